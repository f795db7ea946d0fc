"""`llm-layer-exporter report`: an incident snapshot of the current verdict, ready for a ticket.

Why a snapshot on disk and not another view of the live page: a ticket outlives
the incident. DIR/report.html (self-contained), DIR/report.md (its PNGs beside
it), DIR/*.png (the key series per layer) and DIR/diagnosis.json (the raw
verdict) still say what the exporter concluded, and what it saw, once the
service has recovered or the exporter has restarted.

* :mod:`exporter.report.series`: the key series per layer (PromQL and a local evaluation)
* :mod:`exporter.report.collect`: the verdict, Prometheus' range queries or a short sample of the exporter
* :mod:`exporter.report.charts`: the PNGs (matplotlib, imported only here)
* :mod:`exporter.report.render`: report.md and report.html
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from exporter.jsonsafe import dumps
from exporter.report.render import ChartRef, Context, render_html, render_markdown

__all__ = ["ChartRef", "Context", "render_html", "render_markdown", "write_report"]


def write_report(out_dir: Path, verdict: dict[str, Any], ctx: Context) -> list[Path]:
    """Write diagnosis.json, report.md and report.html into out_dir (the PNGs are already there)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx.out_dir = out_dir
    paths = [out_dir / "diagnosis.json", out_dir / "report.md", out_dir / "report.html"]
    paths[0].write_text(dumps(verdict, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")  # NaN/Inf as null
    paths[1].write_text(render_markdown(verdict, ctx), encoding="utf-8")
    paths[2].write_text(render_html(verdict, ctx), encoding="utf-8")
    return paths
