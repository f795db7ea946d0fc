"""report.json / report.md / report.png from a synthetic ramp."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

from exporter.ramp.knee import Saturation, find_knee, first_saturated_layer
from exporter.ramp.model import Step
from exporter.ramp.plot import PIXELS
from exporter.ramp.report import build_report, render_markdown, write_all
from tests.ramp.ramp_steps import KV_ROWS, kv_pressure_docs, steps_from_docs, table


def synthetic() -> tuple[list[Step], Step | None, Saturation | None]:
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


def test_report_names_the_knee_primary_with_its_chain_and_every_step_state(tmp_path: Path) -> None:
    steps = steps_from_docs(KV_ROWS, kv_pressure_docs())
    knee = find_knee(steps)
    sat = first_saturated_layer(steps, knee)
    report = build_report(steps, knee, sat, {"target": "http://t", "exporter": "http://e", "step_seconds": 4})
    write_all(tmp_path, report, steps, knee, sat)
    chain = "6 requests waiting, queue p95 780 ms ← KV cache 93 % full, 7.5 preemptions/s"

    doc = json.loads((tmp_path / "report.json").read_text())
    # the existing keys keep their meaning
    assert doc["first_saturated_layer"] == "memory" and doc["cause"] == "kv_cache_pressure"
    assert doc["baseline_saturated"] == []
    # new: state, primary and chain per step and at the knee
    assert doc["baseline_state"] == "healthy" and doc["knee_state"] == "degraded" and doc["chain"] == chain
    assert doc["saturation"]["source"] == "primary" and doc["saturation"]["chain"] == chain
    assert doc["saturation"]["readings"] == 5 and doc["saturation"]["degraded_readings"] == 6
    assert doc["knee_primary"]["layer"] == "memory" and doc["knee_primary"]["readings"] == 5
    assert doc["knee"]["diagnosis"]["state"] == "degraded" and doc["knee"]["diagnosis"]["primary"]["chain"] == chain
    assert [(s["concurrency"], s["state"], s["primary"]) for s in doc["states"]] == [
        (1, "healthy", None),
        (2, "healthy", None),
        (4, "healthy", None),
        (8, "degraded", "memory/kv_cache_pressure"),
    ]
    assert doc["states"][3]["chain"] == chain and doc["states"][3]["states"]["degraded"] == 0.75
    first = doc["steps"][0]["diagnosis"]
    assert first["state"] == "healthy" and first["primary"] is None and first["states"]["healthy"] == 1.0
    assert first["layers"]["hardware"]["headroom_mean"] == 0.3 and doc["note"] is None

    md = (tmp_path / "report.md").read_text()
    assert "Baseline (concurrency 1): **healthy (100%)**." in md
    assert "**Gave out first: `memory`**, primary cause `kv_cache_pressure` at the knee" in md
    assert "(named in 5 of 6 degraded readings, mean confidence 0.92; layer bottleneck, score 0.93)" in md
    assert f"\nChain: {chain}\n" in md
    assert "\n| 1 | healthy (100%) | - | - | - | - |" in md
    assert f"\n| 8 | degraded (75%) | memory `kv_cache_pressure` | 5 of 6 | 0.92 | {chain} |" in md
    assert "\n| 1 | 30% | - | 60% | 80% | - | - | - |" in md  # headroom per step: hardware, operator, memory, ...
    assert "| 8 | memory | `kv_cache_pressure` | primary |" in md
    with Image.open(tmp_path / "report.png") as img:
        assert img.size == PIXELS


def test_report_says_when_it_fell_back_to_layer_statuses(tmp_path: Path) -> None:
    steps, knee, sat = synthetic()  # no state in the readings: nothing degraded
    report = build_report(steps, knee, sat, {})
    assert sat is not None and sat.source == "saturation"
    assert report["baseline_state"] == "unknown" and report["chain"] is None
    assert report["note"].startswith("no reading at or before the knee (concurrency 8) was degraded")
    md = render_markdown(report, steps, knee, sat)
    assert "First saturated layer: `memory`" in md and "\nNote: no reading at or before the knee" in md
    assert "Gave out first" not in md and "Chain:" not in md


def test_report_with_a_knee_and_no_layer_says_why() -> None:
    steps = table([(1, 100, 0.1), (2, 110, 0.1)], [{"memory": ("ok", 0.1)}, {"memory": ("ok", 0.2)}])
    knee = find_knee(steps)
    report = build_report(steps, knee, None, {})
    assert (
        report["note"]
        == "no reading at or before the knee (concurrency 2) was degraded, and no layer reached warning at or before it"
    )
    assert f"No layer named: {report['note']}." in render_markdown(report, steps, knee, None)


def test_progress_lines_print_state_and_primary() -> None:
    from exporter.ramp.progress import live_line, state_text, step_line

    steps = steps_from_docs(KV_ROWS, kv_pressure_docs())
    knee = find_knee(steps)
    assert state_text(steps[0]) == "healthy"
    assert state_text(steps[3]) == "degraded 75%, primary memory/kv_cache_pressure (5 of 6 degraded)"
    assert "[green]healthy[/]" in step_line(steps[0], knee)
    assert "[red]degraded 75%, primary memory/kv_cache_pressure (5 of 6 degraded)[/]" in step_line(steps[3], knee)
    live = live_line({}, kv_pressure_docs()[3][-1])
    assert live == "degraded  primary memory/kv_cache_pressure"
    assert live_line({}, kv_pressure_docs()[0][0]) == "healthy  worst hardware: ok"
