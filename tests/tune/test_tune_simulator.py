"""``tune`` end to end on the simulator: the fault's group is tried first, the accepted change raises capacity at SLO.

The simulator runs in model time, so what bends its curve is its own settings,
not this machine; steps are short (4 s) and concurrencies few, so each test is a
handful of ramps. Each scenario's SLO is one the baseline misses where the fault
bites and the fixed configuration meets.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from tests.tune.tune_cli import first_cap, run_tune, sim_command

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SHORT = ["--step-seconds", "4", "--sample-interval", "0.5", "--start-timeout", "60"]


def _check_outputs(out: Path, doc: dict) -> None:
    for key in ("baseline", "trials", "recommendation", "rollback"):
        assert key in doc
    assert set(doc["baseline"]) >= {"argv", "capacity", "knee", "primary", "runs"}
    assert set(doc["baseline"]["capacity"]) == {"concurrency", "requests_per_second", "tokens_per_second"}
    for t in doc["trials"]:
        assert set(t) >= {"stage", "group", "cause", "changes", "argv", "capacity", "knee", "primary", "accepted", "why"}
    assert (out / "report.md").read_text().startswith("# Tuning report")
    assert "<h1>Tuning report</h1>" in (out / "report.html").read_text()
    with Image.open(out / "capacity.png") as img:
        assert img.size[0] > 100
    assert (out / "engine-baseline.log").exists()


def test_batching_window_first_trial_is_strategy_and_the_shorter_window_wins(tmp_path: Path) -> None:
    doc, err, rc = run_tune(
        tmp_path,
        [
            "--slo-ttft",
            "500ms",
            "--concurrency",
            "1,2,4",
            "--prompt-tokens",
            "64",
            "--output-tokens",
            "32",
            "--trials",
            "2",
            *SHORT,
        ],
        sim_command("batching_window"),
    )
    assert rc == 0, err[-3000:]
    _check_outputs(tmp_path, doc)
    assert doc["baseline"]["primary"]["cause"] == "batching_window_too_large", err[-3000:]
    first = doc["trials"][0]
    assert first["group"] == "strategy" and first["changes"][0]["flag"] == "--batch-wait-s"
    assert first["accepted"], first["why"]
    assert first_cap(first) > first_cap(doc["baseline"])
    rec = doc["recommendation"]
    assert rec is not None and "--batch-wait-s" in rec["argv"] and rec["changes"][0]["to"] == "0.2"
    assert doc["rollback"]["argv"] == doc["baseline"]["argv"]
    # the baseline is what the tuner left running, and the closing paragraph says what to deploy
    assert doc["left_running"]["argv"] == doc["baseline"]["argv"]
    assert "Deploy: " in err and "Roll back to: " in err


def test_kv_pressure_first_trial_is_resource_and_more_blocks_win(tmp_path: Path) -> None:
    doc, err, rc = run_tune(
        tmp_path,
        [
            "--slo-ttft",
            "300ms",
            "--concurrency",
            "1,2,4,8",
            "--prompt-tokens",
            "64",
            "--output-tokens",
            "128",
            "--trials",
            "1",
            *SHORT,
        ],  # fmt: skip
        sim_command("kv_pressure", "--num-gpu-blocks", "24", "--time-scale", "0.5"),
    )
    assert rc == 0, err[-3000:]
    assert doc["baseline"]["primary"]["cause"] == "kv_cache_pressure", err[-3000:]
    first = doc["trials"][0]
    assert first["group"] == "resource" and first["changes"][0] == {"flag": "--num-gpu-blocks", "from": "24", "to": "48"}
    assert first["accepted"], first["why"]
    assert first_cap(first) > first_cap(doc["baseline"])


def test_healthy_recommends_no_change(tmp_path: Path) -> None:
    doc, err, rc = run_tune(
        tmp_path,
        ["--slo-ttft", "1s", "--concurrency", "1,2,4", "--prompt-tokens", "64", "--output-tokens", "32", *SHORT],
        sim_command("healthy", "--num-gpu-blocks", "20000", "--time-scale", "0.5"),
    )
    assert rc == 0, err[-3000:]
    assert doc["recommendation"] is None and doc["trials"] == []
    assert "SLO holds" in doc["stop"] and "No change recommended" in err
