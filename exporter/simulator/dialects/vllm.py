"""vLLM 0.33 (V1 engine) ``/metrics``: ``vllm:`` names, ``model_name`` + ``engine`` labels.

Names, types, units and labels follow docs/reference/engine-metrics.md §2.1
(read from ``vllm/v1/metrics/loggers.py``). Wire habits of prometheus_client
in multiprocess mode: counters end in ``_total`` with no ``_created`` series,
floats print as ``3.0``, the info metric ``vllm:cache_config_info`` is a gauge
set to 1 whose labels carry the cache config (and no ``model_name``).
"""

from __future__ import annotations

from exporter.simulator.dialects.text import Exposition
from exporter.simulator.engine import EngineSnapshot

NAME = "vllm"

# bucket bounds: a table of numbers reads best as rows, not one value a line
# fmt: off
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
                80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                           480.0, 960.0, 1920.0, 7680.0)
#: build_1_2_5_buckets(max_model_len) for the default max_model_len 8192
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
#: CUDA-graph capture sizes, as the iteration-tokens histogram uses them
ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PREEMPTION_BUCKETS = (0, 1, 2, 5, 10, 20, 50)
# fmt: on

BUCKETS: dict[str, tuple[float, ...]] = {
    "ttft": TTFT_BUCKETS,
    "itl": ITL_BUCKETS,
    "tpot": ITL_BUCKETS,
    "e2e": REQUEST_LATENCY_BUCKETS,
    "queue": REQUEST_LATENCY_BUCKETS,
    "inference": REQUEST_LATENCY_BUCKETS,
    "prefill": REQUEST_LATENCY_BUCKETS,
    "decode": REQUEST_LATENCY_BUCKETS,
    "prompt_len": TOKEN_BUCKETS,
    "gen_len": TOKEN_BUCKETS,
    "max_tokens": TOKEN_BUCKETS,
    "iteration_tokens": ITERATION_BUCKETS,
    "request_preemptions": PREEMPTION_BUCKETS,
}

FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")


def cache_config_labels(snap: EngineSnapshot, engine: str | None) -> dict[str, str]:
    """Labels of ``vllm:cache_config_info``: CacheConfig fields rendered as strings."""
    cfg = snap.config
    labels = {
        "block_size": str(cfg.block_size),
        "cache_dtype": cfg.kv_cache_dtype,
        "calculate_kv_scales": "False",
        "cpu_offload_gb": "0",
        "enable_prefix_caching": str(cfg.enable_prefix_caching),
        "gpu_memory_utilization": "0.9",
        "is_attention_free": "False",
        "kv_cache_size_tokens": str(snap.kv_blocks_total * cfg.block_size),
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(snap.kv_blocks_total),
        "prefix_caching_hash_algo": "sha256",
        "sliding_window": "None",
        "swap_space": "4",
    }
    if engine is not None:
        labels["engine"] = engine
    return labels


class Writer:
    """One snapshot's vLLM exposition, and the families both vLLM generations write alike."""

    def __init__(self, snap: EngineSnapshot) -> None:
        self.snap, self.cfg, self.s = snap, snap.config, snap.stats
        self.base = {"model_name": self.cfg.model, "engine": "0"}
        self.out = Exposition()

    def gauge(self, name: str, help_text: str, value: float) -> None:
        self.out.metric(name, "gauge", help_text, self.base, value)

    def counter(self, name: str, help_text: str, value: float) -> None:
        self.out.metric(name, "counter", help_text, self.base, value)

    def hist(self, name: str, help_text: str, neutral: str) -> None:
        self.out.family(name, "histogram", help_text)
        self.out.histogram_series(name, self.base, self.s.histogram(neutral))

    def tokens_and_finished(self, reasons: tuple[str, ...]) -> None:
        """Preemptions, prompt/generation tokens and ``request_success_total`` by ``finished_reason``."""
        s = self.s
        self.counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", s.counter("preemptions"))
        self.counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", s.counter("prompt_tokens"))
        self.counter("vllm:generation_tokens_total", "Number of generation tokens processed.", s.counter("generation_tokens"))
        self.out.family("vllm:request_success_total", "counter", "Count of successfully processed requests.")
        finished = s.counter_by("finished", "reason")
        for reason in reasons:
            self.out.sample("vllm:request_success_total", {**self.base, "finished_reason": reason}, finished.get(reason, 0.0))

    def phase_histograms(self) -> None:
        """End-to-end latency and the time in each request phase."""
        self.hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", "e2e")
        self.hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", "queue")
        self.hist("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", "inference")
        self.hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", "prefill")
        self.hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", "decode")

    def spec_decode(self) -> None:
        """The speculative-decoding counters, when the simulated server drafts tokens."""
        cfg, s = self.cfg, self.s
        if not cfg.spec_tokens:
            return
        self.counter("vllm:spec_decode_num_drafts_total", "Number of spec decoding drafts.", s.counter("spec_drafts"))
        self.counter("vllm:spec_decode_num_draft_tokens_total", "Number of draft tokens.", s.counter("spec_draft_tokens"))
        self.counter(
            "vllm:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.", s.counter("spec_accepted_tokens")
        )
        self.out.family("vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter", "Accepted tokens per draft position.")
        for pos in range(cfg.spec_tokens):
            self.out.sample(
                "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                {**self.base, "position": str(pos)},
                s.counter("spec_accepted_per_pos", position=str(pos)),
            )


def render(snap: EngineSnapshot) -> str:
    w = Writer(snap)
    cfg, s, base, out = w.cfg, w.s, w.base, w.out
    gauge, counter, hist = w.gauge, w.counter, w.hist

    gauge("vllm:num_requests_running", "Number of requests in model execution batches.", snap.running)
    gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", snap.waiting)
    out.family("vllm:num_requests_waiting_by_reason", "gauge", "Number of requests waiting to be processed, by reason.")
    out.sample("vllm:num_requests_waiting_by_reason", {**base, "reason": "capacity"}, snap.waiting - snap.waiting_deferred)
    out.sample("vllm:num_requests_waiting_by_reason", {**base, "reason": "deferred"}, snap.waiting_deferred)
    gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", snap.kv_usage)
    counter(
        "vllm:prefix_cache_queries_total",
        "Prefix cache queries, in terms of number of queried tokens.",
        s.counter("prefix_queries"),
    )
    counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", s.counter("prefix_hits"))
    if cfg.kv_offload or cfg.kv_offload_blocks:
        counter(
            "vllm:external_prefix_cache_queries_total",
            "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.",
            s.counter("external_queries"),
        )
        counter(
            "vllm:external_prefix_cache_hits_total",
            "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.",
            s.counter("external_hits"),
        )
    cached = s.counter("prompt_tokens_cached")
    external = s.counter("prompt_tokens_external")
    counter("vllm:prompt_tokens_cached_total", "Number of cached prompt tokens (local + external).", cached + external)
    out.family("vllm:prompt_tokens_by_source_total", "counter", "Number of prompt tokens by source.")
    for source, value in (
        ("local_compute", s.counter("prompt_tokens_local_compute")),
        ("local_cache_hit", cached),
        ("external_kv_transfer", external),
    ):
        out.sample("vllm:prompt_tokens_by_source_total", {**base, "source": source}, value)
    # the tiers the simulator has: the GPU's own prefix cache, and host memory (kv_offload, kv_offload_blocks)
    out.family(
        "vllm:prompt_tokens_cached_by_source_total", "counter", "Number of cached prompt tokens by the source they came from."
    )
    out.sample("vllm:prompt_tokens_cached_by_source_total", {**base, "source": "device"}, cached)
    out.sample("vllm:prompt_tokens_cached_by_source_total", {**base, "source": "host"}, external)
    if cfg.kv_offload_blocks:
        gauge(
            "vllm:kv_offload_cpu_cache_usage_perc",
            "CPU KV-offload cache usage. 1 means 100 percent usage.",
            snap.offload_blocks_used / snap.offload_blocks_total if snap.offload_blocks_total else 0.0,
        )
    if cfg.kv_offload or cfg.kv_offload_blocks:
        # the OffloadingConnector's transfer counter: blocks stored to and loaded from host memory, in bytes
        block_bytes = cfg.block_size * cfg.geometry.kv_bytes_per_token
        out.family("vllm:kv_offload_total_bytes_total", "counter", "Number of bytes offloaded by KV connector")
        for transfer, blocks in (("GPU_to_CPU", "offload_stored_blocks"), ("CPU_to_GPU", "offload_loaded_blocks")):
            out.sample("vllm:kv_offload_total_bytes_total", {**base, "transfer_type": transfer}, s.counter(blocks) * block_bytes)
    w.tokens_and_finished(FINISHED_REASONS)
    out.family(
        "vllm:admission_rejections_total",
        "counter",
        "Number of requests rejected at admission because a queue limit was reached.",
    )
    rejected = s.counter("rejected")
    out.sample("vllm:admission_rejections_total", {"model_name": cfg.model, "reason": "max_num_queued_reqs"}, rejected)
    out.sample("vllm:admission_rejections_total", {"model_name": cfg.model, "reason": "max_num_queued_tokens"}, 0.0)
    hist("vllm:request_num_preemptions", "Number of preemptions per finished request.", "request_preemptions")
    hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", "prompt_len")
    hist("vllm:request_generation_tokens", "Number of generation tokens processed.", "gen_len")
    hist("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", "iteration_tokens")
    hist("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", "max_tokens")
    hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", "ttft")
    hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", "itl")
    hist("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", "tpot")
    w.phase_histograms()
    out.metric("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig", cache_config_labels(snap, "0"), 1.0)
    w.spec_decode()
    return out.text()
