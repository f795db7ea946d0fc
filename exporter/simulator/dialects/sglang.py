"""SGLang 0.5.23 ``/metrics`` (``--enable-metrics``): ``sglang:`` names.

Per docs/reference/engine-metrics.md §3.1: scheduler-side families carry
``model_name, engine_type, tp_rank, pp_rank, moe_ep_rank``; tokenizer-side
families carry ``model_name, engine_type`` (+ ``is_streaming`` where SGLang has
it). KV usage is ``sglang:token_usage`` (0-1); preemption is "retraction";
the prefix cache reports a windowed ``cache_hit_rate`` gauge plus the
``cached_tokens_total`` counter (counted at request finish); speculative
decoding only has windowed gauges and ``spec_verify_calls_total``. The
scheduler process's CPU time is a counter — real CPU time of our scheduler
thread here.
"""

from __future__ import annotations

from exporter.simulator.dialects.text import Exposition
from exporter.simulator.engine import EngineSnapshot

NAME = "sglang"

# bucket bounds: a table of numbers reads best as rows, not one value a line
# fmt: off
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 15.0, 20.0,
                25.0, 30.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2, 0.4, 0.6,
               0.8, 1.0, 2.0, 4.0, 6.0, 8.0)
TPOT_BUCKETS = (0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
QUEUE_BUCKETS = (0.0, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0,
                 100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0, 900.0, 1000.0, 1200.0, 1400.0, 1600.0, 1800.0,
                 2000.0, 2500.0, 3000.0)
# fmt: on

BUCKETS: dict[str, tuple[float, ...]] = {
    "ttft": TTFT_BUCKETS,
    "e2e": E2E_BUCKETS,
    "itl": ITL_BUCKETS,
    "tpot": TPOT_BUCKETS,
    "queue": QUEUE_BUCKETS,
}


def render(snap: EngineSnapshot) -> str:
    cfg = snap.config
    s = snap.stats
    sched = {"model_name": cfg.model, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
    tok = {"model_name": cfg.model, "engine_type": "unified"}
    out = Exposition()
    capacity = snap.kv_blocks_total * cfg.block_size
    used_tokens = snap.kv_blocks_used * cfg.block_size
    evictable = snap.kv_blocks_cached * cfg.block_size

    def gauge(name: str, help_text: str, value: float, labels: dict[str, str] = sched) -> None:
        out.metric(name, "gauge", help_text, labels, value)

    def counter(name: str, help_text: str, value: float, labels: dict[str, str] = sched) -> None:
        out.metric(name, "counter", help_text, labels, value)

    def by_streaming(name: str, type_: str, help_text: str, neutral: str) -> None:
        out.family(name, type_, help_text)
        for flag in ("false", "true"):
            labels = {**tok, "is_streaming": flag}
            if type_ == "histogram":
                out.histogram_series(name, labels, s.histogram(neutral, streaming=flag))
            else:
                out.sample(name, labels, s.counter(neutral, streaming=flag))

    gauge("sglang:num_running_reqs", "The number of running requests.", snap.running)
    gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", snap.waiting)
    gauge("sglang:num_grammar_queue_reqs", "The number of requests in the grammar waiting queue.", 0)
    gauge("sglang:num_paused_reqs", "The number of requests paused by async weight sync.", 0)
    gauge("sglang:token_usage", "The token usage.", snap.kv_usage)
    gauge("sglang:full_token_usage", "The token usage for full attention layers.", snap.kv_usage)
    gauge("sglang:num_used_tokens", "The number of used tokens.", used_tokens)
    gauge("sglang:kv_used_tokens", "The number of used KV cache tokens.", used_tokens)
    gauge("sglang:kv_available_tokens", "The number of available KV cache tokens.", capacity - used_tokens)
    gauge("sglang:kv_evictable_tokens", "The number of evictable KV cache tokens.", evictable)
    gauge("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", capacity)
    gauge("sglang:page_size", "The page size of the KV cache.", cfg.block_size)
    gauge("sglang:num_pages", "The number of pages in the KV cache.", snap.kv_blocks_total)
    gauge("sglang:context_len", "The context length.", cfg.max_model_len)
    gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", snap.window.get("cache_hit_rate", 0.0))
    gauge("sglang:gen_throughput", "The generation throughput (token/s).", snap.window.get("generation_tokens_per_s", 0.0))
    gauge("sglang:num_retracted_reqs", "The number of retracted requests.", 0)
    counter("sglang:num_retracted_requests_total", "Total number of retracted requests.", s.counter("preemptions"))
    counter(
        "sglang:num_retracted_input_tokens_total",
        "Total number of input tokens of retracted requests.",
        s.counter("retracted_input_tokens"),
    )
    counter(
        "sglang:num_retracted_output_tokens_total",
        "Total number of output tokens of retracted requests.",
        s.counter("retracted_output_tokens"),
    )
    gauge("sglang:is_cuda_graph", "Whether the batch is using CUDA graph.", 1)
    if cfg.spec_tokens:
        gauge(
            "sglang:spec_accept_length",
            "The average acceptance length of speculative decoding.",
            snap.window.get("spec_accept_length", 0.0),
        )
        gauge(
            "sglang:spec_accept_rate",
            "The average acceptance rate of speculative decoding.",
            snap.window.get("spec_accept_rate", 0.0),
        )
        gauge("sglang:spec_num_draft_tokens", "The number of draft tokens per verify step.", cfg.spec_tokens + 1)
        gauge("sglang:spec_num_steps", "The number of speculative draft steps.", cfg.spec_tokens)
    if cfg.kv_offload_blocks:  # HiCache: the host tier of the radix cache
        gauge(
            "sglang:hicache_host_used_tokens", "Tokens held in the HiCache host pool.", snap.offload_blocks_used * cfg.block_size
        )
        gauge(
            "sglang:hicache_host_total_tokens",
            "Capacity of the HiCache host pool in tokens.",
            snap.offload_blocks_total * cfg.block_size,
        )
    out.family("sglang:realtime_tokens_total", "counter", "The number of tokens processed, by mode.")
    out.sample("sglang:realtime_tokens_total", {**sched, "mode": "prefill_compute"}, s.counter("prompt_tokens_local_compute"))
    out.sample("sglang:realtime_tokens_total", {**sched, "mode": "prefill_cache"}, s.counter("prompt_tokens_cached"))
    out.sample("sglang:realtime_tokens_total", {**sched, "mode": "decode"}, s.counter("generation_tokens"))
    out.family("sglang:forward_execution_seconds_total", "counter", "Total time spent executing forward passes, by forward mode.")
    forward = s.counter_by("forward_seconds", "mode")
    for category, key in (("EXTEND", "extend"), ("DECODE", "decode"), ("MIXED", "mixed")):
        out.sample("sglang:forward_execution_seconds_total", {**sched, "category": category}, forward.get(key, 0.0))
    counter("sglang:scheduler_idle_seconds_total", "Total time the scheduler was idle.", snap.idle_seconds)
    counter("sglang:scheduler_process_cpu_seconds_total", "Total CPU time of the scheduler process.", snap.scheduler_cpu_seconds)
    # tokenizer side
    by_streaming("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.", "prompt_tokens")
    by_streaming("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.", "generation_tokens")
    out.family("sglang:num_requests_total", "counter", "Number of requests processed.")
    for flag in ("false", "true"):
        out.sample("sglang:num_requests_total", {**tok, "is_streaming": flag}, s.counter("finished", streaming=flag))
    counter("sglang:num_aborted_requests_total", "Number of requests aborted.", s.counter("finished", reason="abort"), tok)
    out.family("sglang:cached_tokens_total", "counter", "Number of cached prompt tokens.")
    out.sample("sglang:cached_tokens_total", {**tok, "cache_source": "device"}, s.counter("prompt_tokens_cached"))
    out.sample("sglang:cached_tokens_total", {**tok, "cache_source": "host"}, s.counter("prompt_tokens_external"))
    if cfg.spec_tokens:
        counter("sglang:spec_verify_calls_total", "Number of speculative verify calls.", s.counter("spec_drafts"), tok)
    by_streaming("sglang:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.", "ttft")
    out.family("sglang:inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds.")
    out.histogram_series("sglang:inter_token_latency_seconds", tok, s.histogram("itl"))
    by_streaming(
        "sglang:request_time_per_output_token_seconds",
        "histogram",
        "Histogram of time per output token of a request in seconds.",
        "tpot",
    )
    by_streaming("sglang:e2e_request_latency_seconds", "histogram", "Histogram of End-to-end request latency in seconds", "e2e")
    out.family("sglang:queue_time_seconds", "histogram", "Histogram of queueing time in seconds.")
    out.histogram_series("sglang:queue_time_seconds", tok, s.histogram("queue"))
    return out.text()
