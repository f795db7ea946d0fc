"""report.png: throughput and TTFT p95 against concurrency, the knee marked, layer scores underneath.

Why steps on a categorical x axis: ramps usually double concurrency (1, 2, 4,
...); equal spacing keeps every step readable, and the top and bottom panels
share the same columns so a layer's colour sits right under the point it explains.
The size is fixed (``FIGSIZE`` at ``DPI``, no tight bbox) so the file has a known
pixel size.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from exporter.ramp.knee import Saturation
from exporter.ramp.model import Step
from exporter.schema import LAYERS

FIGSIZE = (10.0, 8.0)
DPI = 100
#: pixel size of report.png (width, height)
PIXELS = (int(FIGSIZE[0] * DPI), int(FIGSIZE[1] * DPI))


def _clip(text: str, width: int = 150) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def write_png(path: Path, steps: Sequence[Step], knee: Step | None, saturation: Saturation | None = None) -> Path:
    """Draw the report figure; the cell of the layer that gave out first is framed in blue (its chain
    written underneath), the knee's column dotted, degraded steps shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.patches import Rectangle

    fig, (top, bottom) = plt.subplots(2, 1, figsize=FIGSIZE, dpi=DPI, gridspec_kw={"height_ratios": [3, 2]}, sharex=True)
    try:
        x = list(range(len(steps)))
        labels = [str(s.concurrency) for s in steps]
        thr = [s.client.output_tokens_per_s for s in steps]
        ttft = [np.nan if s.client.ttft_s.p95 is None else s.client.ttft_s.p95 * 1000 for s in steps]

        degraded = [j for j, s in enumerate(steps) if s.diagnosis.state == "degraded"]
        for k, j in enumerate(degraded):  # the steps the diagnosis judged degraded, shaded
            top.axvspan(
                j - 0.5, j + 0.5, color="mistyrose", zorder=0, lw=0, label="degraded (diagnosis)" if k == 0 else "_nolegend_"
            )
        top.plot(x, thr, "o-", color="tab:blue", label="output tokens/s")
        top.set_ylabel("output tokens/s", color="tab:blue")
        top.set_ylim(bottom=0)
        top.grid(alpha=0.3)
        right = top.twinx()
        right.plot(x, ttft, "s--", color="tab:red", label="TTFT p95 (ms)")
        right.set_ylabel("TTFT p95 (ms)", color="tab:red")
        right.set_ylim(bottom=0)
        if knee is not None:
            top.axvline(knee.index, color="black", linestyle=":", linewidth=2)
            right_half = knee.index > (len(steps) - 1) / 2
            top.annotate(
                f"knee @ {knee.concurrency}\n{', '.join(knee.flags)}",
                xy=(knee.index, thr[knee.index]),
                xytext=(-12 if right_half else 12, -40),
                textcoords="offset points",
                ha="right" if right_half else "left",
                fontsize=9,
                bbox={"boxstyle": "round", "fc": "lightyellow"},
            )
        top.set_title("Ramp: throughput and TTFT p95 against concurrency" + ("" if knee else " (no knee)"))
        handles = top.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
        top.legend(handles, [str(h.get_label()) for h in handles], loc="upper left", fontsize=8)

        grid = np.full((len(LAYERS), max(len(steps), 1)), np.nan)
        for j, s in enumerate(steps):
            for i, layer in enumerate(LAYERS):
                lf = s.diagnosis.layers.get(layer)
                if lf is not None and lf.score_mean is not None:
                    grid[i, j] = lf.score_mean
        cmap = matplotlib.colormaps["RdYlGn_r"].with_extremes(bad="lightgrey")
        bottom.imshow(
            np.ma.masked_invalid(grid),
            aspect="auto",
            cmap=cmap,
            vmin=0,
            vmax=1,
            interpolation="nearest",
            extent=(-0.5, len(steps) - 0.5, len(LAYERS) - 0.5, -0.5),
        )
        for j, s in enumerate(steps):
            for i, layer in enumerate(LAYERS):
                lf = s.diagnosis.layers.get(layer)
                if lf is None:
                    continue
                mark = {"bottleneck": "B", "warning": "W"}.get(lf.status, "")
                text = "?" if lf.score_mean is None else f"{lf.score_mean:.2f}{(' ' + mark) if mark else ''}"
                dark = lf.score_mean is not None and not 0.2 <= lf.score_mean <= 0.8
                bottom.text(j, i, text, ha="center", va="center", fontsize=8, color="white" if dark else "black")
        if knee is not None:  # the knee's column, framed
            bottom.add_patch(Rectangle((knee.index - 0.5, -0.5), 1, len(LAYERS), fill=False, lw=2.5, ls=":", ec="black"))
        if saturation is not None and saturation.layer in LAYERS:  # where the first saturated layer crossed
            row = LAYERS.index(saturation.layer)
            bottom.add_patch(Rectangle((saturation.step_index - 0.5, row - 0.5), 1, 1, fill=False, lw=3, ec="blue"))
            bottom.text(len(steps) - 0.45, row, " first", va="center", fontsize=8, color="blue")
            if saturation.chain:
                fig.text(
                    0.5,
                    0.01,
                    _clip(f"gave out first: {saturation.layer}: {saturation.chain}"),
                    ha="center",
                    va="bottom",
                    fontsize=8,
                    color="blue",
                )
        bottom.set_yticks(range(len(LAYERS)), LAYERS, fontsize=8)
        bottom.set_xticks(x, labels)
        bottom.set_xlabel("concurrency")
        bottom.set_title(
            "layer scores (mean over the step; W warning, B bottleneck, grey unknown; blue: gave out first)", fontsize=9
        )
        fig.subplots_adjust(left=0.17, right=0.9, top=0.94, bottom=0.1, hspace=0.25)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=DPI)
    finally:
        plt.close(fig)
    return path
