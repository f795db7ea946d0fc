"""The live view on a terminal: the verdict, its advice, one row per layer, the other findings.

Why rich, and only here: it redraws in place and wraps long advice instead of cutting it;
a pipe or a log file gets exporter/demo/transcript.py's plain lines instead.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from exporter.demo.readings import Reading
from exporter.demo.rows import layer_rows
from exporter.demo.summary import Conclusion
from exporter.demo.units import evidence_text, fmt
from exporter.demo.verdicts import verdict_text

#: facts that do not move (limits, sizes, counts): left out of the live view so it fits a terminal
#: (``/metrics`` has them all)
TUI_HIDDEN = frozenset(
    {
        "gpu_up",
        "gpu_profiling_available",
        "gpu_memory_total_bytes",
        "gpu_power_limit_watts",
        "gpu_sm_clock_max_hertz",
        "gpu_memory_clock_hertz",
        "gpu_energy_joules_total",
        "kv_cache_capacity_tokens",
        "kv_cache_block_size_tokens",
        "kv_cache_slot_context_tokens",
        "parallel_group_gpus",
        "process_threads",
        "process_resident_memory_bytes",
    }
)


def render(
    args: argparse.Namespace,
    elapsed: float,
    now: Reading,
    before: Reading | None,
    diagnosis: dict[str, Any] | None,
    load_text: str,
    note: str,
    scenario: str | None = None,
    tour: str = "",
    results: list[Conclusion] | None = None,
) -> Any:
    """One frame of the view (a rich renderable)."""
    layers = diagnosis.get("layers", {}) if diagnosis else {}
    signals = diagnosis.get("signals") if diagnosis else None
    table = Table(expand=True, show_lines=False)
    table.add_column("layer", style="bold", overflow="fold")
    table.add_column("status", overflow="fold", ratio=1)
    table.add_column("metrics", overflow="fold", ratio=3)
    rows_by_layer = layer_rows(now, before, signals)
    for layer, rows in rows_by_layer.items():
        rows = [(n, v) for n, v in rows if n not in TUI_HIDDEN]
        info = layers.get(layer) or {}
        status = info.get("status", "not judged" if diagnosis else "no verdict yet")
        score = info.get("score")
        status_text = f"{status} {score:.2f}" if isinstance(score, (int, float)) else str(status)
        room = info.get("headroom")
        if isinstance(room, (int, float)):
            status_text += f" · {fmt(room, 'share')} headroom"
        cells = "  ".join(f"{name}={value}" for name, value in rows) or "no metric served"
        table.add_row(layer, status_text, Text(cells))
    name = scenario or args.scenario
    header = Text.assemble("scenario ", (str(name), "bold"), f" · dialect {args.dialect} · {elapsed:.0f}s · load: {load_text}")
    parts: list[Any] = [header]
    if tour:
        parts.append(Text(tour, style="cyan"))
    if results:
        parts.append(
            Text(
                "tour so far: "
                + " · ".join(
                    f"{r.scenario} -> {r.named or 'healthy'} ({'as expected' if r.matched else 'NOT as expected'})"
                    for r in results
                )
            )
        )
    parts.append(Panel(Text(verdict_text(diagnosis)), title="verdict"))
    if diagnosis and diagnosis.get("primary"):
        advice = str(diagnosis["primary"].get("advice") or "")
        if advice:
            parts.append(Text(advice, style="dim"))  # rich wraps it: never cut
    parts.append(table)
    if diagnosis:
        others = [b for b in diagnosis.get("bottlenecks") or [] if b.get("role") != "primary"]
        for b in others[:3]:
            parts.append(
                Text(
                    f"• {b.get('role', 'warning')} {b.get('layer')}/{b.get('cause')}: "
                    f"{b.get('summary') or evidence_text(b.get('evidence'))}"
                )
            )
    if note:
        parts.append(Text(note, style="yellow"))
    return Panel(Group(*parts), title="llm-layer-exporter demo (Ctrl-C to stop)")
