"""The command lines: tune's one-line usage errors (exit status 2), and compare on saved records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from exporter.cli import main
from tests.tune.records import report, step


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["tune", "--slo-ttft", "1s", "llama-server"], "missing -- before the engine command"),
        (["tune", "--slo-ttft", "soon", "--", "llama-server"], "--slo-ttft: expected a positive duration"),
        (["tune", "--", "llama-server"], "give an SLO"),
        (["tune", "--slo-itl", "50ms", "--", "./my-engine", "--port", "1"], "pass --engine-type"),
        (["tune", "--slo-itl", "50ms", "--apply", "true {args}", "--", "vllm", "serve", "m"], "--apply needs --engine-url"),
        (["tune", "--slo-itl", "50ms", "--budget", "forever", "--", "vllm", "serve"], "--budget: expected a duration"),
    ],
)
def test_tune_usage_errors_are_one_line_and_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--warmup-seconds", "-1", "expected 0 or a positive number"),
        ("--warmup-seconds", "nan", "expected a finite number"),
        ("--step-seconds", "inf", "expected a finite number"),
        ("--step-seconds", "0", "expected a positive number"),
        ("--repeats", "two", "expected a number"),
    ],
)
def test_tune_number_flags_refuse_what_is_no_length_or_count(
    flag: str, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["tune", "--slo-ttft", "1s", flag, value, "--", "llama-server"])
    assert exit_.value.code == 2
    assert f"argument {flag}: {message}" in capsys.readouterr().err.strip().splitlines()[-1]


def _write(path: Path, doc: dict[str, Any]) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


def test_compare_two_ramp_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slots = ("memory", "kv_fragmentation_or_capacity_misjudged")
    a = _write(tmp_path / "a.json", report([step(1, 1.0, 0.1), step(4, 2.0, 0.9, primary=slots)], knee_index=1, cause=slots))
    b = _write(tmp_path / "b.json", report([step(1, 1.0, 0.1), step(4, 3.8, 0.3)]))
    assert main(["compare", a, b, "--slo-ttft", "500ms"]) == 0
    out = capsys.readouterr().out
    assert "capacity at SLO: A 1.00 req/s (c=1" in out and "B 3.80 req/s (c=4" in out
    assert "primary at the knee: memory/kv_fragmentation_or_capacity_misjudged -> none" in out
    assert main(["compare", a, b, "--slo-ttft", "500ms", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["knee_moved"] == {"from": 4, "to": None} and doc["capacity_ratio"] == pytest.approx(3.8)


def test_compare_stages_of_a_tune_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = report([step(1, 1.0, 0.1), step(4, 2.0, 0.9)])
    better = report([step(1, 1.0, 0.1), step(4, 3.0, 0.2)])
    tune = {
        "slo": {"ttft_s": 0.5, "itl_s": None},
        "baseline": {"runs": [base, base]},
        "trials": [{"trial": 1, "accepted": True, "runs": [better, better]}],
    }
    path = _write(tmp_path / "tune.json", tune)
    assert main(["compare", path, path + "#best"]) == 0
    assert "x3.00" in capsys.readouterr().out
    assert main(["compare", path, path + "#trial-7"]) == 2
    assert "no stage 'trial-7'" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "missing.json"), path]) == 2
