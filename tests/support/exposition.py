"""The synthetic vLLM 0.33 exposition: N data-parallel engines, every family vLLM serves.

Why generated: no complete real V1 capture exists (see tests/engines/fixtures/SOURCES.md)
and 800 KB does not belong in the repository. The families, label sets, bucket
bounds and number formatting follow vLLM's ``PrometheusStatLogger`` as documented
in docs/reference/engine-metrics.md section 2.1. The bucket bounds are the
simulator's (exporter/simulator/dialects/vllm.py), declared once there; only the
token histograms use a longer model context (131,072, so up to 100,000 tokens).

Values are deterministic per engine (``engine_values``, ``histogram_counts``), so
a test can check that every rank keeps its own numbers. ``created=True`` adds
the ``_created`` series a single-process vLLM serves (multiprocess mode has
none). Sizes: ``vllm_exposition(1)`` is the benchmarks' "55 KB vLLM engine"
(57 KiB); ``vllm_exposition(20)`` 931 KiB / 9,842 samples, without ``_created``
817 KiB / 8,722 samples (the issue's "800 KB, 8,840 samples").
``python -m tests.support.exposition`` prints them.
"""

from __future__ import annotations

from exporter.simulator.dialects.vllm import (
    FINISHED_REASONS,
    ITERATION_BUCKETS,
    ITL_BUCKETS,
    PREEMPTION_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    TTFT_BUCKETS,
)

MODEL = "Qwen/Qwen3-8B"
#: the model's context: vLLM sizes the token histograms from it
MAX_MODEL_LEN = 131072
#: when the ``_created`` series say the counters started
CREATED_TS = 1.7645e9


def build_1_2_5_buckets(max_value: int) -> tuple[int, ...]:
    """vLLM's ``build_1_2_5_buckets``: 1, 2, 5, 10, 20, 50, ... up to ``max_value``."""
    out: list[int] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return tuple(out)
            out.append(value)
        exponent += 1


TOKEN_BUCKETS = build_1_2_5_buckets(MAX_MODEL_LEN)

GAUGES = (
    ("vllm:num_requests_running", "Number of requests in model execution batches."),
    ("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
    ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
)
#: counters without extra labels (names without ``_total``)
COUNTERS = (
    ("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."),
    ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."),
    ("vllm:external_prefix_cache_queries", "External prefix cache queries from KV connector cross-instance cache sharing."),
    ("vllm:external_prefix_cache_hits", "External prefix cache hits from KV connector cross-instance cache sharing."),
    ("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external)."),
    ("vllm:mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items."),
    ("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items."),
    ("vllm:num_preemptions", "Cumulative number of preemption from the engine."),
    ("vllm:prompt_tokens", "Number of prefill tokens processed."),
    ("vllm:generation_tokens", "Number of generation tokens processed."),
    ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts."),
    ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens."),
    ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens."),
    ("vllm:estimated_flops_per_gpu", "Estimated FLOPs per GPU."),
    ("vllm:estimated_read_bytes_per_gpu", "Estimated bytes read per GPU."),
    ("vllm:estimated_write_bytes_per_gpu", "Estimated bytes written per GPU."),
)
#: counters with one extra label: (name, help, label, values)
LABELLED_COUNTERS = (
    (
        "vllm:prompt_tokens_cached_by_source",
        "Number of cached prompt tokens by source.",
        "source",
        ("device", "host", "p2p", "disk", "external_unspecified"),
    ),
    (
        "vllm:prompt_tokens_by_source",
        "Number of prompt tokens by source.",
        "source",
        ("local_compute", "local_cache_hit", "external_kv_transfer"),
    ),
    ("vllm:request_success", "Count of successfully processed requests.", "finished_reason", FINISHED_REASONS),
    (
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        "Accepted tokens per draft position.",
        "position",
        tuple(str(p) for p in range(8)),
    ),
)
HISTOGRAMS: tuple[tuple[str, str, tuple[float, ...]], ...] = (
    ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", TOKEN_BUCKETS),
    ("vllm:request_generation_tokens", "Number of generation tokens processed.", TOKEN_BUCKETS),
    (
        "vllm:request_prefill_kv_computed_tokens",
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
        TOKEN_BUCKETS,
    ),
    ("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", ITERATION_BUCKETS),
    ("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.", TOKEN_BUCKETS),
    ("vllm:request_params_n", "Histogram of the n request parameter.", build_1_2_5_buckets(20)),
    ("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", TOKEN_BUCKETS),
    ("vllm:request_num_preemptions", "Number of preemptions per finished request.", PREEMPTION_BUCKETS),
    ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS),
    ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS),
    ("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", ITL_BUCKETS),
    ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", REQUEST_LATENCY_BUCKETS),
    ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", REQUEST_LATENCY_BUCKETS),
    ("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", REQUEST_LATENCY_BUCKETS),
    ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", REQUEST_LATENCY_BUCKETS),
    ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", REQUEST_LATENCY_BUCKETS),
    (
        "vllm:kv_block_lifetime_seconds",
        "Histogram of KV cache block lifetime from allocation to eviction.",
        REQUEST_LATENCY_BUCKETS,
    ),
    (
        "vllm:kv_block_idle_before_evict_seconds",
        "Histogram of idle time before KV cache block eviction.",
        REQUEST_LATENCY_BUCKETS,
    ),
    (
        "vllm:kv_block_reuse_gap_seconds",
        "Histogram of time gaps between consecutive KV cache block accesses.",
        REQUEST_LATENCY_BUCKETS,
    ),
)


def fmt(x: float) -> str:
    """prometheus_client's float formatting (``1.0``, ``+Inf``, ``1e+06``)."""
    if x == float("inf"):
        return "+Inf"
    return repr(float(x))


def histogram_counts(engine: int, nbounds: int) -> list[float]:
    """Cumulative counts per bound (the +Inf count last) for one engine's histograms."""
    out, acc = [], 0.0
    for k in range(nbounds + 1):
        acc += (engine + 1) * (k % 3 + 1)
        out.append(acc)
    return out


def engine_values(engine: int) -> dict[str, float]:
    """The scalar values engine ``engine`` reports (tests compare against these); other counters: 7 x engine."""
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


def vllm_exposition(engines: int = 1, created: bool = True, model: str = MODEL) -> str:
    """The /metrics text of a vLLM with ``engines`` data-parallel engine cores."""
    out: list[str] = []

    def family(name: str, help_text: str, kind: str) -> None:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")

    def lab(i: int, extra: tuple[str, str] | None = None) -> str:
        # label names sorted, as prometheus_client writes them: engine, le/reason/..., model_name
        pairs = {"engine": str(i), "model_name": model, **(dict([extra]) if extra else {})}
        return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(pairs.items())) + "}"

    def created_family(name: str, help_text: str, keys: list[str]) -> None:
        if created:
            family(f"{name}_created", help_text, "gauge")
            out.extend(f"{name}_created{key} {fmt(CREATED_TS)}" for key in keys)

    ids = range(engines)
    for name, help_text in GAUGES:
        family(name, help_text, "gauge")
        out.extend(f"{name}{lab(i)} {fmt(engine_values(i)[name])}" for i in ids)
    family("vllm:num_requests_waiting_by_reason", "Number of requests waiting, by reason.", "gauge")
    for i in ids:
        for reason, share in (("capacity", 1.0), ("deferred", 0.0)):
            value = engine_values(i)["vllm:num_requests_waiting"] * share
            out.append(f"vllm:num_requests_waiting_by_reason{lab(i, ('reason', reason))} {fmt(value)}")
    family("vllm:engine_sleep_state", "Engine sleep state.", "gauge")
    for i in ids:
        for state, v in (("awake", 1.0), ("weights_offloaded", 0.0), ("discard_all", 0.0)):
            out.append(f"vllm:engine_sleep_state{lab(i, ('sleep_state', state))} {fmt(v)}")
    for name, help_text in COUNTERS:
        family(f"{name}_total", help_text, "counter")
        out.extend(f"{name}_total{lab(i)} {fmt(engine_values(i).get(name + '_total', 7.0 * i))}" for i in ids)
        created_family(name, help_text, [lab(i) for i in ids])
    for name, help_text, label, values in LABELLED_COUNTERS:
        family(f"{name}_total", help_text, "counter")
        for i in ids:
            out.extend(f"{name}_total{lab(i, (label, v))} {fmt(10.0 * (i + 1) + k)}" for k, v in enumerate(values))
        created_family(name, help_text, [lab(i, (label, v)) for i in ids for v in values])
    family("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", "gauge")
    for i in ids:
        out.append(
            f'vllm:cache_config_info{{block_size="16",cache_dtype="fp8",calculate_kv_scales="False",cpu_offload_gb="0",'
            f'enable_prefix_caching="True",engine="{i}",gpu_memory_utilization="0.9",is_attention_free="False",'
            f'kv_cache_size_tokens="{1000000 + i * 16}",num_cpu_blocks="None",num_gpu_blocks="{62500 + i}",'
            f'num_gpu_blocks_override="None",prefix_caching_hash_algo="sha256",sliding_window="None",swap_space="4"}} 1.0'
        )
    for name, help_text, bounds in HISTOGRAMS:
        family(name, help_text, "histogram")
        for i in ids:
            counts = histogram_counts(i, len(bounds))
            for b, c in zip([*bounds, float("inf")], counts):
                out.append(f"{name}_bucket{lab(i, ('le', fmt(b)))} {fmt(c)}")
            out.append(f"{name}_sum{lab(i)} {fmt(counts[-1] * 0.5)}")
            out.append(f"{name}_count{lab(i)} {fmt(counts[-1])}")
        created_family(name, help_text, [lab(i) for i in ids])
    family("vllm:admission_rejections_total", "Requests rejected at admission.", "counter")
    for reason in ("max_num_queued_reqs", "max_num_queued_tokens"):
        out.append(f'vllm:admission_rejections_total{{model_name="{model}",reason="{reason}"}} 3.0')
    return "\n".join(out) + "\n"


def sample_count(text: str) -> int:
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


if __name__ == "__main__":
    for n, created in ((1, True), (20, True), (20, False)):
        text = vllm_exposition(n, created=created)
        print(f"{n} engine(s){'' if created else ', no _created'}: {len(text) / 1024:.1f} KiB, {sample_count(text)} samples")
