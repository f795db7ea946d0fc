"""vLLM: V0 (<= 0.7), V1 with deprecated names (0.8 - 0.10), V1 (>= 0.11).

Source of truth: docs/reference/engine-metrics.md section 2. Wire names carry
``_total`` on counters (prometheus_client). Labels: ``model_name``, and in V1
``engine`` (the data-parallel engine-core index, kept as ``rank``).

Not mapped on purpose:
* ``vllm:gpu_prefix_cache_queries_total`` / ``_hits_total``: counted *blocks* in
  0.8/0.9 and tokens from 0.10 (where the new names exist anyway), so they would
  change meaning across versions -> absent before 0.10.
* ``vllm:request_time_per_output_token_seconds``: a per-request mean, not the
  per-token gap ``llm_request_inter_token_seconds`` means.
* V0 ``vllm:gpu_prefix_cache_hit_rate``: a windowed gauge (-1 when unused), not a counter.
* Of the KV-offload family (``vllm:kv_offload_*``) only the CPU tier's usage and the bytes
  moved: the OffloadingConnector's ``kv_offload_total_bytes_total{transfer_type}``
  (``GPU_to_CPU`` / ``CPU_to_GPU``, lower case in some releases) and the load/store counters
  that replace it (``kv_offload_store_bytes_total`` GPU -> CPU, ``kv_offload_load_bytes_total``
  CPU -> GPU) are ``llm_kv_cache_tier_transfer_bytes_total{direction}``; the newer names are
  preferred where both are served. Its timers, sizes and tiering internals, NIXL (``vllm:nixl_*``)
  and Mooncake: not mapped (units and meaning vary by release). What KV came back from a lower
  tier is also known as tokens: ``prompt_tokens_cached_by_source_total{source}`` (0.33) counts
  the cached prompt tokens per tier, and is ``llm_kv_cache_tier_hit_tokens_total``.
* ``vllm:external_prefix_cache_*`` and ``prompt_tokens_by_source_total``: the same
  external hits the per-source counter splits by tier.

Finish reasons: ``finished_reason`` is the FinishReason of V0 and V1 (``stop``,
``length``, ``abort``, since 0.10 ``error``, since 0.33 ``repetition``: repetition
detection ended a degenerate answer, a stop condition, not a failure). A reason
this table does not know becomes the schema's ``other``.
"""

from __future__ import annotations

from exporter.engines.table import ConfigField, EngineMapping, Generation, InfoLabel, Product, Rewrite, Row, Series

CACHE_INFO = "vllm:cache_config_info"
#: ``kv_offload_total_bytes_total{transfer_type}``: the connector's spellings of each direction
OFFLOADED = ("GPU_to_CPU", "gpu_to_cpu")
LOADED = ("CPU_to_GPU", "cpu_to_gpu")
#: ``finished_reason`` -> the schema's finish reasons (exporter/schema.py FINISH_REASONS)
RAW_FINISH_REASONS = Rewrite({"stop": "stop", "length": "length", "abort": "abort", "error": "error", "repetition": "stop"})
#: ``prompt_tokens_cached_by_source_total{source}`` -> the schema's KV tiers (exporter/schema.py KV_CACHE_TIERS)
CACHE_SOURCES = Rewrite(
    {"device": "gpu", "host": "host", "disk": "storage", "p2p": "peer", "external_unspecified": "other"}, default="other"
)

MAPPING = EngineMapping(
    family="vllm",
    prefixes=("vllm:",),
    generations=(
        # 0.8 - 0.10: V1 engine (``engine`` label) still serving gpu_cache_usage_perc
        Generation("v1-legacy", any_of=("vllm:gpu_cache_usage_perc",), label="engine"),
        Generation("v1", any_of=("vllm:kv_cache_usage_perc",)),
        Generation("v1", label="engine"),
        Generation("v0"),
    ),
    label_map={"model_name": "model", "finished_reason": "reason", "reason": "reason", "sleep_state": "state"},
    rank_labels=("engine",),
    rows=(
        # --- application
        Row("llm_request_ttft_seconds", (Series("vllm:time_to_first_token_seconds"),)),
        Row(
            "llm_request_inter_token_seconds",
            (Series("vllm:inter_token_latency_seconds"), Series("vllm:time_per_output_token_seconds")),
            note="time_per_output_token_seconds was the per-token gap until 0.11 renamed it",
        ),
        Row("llm_request_e2e_seconds", (Series("vllm:e2e_request_latency_seconds"),)),
        Row("llm_request_prompt_tokens", (Series("vllm:request_prompt_tokens"),), note="includes prefix-cache hits"),
        Row("llm_request_generation_tokens", (Series("vllm:request_generation_tokens"),)),
        Row("llm_prompt_tokens_total", (Series("vllm:prompt_tokens_total"),), note="includes prefix-cache hits"),
        Row("llm_generation_tokens_total", (Series("vllm:generation_tokens_total"),)),
        Row(
            "llm_requests_finished_total",
            (Series("vllm:request_success_total"),),
            note="finished_reason -> reason",
            values={"reason": RAW_FINISH_REASONS},
        ),
        Row("llm_requests_rejected_total", (Series("vllm:admission_rejections_total"),)),
        # --- memory
        Row(
            "llm_kv_cache_usage_ratio",
            (Series("vllm:kv_cache_usage_perc"), Series("vllm:gpu_cache_usage_perc")),
            combine="max",
            note="both are 0-1 despite _perc; 0.10 serves both, the new name wins",
        ),
        Row(
            "llm_kv_cache_capacity_tokens",
            (
                InfoLabel(CACHE_INFO, "kv_cache_size_tokens"),
                Product((InfoLabel(CACHE_INFO, "block_size"), InfoLabel(CACHE_INFO, "num_gpu_blocks"))),
            ),
            combine="max",
        ),
        Row("llm_kv_cache_block_size_tokens", (InfoLabel(CACHE_INFO, "block_size"),), combine="max"),
        Row("llm_kv_cache_preemptions_total", (Series("vllm:num_preemptions_total"),)),
        Row("llm_prefix_cache_queried_tokens_total", (Series("vllm:prefix_cache_queries_total"),)),
        Row("llm_prefix_cache_hit_tokens_total", (Series("vllm:prefix_cache_hits_total"),)),
        Row("llm_prompt_tokens_cached_total", (Series("vllm:prompt_tokens_cached_total"),), note=">= 0.11; local + external"),
        Row(
            "llm_kv_cache_tier_hit_tokens_total",
            (Series("vllm:prompt_tokens_cached_by_source_total", rename={"source": "tier"}),),
            note="0.33: where the cached prompt tokens came from (device, or a KV connector / offload tier)",
            values={"tier": CACHE_SOURCES},
        ),
        Row(
            "llm_kv_cache_tier_transfer_bytes_total",
            (
                Series("vllm:kv_offload_store_bytes_total", labels={"direction": "offload"}),
                Series("vllm:kv_offload_total_bytes_total", match={"transfer_type": OFFLOADED}, labels={"direction": "offload"}),
            ),
            note="KV offloading connector: GPU -> CPU",
        ),
        Row(
            "llm_kv_cache_tier_transfer_bytes_total",
            (
                Series("vllm:kv_offload_load_bytes_total", labels={"direction": "load"}),
                Series("vllm:kv_offload_total_bytes_total", match={"transfer_type": LOADED}, labels={"direction": "load"}),
            ),
            note="KV offloading connector: CPU -> GPU",
        ),
        Row(
            "llm_kv_cache_host_usage_ratio",
            (Series("vllm:kv_offload_cpu_cache_usage_perc"), Series("vllm:cpu_cache_usage_perc")),
            combine="max",
            note="V1 with KV offload to CPU; V0 its swap space (both 0-1 despite _perc)",
        ),
        Row("llm_request_preemptions", (Series("vllm:request_num_preemptions"),), note="per finished request"),
        # --- scheduler
        Row("llm_scheduler_requests_running", (Series("vllm:num_requests_running"),)),
        Row("llm_scheduler_requests_waiting", (Series("vllm:num_requests_waiting"),)),
        Row(
            "llm_scheduler_requests_waiting_by_reason",
            (Series("vllm:num_requests_waiting_by_reason"),),
            note="capacity: no room in the batch or KV cache; deferred: LoRA budget, KV transfer, blocked",
        ),
        Row(
            "llm_scheduler_iteration_tokens",
            (Series("vllm:iteration_tokens_total"),),
            note="a histogram despite _total: tokens per engine step",
        ),
        Row(
            "llm_scheduler_queue_seconds",
            (Series("vllm:request_queue_time_seconds"), Series("vllm:time_in_queue_requests")),
        ),
        # --- operator
        Row("llm_request_prefill_seconds", (Series("vllm:request_prefill_time_seconds"),)),
        Row("llm_request_decode_seconds", (Series("vllm:request_decode_time_seconds"),)),
        # --- hardware cross-check (only with enable_mfu_metrics)
        Row("llm_engine_estimated_gpu_flops_total", (Series("vllm:estimated_flops_per_gpu_total"),)),
        Row("llm_engine_estimated_gpu_read_bytes_total", (Series("vllm:estimated_read_bytes_per_gpu_total"),)),
        Row("llm_engine_estimated_gpu_write_bytes_total", (Series("vllm:estimated_write_bytes_per_gpu_total"),)),
        # --- application: sleep mode (an asleep engine serves nothing by design)
        Row("llm_engine_sleep_state", (Series("vllm:engine_sleep_state"),), combine="max"),
        # --- speculative decoding
        Row("llm_spec_decode_draft_tokens_total", (Series("vllm:spec_decode_num_draft_tokens_total"),)),
        Row("llm_spec_decode_accepted_tokens_total", (Series("vllm:spec_decode_num_accepted_tokens_total"),)),
        Row("llm_spec_decode_drafts_total", (Series("vllm:spec_decode_num_drafts_total"),)),
    ),
    config=(
        ConfigField("block_size", (InfoLabel(CACHE_INFO, "block_size"),)),
        ConfigField("kv_cache_dtype", (InfoLabel(CACHE_INFO, "cache_dtype"),)),
        ConfigField(
            "prefix_caching",
            (InfoLabel(CACHE_INFO, "enable_prefix_caching"),),
            values={"True": "true", "False": "false"},
        ),
    ),
)
