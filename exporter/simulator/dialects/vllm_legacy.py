"""vLLM 0.8.5 (early V1, the "<= 0.9" names) ``/metrics``.

What differs from 0.33 (docs/reference/engine-metrics.md §2.2): KV usage is
``vllm:gpu_cache_usage_perc``; the prefix cache is counted by
``vllm:gpu_prefix_cache_queries_total`` / ``_hits_total`` in **blocks** (not
tokens); per-token latency is ``vllm:time_per_output_token_seconds``;
``finished_reason`` has only stop / length / abort; there is no
``waiting_by_reason``, no admission-rejection counter and no token-source
breakdown. The ``engine`` label is already there (V1).
"""

from __future__ import annotations

from exporter.simulator.dialects import vllm as current
from exporter.simulator.engine import EngineSnapshot

NAME = "vllm-legacy"

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)

BUCKETS: dict[str, tuple[float, ...]] = {
    **current.BUCKETS,
    "ttft": TTFT_BUCKETS,
    "itl": TPOT_BUCKETS,
    "e2e": LATENCY_BUCKETS,
    "queue": LATENCY_BUCKETS,
    "inference": LATENCY_BUCKETS,
    "prefill": LATENCY_BUCKETS,
    "decode": LATENCY_BUCKETS,
}

FINISHED_REASONS = ("stop", "length", "abort")


def render(snap: EngineSnapshot) -> str:
    w = current.Writer(snap)
    s, out = w.s, w.out
    gauge, counter, hist = w.gauge, w.counter, w.hist

    gauge("vllm:num_requests_running", "Number of requests in model execution batches.", snap.running)
    gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", snap.waiting)
    gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", snap.kv_usage)
    counter(
        "vllm:gpu_prefix_cache_queries_total",
        "GPU prefix cache queries, in terms of number of queried blocks.",
        s.counter("prefix_queries_blocks"),
    )
    counter(
        "vllm:gpu_prefix_cache_hits_total",
        "GPU prefix cache hits, in terms of number of cached blocks.",
        s.counter("prefix_hits_blocks"),
    )
    w.tokens_and_finished(FINISHED_REASONS)
    hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", "prompt_len")
    hist("vllm:request_generation_tokens", "Number of generation tokens processed.", "gen_len")
    hist("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", "iteration_tokens")
    hist("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", "max_tokens")
    hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", "ttft")
    hist("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", "itl")
    w.phase_histograms()
    labels = current.cache_config_labels(snap, "0")
    labels.pop("kv_cache_size_tokens", None)
    out.metric("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig", labels, 1.0)
    w.spec_decode()
    return out.text()
