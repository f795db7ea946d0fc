"""A large, realistic vLLM 0.33 exposition: N data-parallel engines, every family served.

Why generated: no complete real V1 capture exists (see the reference's SOURCES.md),
and 800 KB does not belong in the repository. The families, label sets, bucket
bounds and number formatting follow vLLM's ``PrometheusStatLogger`` in
multiprocess mode (no ``_created`` series) as documented in
docs/reference/engine-metrics.md section 2.1. Values are deterministic per
engine so tests can check that every rank keeps its own numbers. With 20 engines
it has ~8,800 samples and ~800 KB, the size the parser's speed target is set for.
"""

from __future__ import annotations

MODEL = "Qwen/Qwen3-8B"

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000)
ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)

#: histogram families and their bounds; the five latency families share one set
HISTOGRAMS: tuple[tuple[str, str, tuple[float, ...]], ...] = (
    ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", TOKEN_BUCKETS),
    ("vllm:request_generation_tokens", "Number of generation tokens processed.", TOKEN_BUCKETS),
    ("vllm:request_prefill_kv_computed_tokens", "Histogram of new KV tokens computed during prefill (excluding cached tokens).", TOKEN_BUCKETS),
    ("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", ITERATION_BUCKETS),
    ("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.", TOKEN_BUCKETS),
    ("vllm:request_params_n", "Histogram of the n request parameter.", (1, 2, 5, 10, 20)),
    ("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", TOKEN_BUCKETS),
    ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS),
    ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS),
    ("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", ITL_BUCKETS),
    ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", LATENCY_BUCKETS),
    ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", LATENCY_BUCKETS),
    ("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", LATENCY_BUCKETS),
    ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", LATENCY_BUCKETS),
    ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", LATENCY_BUCKETS),
    ("vllm:kv_block_lifetime_seconds", "Histogram of KV cache block lifetime from allocation to eviction.", LATENCY_BUCKETS),
    ("vllm:kv_block_idle_before_evict_seconds", "Histogram of idle time before KV cache block eviction.", LATENCY_BUCKETS),
    ("vllm:kv_block_reuse_gap_seconds", "Histogram of time gaps between consecutive KV cache block accesses.", LATENCY_BUCKETS),
)


def _f(x: float) -> str:
    """prometheus_client's float formatting (``1.0``, ``+Inf``, ``1e+06``)."""
    if x == float("inf"):
        return "+Inf"
    return repr(float(x))


def histogram_counts(engine: int, nbounds: int) -> list[float]:
    """Cumulative counts per bound (the +Inf count last) for one engine's histograms."""
    per = [(engine + 1) * (k % 3 + 1) for k in range(nbounds + 1)]
    out, acc = [], 0.0
    for n in per:
        acc += n
        out.append(acc)
    return out


def engine_values(engine: int) -> dict[str, float]:
    """The scalar values engine ``engine`` reports (tests compare against these)."""
    return {
        "vllm:num_requests_running": float(engine % 7 + 1),
        "vllm:num_requests_waiting": float(engine * 2),
        "vllm:kv_cache_usage_perc": round(0.03 * (engine + 1), 4),
        "vllm:prefix_cache_queries_total": 100000.0 + engine,
        "vllm:prefix_cache_hits_total": 40000.0 + engine,
        "vllm:num_preemptions_total": float(engine),
        "vllm:prompt_tokens_total": 200000.0 + engine,
        "vllm:generation_tokens_total": 90000.0 + engine,
        "vllm:spec_decode_num_drafts_total": 3000.0 + engine,
        "vllm:spec_decode_num_draft_tokens_total": 9000.0 + engine,
        "vllm:spec_decode_num_accepted_tokens_total": 5000.0 + engine,
    }


def _pair(label: str, value: str) -> str:
    return f'{label}="{value}",'


def _family(out: list[str], name: str, help_text: str, kind: str) -> None:
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} {kind}")


def big_vllm_exposition(engines: int = 20, model: str = MODEL) -> str:
    """The exposition text, families grouped as prometheus_client groups them."""
    out: list[str] = []
    ids = range(engines)

    def lab(i: int, extra: str = "") -> str:
        # multiprocess mode sorts label names: engine, le/reason/..., model_name
        pairs = sorted([f'engine="{i}"', f'model_name="{model}"'] + ([extra.rstrip(",")] if extra else []))
        return "{" + ",".join(pairs) + "}"

    gauges = (
        ("vllm:num_requests_running", "Number of requests in model execution batches."),
        ("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
        ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
    )
    for name, help_text in gauges:
        _family(out, name, help_text, "gauge")
        out.extend(f"{name}{lab(i)} {_f(engine_values(i)[name])}" for i in ids)
    _family(out, "vllm:num_requests_waiting_by_reason", "Number of requests waiting, by reason.", "gauge")
    for i in ids:
        for reason, share in (("capacity", 1.0), ("deferred", 0.0)):
            value = engine_values(i)["vllm:num_requests_waiting"] * share
            out.append(f"vllm:num_requests_waiting_by_reason{lab(i, _pair('reason', reason))} {_f(value)}")
    _family(out, "vllm:engine_sleep_state", "Engine sleep state.", "gauge")
    for i in ids:
        for state, v in (("awake", 1.0), ("weights_offloaded", 0.0), ("discard_all", 0.0)):
            out.append(f"vllm:engine_sleep_state{lab(i, _pair('sleep_state', state))} {_f(v)}")

    counters = (
        ("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens."),
        ("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens."),
        ("vllm:external_prefix_cache_queries_total", "External prefix cache queries."),
        ("vllm:external_prefix_cache_hits_total", "External prefix cache hits."),
        ("vllm:prompt_tokens_cached_total", "Number of cached prompt tokens (local + external)."),
        ("vllm:mm_cache_queries_total", "Multi-modal cache queries."),
        ("vllm:mm_cache_hits_total", "Multi-modal cache hits."),
        ("vllm:num_preemptions_total", "Cumulative number of preemption from the engine."),
        ("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
        ("vllm:generation_tokens_total", "Number of generation tokens processed."),
        ("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts."),
        ("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens."),
        ("vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens."),
        ("vllm:estimated_flops_per_gpu_total", "Estimated FLOPs per GPU."),
        ("vllm:estimated_read_bytes_per_gpu_total", "Estimated bytes read per GPU."),
        ("vllm:estimated_write_bytes_per_gpu_total", "Estimated bytes written per GPU."),
    )
    for name, help_text in counters:
        _family(out, name, help_text, "counter")
        out.extend(f"{name}{lab(i)} {_f(engine_values(i).get(name, 7.0 * i))}" for i in ids)
    by_label = (
        ("vllm:prompt_tokens_cached_by_source_total", "source", ("device", "host", "p2p", "disk", "external_unspecified")),
        ("vllm:prompt_tokens_by_source_total", "source", ("local_compute", "local_cache_hit", "external_kv_transfer")),
        ("vllm:request_success_total", "finished_reason", ("stop", "length", "abort", "error", "repetition")),
        ("vllm:spec_decode_num_accepted_tokens_per_pos_total", "position", tuple(str(p) for p in range(8))),
    )
    for name, label, values in by_label:
        _family(out, name, "Breakdown.", "counter")
        for i in ids:
            for k, v in enumerate(values):
                out.append(f"{name}{lab(i, _pair(label, v))} {_f(10.0 * (i + 1) + k)}")
    _family(out, "vllm:cache_config_info", "Information of the LLMEngine CacheConfig", "gauge")
    for i in ids:
        out.append(
            f'vllm:cache_config_info{{block_size="16",cache_dtype="fp8",calculate_kv_scales="False",cpu_offload_gb="0",'
            f'enable_prefix_caching="True",engine="{i}",gpu_memory_utilization="0.9",is_attention_free="False",'
            f'kv_cache_size_tokens="{1000000 + i * 16}",num_cpu_blocks="None",num_gpu_blocks="{62500 + i}",'
            f'num_gpu_blocks_override="None",prefix_caching_hash_algo="sha256",sliding_window="None",swap_space="4"}} 1.0'
        )
    for name, help_text, bounds in HISTOGRAMS:
        _family(out, name, help_text, "histogram")
        for i in ids:
            counts = histogram_counts(i, len(bounds))
            for b, c in zip(list(bounds) + [float("inf")], counts):
                out.append(f"{name}_bucket{lab(i, _pair('le', _f(b)))} {_f(c)}")
            out.append(f"{name}_sum{lab(i)} {_f(counts[-1] * 0.5)}")
            out.append(f"{name}_count{lab(i)} {_f(counts[-1])}")
    _family(out, "vllm:admission_rejections_total", "Requests rejected at admission.", "counter")
    for reason in ("max_num_queued_reqs", "max_num_queued_tokens"):
        out.append(f'vllm:admission_rejections_total{{model_name="{model}",reason="{reason}"}} 3.0')
    return "\n".join(out) + "\n"
