"""plan.png: per model, demand against the fleet's measured capacity over the period.

Why two panels per model: the fleet can run short on either measure (request
rate or requests in flight, as llm_capacity_used_ratio takes the larger), and
each has its own capacity line; the headroom target (capacity x (1 - headroom))
is dashed, and the steps above capacity are shaded red.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from exporter.plan.compute import ModelPlan

DPI = 100
WIDTH = 12.0
PANEL_HEIGHT = 2.6
#: the most models drawn (the busiest ones): a figure of 40 panel pairs is unreadable and unbounded
MAX_MODELS = 6


def _nan(values: Sequence[float | None]) -> list[float]:
    return [float("nan") if v is None else v for v in values]


def write_png(path: Path, plans: Sequence[ModelPlan]) -> Path | None:
    """Draw the chart of the MAX_MODELS busiest models; None when there is nothing to draw (no model)."""
    if not plans:
        return None
    plans = sorted(plans, key=lambda p: -max((v for v in p.demand if v is not None), default=0.0))[:MAX_MODELS]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    rows = 2 * len(plans)
    fig, axes = plt.subplots(rows, 1, figsize=(WIDTH, PANEL_HEIGHT * rows), dpi=DPI, sharex=True, squeeze=False)
    try:
        for i, p in enumerate(plans):
            when = [datetime.fromtimestamp(t, tz=timezone.utc) for t in p.times]
            panels = (
                (axes[2 * i][0], p.demand, p.fleet_rps, "requests/s"),
                (axes[2 * i + 1][0], p.in_flight, p.fleet_concurrency, "requests in flight"),
            )
            for ax, load, cap, unit in panels:
                ax.plot(when, _nan(load), color="tab:blue", linewidth=1, label=f"demand ({unit})")
                ax.plot(when, _nan(cap), color="black", linewidth=1.2, drawstyle="steps-post", label="measured capacity")
                target = [None if c is None else c * (1 - p.headroom) for c in cap]
                ax.plot(when, _nan(target), color="gray", linestyle="--", linewidth=1, label=f"capacity less {p.headroom:.0%}")
                for span in p.above:
                    ax.axvspan(
                        datetime.fromtimestamp(span.start, tz=timezone.utc),
                        datetime.fromtimestamp(span.end, tz=timezone.utc),
                        color="tab:red",
                        alpha=0.25,
                        lw=0,
                    )
                ax.set_ylabel(unit)
                ax.set_ylim(bottom=0)
                ax.grid(alpha=0.3)
                ax.legend(loc="upper left", fontsize=7)
            axes[2 * i][0].set_title(f"{p.model[:80]}: demand against measured capacity (red: above capacity)", fontsize=10)
        axes[-1][0].xaxis.set_major_formatter(mdates.DateFormatter("%m-%d %H:%M", tz=timezone.utc))  # type: ignore[no-untyped-call]
        axes[-1][0].set_xlabel("time (UTC)")
        fig.autofmt_xdate()
        fig.tight_layout()
        fig.savefig(path, dpi=DPI)
    finally:
        plt.close(fig)
    return path


__all__ = ["write_png"]
