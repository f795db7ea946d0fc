"""KV that moved between the GPU and the tiers below it: the figures, and the clause naming them.

Why a module of its own: the hardware cause ``pcie_transfer_bound`` and the memory cause
``kv_cache_pressure`` both say what KV traffic runs beside them when they hold. A full
cache whose evictions go to host memory and come back over PCIe wants a different fix
(more GPU memory for KV, a faster link, less offload) from one that drops and recomputes
them, and a busy PCIe link is explained when the KV offload is what fills it. Engines
publish that traffic in two shapes (docs/reference/engine-metrics.md): bytes moved per
direction (trtllm-serve ``trtllm_kv_cache_offload_bytes_total`` / ``_onboard_``), or prompt
tokens whose KV came back from a lower tier (vLLM 0.33 ``prompt_tokens_cached_by_source_total``,
SGLang HiCache ``cached_tokens_total{cache_source}``). ``signals.py`` calls ``tier_signals``
for the service view; the rules call ``offload_clause``.

* ``OFFLOAD_BYTES_RATE`` / ``LOAD_BYTES_RATE`` — bytes/s GPU -> host memory and back, over
  the window (``llm_kv_cache_tier_transfer_bytes_total{direction}``).
* ``TIER_HIT_RATES[tier]`` — prompt tokens/s whose KV came from ``tier`` (every tier but the
  GPU's own: ``llm_kv_cache_tier_hit_tokens_total{tier}``).
* ``HOST_USAGE`` — the host tier's usage (``llm_kv_cache_host_usage_ratio``).

Absent, never 0, where the engine publishes none of it; a rate of 0 is kept (the tier is
there and idle) but names nothing in the clause.
"""

from __future__ import annotations

from collections.abc import Mapping

from exporter.diagnosis.window import LabelFilter, Window
from exporter.schema import KV_CACHE_TIERS, reduce_series, reduced_name

TRANSFER_METRIC = "llm_kv_cache_tier_transfer_bytes_total"
HIT_METRIC = "llm_kv_cache_tier_hit_tokens_total"
HOST_USAGE_METRIC = "llm_kv_cache_host_usage_ratio"
#: the families these signals read (the diagnosis window keeps them)
READS: frozenset[str] = frozenset({TRANSFER_METRIC, HIT_METRIC, HOST_USAGE_METRIC})

OFFLOAD_BYTES_RATE = f'rate({TRANSFER_METRIC}{{direction="offload"}})'
LOAD_BYTES_RATE = f'rate({TRANSFER_METRIC}{{direction="load"}})'
#: the tiers below the GPU, in the order the clause names them
LOWER_TIERS: tuple[str, ...] = tuple(t for t in KV_CACHE_TIERS if t != "gpu")
TIER_HIT_RATES: dict[str, str] = {t: f'rate({HIT_METRIC}{{tier="{t}"}})' for t in LOWER_TIERS}
HOST_USAGE = reduced_name(HOST_USAGE_METRIC)
#: every signal of this module, for a rule's evidence
EVIDENCE: tuple[str, ...] = (OFFLOAD_BYTES_RATE, LOAD_BYTES_RATE, *TIER_HIT_RATES.values(), HOST_USAGE)

#: how the clause names each tier the KV came back from
_WHERE: dict[str, str] = {"host": "host memory", "storage": "storage", "peer": "other instances", "other": "a KV connector"}


def tier_signals(window: Window, v: dict[str, float]) -> None:
    """Add the KV tier signals the window supports to the service view ``v``."""
    for key, direction in ((OFFLOAD_BYTES_RATE, "offload"), (LOAD_BYTES_RATE, "load")):
        rate = window.rate(TRANSFER_METRIC, _label_is("direction", direction))
        if rate is not None:
            v[key] = rate
    for tier, key in TIER_HIT_RATES.items():
        rate = window.rate(HIT_METRIC, _label_is("tier", tier))
        if rate is not None:
            v[key] = rate
    snap = window.latest
    if snap is not None:
        usage = reduce_series(HOST_USAGE_METRIC, snap.values(HOST_USAGE_METRIC))
        if usage is not None:
            v[HOST_USAGE] = usage


def _label_is(label: str, value: str) -> LabelFilter:
    return lambda labels: labels.get(label) == value


def offload_clause(v: Mapping[str, float]) -> str:
    """ "1.2 GB/s of KV moved between the GPU and host memory (0.8 GB/s offloaded, 0.4 GB/s loaded
    back)", or "the KV of 3500 prompt tokens/s came back from host memory"; "" where the view shows
    no KV moving. Bytes are named where the engine counts them, else tokens."""
    offload, load = v.get(OFFLOAD_BYTES_RATE, 0.0), v.get(LOAD_BYTES_RATE, 0.0)
    if offload > 0 and load > 0:
        return (
            f"{_bytes(offload + load)} of KV moved between the GPU and host memory "
            f"({_bytes(offload)} offloaded, {_bytes(load)} loaded back)"
        )
    if offload > 0:
        return f"{_bytes(offload)} of KV was offloaded to host memory"
    if load > 0:
        return f"{_bytes(load)} of KV was loaded back from host memory"
    rates = {t: v.get(key, 0.0) for t, key in TIER_HIT_RATES.items()}
    tiers = [t for t in LOWER_TIERS if rates[t] > 0]
    if not tiers:
        return ""
    places = " and ".join(_WHERE[t] for t in tiers)
    return f"the KV of {sum(rates.values()):.0f} prompt tokens/s came back from {places}"


def with_offload(text: str, v: Mapping[str, float], joiner: str = " while ") -> str:
    """``text`` followed by ``joiner`` and the offload clause, where KV moves."""
    clause = offload_clause(v)
    return f"{text}{joiner}{clause}" if clause else text


def _bytes(per_second: float) -> str:
    if per_second >= 1e8:
        return f"{per_second / 1e9:.1f} GB/s"
    return f"{per_second / 1e6:.1f} MB/s"
