"""plan.json, plan.md and plan.html from the per-model plans.

Why plan.json carries the step series too: the chart is one view of them, and a
reader (a capacity review, a spreadsheet) should be able to redraw or re-check
it without a Prometheus. Times are UTC, ISO 8601; non-finite numbers become
null (exporter/jsonsafe.py). Text from Prometheus (model names) is escaped in
Markdown (exporter/report/render.py ``md``) and in HTML.
"""

from __future__ import annotations

import base64
import html
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter import jsonsafe
from exporter.plan.compute import ModelPlan, Sizing
from exporter.plan.durations import format_duration
from exporter.report.render import md

VERSION = 1
DEFINITIONS = {
    "peak": "the UTC clock hour of the period with the highest mean finished-request rate (hour's mean of the steps)",
    "trough": "the UTC clock hour of the period with the lowest mean finished-request rate",
    "in_flight": "running + waiting requests at the engines, mean over the step; its peak/trough is the highest/lowest hourly mean",
    "replicas_needed": "max(ceil(rate / (rps per replica x (1 - headroom))), ceil(in flight / (knee concurrency x (1 - headroom)))), at least 1",
    "concurrency_ceiling": "floor(knee concurrency per replica x (1 - headroom)), at least 1",
    "above_capacity": "a step whose rate or in-flight count exceeds the summed capacity of the replicas that existed at that step",
    "typical_peak_hour_utc": "hour of day (UTC) with the highest mean demand across the days with data in at least 12 hours",
}


@dataclass(frozen=True)
class Meta:
    prometheus: str
    start: float
    end: float
    step: float
    headroom: float


def iso(t: float | None) -> str | None:
    return None if t is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _r(v: float | None, digits: int = 3) -> float | None:
    return None if v is None else round(v, digits)


def _sizing(s: Sizing) -> dict[str, Any]:
    return {
        "hour": iso(s.hour),
        "requests_per_second": _r(s.requests_per_second),
        "in_flight": _r(s.in_flight),
        "replicas_needed": s.replicas,
        "replicas_needed_by_rate": s.replicas_by_rate,
        "replicas_needed_by_concurrency": s.replicas_by_concurrency,
        "concurrency_ceiling_per_replica": s.concurrency_ceiling,
        "in_flight_per_replica": _r(s.in_flight_per_replica),
    }


def model_dict(p: ModelPlan) -> dict[str, Any]:
    return {
        "model": p.model,
        "capacity_per_replica": {
            "source": p.capacity.source,
            "requests_per_second": _r(p.capacity.requests_per_second),
            "concurrency": _r(p.capacity.concurrency),
            "tokens_per_second": _r(p.capacity.tokens_per_second),
        },
        "replicas_observed": {"max": max(p.replicas, default=0), "min": min((n for n in p.replicas if n), default=0)},
        "peak": _sizing(p.peak),
        "trough": _sizing(p.trough),
        "demand": {"p95_step_requests_per_second": _r(p.p95_step_rps), "max_step_requests_per_second": _r(p.max_step_rps)},
        "typical_peak_hour_utc": p.day.typical_peak_hour,
        "typical_peak_hour_agreement": _r(p.day.agreement, 2),
        "daily_peak_hours_utc": [{"date": (iso(day) or "")[:10], "hour": hour} for day, hour in p.day.daily_peaks],
        "above_capacity": {
            "spans": [
                {
                    "start": iso(s.start),
                    "end": iso(s.end),
                    "minutes": round(s.seconds / 60, 1),
                    "steps": s.steps,
                    "worst_ratio": _r(s.worst_ratio),
                }
                for s in p.above
            ],
            "hours": [iso(h) for h in p.hours_above],
            "seconds": sum(s.seconds for s in p.above),
        },
        "notes": p.notes,
        "series": {
            "time": [iso(t) for t in p.times],
            "requests_per_second": [_r(v, 4) for v in p.demand],
            "capacity_requests_per_second": [_r(v, 4) for v in p.fleet_rps],
            "in_flight": [_r(v, 3) for v in p.in_flight],
            "capacity_concurrency": [_r(v, 3) for v in p.fleet_concurrency],
            "replicas": p.replicas,
        },
    }


def build(plans: list[ModelPlan], meta: Meta) -> dict[str, Any]:
    return {
        "version": VERSION,
        "generated_at": iso(time.time()),
        "prometheus": meta.prometheus,
        "range": {"start": iso(meta.start), "end": iso(meta.end), "step_seconds": meta.step},
        "headroom": meta.headroom,
        "definitions": DEFINITIONS,
        "models": [model_dict(p) for p in plans],
    }


def _n(v: Any, unit: str = "") -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.3g}{unit}"
    return f"{v}{unit}"


def _share(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0%}"


def _hour(t: str | None) -> str:
    return "n/a" if t is None else t[:13].replace("T", " ") + ":00 UTC"


def summary_lines(doc: dict[str, Any]) -> list[str]:
    """One line per model: what to run at peak and at trough, and how long the fleet ran short."""
    out = []
    for m in doc["models"]:
        pk, tr, above = m["peak"], m["trough"], m["above_capacity"]
        typical = m["typical_peak_hour_utc"]
        out.append(
            f"{m['model']}: peak {_hour(pk['hour'])} {_n(pk['requests_per_second'])} req/s -> {_n(pk['replicas_needed'])} replicas; "
            f"trough {_hour(tr['hour'])} {_n(tr['requests_per_second'])} req/s -> {_n(tr['replicas_needed'])}; "
            f"ceiling {_n(pk['concurrency_ceiling_per_replica'])} per replica; "
            f"typical peak hour {'n/a' if typical is None else f'{typical:02d}:00 UTC'}; "
            f"above capacity {format_duration(above['seconds'])} in {len(above['spans'])} span(s)"
        )
    return out


def _rows(m: dict[str, Any]) -> list[tuple[str, str, str]]:
    pk, tr = m["peak"], m["trough"]
    keys = (
        ("hour (UTC)", "hour"),
        ("requests/s (hour mean)", "requests_per_second"),
        ("in flight (hourly mean, extreme)", "in_flight"),
        ("replicas needed", "replicas_needed"),
        ("... by request rate", "replicas_needed_by_rate"),
        ("... by requests in flight", "replicas_needed_by_concurrency"),
        ("concurrency ceiling per replica", "concurrency_ceiling_per_replica"),
        ("in flight per replica at that size", "in_flight_per_replica"),
    )
    return [(label, _n(pk[k]) if k != "hour" else _hour(pk[k]), _n(tr[k]) if k != "hour" else _hour(tr[k])) for label, k in keys]


def render_markdown(doc: dict[str, Any], chart: str | None) -> str:
    r = doc["range"]
    lines = [
        "# Capacity plan",
        "",
        f"Prometheus {md(doc['prometheus'])}, {r['start']} to {r['end']}, step {format_duration(r['step_seconds'])}, "
        f"headroom {doc['headroom']:.0%}.",
        "",
    ]
    lines += [f"- {md(s)}" for s in summary_lines(doc)]
    lines.append("")
    for m in doc["models"]:
        cap = m["capacity_per_replica"]
        lines += [
            f"## {md(m['model'])}",
            "",
            f"Capacity per replica at SLO: {_n(cap['requests_per_second'])} req/s, concurrency {_n(cap['concurrency'])}, "
            f"{_n(cap['tokens_per_second'])} tokens/s (from {md(cap['source'])}). "
            f"Replicas seen: {m['replicas_observed']['min']} to {m['replicas_observed']['max']}.",
            "",
            "| | peak | trough |",
            "|---|---|---|",
        ]
        lines += [f"| {a} | {b} | {c} |" for a, b, c in _rows(m)]
        typical = m["typical_peak_hour_utc"]
        lines += [
            "",
            f"Typical peak hour of day: {'n/a' if typical is None else f'{typical:02d}:00 UTC'} "
            f"(the peak hour of {_share(m['typical_peak_hour_agreement'])} of the days); "
            f"step demand p95 {_n(m['demand']['p95_step_requests_per_second'])} req/s, "
            f"max {_n(m['demand']['max_step_requests_per_second'])} req/s.",
            "",
        ]
        spans = m["above_capacity"]["spans"]
        if spans:
            lines += ["Above measured capacity:", "", "| from | to | minutes | worst demand / capacity |", "|---|---|---|---|"]
            lines += [f"| {s['start']} | {s['end']} | {s['minutes']} | {_n(s['worst_ratio'])} |" for s in spans]
        else:
            lines.append("Never above the measured capacity in this period (or capacity unknown: see the notes).")
        lines += [""] + [f"Note: {md(n)}" for n in m["notes"]] + [""]
    if chart:
        lines += [f"![demand against capacity]({chart})", ""]
    lines += ["## Definitions", ""] + [f"- **{k}**: {md(v)}" for k, v in doc["definitions"].items()] + [""]
    return "\n".join(lines)


def render_html(doc: dict[str, Any], chart_path: Path | None) -> str:
    """Self-contained: the chart is embedded as a data URL, so the file can be mailed alone."""
    e = html.escape
    r = doc["range"]
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>Capacity plan</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}img{max-width:100%}</style></head><body>",
        "<h1>Capacity plan</h1>",
        f"<p>Prometheus {e(doc['prometheus'])}, {e(r['start'])} to {e(r['end'])}, step "
        f"{e(format_duration(r['step_seconds']))}, headroom {doc['headroom']:.0%}.</p>",
        "<ul>" + "".join(f"<li>{e(s)}</li>" for s in summary_lines(doc)) + "</ul>",
    ]
    for m in doc["models"]:
        cap = m["capacity_per_replica"]
        parts.append(f"<h2>{e(m['model'])}</h2>")
        parts.append(
            f"<p>Capacity per replica at SLO: {e(_n(cap['requests_per_second']))} req/s, concurrency "
            f"{e(_n(cap['concurrency']))} (from {e(cap['source'])}).</p>"
        )
        parts.append("<table><tr><th></th><th>peak</th><th>trough</th></tr>")
        parts += [f"<tr><td>{e(a)}</td><td>{e(b)}</td><td>{e(c)}</td></tr>" for a, b, c in _rows(m)]
        parts.append("</table>")
        spans = m["above_capacity"]["spans"]
        if spans:
            parts.append("<h3>Above measured capacity</h3><table><tr><th>from</th><th>to</th><th>minutes</th><th>worst</th></tr>")
            parts += [
                f"<tr><td>{e(s['start'])}</td><td>{e(s['end'])}</td><td>{s['minutes']}</td><td>{e(_n(s['worst_ratio']))}</td></tr>"
                for s in spans
            ]
            parts.append("</table>")
        parts += [f"<p>Note: {e(n)}</p>" for n in m["notes"]]
    if chart_path is not None and chart_path.exists():
        data = base64.b64encode(chart_path.read_bytes()).decode("ascii")
        parts.append(f'<img alt="demand against capacity" src="data:image/png;base64,{data}">')
    parts.append("<h2>Definitions</h2><ul>")
    parts += [f"<li><b>{e(k)}</b>: {e(v)}</li>" for k, v in doc["definitions"].items()]
    parts.append("</ul></body></html>")
    return "\n".join(parts)


def write_all(out: Path, doc: dict[str, Any], chart: Path | None) -> list[Path]:
    """plan.json, plan.md, plan.html in ``out`` (plan.png, when drawn, is already there)."""
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "plan.json": jsonsafe.dumps(doc, indent=2) + "\n",
        "plan.md": render_markdown(doc, chart.name if chart else None),
        "plan.html": render_html(doc, chart),
    }
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
    return [out / name for name in files]


__all__ = [
    "DEFINITIONS",
    "VERSION",
    "Meta",
    "build",
    "model_dict",
    "render_html",
    "render_markdown",
    "summary_lines",
    "write_all",
]
