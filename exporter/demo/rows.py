"""The values per bottleneck layer: every schema metric the exporter serves, as the diagnosis judged it.

Why the diagnosis' values first: ``/diagnosis?signals=1`` judged the same quantities over the
same window, so the view shows what the verdict stood on (a p95 over the recent seconds, not a
mean since start); a metric the diagnosis has no signal for is shown as served.
"""

from __future__ import annotations

import math
from typing import Any

from exporter.demo.readings import Reading
from exporter.demo.units import fmt, fmt_seconds, metric_unit
from exporter.schema import LAYERS, SPECS, reduced_name

# service-scope signal names of the diagnosis (exporter/diagnosis/signals.py), repeated here so that
# importing this module stays cheap; a gauge's is named by how the schema reduces it (schema.reduced_name)
TTFT_P95_RECENT, TTFT_P95 = "p95_over_recent(llm_request_ttft_seconds)", "p95(llm_request_ttft_seconds)"
ITL_P95_RECENT, ITL_P95 = "p95_over_recent(llm_request_inter_token_seconds)", "p95(llm_request_inter_token_seconds)"
QUEUE_P95_RECENT, QUEUE_P95 = "p95_over_recent(llm_scheduler_queue_seconds)", "p95(llm_scheduler_queue_seconds)"
SPEC_ACCEPTANCE = "increase(llm_spec_decode_accepted_tokens_total) / increase(llm_spec_decode_draft_tokens_total)"
#: metric -> (the diagnosis signals that say the same thing, in preference order; how to show them)
SIGNAL_OF: dict[str, tuple[tuple[str, ...], str]] = {
    "llm_request_ttft_seconds": ((TTFT_P95_RECENT, TTFT_P95), "p95"),
    "llm_request_inter_token_seconds": ((ITL_P95_RECENT, ITL_P95), "p95"),
    "llm_scheduler_queue_seconds": ((QUEUE_P95_RECENT, QUEUE_P95), "p95"),
    "llm_scheduler_requests_running": ((reduced_name("llm_scheduler_requests_running"),), "count"),
    "llm_scheduler_requests_waiting": ((reduced_name("llm_scheduler_requests_waiting"),), "count"),
    "llm_kv_cache_usage_ratio": ((reduced_name("llm_kv_cache_usage_ratio"),), "share"),
    "llm_kv_cache_preemptions_total": (("rate(llm_kv_cache_preemptions_total)",), "rate"),
    "llm_generation_tokens_total": (("rate(llm_generation_tokens_total)",), "rate"),
    "llm_requests_finished_total": (("rate(llm_requests_finished_total)",), "rate"),
    "llm_requests_rejected_total": (("rate(llm_requests_rejected_total)",), "rate"),
    "llm_process_busiest_thread_cpu_ratio": ((reduced_name("llm_process_busiest_thread_cpu_ratio"),), "share"),
    "llm_process_busiest_thread_cpu_demand_ratio": ((reduced_name("llm_process_busiest_thread_cpu_demand_ratio"),), "cores"),
    "llm_process_cpu_ratio": ((reduced_name("llm_process_cpu_ratio"),), "cores"),
}


def from_signals(name: str, signals: dict[str, Any] | None) -> str | None:
    """The metric as the diagnosis judged it, or None if it has no such signal."""
    if not signals or name not in SIGNAL_OF:
        return None
    keys, how = SIGNAL_OF[name]
    for key in keys:
        value = signals.get(key)
        if isinstance(value, (int, float)) and not math.isnan(value):
            if how == "p95":
                return f"{fmt_seconds(value)} p95"
            return fmt(value, how)
    return None


def layer_rows(now: Reading, before: Reading | None, signals: dict[str, Any] | None = None) -> dict[str, list[tuple[str, str]]]:
    """Per bottleneck layer, (metric, shown value) rows for every schema metric the exporter serves.

    Where the diagnosis judged the same quantity (``signals``, from ``/diagnosis?signals=1``) its
    value is shown; otherwise the metric itself: gauges as served, counters as a rate between the
    two readings, histograms as the mean between them (since start when nothing finished between).
    """
    rows: dict[str, list[tuple[str, str]]] = {layer: [] for layer in LAYERS}
    dt = (now.at - before.at) if before else 0.0
    for name, spec in SPECS.items():
        if spec.layer not in rows or spec.type == "info" or name.endswith("_info"):
            continue
        present = name in now.hists if spec.type == "histogram" else bool(now.values.get(name))
        if not present:
            continue
        shown = from_signals(name, signals)
        if shown is not None:
            pass
        elif spec.type == "histogram":
            total, count = now.hists[name]
            unit = spec.unit if spec.unit == "seconds" else ""
            if before and name in before.hists and count - before.hists[name][1] > 0:
                d_total, d_count = total - before.hists[name][0], count - before.hists[name][1]
                shown = fmt(d_total / d_count, unit) + " avg"
            elif count > 0:
                shown = fmt(total / count, unit) + (" avg since start" if before else " avg")
            else:
                shown = "no observation yet"
        elif spec.type == "counter":
            value = now.total(name)
            assert value is not None
            prev = before.total(name) if before else None
            shown = fmt((value - prev) / dt, "rate") if prev is not None and dt > 0 else fmt(value, "")
        else:
            series = now.values[name]
            unit = metric_unit(name, spec.unit)
            if "reason" in spec.labels:
                active = [labels.get("reason", "") for labels, v in series if v]
                shown = ",".join(sorted(set(active))) or "none"
            elif len(series) > 1 and spec.labels[:1] in (("gpu",), ("group",)):
                key = spec.labels[0]
                ordered = sorted(series, key=lambda s: s[0].get(key, ""))
                texts = [fmt(v, unit) for _, v in ordered]
                shown = f"{texts[0]} (all {len(texts)})" if len(set(texts)) == 1 else " ".join(texts)
            else:
                shown = fmt(now.figure(name), unit)
        rows[spec.layer].append((name.removeprefix("llm_"), shown))
    if signals and isinstance(signals.get(SPEC_ACCEPTANCE), (int, float)):
        rows["speculative_decoding"].append(("spec_decode_acceptance", fmt(signals[SPEC_ACCEPTANCE], "share")))
    return rows
