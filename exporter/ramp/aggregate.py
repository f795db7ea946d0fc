"""Reduce the exporter samples taken during one step to one row of figures.

Why these reductions (documented in docs/ramp.md):

- Gauges: mean and max over the step's *settled* samples (those taken after the
  warm-up share of the step), so the row shows both the typical level and the
  peak. Across series of one scrape a gauge is reduced the way its meaning asks:
  KV usage and busiest thread take the worst series, queue lengths sum, GPU
  activity ratios average over the GPUs.
- Counters: increase from the first to the last sample of the whole step (a
  counter that went backwards restarted; its last value is the increase).
- Diagnosis: per layer the mean and max score, and the *upper median* status of
  the settled samples: the most severe status held in at least half of them. One
  sample's spike does not make a layer saturated; a status held for half of the
  step does. ``unknown`` samples do not vote; a layer with only those is unknown.
  The worst status any sample showed is kept too: the baseline uses it (see
  exporter.ramp.knee).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from exporter.ramp.model import STATUS_SEVERITY, CauseFigures, DiagnosisFigures, ExporterFigures, LayerFigures, Stat

#: one /metrics scrape: sample name -> [(labels, value), ...]
Scrape = Mapping[str, Sequence[tuple[Mapping[str, str], float]]]


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


#: short name -> (schema metric, reduction across the series of one scrape)
GAUGES: dict[str, tuple[str, Callable[[Sequence[float]], float]]] = {
    "kv_cache_usage_ratio": ("llm_kv_cache_usage_ratio", max),
    "requests_running": ("llm_scheduler_requests_running", sum),
    "requests_waiting": ("llm_scheduler_requests_waiting", sum),
    "kv_cache_predicted_max_concurrency": ("llm_kv_cache_predicted_max_concurrency", min),
    "busiest_thread_cpu_ratio": ("llm_process_busiest_thread_cpu_ratio", max),
    "busiest_thread_cpu_demand_ratio": ("llm_process_busiest_thread_cpu_demand_ratio", max),
    "process_cpu_ratio": ("llm_process_cpu_ratio", sum),
    "gpu_utilization_ratio": ("llm_gpu_utilization_ratio", _mean),
    "sm_active_ratio": ("llm_gpu_sm_active_ratio", _mean),
    "sm_occupancy_ratio": ("llm_gpu_sm_occupancy_ratio", _mean),
    "tensor_active_ratio": ("llm_gpu_tensor_active_ratio", _mean),
    "dram_active_ratio": ("llm_gpu_dram_active_ratio", _mean),
    "gpu_memory_used_bytes": ("llm_gpu_memory_used_bytes", sum),
    "gpu_power_watts": ("llm_gpu_power_watts", sum),
    "sm_clock_hertz": ("llm_gpu_sm_clock_hertz", _mean),
    "pcie_receive_bytes_per_second": ("llm_gpu_pcie_receive_bytes_per_second", sum),
    "pcie_transmit_bytes_per_second": ("llm_gpu_pcie_transmit_bytes_per_second", sum),
    "parallel_sm_active_skew_ratio": ("llm_parallel_sm_active_skew_ratio", max),
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
    for short, (metric, reduce) in GAUGES.items():
        per_scrape = [reduce(vals) for vals in (_values(s, metric) for s in settled) if vals]
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


def diagnosis_figures(docs: Sequence[Mapping[str, Any]]) -> DiagnosisFigures:
    """Reduce the /diagnosis documents of one step's settled window."""
    out = DiagnosisFigures(samples=len(docs))
    scores: dict[str, list[float]] = {}
    statuses: dict[str, list[str]] = {}
    for doc in docs:
        for layer, info in (doc.get("layers") or {}).items():
            if not isinstance(info, Mapping):
                continue
            statuses.setdefault(layer, []).append(str(info.get("status", "unknown")))
            score = info.get("score")
            if isinstance(score, (int, float)):
                scores.setdefault(layer, []).append(float(score))
    for layer, seen in statuses.items():
        vals = scores.get(layer, [])
        out.layers[layer] = LayerFigures(
            score_mean=_mean(vals) if vals else None,
            score_max=max(vals) if vals else None,
            status=upper_median_status(seen),
            samples=len(seen),
            worst_status=max(seen, key=lambda st: STATUS_SEVERITY.get(st, -1)),
        )
    causes: dict[tuple[str, str], CauseFigures] = {}
    for doc in docs:
        for b in doc.get("bottlenecks") or ():
            if not isinstance(b, Mapping) or "layer" not in b or "cause" not in b:
                continue
            key = (str(b["layer"]), str(b["cause"]))
            score = float(b.get("score") or 0.0)
            evidence = b.get("evidence") if isinstance(b.get("evidence"), Mapping) else {}
            cf = causes.get(key)
            if cf is None:
                cf = causes[key] = CauseFigures(key[0], key[1], score, 0.0, dict(evidence), str(b.get("advice", "")))
            elif score > cf.score_max:
                cf.score_max, cf.evidence = score, dict(evidence)
            cf.share += 1
    for cf in causes.values():
        cf.share = cf.share / len(docs) if docs else 0.0
    out.causes = sorted(causes.values(), key=lambda c: (c.share, c.score_max), reverse=True)
    return out
