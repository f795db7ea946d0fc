"""``DIR/report.md``, ``report.html`` and ``capacity.png`` from tune.json: the story per stage, and the frontier.

Why from the record: the report is a view of tune.json (one source of figures);
each trial reads cause -> change -> measured effect, followed by the verdict diff
against the configuration it was measured against (exporter/tune/compare.py).
Command lines are shown through exporter/tune/redact.py even though tune.json
holds them redacted already: a record written before redaction renders safe too.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from exporter.tune.capacity import SLO
from exporter.tune.compare import diff, render
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
    best_runs = base["runs"]
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
            f"Measured: capacity at SLO {_cap(t['capacity'])}; knee {_knee(t['knee'])}; primary {_primary(t['primary'])}.",
            f"Verdict: {t['why']}.",
        ]
        if t["runs"] and best_runs:
            lines += ["", "```", *render(diff(best_runs, t["runs"], slo), "best", f"trial {t['trial']}"), "```"]
        if t["accepted"]:
            best_runs = t["runs"]
    rec = doc["recommendation"]
    lines += ["", "## Result", ""]
    if rec is None:
        lines.append(f"No change recommended ({doc['stop']}).")
    else:
        gain = "" if rec["gain"] is None else f" (x{rec['gain']:.2f} capacity at SLO)"
        lines += [f"Deploy{gain}: `{command_line(rec['argv'])}`", "", f"Stopped: {doc['stop']}."]
    lines += ["", f"Roll back to: `{command_line(doc['rollback']['argv'])}`", ""]
    return "\n".join(lines)


def html_page(md: str) -> str:
    """A self-contained page: the Markdown's lines, headings and code kept, plus the figure."""
    out = ["<!doctype html><meta charset='utf-8'><title>Tuning report</title>", "<body style='font-family:sans-serif'>"]
    in_code = False
    for line in md.splitlines():
        if line.startswith("```"):
            out.append("</pre>" if in_code else "<pre>")
            in_code = not in_code
        elif in_code:
            out.append(html.escape(line))
        elif line.startswith("## "):
            out.append(f"<h2>{html.escape(line[3:])}</h2>")
        elif line.startswith("# "):
            out.append(f"<h1>{html.escape(line[2:])}</h1>")
        elif line:
            out.append(f"<p>{html.escape(line).replace('`', '')}</p>")
    out.append("<img src='capacity.png' alt='throughput against TTFT p95 per configuration'></body>")
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


def write_all(directory: Path, doc: dict[str, Any]) -> None:
    md = markdown(doc)
    (directory / "report.md").write_text(md)
    (directory / "report.html").write_text(html_page(md))
    plot(doc, directory / "capacity.png")


__all__ = ["html_page", "markdown", "plot", "write_all"]
