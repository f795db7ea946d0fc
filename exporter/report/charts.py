"""DIR/<stem>.png: one figure per chart of :func:`exporter.report.series.charts`, panels stacked.

Why every chart is drawn even without data: a layer whose chart says "no data"
tells the reader what the exporter could not see, which a missing file does not.
The x axis is time before the end of the span, so Prometheus' 15 minutes and a
30-second sample of the exporter read the same way; the verdict's instant is
the dashed vertical line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from exporter.report.collect import Collected
from exporter.report.series import Chart

DPI = 100
WIDTH_IN = 11.0
PANEL_IN = 2.3
_SCALE = {"bytes_per_second": (1e-9, "GB/s"), "percent": (100.0, "%"), "seconds": (1.0, "s"), "per_second": (1.0, "1/s")}


@dataclass(frozen=True)
class ChartFile:
    stem: str
    title: str
    layer: str
    #: the file name inside DIR
    file: str
    #: legends that had at least one finite point
    curves: int
    #: panels without any finite point (their titles)
    empty: tuple[str, ...]


def _finite(points: list[tuple[float, float]]) -> bool:
    return any(not math.isnan(v) and not math.isinf(v) for _, v in points)


def draw(out_dir: Path, chart: Chart, collected: Collected) -> ChartFile:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = collected.data.get(chart.stem) or [{} for _ in chart.panels]
    minutes = collected.span_s >= 180
    div, xunit = (60.0, "minutes") if minutes else (1.0, "seconds")
    end = collected.end
    fig, axes = plt.subplots(
        len(chart.panels), 1, figsize=(WIDTH_IN, PANEL_IN * len(chart.panels) + 0.7), dpi=DPI, sharex=True, squeeze=False
    )
    curves = 0
    empty: list[str] = []
    try:
        for ax, panel, data in zip(axes[:, 0], chart.panels, panels):
            factor, unit = _SCALE.get(panel.unit, (1.0, ""))
            drawn = 0
            top = 0.0
            for legend, points in sorted(data.items()):
                if not _finite(points):
                    continue
                xs = [(t - end) / div for t, _ in points]
                # on/off lines are lifted apart a little so that two at 1 stay visible
                lift = 0.025 * drawn if panel.unit == "onoff" else 0.0
                ys = [v * factor + lift for _, v in points]
                finite = [y for y in ys if not math.isnan(y) and not math.isinf(y)]
                top = max([top, *finite])
                if panel.unit == "onoff":
                    ax.step(xs, ys, where="post", label=legend, linewidth=1.5)
                else:
                    ax.plot(xs, ys, marker="." if len(xs) < 40 else None, label=legend, linewidth=1.5)
                drawn += 1
            title = panel.title + (f" ({unit})" if unit else "")
            ax.set_title(title, fontsize=9, loc="left")
            ax.grid(alpha=0.3)
            if drawn == 0:
                empty.append(panel.title)
                queries = "; ".join(s.promql() for s in panel.series)
                ax.text(
                    0.5,
                    0.5,
                    "no data for: " + _clip(queries, 110),
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="grey",
                    transform=ax.transAxes,
                    wrap=True,
                )
                ax.set_yticks([])
            else:
                if panel.unit in ("ratio", "onoff"):
                    ax.set_ylim(-0.05, max(1.1, top * 1.05))
                else:
                    ax.set_ylim(bottom=0, top=top * 1.1 if top > 0 else 1.0)
                ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, framealpha=0.7)
            curves += drawn
            when = collected.verdict.get("timestamp")
            if isinstance(when, (int, float)) and collected.start - 1 <= when <= end + 1:
                ax.axvline((when - end) / div, color="black", linestyle="--", linewidth=1)
        span_end = f"{_utc(end)} UTC"
        axes[-1, 0].set_xlabel(f"{xunit} before {span_end} (dashed: the verdict's instant)", fontsize=8)
        span = max(collected.span_s, 1.0) / div
        axes[-1, 0].set_xlim(-span, span * 0.02)
        fig.suptitle(f"{chart.title}: {_source(collected)}", fontsize=10)
        fig.tight_layout()
        out_dir.mkdir(parents=True, exist_ok=True)
        fig.savefig(out_dir / f"{chart.stem}.png", dpi=DPI)
    finally:
        plt.close(fig)
    return ChartFile(chart.stem, chart.title, chart.layer, f"{chart.stem}.png", curves, tuple(empty))


def _source(c: Collected) -> str:
    if c.source == "prometheus":
        return f"Prometheus, last {c.span_s / 60:.0f} min"
    return f"exporter sampled for {c.span_s:.0f} s"


def _utc(ts: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts))


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def draw_all(out_dir: Path, charts: list[Chart], collected: Collected) -> list[ChartFile]:
    return [draw(out_dir, chart, collected) for chart in charts]
