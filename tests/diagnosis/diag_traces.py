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


#: what each supplied symptom looks like to the engine: (TTFT, ITL) of every request, seconds
SYMPTOM_LATENCIES: dict[str, tuple[float, float]] = {
    "none": (0.2, 0.03),  # well inside the default SLOs (2 s, 0.2 s)
    "ttft": (3.0, 0.03),
    "itl": (0.2, 0.4),
}
_BOUNDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, float("inf"))
_ENG = {"server": "hf", "engine": "vllm", "model": "m", "rank": ""}


def engine_points(row_index: int, symptom: str, per_row: int = 30) -> list[Point]:
    """A serving engine beside the trace: one request running, none waiting, cumulative
    latency histograms whose every observation has the ``symptom``'s latencies."""
    from exporter.samples import HistogramSample

    ttft, itl = SYMPTOM_LATENCIES[symptom]
    n = float(per_row * row_index)

    def hist(name: str, value: float) -> HistogramSample:
        return HistogramSample(name, _ENG, tuple((le, n if value <= le else 0.0) for le in _BOUNDS), n * value, n)

    return [
        Sample("llm_scheduler_requests_running", _ENG, 1.0),
        Sample("llm_scheduler_requests_waiting", _ENG, 0.0),
        Sample("llm_kv_cache_usage_ratio", _ENG, 0.05),
        Sample("llm_requests_finished_total", {**_ENG, "reason": "stop"}, n),
        hist("llm_request_ttft_seconds", ttft),
        hist("llm_request_inter_token_seconds", itl),
    ]
