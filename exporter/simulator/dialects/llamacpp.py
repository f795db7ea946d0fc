"""llama.cpp server (``llama-server --metrics``, build 0c1e57098) ``/metrics``.

Per docs/reference/engine-metrics.md §6.1: hand-rendered text, no labels
(except the per-position speculative counter), ``_total`` inside the family
name of the TYPE line, ``llamacpp:n_tokens_max`` typed ``counter`` although it
is a high-watermark, ``prompt_tokens_total`` **excludes** prefix-cached tokens
(``prompt_tokens_cached_total`` counts those), throughput gauges averaged by
the server itself, and no KV-cache usage at all. The response carries a
``Process-Start-Time-Unix`` header.

Beside /metrics, llama-server answers ``GET /props`` and ``GET /slots``
(tests/engines/fixtures/llamacpp-b11434-props.json is a real /props: ``-np 2 -c 512``
gives ``total_slots`` 2 and ``default_generation_settings.n_ctx`` 256, the context *per
slot*). llama.cpp allocates its KV cache once, ``-c`` tokens, and splits it evenly over the
``-np`` slots, each reserving its ``-c / -np`` in full whatever its request uses. ``fit``
gives the simulator the same shape: the KV cache (``num_gpu_blocks`` x ``block_size``) is
``-c``, the context per slot is ``max_model_len``, and the slots are as many as fit in full
(at most ``max_num_seqs``). So a shorter ``--max-model-len`` in the same cache is more
slots, as ``-np`` up with ``-c`` kept is on llama.cpp.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from exporter.simulator.dialects.text import Exposition, compact_number
from exporter.simulator.engine import EngineSnapshot
from exporter.simulator.settings import SimConfig

NAME = "llamacpp"
BUCKETS: dict[str, tuple[float, ...]] = {}


def slot_count(config: SimConfig) -> int:
    """Slots whose full context fits in the KV cache, at most ``max_num_seqs``."""
    return min(config.max_num_seqs, config.num_gpu_blocks * config.block_size // config.max_model_len)


def fit(config: SimConfig) -> SimConfig:
    """``config`` with llama.cpp's slot arithmetic applied: ``max_num_seqs`` becomes the slots that
    fit. ValueError (naming both figures) when not even one slot's context fits in the cache."""
    slots = slot_count(config)
    if slots < 1:
        raise ValueError(
            f"max_model_len: {config.max_model_len} context tokens per slot do not fit in the KV cache of "
            f"{config.num_gpu_blocks * config.block_size} tokens (num_gpu_blocks x block_size); llama.cpp needs one slot"
        )
    return dataclasses.replace(config, max_num_seqs=slots)


def props(snap: EngineSnapshot) -> dict[str, Any]:
    """``GET /props``: the fields of llama-server b11434's answer that describe the slots (real shape)."""
    cfg = snap.config
    return {
        "default_generation_settings": {"params": {"n_predict": -1, "max_tokens": -1}, "n_ctx": cfg.max_model_len},
        "total_slots": cfg.max_num_seqs,
        "model_alias": cfg.model,
        "model_path": cfg.model,
        "endpoint_slots": True,
        "endpoint_props": False,
        "endpoint_metrics": True,
        "build_info": "b11434-simulated",
    }


def slots(snap: EngineSnapshot) -> list[dict[str, Any]]:
    """``GET /slots``: one entry per slot; the running requests hold the first ones (prompt tokens and
    tokens decoded, as llama-server reports a busy slot), the rest are idle."""
    cfg = snap.config
    out: list[dict[str, Any]] = []
    for i in range(cfg.max_num_seqs):
        busy = i < len(snap.running_lengths)
        prompt, decoded = snap.running_lengths[i] if busy else (0, 0)
        out.append(
            {
                "id": i,
                "n_ctx": cfg.max_model_len,
                "speculative": bool(cfg.spec_tokens),
                "is_processing": busy,
                "id_task": i if busy else -1,
                "n_prompt_tokens": prompt,
                "next_token": [{"has_next_token": busy, "n_remain": -1, "n_decoded": decoded}],
            }
        )
    return out


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
