"""plan.md / plan.html / plan.json from a plan, and the command's flags and failures."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from exporter.cli import main
from exporter.plan import render
from exporter.plan.compute import Inputs, plan_model
from exporter.plan.prometheus import Series, Window
from tests.support.fake_engine import FakeEngine
from tests.support.ports import closed_port_url

HOSTILE = "evil*<script>alert(1)</script>|[x](http://e)"


def _doc() -> dict[str, Any]:
    w = Window(0.0, 2 * 3600.0 - 300, 300.0)
    ts = [w.start + k * w.step for k in range(w.points)]
    labels = {"job": "j", "instance": "i", "engine": "a", "model": HOSTILE}
    inputs = Inputs(
        {HOSTILE: Series({"model": HOSTILE}, [(t, 7.0 if t < 3600 else 1.0) for t in ts])},
        {HOSTILE: Series({"model": HOSTILE}, [(t, 2.0) for t in ts])},
        [Series(labels, [(t, 1.0) for t in ts])],
        {
            "requests_per_second": [Series(labels, [(t, 5.0) for t in ts])],
            "concurrency": [Series(labels, [(t, 4.0) for t in ts])],
        },
    )
    plan = plan_model(HOSTILE, inputs, w, 0.2, [])
    return render.build([plan], render.Meta("http://prom:9090", w.start, w.end, w.step, 0.2))


def test_plan_json_has_the_documented_fields() -> None:
    doc = _doc()
    m = doc["models"][0]
    assert m["peak"] == {
        "hour": "1970-01-01T00:00:00Z",
        "requests_per_second": 7.0,
        "in_flight": 2.0,
        "replicas_needed": 2,  # 7 / (5 x 0.8) = 1.75
        "replicas_needed_by_rate": 2,
        "replicas_needed_by_concurrency": 1,
        "concurrency_ceiling_per_replica": 3,
        "in_flight_per_replica": 1.0,
    }
    assert m["trough"]["hour"] == "1970-01-01T01:00:00Z" and m["trough"]["replicas_needed"] == 1
    assert m["above_capacity"]["spans"] == [
        {"start": "1970-01-01T00:00:00Z", "end": "1970-01-01T01:00:00Z", "minutes": 60.0, "steps": 12, "worst_ratio": 1.4}
    ]
    assert m["above_capacity"]["hours"] == ["1970-01-01T00:00:00Z"]
    assert len(m["series"]["time"]) == len(m["series"]["requests_per_second"]) == 24
    assert set(doc["definitions"]) >= {"peak", "trough", "replicas_needed", "concurrency_ceiling", "above_capacity"}


def test_model_names_are_escaped_in_markdown_and_html() -> None:
    doc = _doc()
    text = render.render_markdown(doc, "plan.png")
    assert re.search(r"(?<!\\)<script>", text) is None and "\\<script>" in text  # CommonMark reads \< as a literal <
    assert "\\[x\\](http://e)" in text and "evil\\*" in text
    page = render.render_html(doc, None)
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_write_all_writes_the_three_text_files(tmp_path: Path) -> None:
    paths = render.write_all(tmp_path / "out", _doc(), None)
    assert sorted(p.name for p in paths) == ["plan.html", "plan.json", "plan.md"]
    assert json.loads((tmp_path / "out" / "plan.json").read_text())["version"] == render.VERSION


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--since", "7x"], "--since: expected a duration"),
        (["--step", "0m"], "--step: expected a positive duration"),
        (["--since", "1h", "--step", "2h"], "--step: expected a step no longer than --since"),
        (["--since", "30d", "--step", "1m"], "over 11000 points per series"),
        (["--headroom", "1"], "--headroom: expected a value from 0 up to"),
        (["--headroom", "-0.1"], "--headroom"),
        (["--timeout", "0"], "--timeout"),
        (["--profile", "/nonexistent/tune.json"], "--profile /nonexistent/tune.json: cannot read the file"),
    ],
)
def test_bad_flags_exit_2_in_one_line(flags: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["plan", "--prometheus", closed_port_url(""), "--out", "/nonexistent/plan", *flags])
    err = capsys.readouterr().err
    assert rc == 2 and expected in err and len(err.strip().splitlines()) == 1, err


def test_an_unreachable_or_foreign_prometheus_exits_1_in_one_line_without_secrets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = closed_port_url("").replace("http://", "http://ops:hunter2@")
    assert main(["plan", "--prometheus", url, "--out", str(tmp_path / "a")]) == 1
    err = capsys.readouterr().err
    assert "cannot reach Prometheus" in err and "hunter2" not in err and len(err.strip().splitlines()) == 1
    token = tmp_path / "token"
    token.write_text("t0ken-value\n")
    with FakeEngine("<html>Grafana</html>") as engine:
        root = engine.url.removesuffix("/metrics")
        assert (
            main(["plan", "--prometheus", root, "--prometheus-bearer-token-file", str(token), "--out", str(tmp_path / "b")]) == 1
        )
        assert engine.seen_headers[-1]["Authorization"] == "Bearer t0ken-value"
    err = capsys.readouterr().err
    assert "something that is not JSON" in err and "t0ken" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
