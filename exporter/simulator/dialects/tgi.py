"""Hugging Face TGI 3.x ``/metrics``: ``tgi_`` names, no labels, no ``_total``.

Per docs/reference/engine-metrics.md §4 and the DataDog fixture in
tests/engines/fixtures (the real-* files): the Rust ``metrics-exporter-prometheus`` prints
counters without ``_total``, integers without a decimal point, a blank line
between families, and some families (``tgi_request_failure``) without HELP.
Only names matched by TGI's bucket rules are histograms; the speculative
``tgi_request_skipped_tokens`` is a summary. TGI exposes no KV usage, no
prefix cache, no preemptions and no TTFT histogram: neither do we.
"""

from __future__ import annotations

from exporter.simulator.dialects.text import Exposition, compact_number
from exporter.simulator.engine import EngineSnapshot
from exporter.simulator.settings import SimConfig

NAME = "tgi"


def _duration_buckets() -> tuple[float, ...]:
    """router/src/server.rs: start at 1e-4 and multiply by 1.5, 35 times (same float steps as Rust)."""
    out, value = [], 0.0001
    for _ in range(35):
        value *= 1.5
        out.append(value)
    return tuple(out)


DURATION_BUCKETS = _duration_buckets()
BATCH_SIZE_BUCKETS = tuple(float(i) for i in range(1, 1025))
SUMMARY_QUANTILES = (0.0, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0)
FAILURE_KINDS = ("validation", "overloaded", "dropped")


def _linear(maximum: float) -> tuple[float, ...]:
    """TGI's token-length buckets: 100 equal steps up to ``maximum``."""
    step = maximum / 100.0
    return tuple(step * (i + 1) for i in range(100))


def buckets_for(config: SimConfig) -> dict[str, tuple[float, ...]]:
    max_input = config.max_model_len - 1
    max_total = config.max_model_len
    return {
        "e2e": DURATION_BUCKETS,
        "queue": DURATION_BUCKETS,
        "inference": DURATION_BUCKETS,
        "mean_time_per_token": DURATION_BUCKETS,
        "forward": DURATION_BUCKETS,
        "step": DURATION_BUCKETS,
        "prompt_len": _linear(max_input),
        "gen_len": _linear(max_total),
        "max_tokens": _linear(max_total),
        "batch_size": BATCH_SIZE_BUCKETS,
    }


BUCKETS = buckets_for(SimConfig())


def render(snap: EngineSnapshot) -> str:
    s = snap.stats
    out = Exposition(fmt=compact_number, blank_between=True)
    none: dict[str, str] = {}

    out.metric("tgi_request_count", "counter", "Total number of requests", none, s.counter("api_requests"))
    finished = s.counter_by("finished", "reason")
    success = sum(v for reason, v in finished.items() if reason and reason != "abort")
    out.metric("tgi_request_success", "counter", "Number of successful requests", none, success)
    out.family("tgi_request_failure", "counter", None)
    failures = {
        "validation": s.counter("validation_errors"),
        "overloaded": s.counter("rejected"),
        "dropped": finished.get("abort", 0.0),
    }
    for kind in FAILURE_KINDS:
        if failures[kind]:
            out.sample("tgi_request_failure", {"err": kind}, failures[kind])
    steps = s.counter_by("steps", "method")
    for name, help_text in (
        ("tgi_batch_inference_count", "Inference calls per method (prefill or decode)"),
        ("tgi_batch_inference_success", "Number of successful inference calls per method (prefill or decode)"),
    ):
        out.family(name, "counter", help_text)
        for method in ("prefill", "decode"):
            out.sample(name, {"method": method}, steps.get(method, 0.0))
    out.metric("tgi_queue_size", "gauge", "Current queue size", none, snap.waiting)
    out.metric("tgi_batch_current_size", "gauge", "Current batch size", none, snap.running)
    out.metric("tgi_batch_current_max_tokens", "gauge", "Maximum tokens for the current batch", none, snap.batch_max_tokens)
    out.metric(
        "tgi_batch_max_total_tokens",
        "gauge",
        "Maximum amount of tokens in total.",
        none,
        snap.kv_blocks_total * snap.config.block_size,
    )
    for name, help_text, neutral in (
        ("tgi_request_input_length", "Input token length per request", "prompt_len"),
        ("tgi_request_max_new_tokens", "Maximum new tokens per request", "max_tokens"),
        ("tgi_request_generated_tokens", "Generated tokens per request", "gen_len"),
        ("tgi_request_inference_duration", "Request inference duration", "inference"),
        ("tgi_request_duration", "Request duration", "e2e"),
        ("tgi_request_queue_duration", "Request queue duration", "queue"),
        ("tgi_request_mean_time_per_token_duration", "Mean time per token per request", "mean_time_per_token"),
        ("tgi_batch_next_size", "Batch size of the next batch", "batch_size"),
    ):
        out.family(name, "histogram", help_text)
        out.histogram_series(name, none, s.histogram(neutral))
    for name, help_text, neutral in (
        ("tgi_batch_forward_duration", "Batch forward duration per method (prefill or decode)", "forward"),
        ("tgi_batch_inference_duration", "Batch inference duration", "step"),
    ):
        out.family(name, "histogram", help_text)
        for method in ("prefill", "decode"):
            out.histogram_series(name, {"method": method}, s.histogram(neutral, method=method))
    if snap.config.spec_tokens:
        quantiles, total, count = s.summary("skipped_tokens", SUMMARY_QUANTILES)
        out.family("tgi_request_skipped_tokens", "summary", "Speculated tokens per request")
        out.summary_series("tgi_request_skipped_tokens", none, quantiles, total, count)
    return out.text()
