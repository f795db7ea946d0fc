"""llama.cpp server (``llama-server --metrics``, build 0c1e57098) ``/metrics``.

Per docs/reference/engine-metrics.md §6.1: hand-rendered text, no labels
(except the per-position speculative counter), ``_total`` inside the family
name of the TYPE line, ``llamacpp:n_tokens_max`` typed ``counter`` although it
is a high-watermark, ``prompt_tokens_total`` **excludes** prefix-cached tokens
(``prompt_tokens_cached_total`` counts those), throughput gauges averaged by
the server itself, and no KV-cache usage at all. The response carries a
``Process-Start-Time-Unix`` header.
"""

from __future__ import annotations

from exporter.simulator.dialects.text import Exposition, compact_number
from exporter.simulator.engine import EngineSnapshot

NAME = "llamacpp"
BUCKETS: dict[str, tuple[float, ...]] = {}


def headers(snap: EngineSnapshot) -> dict[str, str]:
    return {"Process-Start-Time-Unix": str(int(snap.start_unix))}


def render(snap: EngineSnapshot) -> str:
    s = snap.stats
    out = Exposition(fmt=compact_number)
    none: dict[str, str] = {}
    counters = [
        (
            "llamacpp:prompt_tokens_total",
            "Number of prompt tokens processed, excluding cached tokens.",
            s.counter("prompt_tokens") - s.counter("prompt_tokens_cached") - s.counter("prompt_tokens_external"),
        ),
        (
            "llamacpp:prompt_tokens_cached_total",
            "Number of prompt tokens reused from the cache.",
            s.counter("prompt_tokens_cached") + s.counter("prompt_tokens_external"),
        ),
        ("llamacpp:prompt_seconds_total", "Total time spent processing prompts.", s.counter("prompt_seconds")),
        ("llamacpp:tokens_predicted_total", "Number of generation tokens processed.", s.counter("generation_tokens")),
        ("llamacpp:tokens_predicted_seconds_total", "Total time spent generating tokens.", s.counter("predicted_seconds")),
        ("llamacpp:n_decode_total", "Total number of llama_decode() calls.", s.counter("steps")),
        ("llamacpp:n_tokens_max", "Largest observed n_tokens.", snap.max_seq_len),
    ]
    if snap.config.spec_tokens:
        counters += [
            ("llamacpp:spec_decode_num_draft_tokens_total", "Number of draft tokens generated.", s.counter("spec_draft_tokens")),
            (
                "llamacpp:spec_decode_num_accepted_tokens_total",
                "Number of draft tokens accepted.",
                s.counter("spec_accepted_tokens"),
            ),
            (
                "llamacpp:spec_decode_num_drafts_total",
                "Number of speculative decoding verification steps.",
                s.counter("spec_drafts"),
            ),
        ]
    for name, help_text, value in counters:
        out.metric(name, "counter", help_text, none, value)
    if snap.config.spec_tokens and s.counter("spec_drafts"):
        name = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
        out.family(name, "counter", "Number of draft tokens accepted, per draft position.")
        for pos in range(snap.config.spec_tokens):
            out.sample(name, {"position": str(pos)}, s.counter("spec_accepted_per_pos", position=str(pos)))
    gauges = [
        ("llamacpp:prompt_tokens_seconds", "Average prompt throughput in tokens/s.", snap.window.get("prompt_tokens_per_s", 0.0)),
        (
            "llamacpp:predicted_tokens_seconds",
            "Average generation throughput in tokens/s.",
            snap.window.get("generation_tokens_per_s", 0.0),
        ),
        ("llamacpp:requests_processing", "Number of requests processing.", snap.running),
        ("llamacpp:requests_deferred", "Number of requests deferred.", snap.waiting),
        (
            "llamacpp:n_busy_slots_per_decode",
            "Average number of busy slots per llama_decode() call.",
            snap.window.get("busy_slots_per_decode", 0.0),
        ),
    ]
    for name, help_text, value in gauges:
        out.metric(name, "gauge", help_text, none, value)
    return out.text()
