"""Reduce the exporter samples taken during one step to one row of figures.

Why these reductions (documented in docs/ramp.md):

- Gauges: mean and max over the step's *settled* samples (those taken after the
  warm-up share of the step), so the row shows both the typical level and the
  peak. Across series of one scrape a gauge is reduced the way its schema spec
  says (``MetricSpec.reduce``, the same reduction the diagnosis judges): KV
  usage, busiest thread and GPU activity take the worst series, queue lengths,
  memory and power sum, the SM clock averages over the GPUs.
- Counters: increase from the first to the last sample of the whole step (a
  counter that went backwards restarted; its last value is the increase).
- Diagnosis: per layer the mean and max score, and the *upper median* status of
  the settled samples: the most severe status held in at least half of them. One
  sample's spike does not make a layer saturated; a status held for half of the
  step does. ``unknown`` samples do not vote; a layer with only those is unknown.
  The worst status any sample showed is kept too: the baseline uses it (see
  exporter.ramp.knee). Headroom (schema 2: 0-1, how far the layer is from its
  nearest limit) is averaged over the samples that measured it; the least is
  kept with its sentence.
- Service state (schema 2, symptom-first): the share of the readings per state
  (``degraded`` / ``healthy`` / ``unknown``) and the step's state, the upper
  median again (``degraded`` when at least half of the judged readings were).
  A reading without ``state`` (an older exporter) counts as ``unknown``.
- Primary: per ``(layer, cause)`` named ``primary`` in a *degraded* reading, how
  many readings named it, their mean confidence, the chain it was given most
  often (ties: the latest, the one whose window saw most of the step), and the
  summary, evidence and advice of that same reading (so the chain and its numbers
  agree). The one named most often is the step's
  ``primary`` (ties: higher mean confidence, then the one named first).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from exporter.ramp.model import (
    STATE_SEVERITY,
    STATES,
    STATUS_SEVERITY,
    CauseFigures,
    DiagnosisFigures,
    ExporterFigures,
    LayerFigures,
    PrimaryFigures,
    Stat,
)
from exporter.schema import reduce_series

#: one /metrics scrape: sample name -> [(labels, value), ...]
Scrape = Mapping[str, Sequence[tuple[Mapping[str, str], float]]]


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


#: short name -> schema gauge (reduced across the series of one scrape by its spec's ``reduce``)
GAUGES: dict[str, str] = {
    "kv_cache_usage_ratio": "llm_kv_cache_usage_ratio",
    "requests_running": "llm_scheduler_requests_running",
    "requests_waiting": "llm_scheduler_requests_waiting",
    "kv_cache_predicted_max_concurrency": "llm_kv_cache_predicted_max_concurrency",
    "busiest_thread_cpu_ratio": "llm_process_busiest_thread_cpu_ratio",
    "busiest_thread_cpu_demand_ratio": "llm_process_busiest_thread_cpu_demand_ratio",
    "process_cpu_ratio": "llm_process_cpu_ratio",
    "gpu_utilization_ratio": "llm_gpu_utilization_ratio",
    "sm_active_ratio": "llm_gpu_sm_active_ratio",
    "sm_occupancy_ratio": "llm_gpu_sm_occupancy_ratio",
    "tensor_active_ratio": "llm_gpu_tensor_active_ratio",
    "dram_active_ratio": "llm_gpu_dram_active_ratio",
    "gpu_memory_used_bytes": "llm_gpu_memory_used_bytes",
    "gpu_power_watts": "llm_gpu_power_watts",
    "sm_clock_hertz": "llm_gpu_sm_clock_hertz",
    "pcie_receive_bytes_per_second": "llm_gpu_pcie_receive_bytes_per_second",
    "pcie_transmit_bytes_per_second": "llm_gpu_pcie_transmit_bytes_per_second",
    "parallel_sm_active_skew_ratio": "llm_parallel_sm_active_skew_ratio",
}

#: short name -> schema counter (sample name on the wire)
COUNTERS: dict[str, str] = {
    "preemptions": "llm_kv_cache_preemptions_total",
    "requests_finished": "llm_requests_finished_total",
    "requests_rejected": "llm_requests_rejected_total",
    "prompt_tokens": "llm_prompt_tokens_total",
    "generation_tokens": "llm_generation_tokens_total",
    "prefix_cache_queried_tokens": "llm_prefix_cache_queried_tokens_total",
    "prefix_cache_hit_tokens": "llm_prefix_cache_hit_tokens_total",
    "spec_decode_draft_tokens": "llm_spec_decode_draft_tokens_total",
    "spec_decode_accepted_tokens": "llm_spec_decode_accepted_tokens_total",
}


def _values(scrape: Scrape, name: str) -> list[float]:
    return [v for _, v in scrape.get(name, ())]


def exporter_figures(scrapes: Sequence[Scrape], settled: Sequence[Scrape]) -> ExporterFigures:
    """Gauges over ``settled`` (mean/max), counters from first to last of ``scrapes``."""
    out = ExporterFigures(samples=len(scrapes))
    for short, metric in GAUGES.items():
        reduced = (reduce_series(metric, _values(s, metric)) for s in settled)
        per_scrape = [v for v in reduced if v is not None]
        if per_scrape:
            out.gauges[short] = Stat(mean=_mean(per_scrape), max=max(per_scrape))
    for short, metric in COUNTERS.items():
        totals = [sum(vals) for vals in (_values(s, metric) for s in scrapes) if vals]
        if len(totals) >= 2:
            delta = totals[-1] - totals[0]
            out.counters[short] = delta if delta >= 0 else totals[-1]
    return out


def upper_median_status(statuses: Sequence[str]) -> str:
    """The most severe status held in at least half of the judged samples."""
    judged = sorted((s for s in statuses if STATUS_SEVERITY.get(s, -1) >= 0), key=STATUS_SEVERITY.__getitem__)
    if not judged:
        return "unknown"
    return judged[len(judged) // 2]


def upper_median_state(states: Sequence[str]) -> str:
    """``degraded`` when at least half of the judged readings were, ``healthy`` when fewer; else ``unknown``."""
    judged = sorted((s for s in states if STATE_SEVERITY.get(s, -1) >= 0), key=STATE_SEVERITY.__getitem__)
    if not judged:
        return "unknown"
    return judged[len(judged) // 2]


def _number(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _state(doc: Mapping[str, Any]) -> str:
    state = doc.get("state")
    return state if isinstance(state, str) and state in STATE_SEVERITY else "unknown"


def primary_figures(docs: Sequence[Mapping[str, Any]]) -> list[PrimaryFigures]:
    """The primaries named in the degraded readings among ``docs``, most readings first."""
    named: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    degraded = 0
    for doc in docs:
        if _state(doc) != "degraded":
            continue
        degraded += 1
        p = doc.get("primary")
        if isinstance(p, Mapping) and "layer" in p and "cause" in p:
            named.setdefault((str(p["layer"]), str(p["cause"])), []).append(p)
    out = []
    for (layer, cause), seen in named.items():
        confidences = [c for c in (_number(p.get("confidence")) for p in seen) if c is not None]
        chains: dict[str, int] = {}
        for p in seen:
            if p.get("chain"):
                chains[str(p["chain"])] = chains.get(str(p["chain"]), 0) + 1
        chain = ""
        if chains:
            top = max(chains.values())
            chain = next(str(p["chain"]) for p in reversed(seen) if chains.get(str(p.get("chain") or "")) == top)
        same = next((p for p in reversed(seen) if str(p.get("chain") or "") == chain), seen[-1])
        evidence = same.get("evidence")
        explains: list[str] = []
        for p in seen:
            explains += [str(x) for x in p.get("explains") or () if str(x) not in explains]
        out.append(
            PrimaryFigures(
                layer=layer,
                cause=cause,
                readings=len(seen),
                share=len(seen) / degraded,
                confidence_mean=_mean(confidences) if confidences else 0.0,
                chain=chain,
                summary=str(same.get("summary") or ""),
                explains=explains,
                evidence=dict(evidence) if isinstance(evidence, Mapping) else {},
                advice=str(same.get("advice") or ""),
            )
        )
    # stable: between equal counts and confidences, the primary named first in the step stays first
    return sorted(out, key=lambda pf: (pf.readings, pf.confidence_mean), reverse=True)


def diagnosis_figures(docs: Sequence[Mapping[str, Any]]) -> DiagnosisFigures:
    """Reduce the /diagnosis documents of one step's settled window."""
    out = DiagnosisFigures(samples=len(docs))
    scores: dict[str, list[float]] = {}
    statuses: dict[str, list[str]] = {}
    headrooms: dict[str, list[tuple[float, str]]] = {}
    for doc in docs:
        for layer, info in (doc.get("layers") or {}).items():
            if not isinstance(info, Mapping):
                continue
            statuses.setdefault(layer, []).append(str(info.get("status", "unknown")))
            score = _number(info.get("score"))
            if score is not None:
                scores.setdefault(layer, []).append(score)
            room = _number(info.get("headroom"))
            if room is not None:
                headrooms.setdefault(layer, []).append((room, str(info.get("limit") or "")))
    for layer, seen in statuses.items():
        vals = scores.get(layer, [])
        rooms = headrooms.get(layer, [])
        least = min(rooms, key=lambda r: r[0]) if rooms else None
        out.layers[layer] = LayerFigures(
            score_mean=_mean(vals) if vals else None,
            score_max=max(vals) if vals else None,
            status=upper_median_status(seen),
            samples=len(seen),
            worst_status=max(seen, key=lambda st: STATUS_SEVERITY.get(st, -1)),
            headroom_mean=_mean([r for r, _ in rooms]) if rooms else None,
            headroom_min=least[0] if least else None,
            limit=least[1] if least else "",
        )
    states = [_state(doc) for doc in docs]
    out.state = upper_median_state(states)
    out.states = {st: states.count(st) / len(states) for st in STATES} if states else {}
    out.degraded_readings = states.count("degraded")
    out.primaries = primary_figures(docs)
    out.primary = out.primaries[0] if out.primaries else None
    causes: dict[tuple[str, str], CauseFigures] = {}
    roles: dict[tuple[str, str], dict[str, int]] = {}
    for doc in docs:
        for b in doc.get("bottlenecks") or ():
            if not isinstance(b, Mapping) or "layer" not in b or "cause" not in b:
                continue
            key = (str(b["layer"]), str(b["cause"]))
            score = float(b.get("score") or 0.0)
            raw_evidence = b.get("evidence")
            evidence = raw_evidence if isinstance(raw_evidence, Mapping) else {}
            cf = causes.get(key)
            if cf is None:
                cf = causes[key] = CauseFigures(key[0], key[1], score, 0.0, dict(evidence), str(b.get("advice", "")))
            elif score > cf.score_max:
                cf.score_max, cf.evidence = score, dict(evidence)
            cf.share += 1
            if b.get("role"):
                seen_roles = roles.setdefault(key, {})
                seen_roles[str(b["role"])] = seen_roles.get(str(b["role"]), 0) + 1
    for key, cf in causes.items():
        cf.share = cf.share / len(docs) if docs else 0.0
        if key in roles:
            cf.role = max(roles[key].items(), key=lambda r: r[1])[0]
    out.causes = sorted(causes.values(), key=lambda c: (c.share, c.score_max), reverse=True)
    return out
