"""``DIR/report.md``, ``report.html`` and ``capacity.png`` from tune.json: the story per stage, and the frontier.

Why from the record: the report is a view of tune.json (one source of figures);
each trial reads cause -> change -> measured effect, followed by the verdict diff
against the configuration it was measured against (exporter/tune/compare.py).
Command lines are shown through exporter/tune/redact.py even though tune.json
holds them redacted already: a record written before redaction renders safe too.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.capacity.layout import GPUS_FROM_TEXT, Layout, layout_of_fingerprint, parse_layout
from exporter.tune.capacity import SLO, step_meets
from exporter.tune.compare import diff, render, stage_fingerprint
from exporter.tune.redact import change, command_line


def _cap(c: dict[str, Any]) -> str:
    return f"{c['requests_per_second']:.2f} req/s, {c['tokens_per_second']:.0f} tok/s at concurrency {c['concurrency']}"


def _knee(k: int | None) -> str:
    return "none" if k is None else f"concurrency {k}"


def _primary(p: dict[str, Any] | None) -> str:
    return "none" if not p else f"{p['layer']}/{p['cause']}"


def _warmup_line(warm: dict[str, Any] | None) -> str:
    if not warm:
        return "Warm-up: none; each configuration's first repeat ran on a freshly started engine."
    return (
        f"Warm-up: each configuration was loaded at concurrency {warm['concurrency']}, unmeasured, before its first "
        f"repeat (the baseline: {warm['requests']} requests, {warm['errors']} failed, {warm['seconds']:g} s with the quiet gap after it)."
    )


def markdown(doc: dict[str, Any]) -> str:
    slo = SLO(doc["slo"]["ttft_s"], doc["slo"]["itl_s"])
    base = doc["baseline"]
    lines = [
        "# Tuning report",
        "",
        f"Engine: {doc['engine']} ({doc['mode']} mode); SLO: {slo.describe()}; {len(doc['trials'])} trials in {doc['seconds']:g} s.",
        "",
        f"Accept rule: {doc['rule']}.",
        "",
        _warmup_line(base.get("warmup")),
        "",
        "## Baseline",
        "",
        f"`{command_line(base['argv'])}`",
        "",
        f"Capacity at SLO: {_cap(base['capacity'])}; knee: {_knee(base['knee'])}; primary at the knee: {_primary(base['primary'])}.",
    ]
    if base["primary"] and base["primary"].get("chain"):
        lines += ["", f"Chain: {base['primary']['chain']}"]
    best_runs, best_fp = base["runs"], stage_fingerprint(doc, base)
    for t in doc["trials"]:
        changes = ", ".join(
            f"`{c['flag']}` {c['from'] or '(unset)'} → {c['to'] or '(removed)'}" for c in map(change, t["changes"])
        )
        lines += [
            "",
            f"## Trial {t['trial']}: stage {t['stage']} ({t['group']})",
            "",
            f"Cause: {t['cause']} — {t['reason']}.",
            f"Change: {changes}.",
            *([f"Trade: {t['trade']}."] if t.get("trade") else []),
            f"Measured: capacity at SLO {_cap(t['capacity'])}; knee {_knee(t['knee'])}; primary {_primary(t['primary'])}.",
            f"Verdict: {t['why']}.",
        ]
        if t["runs"] and best_runs:
            d = diff(best_runs, t["runs"], slo, best_fp, stage_fingerprint(doc, t))
            lines += ["", "```", *render(d, "best", f"trial {t['trial']}"), "```"]
        if t["accepted"]:
            best_runs, best_fp = t["runs"], stage_fingerprint(doc, t)
    rec = doc["recommendation"]
    lines += ["", "## Result", ""]
    if rec is None:
        lines.append(f"No change recommended ({doc['stop']}).")
    else:
        gain = "" if rec["gain"] is None else f" (x{rec['gain']:.2f} capacity at SLO)"
        lines += [f"Deploy{gain}: `{command_line(rec['argv'])}`", "", f"Stopped: {doc['stop']}."]
    lines += ["", f"Roll back to: `{command_line(doc['rollback']['argv'])}`", ""]
    lines += _scaling_section(doc, slo)
    return "\n".join(lines)


def _layout(doc: dict[str, Any], c: dict[str, Any]) -> Layout:
    """A configuration's layout as recorded, else from its fingerprint (a tune.json from before layouts)."""
    return parse_layout(c.get("layout")) or layout_of_fingerprint(stage_fingerprint(doc, c))


def _configs(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [("baseline", doc["baseline"])] + [(f"trial {t['trial']}", t) for t in doc["trials"]]


def _scaling_section(doc: dict[str, Any], slo: SLO) -> list[str]:
    """Per configuration: its layout, per-GPU and per-user output tokens/s at the SLO, and the scaling
    efficiency where a smaller layout of the model was measured (exporter/capacity/layout.py)."""
    out = [
        "## Per GPU and per user",
        "",
        f"At the SLO ({slo.describe() or 'none'}): output tokens/s per GPU and per concurrent client at the highest "
        "concurrency meeting it; the scaling efficiency is a larger layout's per-GPU output tokens/s over the smallest "
        "layout's of the same model.",
        "",
        "![per-GPU against per-user throughput, the frontier marked](scaling.png)",
        "",
        "| configuration | layout | GPUs from | out tok/s per GPU | req/s per GPU | out tok/s per user | scaling efficiency |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, c in _configs(doc):
        lay, per_gpu, eff = _layout(doc, c), c.get("per_gpu") or {}, c.get("scaling_efficiency")
        tokens, requests = per_gpu.get("output_tokens_per_second_at_slo"), per_gpu.get("requests_per_second_at_slo")
        user = c.get("per_user_output_tokens_per_second")
        out.append(
            f"| {label} | {lay.with_gpus()} | {GPUS_FROM_TEXT[lay.gpus_from]} | {_fmt(tokens, '{:.1f}')} | {_fmt(requests, '{:.3g}')} "
            f"| {_fmt(user, '{:.1f}')} | {_efficiency_cell(eff)} |"
        )
    said = [c["scaling_efficiency"]["text"] for _, c in _configs(doc) if c.get("scaling_efficiency")]
    out += [""] + [f"{text}." for text in said] + ([""] if said else [])
    return out


def _efficiency_cell(eff: dict[str, Any] | None) -> str:
    return "-" if not eff else f"{eff['ratio']:.2f} vs {eff['against']['name']}"


def _fmt(v: float | None, fmt: str) -> str:
    return "-" if v is None else fmt.format(v)


def html_page(md: str) -> str:
    """A self-contained page: the Markdown's lines, headings and code kept, plus the figures."""
    out = ["<!doctype html><meta charset='utf-8'><title>Tuning report</title>", "<body style='font-family:sans-serif'>"]
    in_code = False
    for line in md.splitlines():
        if line.startswith("```"):
            out.append("</pre>" if in_code else "<pre>")
            in_code = not in_code
        elif in_code:
            out.append(html.escape(line))
        elif line.startswith("!["):
            continue  # a figure: the page shows each one as an image at its end
        elif line.startswith("## "):
            out.append(f"<h2>{html.escape(line[3:])}</h2>")
        elif line.startswith("# "):
            out.append(f"<h1>{html.escape(line[2:])}</h1>")
        elif line:
            out.append(f"<p>{html.escape(line).replace('`', '')}</p>")
    out.append("<img src='capacity.png' alt='throughput against TTFT p95 per configuration'>")
    out.append("<img src='scaling.png' alt='per-GPU against per-user throughput per configuration, the frontier marked'></body>")
    return "\n".join(out) + "\n"


def plot(doc: dict[str, Any], path: Path) -> None:
    """Throughput against TTFT p95 for every configuration, the SLO line, the frontier."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    configs = [("baseline", doc["baseline"])] + [(f"trial {t['trial']}", t) for t in doc["trials"]]
    points: list[tuple[float, float]] = []
    for label, c in configs:
        xs, ys = [], []
        for r in c["runs"]:
            for s in r.get("steps") or []:
                p95 = (s["client"].get("ttft_s") or {}).get("p95")
                if p95 is not None:
                    xs.append(p95 * 1000)
                    ys.append(s["client"]["requests_per_s"])
        points += list(zip(xs, ys, strict=True))
        if xs:
            ax.plot(xs, ys, "o", label=label, alpha=0.7)
    frontier, top = [], -1.0
    for x, y in sorted(points):
        if y > top:
            frontier.append((x, y))
            top = y
    if frontier:
        ax.plot([p[0] for p in frontier], [p[1] for p in frontier], "k--", label="frontier")
    if doc["slo"]["ttft_s"] is not None:
        ax.axvline(doc["slo"]["ttft_s"] * 1000, color="red", label="TTFT SLO")
    ax.set_xlabel("TTFT p95 (ms)")
    ax.set_ylabel("requests/s")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


@dataclass(frozen=True)
class Point:
    """One ramp step of one configuration: output tokens/s per concurrent client and per GPU."""

    configuration: str
    per_user: float
    per_gpu: float
    #: the step met the SLO (a point off it is drawn, never on the frontier)
    meets: bool


def operating_points(doc: dict[str, Any]) -> list[Point]:
    """Every step of every repeat of every configuration tried, per user and per GPU."""
    slo = SLO(doc["slo"]["ttft_s"], doc["slo"]["itl_s"])
    out: list[Point] = []
    for label, c in _configs(doc):
        gpus = _layout(doc, c).gpus
        for r in c.get("runs") or []:
            for s in r.get("steps") or []:
                conc, tps = s.get("concurrency"), (s.get("client") or {}).get("output_tokens_per_s")
                if isinstance(conc, int) and conc > 0 and isinstance(tps, (int, float)):
                    out.append(Point(label, tps / conc, tps / gpus, step_meets(s, slo)))
    return out


def pareto_frontier(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other beats on both axes (more per user and more per GPU), by rising per-user figure.

    A point is on it when every point with at least its per-user figure has less per GPU; equal
    points count once.
    """
    frontier: list[tuple[float, float]] = []
    best_y = float("-inf")
    for x, y in sorted(set(points), key=lambda p: (-p[0], -p[1])):
        if y > best_y:
            frontier.append((x, y))
            best_y = y
    return frontier[::-1]


def plot_scaling(doc: dict[str, Any], path: Path) -> None:
    """Per-GPU against per-user output tokens/s for every step of every configuration, the frontier of
    the steps within the SLO marked (hollow: a step off the SLO)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    points = operating_points(doc)
    for label, _ in _configs(doc):
        mine = [p for p in points if p.configuration == label]
        if not mine:
            continue
        met = [p for p in mine if p.meets]
        off = [p for p in mine if not p.meets]
        line = ax.plot([p.per_user for p in met], [p.per_gpu for p in met], "o", alpha=0.7, label=label)
        color = line[0].get_color()
        if off:
            ax.plot([p.per_user for p in off], [p.per_gpu for p in off], "o", mfc="none", color=color, alpha=0.7)
    frontier = pareto_frontier([(p.per_user, p.per_gpu) for p in points if p.meets])
    if frontier:
        ax.plot([p[0] for p in frontier], [p[1] for p in frontier], "k--", label="frontier (within the SLO)")
    ax.set_xlabel("output tokens/s per user")
    ax.set_ylabel("output tokens/s per GPU")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_all(directory: Path, doc: dict[str, Any]) -> None:
    md = markdown(doc)
    (directory / "report.md").write_text(md)
    (directory / "report.html").write_text(html_page(md))
    plot(doc, directory / "capacity.png")
    plot_scaling(doc, directory / "scaling.png")


__all__ = ["Point", "html_page", "markdown", "operating_points", "pareto_frontier", "plot", "plot_scaling", "write_all"]
