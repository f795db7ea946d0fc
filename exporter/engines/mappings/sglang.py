"""SGLang 0.3 - 0.5.x, served as ``sglang:`` (written here) or ``sglang_``.

Source of truth: docs/reference/engine-metrics.md section 3. Labels:
``model_name``; since 0.5.6 ``tp_rank``, ``pp_rank`` (+ ``dp_rank`` with DP
attention, ``moe_ep_rank``, ``engine_type``, ``priority``, ``is_streaming``).
``dp_rank`` (else ``tp_rank``) becomes ``rank``; the other parallel ranks report
the same requests, so they are collapsed with ``max``; ``is_streaming``,
``cache_source`` and ``priority`` partition the data and are summed.
Caveat: without DP attention but with ``--enable-metrics-for-all-schedulers`` every
TP rank reports the same scheduler state as its own ``rank``; aggregate those with
``max``, not ``sum`` (by default only TP rank 0 reports, so this rarely arises).

Not mapped on purpose:
* ``sglang:cache_hit_rate``, ``sglang:spec_accept_rate`` / ``_length``: windowed
  gauges, not counters.
* ``sglang:num_retracted_reqs`` (older gauge of the last batch): not cumulative.
* ``sglang:per_stage_req_latency_seconds{stage}``: stage names are not a stable
  prefill/decode split.
* HiCache ``sglang:load_back_tokens_total{pool}``: the host hits again, counted when loaded
  instead of at request finish (``cached_tokens_total{cache_source="host"}`` is the tier's
  ``llm_kv_cache_tier_hit_tokens_total``); its ``pool`` values are not documented.
  ``sglang:evicted_tokens_total``: tokens dropped from the device cache, which HiCache may
  or may not have copied to host before: not "KV moved". SGLang publishes no bytes moved.
* ``sglang:num_requests_total`` has no finish reason: published as ``reason="unknown"``
  (the schema's word for "finished, the engine does not say how"). Its aborts also
  finish, so ``sglang:num_aborted_requests_total`` is not added as ``abort`` (it
  would count those requests twice).
"""

from __future__ import annotations

from exporter.engines.table import ConfigField, EngineMapping, Generation, InfoLabel, Quotient, Rewrite, Row, Series

#: ``cached_tokens_total{cache_source}`` -> the schema's KV tiers (exporter/schema.py KV_CACHE_TIERS)
CACHE_SOURCES = Rewrite({"device": "gpu", "host": "host", "storage": "storage"}, default="other")

MAPPING = EngineMapping(
    family="sglang",
    prefixes=("sglang:", "sglang_"),
    prefix_styles=(("sglang:", "colon"), ("sglang_", "underscore")),
    generations=(
        Generation("0.5.11+", any_of=("sglang:page_size", "sglang:num_pages", "sglang:forward_execution_seconds_total")),
        Generation("0.5.9-0.5.10", any_of=("sglang:cache_config_info",)),
        Generation("0.5", label="tp_rank"),
        Generation("0.3-0.4"),
    ),
    label_map={"model_name": "model"},
    rank_labels=("dp_rank", "tp_rank"),
    replica_labels=("pp_rank", "moe_ep_rank"),
    rows=(
        # --- application
        Row("llm_request_ttft_seconds", (Series("sglang:time_to_first_token_seconds"),)),
        Row(
            "llm_request_inter_token_seconds",
            (Series("sglang:inter_token_latency_seconds"), Series("sglang:time_per_output_token_seconds")),
            note="0.3/0.4 observed the per-token gap as time_per_output_token_seconds (count == tokens)",
        ),
        Row("llm_request_e2e_seconds", (Series("sglang:e2e_request_latency_seconds"),)),
        Row("llm_request_prompt_tokens", (Series("sglang:prompt_tokens_histogram"),), note="includes cached tokens"),
        Row("llm_request_generation_tokens", (Series("sglang:generation_tokens_histogram"),)),
        Row("llm_prompt_tokens_total", (Series("sglang:prompt_tokens_total"),), note="includes cached tokens"),
        Row("llm_generation_tokens_total", (Series("sglang:generation_tokens_total"),)),
        Row(
            "llm_requests_finished_total",
            (Series("sglang:num_requests_total", labels={"reason": "unknown"}),),
        ),
        # --- memory
        Row("llm_kv_cache_usage_ratio", (Series("sglang:token_usage"),), combine="max", note="max over KV pools"),
        Row("llm_kv_cache_capacity_tokens", (Series("sglang:max_total_num_tokens"),), combine="max"),
        Row(
            "llm_kv_cache_block_size_tokens",
            (Series("sglang:page_size"), InfoLabel("sglang:cache_config_info", "page_size")),
            combine="max",
        ),
        Row("llm_kv_cache_preemptions_total", (Series("sglang:num_retracted_requests_total"),), note="retractions"),
        Row(
            "llm_prefix_cache_queried_tokens_total",
            (Series("sglang:prompt_tokens_total", requires="sglang:cached_tokens_total"),),
            note="every prompt token is looked up in the radix cache",
        ),
        Row("llm_prefix_cache_hit_tokens_total", (Series("sglang:cached_tokens_total"),), note="sum over cache_source"),
        # --- memory: HiCache tiers (host memory, storage) and PD-disaggregation transfers
        Row(
            "llm_kv_cache_tier_hit_tokens_total",
            (Series("sglang:cached_tokens_total", rename={"cache_source": "tier"}, exclude={"cache_source": "total"}),),
            note='cache_source="total" is the fallback of builds without the split: no tier',
            values={"tier": CACHE_SOURCES},
        ),
        Row(
            "llm_kv_cache_host_usage_ratio",
            (Quotient((Series("sglang:hicache_host_used_tokens"), Series("sglang:hicache_host_total_tokens"))),),
            combine="max",
            note="HiCache host pool: used / total tokens",
        ),
        Row(
            "llm_kv_cache_instance_transfer_seconds_total",
            (Series("sglang:kv_transfer_latency_ms_sum", scale=1e-3),),
            note="a histogram's sum (ms): cumulative, so a counter",
        ),
        Row("llm_kv_cache_instance_transfers_total", (Series("sglang:kv_transfer_latency_ms_count"),)),
        # --- scheduler
        Row("llm_scheduler_requests_running", (Series("sglang:num_running_reqs"),)),
        Row("llm_scheduler_requests_waiting", (Series("sglang:num_queue_reqs"),)),
        Row("llm_scheduler_queue_seconds", (Series("sglang:queue_time_seconds"), Series("sglang:queue_time_s"))),
        # --- speculative decoding
        Row("llm_spec_decode_drafts_total", (Series("sglang:spec_verify_calls_total"),)),
    ),
    config=(ConfigField("block_size", (Series("sglang:page_size"), InfoLabel("sglang:cache_config_info", "page_size"))),),
)
