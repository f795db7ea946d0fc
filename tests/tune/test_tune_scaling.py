"""Scaling efficiency, measured (issue 33, item 1): the layout and per-GPU / per-user figures of every
configuration in tune.json, the efficiency of a larger layout against a smaller one, what ``compare``
prints for two records whose layouts differ, and the tune report's per-GPU against per-user frontier.

The records are ramp reports built by exporter/ramp/report.py from synthetic steps (tests/ramp/ramp_steps.py),
as tune keeps them; the worked example is the one of tests/capacity/test_capacity_layout.py: TP 1 carries
800 output tokens/s at its SLO, TP 4 1984 (496 per GPU, 0.62 of TP 1's).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from exporter.commands import compare as compare_command
from exporter.ramp.report import build_report
from exporter.tune import record, report
from exporter.tune.argv import EngineCommand
from exporter.tune.capacity import SLO
from exporter.tune.compare import diff, load_stage, render
from exporter.tune.decide import Decision
from exporter.tune.report import operating_points, pareto_frontier
from exporter.tune.session import Measurement, Trial, TuneResult
from tests.ramp.ramp_steps import table

SLO_2S = SLO(2.0, 0.2)
SENTENCE = "TP 4 (4 GPUs) gives 0.62 of TP 1's per-GPU throughput: 2.5x the throughput for 4x the GPUs"
TP1_ROWS = [(1, 100.0, 0.1), (4, 400.0, 0.3), (8, 800.0, 0.8), (16, 900.0, 3.0)]
TP4_ROWS = [(8, 800.0, 0.1), (16, 1500.0, 0.3), (32, 1984.0, 1.2), (64, 2100.0, 4.0)]
#: what tune's exporter publishes for a vLLM it started (its PID known: the flags written are read)
EXPORTER_FP = {"engine": "vllm", "model": "m", "settings": {}, "gpu_count": 8}


def _run(rows: list[tuple[int, float, float]], settings: dict[str, float]) -> dict[str, Any]:
    fp = {**EXPORTER_FP, "settings": settings}
    return build_report(table(rows), None, None, {"prompt_tokens": 512}, fingerprint=fp, slo=SLO_2S)


def _result(trial_argv: list[str], trial_rows: list[tuple[int, float, float]], trial_settings: dict[str, float]) -> TuneResult:
    base = Measurement("baseline", EngineCommand(["vllm", "serve", "m"], {}, "vllm"), [_run(TP1_ROWS, {})] * 2)
    cmd = EngineCommand(trial_argv, {}, "vllm")
    trial = Measurement("trial-1", cmd, [_run(trial_rows, trial_settings)] * 2)
    decision = Decision("kv_cache_pressure", "resource", "the KV cache is full", cmd, [])
    return TuneResult(base, [Trial(1, decision, trial, True, "accepted", 2.48)], best=trial, stop="done")


def test_tune_json_carries_each_configuration_s_layout_and_the_larger_s_efficiency() -> None:
    doc = record.build(
        _result(["vllm", "serve", "m", "-tp", "4"], TP4_ROWS, {"tensor_parallel_size": 4.0}), SLO_2S, "vllm", "launch"
    )
    base, trial, rec = doc["baseline"], doc["trials"][0], doc["recommendation"]
    # the baseline wrote no -tp: vLLM's default, TP 1 on one GPU (its exporter saw the node's eight)
    assert base["layout"] == {"tp": 1, "pp": 1, "dp": 1, "gpus": 1, "gpus_from": "layout", "gpus_seen": 8, "assumed": []}
    assert base["per_gpu"] == {"output_tokens_per_second_at_slo": 800.0, "requests_per_second_at_slo": 10.0}
    assert base["per_user_output_tokens_per_second"] == 100.0 and base["scaling_efficiency"] is None
    assert trial["layout"]["gpus"] == 4 and trial["per_gpu"]["output_tokens_per_second_at_slo"] == 496.0
    assert trial["per_user_output_tokens_per_second"] == 62.0
    eff = trial["scaling_efficiency"]
    assert eff["ratio"] == pytest.approx(0.62) and eff["against"]["name"] == "baseline" and eff["text"] == SENTENCE
    assert rec["scaling_efficiency"] == eff and rec["layout"] == trial["layout"]
    # the fields of issue 21 are unchanged beside them
    assert set(base["capacity"]) == {"concurrency", "requests_per_second", "tokens_per_second"}
    assert base["capacity"] == {"concurrency": 8, "requests_per_second": 10.0, "tokens_per_second": 800.0}
    # each run keeps its own figures at the tune SLO
    assert trial["runs"][0]["capacity_at_slo"]["slo"] == {"ttft_s": 2.0, "itl_s": 0.2}


def test_the_same_layout_has_no_efficiency_and_an_unmeasured_trial_no_figures() -> None:
    doc = record.build(_result(["vllm", "serve", "m", "--max-num-seqs", "64"], TP4_ROWS, {}), SLO_2S, "vllm", "launch")
    assert doc["trials"][0]["layout"]["gpus"] == 1 and doc["trials"][0]["scaling_efficiency"] is None
    result = _result(["vllm", "serve", "m", "-tp", "4"], TP4_ROWS, {})
    result.trials[0].measurement.runs = []
    result.trials[0].measurement.failure = "CUDA out of memory"
    failed = record.build(result, SLO_2S, "vllm", "launch")["trials"][0]
    assert failed["layout"]["gpus"] == 4  # from its command line
    assert failed["per_gpu"] is None and failed["per_user_output_tokens_per_second"] is None
    assert failed["scaling_efficiency"] is None


def _compare(a: str, b: str, as_json: bool = False) -> None:
    args = argparse.Namespace(a=a, b=b, json=as_json, slo_ttft=None, slo_itl=None)
    assert compare_command.run(args) == 0


def test_compare_prints_the_layouts_the_per_gpu_figures_and_the_efficiency(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one = _run(TP1_ROWS[:3], {"tensor_parallel_size": 1.0})  # every step within the SLO: compare reads ramp records without one
    four = _run(TP4_ROWS[:3], {"tensor_parallel_size": 4.0})
    (tmp_path / "tp1.json").write_text(json.dumps(one))
    (tmp_path / "tp4.json").write_text(json.dumps(four))
    _compare(str(tmp_path / "tp1.json"), str(tmp_path / "tp4.json"))
    lines = capsys.readouterr().out.splitlines()
    assert "  layout: A TP 1 (1 GPU) -> B TP 4 (4 GPUs)" in lines
    assert (
        "  at SLO: A 800.0 tok/s, 10 req/s per GPU, 100.0 tok/s per user -> B 496.0 tok/s, 2.5 req/s per GPU, "
        "62.0 tok/s per user" in lines
    )
    assert f"  scaling: {SENTENCE}" in lines
    # the other way round: the efficiency is still the larger layout's, now side A, against B
    _compare(str(tmp_path / "tp4.json"), str(tmp_path / "tp1.json"), as_json=True)
    doc = json.loads(capsys.readouterr().out)
    eff = doc["scaling_efficiency"]
    assert eff["of"] == "a" and eff["against"]["name"] == "b" and eff["ratio"] == pytest.approx(0.62)
    assert (
        doc["layout_changed"] is True
        and doc["a"]["layout"]["gpus"] == 4
        and doc["b"]["per_gpu"]["requests_per_second_at_slo"] == 10.0
    )
    assert {"capacity", "spread", "knee", "primary", "repeats"} <= set(doc["a"])  # as before


def test_compare_says_nothing_more_when_the_layouts_are_the_same(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    same = _run(TP1_ROWS[:3], {"tensor_parallel_size": 2.0})
    (tmp_path / "a.json").write_text(json.dumps(same))
    _compare(str(tmp_path / "a.json"), str(tmp_path / "a.json"))
    out = capsys.readouterr().out
    assert "layout:" not in out and "scaling:" not in out
    d = diff([same], [same], SLO())
    assert d["layout_changed"] is False and d["scaling_efficiency"] is None
    # a TP 2 and a DP 2 on two GPUs each: layouts shown, no efficiency between equals
    dp = _run(TP1_ROWS[:3], {"data_parallel_size": 2.0})
    lines = render(diff([same], [dp], SLO()))
    assert "layout: A TP 2 (2 GPUs) -> B TP 1 × DP 2 (2 GPUs)" in lines
    assert "scaling: both on 2 GPUs, no efficiency to tell" in lines
    # TP 1 known from its setting against an engine that published none on an 8-GPU node: no efficiency
    known, unknown = _run(TP1_ROWS[:3], {"tensor_parallel_size": 1.0}), _run(TP4_ROWS[:3], {})
    lines = render(diff([known], [unknown], SLO()))
    assert known["layout"]["gpus"] == 1 and "layout: A TP 1 (1 GPU) -> B 8 GPUs" in lines
    assert "scaling: no efficiency (GPU counts from TP × PP × DP and llm_gpu_info do not compare)" in lines


def test_compare_reads_a_tune_stage_s_layout_from_its_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the trial's exporter published no layout: the -tp its command line wrote is read
    doc = record.build(_result(["vllm", "serve", "m", "-tp", "4"], TP4_ROWS, {}), SLO_2S, "vllm", "launch")
    (tmp_path / "tune.json").write_text(json.dumps(doc))
    runs, slo, label, fp = load_stage(str(tmp_path / "tune.json") + "#trial-1")
    assert label == "tune.json#trial-1" and fp["argv"][-2:] == ["-tp", "4"] and len(runs) == 2
    _compare(str(tmp_path / "tune.json"), str(tmp_path / "tune.json") + "#best")
    assert f"  scaling: {SENTENCE}" in capsys.readouterr().out.splitlines()


# ------------------------------------------------------------------ the frontier


def test_the_pareto_frontier_keeps_the_points_no_other_beats_on_both_axes() -> None:
    points = [(100.0, 800.0), (62.0, 496.0), (50.0, 900.0), (25.0, 700.0), (100.0, 500.0), (10.0, 900.0), (50.0, 900.0)]
    # (62, 496) is beaten by (100, 800); (25, 700) and (10, 900) by (50, 900); (100, 500) by (100, 800)
    assert pareto_frontier(points) == [(50.0, 900.0), (100.0, 800.0)]
    assert pareto_frontier([]) == [] and pareto_frontier([(1.0, 1.0)]) == [(1.0, 1.0)]
    assert pareto_frontier([(1.0, 3.0), (2.0, 2.0), (3.0, 1.0)]) == [(1.0, 3.0), (2.0, 2.0), (3.0, 1.0)]


def test_operating_points_are_per_user_and_per_gpu_for_every_step_and_the_report_plots_them(tmp_path: Path) -> None:
    doc = record.build(
        _result(["vllm", "serve", "m", "-tp", "4"], TP4_ROWS, {"tensor_parallel_size": 4.0}), SLO_2S, "vllm", "launch"
    )
    points = operating_points(doc)
    assert len(points) == 16  # 4 steps x 2 repeats x 2 configurations
    tp4 = [(p.per_user, p.per_gpu, p.meets) for p in points if p.configuration == "trial 1"][:4]
    assert tp4 == [(100.0, 200.0, True), (93.75, 375.0, True), (62.0, 496.0, True), (2100.0 / 64, 525.0, False)]
    frontier = pareto_frontier([(p.per_user, p.per_gpu) for p in points if p.meets])
    # TP 1 keeps 100 tok/s per user up to concurrency 8, 800 per GPU: no TP 4 step beats it on either axis
    assert frontier == [(100.0, 800.0)]
    off = [(p.per_user, p.per_gpu) for p in points if not p.meets]
    assert (2100.0 / 64, 525.0) in off and (2100.0 / 64, 525.0) not in frontier  # past the SLO: never on it
    md = report.markdown(doc)
    assert "## Per GPU and per user" in md and f"{SENTENCE}." in md
    assert "| trial 1 | TP 4 (4 GPUs) | TP × PP × DP | 496.0 | 2.5 | 62.0 | 0.62 vs baseline |" in md
    html = report.html_page(md)
    assert "scaling.png" in html and "![" not in html
    report.write_all(tmp_path, doc)
    for name in ("capacity.png", "scaling.png"):
        with Image.open(tmp_path / name) as img:
            assert img.format == "PNG" and img.size == (800, 500)
