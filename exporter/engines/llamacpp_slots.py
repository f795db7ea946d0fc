"""llama.cpp's sequence slots, from ``GET /props`` and ``GET /slots``: first-party capacity evidence.

Why: llama.cpp's /metrics has no KV-usage gauge in current builds, so "all
slots busy while most of their context is free" (a slot count set too low for
the load: ``-np``) cannot be told from it. The server answers it directly:
``/props`` gives ``total_slots`` and the context per slot
(``default_generation_settings.n_ctx``); ``/slots`` lists each slot with
``is_processing`` and, while busy, ``n_prompt_tokens`` and
``next_token[0].n_decoded``, whose sum is the context that slot holds.

Published (labels as the engine's other series): ``llm_scheduler_slots``,
``llm_scheduler_slots_busy``, ``llm_kv_cache_slot_context_tokens`` and
``llm_kv_cache_used_tokens``, and the same /props values as launch settings
(``llm_engine_setting{setting="slots"|"context_per_slot"}``, exporter/engines/settings.py). A server started with ``--no-slots`` answers
/slots with an error: then only the /props values are published; absent stays
absent, never 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from exporter.engines import settings as launch_settings
from exporter.jsonsafe import loads_bounded
from exporter.samples import Sample

PROPS_PATH = "/props"
SLOTS_PATH = "/slots"
#: the most bytes of one /props or /slots answer read (a slot list of 512 slots is ~1 MiB)
MAX_BODY_BYTES = 4 << 20
#: /slots nests about five levels; deeper is not llama.cpp
MAX_DEPTH = 32


def base_of(metrics_url: str) -> str:
    """The server's base URL from its metrics URL (``http://h:8080/metrics`` -> ``http://h:8080``)."""
    for suffix in ("/metrics", "/metrics/"):
        if metrics_url.endswith(suffix):
            return metrics_url[: -len(suffix)]
    return metrics_url.rstrip("/")


def _json(body: bytes | str | None) -> Any:
    """The decoded body, or None when it is not JSON or is over the size or depth bound (never RecursionError)."""
    if body is None:
        return None
    try:
        return loads_bounded(body, max_bytes=MAX_BODY_BYTES, max_depth=MAX_DEPTH)
    except (ValueError, UnicodeDecodeError):  # JSONLimitError is a ValueError
        return None


def decoded(body: bytes | str | None) -> Any:
    """A small JSON body decoded within this module's size and depth bounds (None when it is not JSON)."""
    return _json(body)


def _number(x: Any) -> float | None:
    """A JSON number as a float; None for anything else, an integer too large for a float included."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    if isinstance(x, int) and abs(x) > _MAX_INT:
        return None
    return float(x)


#: the largest integer read as a count (float() of an integer with 400 digits raises OverflowError)
_MAX_INT = 2**63


def props_points(body: bytes | str | None, labels: Mapping[str, str]) -> list[Sample]:
    """Slot count and context per slot from a /props body (nothing when it is not what we expect)."""
    doc = _json(body)
    if not isinstance(doc, dict):
        return []
    out: list[Sample] = []
    slots = _number(doc.get("total_slots"))
    if slots is not None and slots >= 0:
        out.append(Sample("llm_scheduler_slots", dict(labels), slots))
    settings = doc.get("default_generation_settings")
    n_ctx = _number(settings.get("n_ctx")) if isinstance(settings, dict) else None
    if n_ctx is not None and n_ctx > 0:
        out.append(Sample("llm_kv_cache_slot_context_tokens", dict(labels), n_ctx))
    return out


def props_and_setting_points(body: bytes | str | None, labels: Mapping[str, str]) -> list[Sample]:
    """``props_points`` plus the same /props values as launch settings (``llm_engine_setting``)."""
    return props_points(body, labels) + launch_settings.setting_points(launch_settings.from_llamacpp_props(_json(body)), labels)


def slots_points(body: bytes | str | None, labels: Mapping[str, str]) -> list[Sample]:
    """Busy slots and the context tokens they hold from a /slots body."""
    doc = _json(body)
    if not isinstance(doc, list) or not all(isinstance(s, dict) for s in doc):
        return []
    busy = 0
    used = 0.0
    for slot in doc:
        if slot.get("is_processing") is not True:
            continue
        busy += 1
        used += _number(slot.get("n_prompt_tokens")) or 0.0
        nxt = slot.get("next_token")
        if isinstance(nxt, list) and nxt and isinstance(nxt[0], dict):
            used += _number(nxt[0].get("n_decoded")) or 0.0
    return [
        Sample("llm_scheduler_slots_busy", dict(labels), float(busy)),
        Sample("llm_kv_cache_used_tokens", dict(labels), used),
    ]
