"""Snapshots built from the recorded H200 traces, row by row, as the replay source sees them.

GPU points come from the GPU engineer's converter (``exporter.gpu.fields``),
so a row is read exactly as ``--gpu-source replay:...`` publishes it. The
serving trace's ``busiest_thread_cpu_pct`` and ``process_cpu_pct`` columns
become the process sampler's points (100 % = 1.0 core) for server ``hf``.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from exporter.gpu.fields import reading_points
from exporter.gpu.replay import bundled_trace, parse_trace
from exporter.samples import Point, Sample
from exporter.store import Snapshot


@dataclass
class Row:
    phase: str
    points: list[Point]


def trace_rows(name: str, with_process: bool = True) -> list[Row]:
    path: Path = bundled_trace(name)
    text = path.read_text(encoding="utf-8")
    readings = parse_trace(text, str(path))
    raw = list(csv.DictReader(text.splitlines()))
    rows = []
    for reading, cells in zip(readings, raw):
        points: list[Point] = list(reading_points(0, reading, "replay"))
        if with_process and cells.get("busiest_thread_cpu_pct"):
            labels = {"server": "hf"}
            points.append(Sample("llm_process_busiest_thread_cpu_ratio", labels, float(cells["busiest_thread_cpu_pct"]) / 100))
            points.append(Sample("llm_process_cpu_ratio", labels, float(cells["process_cpu_pct"]) / 100))
        rows.append(Row(cells["phase"], points))
    return rows


def snapshot(points: list[Point], timestamp: float) -> Snapshot:
    return Snapshot(timestamp, list(points), {})
