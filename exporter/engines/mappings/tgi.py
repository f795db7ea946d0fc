"""Hugging Face TGI 3.x (Rust ``metrics-exporter-prometheus``: no ``_total`` suffix).

Source of truth: docs/reference/engine-metrics.md section 4. No labels except
``err`` / ``method`` / ``reason``; no model label.

TGI exposes no KV-cache usage, prefix-cache, preemption, KV offload or tier, or TTFT
metric: those neutral names are absent. Token counters come from the per-request histograms'
``_sum`` (cumulative, so still counters). ``tgi_request_skipped_tokens`` (a summary)
records, per request and step, the speculated tokens accepted: its ``_sum`` is the
accepted tokens and its ``_count`` the verification steps (TGI records it even when
speculation is off, with sum 0).

Failures: ``tgi_request_failure{err}`` counts both refusals at admission
(``validation``, ``overloaded``: ``llm_requests_rejected_total``, reason kept) and
requests that got in and failed (every other ``err``: ``llm_requests_finished_total``
with the err rewritten into the schema's finish reasons). TGI writes the err as
literals in its router (``dropped``: the client went away while it was queued,
``template``, ``incomplete``, ``generation``) and as ``InferError::error_type()``
(``incomplete_generation``, ``template_error``, ``missing_template_variable``,
``tool_error``, ...); an err this table does not know is still a failure: ``error``.
``tgi_request_success`` says nothing of stop or length: ``success``.

Not mapped on purpose: ``tgi_request_mean_time_per_token_duration`` (a per-request
mean that includes prefill, not the per-token gap), ``tgi_request_inference_duration``
(prefill and decode together).
"""

from __future__ import annotations

from exporter.engines.table import EngineMapping, Generation, Rewrite, Row, Series

#: Failures refused at admission (``llm_requests_rejected_total``); the rest finished in error.
ADMISSION_ERRORS = ("validation", "overloaded")
#: ``err`` of the requests that got in and failed -> the schema's finish reasons
FAILURE_REASONS = Rewrite(
    {
        "dropped": "abort",
        "cancelled": "abort",
        "generation": "error",
        "incomplete": "error",
        "incomplete_generation": "error",
        "incomplete_generation_stream": "error",
        "template": "error",
        "template_error": "error",
        "missing_template_variable": "error",
        "tool_error": "error",
        "stream_serialization_error": "error",
    },
    default="error",
)

MAPPING = EngineMapping(
    family="tgi",
    prefixes=("tgi_",),
    generations=(
        Generation("v3", any_of=("tgi_batch_concat", "tgi_batch_max_total_tokens")),
        Generation("unknown"),
    ),
    label_map={},
    rows=(
        # --- application
        Row("llm_request_e2e_seconds", (Series("tgi_request_duration"),)),
        Row("llm_request_prompt_tokens", (Series("tgi_request_input_length"),)),
        Row("llm_request_generation_tokens", (Series("tgi_request_generated_tokens"),)),
        Row("llm_prompt_tokens_total", (Series("tgi_request_input_length_sum"),), note="full input incl. cached prefix"),
        Row("llm_generation_tokens_total", (Series("tgi_request_generated_tokens_sum"),)),
        Row("llm_requests_finished_total", (Series("tgi_request_success", labels={"reason": "success"}),)),
        Row(
            "llm_requests_finished_total",
            (
                Series(
                    "tgi_request_failure", exclude={"err": ADMISSION_ERRORS}, rename={"err": "reason"}, labels={"reason": "error"}
                ),
            ),
            values={"reason": FAILURE_REASONS},
        ),
        Row(
            "llm_requests_rejected_total",
            (Series("tgi_request_failure", match={"err": ADMISSION_ERRORS}, rename={"err": "reason"}),),
        ),
        # --- memory
        Row("llm_kv_cache_capacity_tokens", (Series("tgi_batch_max_total_tokens"),), combine="max"),
        # --- scheduler
        Row("llm_scheduler_requests_running", (Series("tgi_batch_current_size"),)),
        Row("llm_scheduler_requests_waiting", (Series("tgi_queue_size"),)),
        Row("llm_scheduler_queue_seconds", (Series("tgi_request_queue_duration"),)),
        # --- speculative decoding
        Row("llm_spec_decode_accepted_tokens_total", (Series("tgi_request_skipped_tokens_sum"),)),
        Row("llm_spec_decode_drafts_total", (Series("tgi_request_skipped_tokens_count"),)),
    ),
)
