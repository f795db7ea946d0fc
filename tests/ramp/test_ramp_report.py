"""report.json / report.md / report.png from a synthetic ramp."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image
from exporter.ramp.knee import find_knee, first_saturated_layer
from exporter.ramp.plot import PIXELS
from exporter.ramp.report import build_report, write_all
from tests.ramp.ramp_steps import table


def synthetic():  # type: ignore[no-untyped-def]
    rows = [(1, 100, 0.1), (2, 200, 0.1), (4, 390, 0.12), (8, 420, 0.6)]
    layers = [
        {"memory": ("ok", 0.1), "scheduler": ("ok", 0.1), "hardware": ("ok", 0.2)},
        {"memory": ("ok", 0.2), "scheduler": ("ok", 0.1), "hardware": ("ok", 0.2)},
        {"memory": ("warning", 0.5), "scheduler": ("ok", 0.2), "hardware": ("ok", 0.3)},
        {"memory": ("bottleneck", 0.9), "scheduler": ("warning", 0.4), "hardware": ("ok", 0.3)},
    ]
    steps = table(rows, layers)
    knee = find_knee(steps)
    return steps, knee, first_saturated_layer(steps, knee)


def test_report_files(tmp_path: Path) -> None:
    steps, knee, sat = synthetic()
    report = build_report(steps, knee, sat, {"target": "http://t", "exporter": "http://e", "step_seconds": 10})
    paths = write_all(tmp_path / "out", report, steps, knee, sat)
    assert [p.name for p in paths] == ["report.json", "report.md", "report.png"]

    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    assert {"steps", "knee", "first_saturated_layer", "cause"} <= set(doc)
    assert len(doc["steps"]) == 4 and doc["knee"]["concurrency"] == 8
    assert doc["knee"]["flags"] == ["throughput_flat", "ttft_jump"]
    assert doc["first_saturated_layer"] == "memory" and doc["cause"] == "memory_cause"
    assert doc["saturation"]["concurrency"] == 8 and doc["saturation"]["evidence"] == {"memory_metric": 0.9}
    assert doc["complete"] is True and doc["totals"]["requests"] == 400

    md = (tmp_path / "out" / "report.md").read_text()
    assert "Knee at concurrency 8" in md and "First saturated layer: `memory`" in md
    assert "\n| 4 | 10.00 | 390.0 | 0.95 | 60/120/144 |" in md  # the step row: req/s, tok/s, scaling, TTFT ms
    assert "\n| 4 | ok 0.30 | - | W 0.50 | ok 0.20 |" in md  # the layer row (operator absent)

    with Image.open(tmp_path / "out" / "report.png") as img:
        assert img.format == "PNG" and img.size == PIXELS == (1000, 800)


def test_report_without_knee_and_with_error(tmp_path: Path) -> None:
    steps = table([(1, 100, 0.1), (2, 200, 0.1)])
    knee = find_knee(steps)
    report = build_report(steps, knee, None, {}, error="step 3 failed", complete=False)
    write_all(tmp_path, report, steps, knee, None)
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["knee"] is None and doc["first_saturated_layer"] is None and doc["complete"] is False
    assert doc["error"] == "step 3 failed"
    md = (tmp_path / "report.md").read_text()
    assert "No knee" in md and "Stopped early" in md
    with Image.open(tmp_path / "report.png") as img:
        assert img.size == PIXELS
