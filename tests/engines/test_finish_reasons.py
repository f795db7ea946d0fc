"""Finish reasons: one closed vocabulary in the schema, every engine's raw reasons mapped into it.

Why: Triton's ``CANCELED``/``BACKEND``/``OTHER`` and TGI's ``template``/``dropped``/...
used to reach the wire raw, so the diagnosis and the recording rule (which count
``abort|error|timeout``) saw 0 % failures on those engines. The proofs here run the
real path: fixture text -> ``normalize_exposition`` -> the diagnosis' signals and
symptoms, and -> promtool evaluating the shipped recording rule.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from alerts import recording
from alerts.settings import load
from exporter.diagnosis import signals as sig
from exporter.diagnosis.symptoms import observe
from exporter.diagnosis.thresholds import Thresholds
from exporter.diagnosis.window import Window
from exporter.engines import normalize_exposition, value_rewrites
from exporter.engines.mappings import MAPPINGS
from exporter.engines.textparse import parse
from exporter.samples import Point, Sample
from exporter.schema import FAILED_FINISH_REASONS, FINISH_REASON_FALLBACK, FINISH_REASONS, SPECS
from exporter.store import Snapshot
from tests.engines.engine_helpers import FIXTURES, find, fixture, normalize, value

ROOT = Path(__file__).resolve().parents[2]
FINISHED = "llm_requests_finished_total"
REJECTED = "llm_requests_rejected_total"
ALL_FIXTURES = sorted(p.name for p in FIXTURES.glob("*.prom") if p.name != "real-vllm-docs-usage-metrics-fragment.prom")

#: the raw series each engine counts finished requests in: (sample name, reason label or None, values
#: that are admission refusals, not finished requests)
RAW_FINISHED: dict[str, tuple[tuple[str, str | None, tuple[str, ...]], ...]] = {
    "vllm": (("vllm:request_success_total", "finished_reason", ()),),
    "sglang": (("sglang:num_requests_total", None, ()), ("sglang_num_requests_total", None, ())),
    "tgi": (("tgi_request_success", None, ()), ("tgi_request_failure", "err", ("validation", "overloaded"))),
    "trtllm": (
        ("nv_inference_request_success", None, ()),
        ("nv_inference_request_failure", "reason", ("REJECTED",)),
        ("trtllm_request_success_total", "finished_reason", ()),
    ),
    "llamacpp": (),
}


def _raw(text: str, family: str) -> tuple[float, set[str]]:
    """(finished requests counted by the engine, the raw reasons it used) in one fixture."""
    names = {name for name, _, _ in RAW_FINISHED[family]}
    exp = parse(text, names)
    total, reasons = 0.0, set()
    for name, label, admission in RAW_FINISHED[family]:
        for labels, v in exp.samples.get(name, ()):
            raw = labels.get(label) if label else None
            if raw in admission:
                continue
            total += v
            if raw is not None:
                reasons.add(raw)
    return total, reasons


def _known_raw(family: str) -> set[str]:
    """Raw reasons the family's table names explicitly (not through a default)."""
    return {raw for row in MAPPINGS[family].rows for rw in row.values.values() for raw in rw.values}


# --------------------------------------------------------------------------- the vocabulary


def test_the_vocabulary_is_declared_once_in_the_schema_and_closes_the_label() -> None:
    assert {"stop", "length", "abort", "error", "timeout"} <= set(FINISH_REASONS)
    assert FINISH_REASON_FALLBACK in FINISH_REASONS
    assert set(FAILED_FINISH_REASONS) <= set(FINISH_REASONS)
    assert FINISH_REASON_FALLBACK not in FAILED_FINISH_REASONS  # an unknown word is not invented as a failure
    assert SPECS[FINISHED].closed_values("reason") == tuple(FINISH_REASONS)
    # the diagnosis and the recording rule read the same set
    assert sig.FAILED_REASONS == FAILED_FINISH_REASONS
    assert recording.FAILED_REASONS == "|".join(FAILED_FINISH_REASONS)


def test_every_rewrite_of_every_engine_row_lands_in_the_vocabulary() -> None:
    for family, mapping in MAPPINGS.items():
        for row in mapping.rows:
            spec = SPECS[row.neutral]
            for label, rewrite in row.values.items():
                allowed = spec.closed_values(label)
                assert allowed is not None, (family, row.neutral, label)
                assert set(rewrite.values.values()) <= set(allowed), (family, rewrite)
                assert rewrite.default is None or rewrite.default in allowed, (family, rewrite)
            for src in row.sources:
                for label, const in getattr(src, "labels", {}).items():
                    allowed = spec.closed_values(label)
                    assert allowed is None or const in allowed, (family, row.neutral, const)


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_every_fixture_maps_its_raw_finish_reasons_into_the_vocabulary(name: str) -> None:
    result = normalize(name)
    total, raw = _raw(fixture(name), result.family)
    # every raw reason the fixture carries is one its engine's table names (none left to a fallback)
    assert raw <= _known_raw(result.family), (name, raw - _known_raw(result.family))
    finished = find(result, FINISHED)
    for p in finished:
        assert p.labels["reason"] in FINISH_REASONS, (name, p.labels)
    # nothing lost, nothing counted twice: the neutral total is the engine's own
    assert sum(p.value for p in finished if isinstance(p, Sample)) == total, name
    if result.family == "llamacpp":
        assert not finished  # llama.cpp counts no finished requests: absent, never 0


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        # a success counter's unknown reason is not a failure: the schema's bounded fallback
        ('vllm:request_success_total{engine="0",finished_reason="brand_new",model_name="m"} 3\n', FINISH_REASON_FALLBACK),
        ('trtllm_request_success_total{finished_reason="brand_new",model_name="m"} 3\n', FINISH_REASON_FALLBACK),
        # a failure counter's unknown reason is still a failure
        ('nv_inference_request_failure{model="m",reason="BRAND_NEW",version="1"} 3\n', "error"),
        ('tgi_request_failure{err="brand_new"} 3\n', "error"),
        # a raw value that already is a vocabulary word stays itself
        ('vllm:request_success_total{engine="0",finished_reason="timeout",model_name="m"} 3\n', "timeout"),
    ],
)
def test_an_unknown_raw_reason_becomes_a_bounded_value_never_itself(text: str, reason: str) -> None:
    result = normalize_exposition(text, "srv")
    (point,) = [p for p in result.points if p.name == FINISHED]
    assert point.labels["reason"] == reason
    assert isinstance(point, Sample) and point.value == 3


def test_rewritten_reasons_that_meet_are_summed_per_rank() -> None:
    text = "".join(
        f'vllm:request_success_total{{engine="0",finished_reason="{r}",model_name="m"}} {n}\n'
        for r, n in (("stop", 5), ("repetition", 2), ("abort", 1))
    )
    r = normalize_exposition(text, "srv")
    assert value(r, FINISHED, rank="0", reason="stop") == 7
    assert value(r, FINISHED, rank="0", reason="abort") == 1


def test_triton_and_tgi_failure_fixtures_map_their_reasons() -> None:
    tgi = normalize("tgi-3.x-failures.prom")
    assert value(tgi, FINISHED, reason="success") == 960
    assert value(tgi, FINISHED, reason="error") == 24 + 8 + 8  # generation, incomplete, template
    assert value(tgi, FINISHED, reason="abort") == 24  # dropped: the client went away in the queue
    assert value(tgi, REJECTED, reason="validation") == 10 and value(tgi, REJECTED, reason="overloaded") == 6
    triton = normalize("triton-trtllm-failures.prom")
    assert value(triton, FINISHED, reason="success") == 960
    assert value(triton, FINISHED, reason="abort") == 40  # CANCELED
    assert value(triton, FINISHED, reason="error") == 16 + 8  # BACKEND, OTHER
    assert value(triton, REJECTED, reason="REJECTED") == 16


def test_the_docs_list_each_engines_raw_reasons() -> None:
    rewrites = value_rewrites()[FINISHED]
    assert set(rewrites) == set(MAPPINGS)
    assert rewrites["trtllm"]["`CANCELED`"] == "abort"
    assert rewrites["tgi"]["`dropped`"] == "abort"
    assert rewrites["llamacpp"] == {}
    docs = (ROOT / "docs" / "metrics.md").read_text()
    assert "### `llm_requests_finished_total{reason}`" in docs and "`CANCELED` -> `abort`" in docs


# --------------------------------------------------------------------------- the diagnosis


def _snapshot(points: list[Point], at: float) -> Snapshot:
    return Snapshot(at, points, {}, monotonic=at)


FAILURE_FIXTURES = {
    # fixture: (failed finished, finished, rejected)
    "tgi-3.x-failures.prom": (40 + 24, 960 + 64, 16),
    "triton-trtllm-failures.prom": (40 + 24, 960 + 64, 16),
}


@pytest.mark.parametrize("name", sorted(FAILURE_FIXTURES))
def test_failures_on_triton_and_tgi_give_a_failed_share_in_the_diagnosis(name: str) -> None:
    """The real path: fixture -> normalize -> the diagnosis window -> signals -> the failures symptom."""
    failed, finished, rejected = FAILURE_FIXTURES[name]
    points = normalize(name).points
    # the same engine a minute earlier, just started: every counter at 0
    start = [Sample(p.name, p.labels, 0.0) if p.name in (FINISHED, REJECTED) and isinstance(p, Sample) else p for p in points]
    window = Window(120.0, keep=sig.reads)
    window.add(_snapshot(start, 1000.0))
    window.add(_snapshot(points, 1060.0))
    v = sig.compute(window).service
    assert v[sig.FAILED_SHARE] == pytest.approx((failed + rejected) / (finished + rejected))
    assert v[sig.FAILED_SHARE] > 0
    assert v[sig.FAILED_RATE] == pytest.approx(failed / 60.0)
    held, _ = observe(v, Thresholds())
    assert "failures" in {s.id for s in held}


# --------------------------------------------------------------------------- the recording rule, in promtool


def test_the_recording_rule_counts_the_schemas_failure_set() -> None:
    s = load()
    rules = {r["record"]: r["expr"] for g in recording.groups(s) for r in g["rules"]}
    expr = rules[f"server_model:llm_requests_failed:ratio_rate{s.rate_window}"]
    assert f'reason=~"{"|".join(FAILED_FINISH_REASONS)}"' in expr
    shipped = yaml.safe_load((ROOT / "alerts" / "recording_rules.yml").read_text())
    assert expr in [r["expr"] for g in shipped["groups"] for r in g["rules"]]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="Debian package prometheus (promtool) not installed")
@pytest.mark.parametrize("name", sorted(FAILURE_FIXTURES))
def test_failures_on_triton_and_tgi_give_a_failed_ratio_in_the_recording_rule(name: str, tmp_path: Path) -> None:
    """promtool evaluates the shipped rule on series built from the normalized fixture: each
    finished counter grows by its fixture value every minute."""
    failed, finished, _ = FAILURE_FIXTURES[name]
    s = load()
    record = f"server_model:llm_requests_failed:ratio_rate{s.rate_window}"
    extra = {"job": s.exporter_job, "instance": "10.0.0.9:9750"}
    series, out = [], None
    for p in normalize(name).points:
        if p.name != FINISHED or not isinstance(p, Sample):
            continue
        labels = {**extra, **{k: v for k, v in p.labels.items() if v}}
        series.append(
            {"series": FINISHED + "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}", "values": f"0+{p.value:g}x20"}
        )
        keep = {k: labels[k] for k in ("job", "instance", "server", "model") if k in labels}
        out = "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(keep.items())) + "}"
    assert series and out
    doc = {
        "rule_files": [str(ROOT / "alerts" / "recording_rules.yml")],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {"expr": f"{record} > bool 0", "eval_time": "20m", "exp_samples": [{"labels": out, "value": 1}]},
                    {
                        "expr": f"abs({record} - {failed / finished!r}) < bool 1e-9",
                        "eval_time": "20m",
                        "exp_samples": [{"labels": out, "value": 1}],
                    },
                ],
            }
        ],
    }
    test_file = tmp_path / "failures_test.yml"
    test_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = subprocess.run(
        ["promtool", "test", "rules", str(test_file)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
