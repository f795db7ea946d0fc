"""TensorRT-LLM: the Triton backend (``nv_trt_llm_*`` + Triton core ``nv_inference_*``)
and trtllm-serve (``trtllm_*`` at ``/prometheus/metrics``).

Source of truth: docs/reference/engine-metrics.md section 5. The two never
share a name, so one table lists the Triton source first and the trtllm-serve
source second. Triton labels ``model``, ``version``; the backend keeps one family
per topic with a category label (``kv_cache_block_type="fraction"``), selected here
with ``match``. Triton's latency counters are microseconds and its first-response
histogram milliseconds: ``scale`` converts both to seconds.

Not mapped on purpose:
* Triton ``nv_inference_*_duration_us`` counters: cumulative sums, not histograms,
  so they cannot be the neutral latency histograms.
* ``nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="reused"}``: a gauge of
  blocks, not a counter of tokens.
* trtllm-serve ``trtllm_time_per_output_token_seconds``: a per-request mean.
* Triton core ``nv_inference_*`` exist per model of an ensemble (``ensemble``,
  ``preprocessing``, ``tensorrt_llm``, ...): filter on ``model`` to avoid counting a
  request once per pipeline step.
* trtllm-serve <= 1.1 unprefixed names (``request_success_total``, ...): cannot be
  told apart from other engines; configure a newer build.
* trtllm-serve ``trtllm_kv_cache_intra_device_copy_bytes_total``: KV copied within the GPU,
  not between tiers. Neither flavour says which tier a reused block came from
  (``llm_kv_cache_tier_hit_tokens_total`` is absent); the bytes offloaded to and onboarded
  from the host pool are ``llm_kv_cache_tier_transfer_bytes_total``.
* trtllm-serve ``trtllm_spec_decode_acceptance_length``: the last iteration's, a gauge; the
  token counters give the window's. ``trtllm_speculative_config_info``: its label keys are
  not documented, so the number of draft tokens is not read from it.
* trtllm-serve ``trtllm_request_error_total{http_code}``: an HTTP status, which does
  not tell a refused request from one that failed while it ran.

Finish reasons: Triton counts successes without a reason (``success``) and failures by
``reason`` (docs "Failure Count Categories"): ``REJECTED`` never got in (rejected, kept
apart), ``CANCELED`` is ``abort``, ``BACKEND`` and ``OTHER`` are ``error``, and a
failure whose reason this table does not know (or, before 23.12, any failure: no
label) is still ``error``. trtllm-serve's ``finished_reason`` is the LLM API's
``CompletionOutput.finish_reason`` (``stop``, ``length``, ``timeout``, ``cancelled``;
``unknown`` until one is set).
"""

from __future__ import annotations

from exporter.engines.table import EngineMapping, Generation, Product, Rewrite, Row, Series

KV = "nv_trt_llm_kv_cache_block_metrics"
DISAGG = "nv_trt_llm_disaggregated_serving_metrics"
REQ = "nv_trt_llm_request_metrics"
#: Triton failures refused before they ran (``llm_requests_rejected_total``)
TRITON_ADMISSION_ERRORS = "REJECTED"
#: Triton failure reasons of requests that ran -> the schema's finish reasons
TRITON_FAILURE_REASONS = Rewrite({"CANCELED": "abort", "BACKEND": "error", "OTHER": "error"}, default="error")
#: trtllm-serve ``finished_reason`` -> the schema's finish reasons (Triton's successes are ``success``)
SERVE_FINISH_REASONS = Rewrite({"stop": "stop", "length": "length", "timeout": "timeout", "cancelled": "abort"})


def _kv(kind: str) -> Series:
    return Series(KV, match={"kv_cache_block_type": kind})


MAPPING = EngineMapping(
    family="trtllm",
    prefixes=("nv_trt_llm_", "nv_llm_", "nv_inference_", "trtllm_"),
    generations=(
        Generation("triton", prefixes=("nv_trt_llm_", "nv_llm_", "nv_inference_")),
        Generation("serve"),
    ),
    label_map={"model": "model", "model_name": "model", "finished_reason": "reason", "reason": "reason"},
    blank_values=("undefined",),  # trtllm-serve labels model_name="undefined" literally
    rows=(
        # --- application
        Row(
            "llm_request_ttft_seconds",
            (Series("nv_inference_first_response_histogram_ms", scale=1e-3), Series("trtllm_time_to_first_token_seconds")),
            note="Triton's is opt-in (--metrics-config histogram_latencies=true), in ms",
        ),
        Row("llm_request_e2e_seconds", (Series("trtllm_e2e_request_latency_seconds"),)),
        Row("llm_request_prompt_tokens", (Series("nv_llm_input_token_len"),), note="Triton backend histograms"),
        Row("llm_request_generation_tokens", (Series("nv_llm_output_token_len"),)),
        Row(
            "llm_prompt_tokens_total",
            (Series("nv_llm_input_token_len_sum"), Series("trtllm_prompt_tokens_total")),
        ),
        Row(
            "llm_generation_tokens_total",
            (Series("nv_llm_output_token_len_sum"), Series("trtllm_generation_tokens_total")),
        ),
        Row(
            "llm_requests_finished_total",
            (Series("nv_inference_request_success", labels={"reason": "success"}), Series("trtllm_request_success_total")),
            values={"reason": SERVE_FINISH_REASONS},
        ),
        Row(
            "llm_requests_finished_total",
            # before 23.12 the failure counter had no reason: all of it is "error"
            (Series("nv_inference_request_failure", exclude={"reason": TRITON_ADMISSION_ERRORS}, labels={"reason": "error"}),),
            values={"reason": TRITON_FAILURE_REASONS},
        ),
        Row(
            "llm_requests_rejected_total",
            (Series("nv_inference_request_failure", match={"reason": TRITON_ADMISSION_ERRORS}),),
        ),
        # --- memory
        Row("llm_kv_cache_usage_ratio", (_kv("fraction"), Series("trtllm_kv_cache_utilization")), combine="max"),
        Row(
            "llm_kv_cache_capacity_tokens",
            (
                Product((_kv("tokens_per"), _kv("max"))),
                Product((Series("trtllm_kv_cache_tokens_per_block"), Series("trtllm_kv_cache_max_blocks"))),
            ),
            combine="max",
        ),
        Row(
            "llm_kv_cache_block_size_tokens",
            (_kv("tokens_per"), Series("trtllm_kv_cache_tokens_per_block")),
            combine="max",
        ),
        Row(
            "llm_prefix_cache_queried_tokens_total",
            (Series("trtllm_prompt_tokens_total", requires="trtllm_prompt_cached_tokens_total"),),
        ),
        Row("llm_prefix_cache_hit_tokens_total", (Series("trtllm_prompt_cached_tokens_total"),)),
        # --- memory: the host (secondary) KV pool and disaggregated serving
        Row(
            "llm_kv_cache_tier_transfer_bytes_total",
            (Series("trtllm_kv_cache_offload_bytes_total", labels={"direction": "offload"}),),
            note="GPU -> host (secondary) pool",
        ),
        Row(
            "llm_kv_cache_tier_transfer_bytes_total",
            (Series("trtllm_kv_cache_onboard_bytes_total", labels={"direction": "load"}),),
            note="host (secondary) pool -> GPU",
        ),
        Row("llm_kv_cache_host_usage_ratio", (Series("trtllm_kv_cache_host_utilization"),), combine="max"),
        Row(
            "llm_kv_cache_instance_transfer_seconds_total",
            (Series(DISAGG, match={"disaggregated_serving_type": "kv_cache_transfer_ms"}, scale=1e-3),),
            note="Triton: a counter in ms",
        ),
        Row("llm_kv_cache_instance_transfers_total", (Series(DISAGG, match={"disaggregated_serving_type": "request_count"}),)),
        # --- scheduler
        Row(
            "llm_scheduler_requests_running",
            (Series(REQ, match={"request_type": "scheduled"}), Series("trtllm_num_requests_running")),
            note="Triton: requests scheduled in the current iteration (as GAIE reads it)",
        ),
        Row(
            "llm_scheduler_requests_waiting",
            (
                Series(REQ, match={"request_type": "waiting"}),
                Series("trtllm_num_requests_waiting"),
                Series("nv_inference_pending_request_count"),
            ),
        ),
        Row("llm_scheduler_queue_seconds", (Series("trtllm_request_queue_time_seconds"),)),
        # --- operator
        Row("llm_request_prefill_seconds", (Series("trtllm_request_prefill_time_seconds"),)),
        Row("llm_request_decode_seconds", (Series("trtllm_request_decode_time_seconds"),)),
        # --- speculative decoding
        Row("llm_spec_decode_draft_tokens_total", (Series("trtllm_spec_decode_num_draft_tokens_total"),)),
        Row("llm_spec_decode_accepted_tokens_total", (Series("trtllm_spec_decode_num_accepted_tokens_total"),)),
        Row(
            "llm_spec_decode_draft_time_ratio",
            (Series("trtllm_spec_decode_draft_overhead"),),
            combine="max",
            note="the engine's last iteration: draft time / iteration time",
        ),
    ),
)
