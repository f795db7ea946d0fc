"""What ``plan`` reads: Prometheus' range answers (over real sockets on 127.0.0.1) and the capacity profiles."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from exporter.errors import UsageError
from exporter.httpget import Target
from exporter.plan.profiles import Profile, load_profile, parse_profile, profile_for
from exporter.plan.prometheus import PlanError, Prometheus, Window, parse_matrix
from tests.support.fake_engine import FakeEngine
from tests.support.ports import closed_port_url

WINDOW = Window(1000.0, 1600.0, 60.0)
OK = {
    "status": "success",
    "data": {
        "resultType": "matrix",
        "result": [{"metric": {"model": "m"}, "values": [[1000, "1.5"], [1060, "NaN"], [1120, "+Inf"], [1180, "2"]]}],
    },
}


def _root(engine: FakeEngine) -> str:
    return engine.url.removesuffix("/metrics")


def test_a_matrix_answer_becomes_series_without_the_non_finite_samples() -> None:
    with FakeEngine(json.dumps(OK)) as engine:
        got = Prometheus(Target(_root(engine)), timeout=5).range_query("up", WINDOW)
    assert [(dict(s.labels), s.points) for s in got] == [({"model": "m"}, [(1000.0, 1.5), (1180.0, 2.0)])]


def test_credentials_travel_in_the_header_and_never_in_an_error() -> None:
    with FakeEngine("<html>login</html>", status=401) as engine:
        prom = Prometheus(Target(_root(engine), {"Authorization": "Bearer s3cret-token"}), timeout=5)
        with pytest.raises(PlanError) as err:
            prom.range_query("up", WINDOW)
        assert engine.seen_headers[-1]["Authorization"] == "Bearer s3cret-token"
    assert "refused the credentials (HTTP 401)" in str(err.value) and "s3cret" not in str(err.value)


@pytest.mark.parametrize(
    ("body", "status", "expected"),
    [
        ("<html>not prometheus</html>", 200, "with something that is not JSON"),
        (
            json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error at char 3:\n unexpected"}),
            400,
            "refused the query (HTTP 400): parse error at char 3: unexpected",
        ),
        (json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}), 200, "without a matrix result"),
        (
            json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}}]}}),
            200,
            "no metric or values",
        ),
        (
            json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [[1]]}]}}),
            200,
            "not [timestamp",
        ),
    ],
)
def test_a_garbled_or_refusing_prometheus_is_one_line(body: str, status: int, expected: str) -> None:
    with FakeEngine(body, status=status) as engine, pytest.raises(PlanError) as err:
        Prometheus(Target(_root(engine)), timeout=5).range_query("up", WINDOW)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_a_down_prometheus_an_oversized_answer_and_a_hang_are_one_line() -> None:
    with pytest.raises(PlanError, match=r"^cannot reach Prometheus at http://127\.0\.0\.1:\d+/api/v1/query_range"):
        Prometheus(Target(closed_port_url("")), timeout=5).range_query("up", WINDOW)
    with FakeEngine(b"x" * 5000) as engine, pytest.raises(PlanError, match="over 1000 bytes"):
        Prometheus(Target(_root(engine)), timeout=5, max_bytes=1000).range_query("up", WINDOW)
    with FakeEngine(json.dumps(OK), delay=20) as engine, pytest.raises(PlanError, match="no complete answer within 0.5 s"):
        Prometheus(Target(_root(engine)), timeout=0.5).range_query("up", WINDOW)


def test_too_many_points_are_refused_before_asking() -> None:
    with pytest.raises(PlanError, match="Prometheus allows 11000; use a larger --step"):
        Prometheus(Target(closed_port_url("")), timeout=1).range_query("up", Window(0.0, 11_000 * 60.0, 60.0))


def test_parse_matrix_keeps_series_order_and_labels() -> None:
    body = json.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "matrix",
                "result": [{"metric": {"model": "a"}, "values": []}, {"metric": {"model": "b", "x": 1}, "values": [[5, "3"]]}],
            },
        }
    ).encode()
    got = parse_matrix(200, body, 10_000, "http://p")
    assert [dict(s.labels) for s in got] == [{"model": "a"}, {"model": "b", "x": "1"}] and got[1].points == [(5.0, 3.0)]


def _ramp(knee: bool) -> dict[str, object]:
    steps = [
        {"concurrency": c, "client": {"requests_per_s": r, "output_tokens_per_s": r * 100}}
        for c, r in ((1, 0.5), (2, 0.9), (4, 1.6), (8, 1.7))
    ]
    return {"config": {"model": "tiny-llama"}, "steps": steps, "knee": steps[2] if knee else None}


def test_profiles_from_tune_and_ramp_records() -> None:
    tune: dict[str, Any] = {
        "baseline": {"capacity": {"concurrency": 4, "requests_per_second": 1.0, "tokens_per_second": 80}},
        "recommendation": None,
    }
    p = parse_profile(tune, "tune.json")
    assert (p.kind, p.concurrency, p.requests_per_second, p.tokens_per_second, p.model) == ("tune baseline", 4, 1.0, 80, None)
    tune["recommendation"] = {"capacity": {"concurrency": 8, "requests_per_second": 2.5, "tokens_per_second": 200}}
    tune["baseline"]["runs"] = [{"config": {"model": "qwen"}}]
    p = parse_profile(tune, "tune.json")
    assert (p.kind, p.concurrency, p.requests_per_second, p.model) == ("tune recommendation", 8, 2.5, "qwen")
    p = parse_profile(_ramp(knee=True), "report.json")
    assert (p.kind, p.concurrency, p.requests_per_second, p.tokens_per_second, p.model) == (
        "ramp knee",
        4,
        1.6,
        160.0,
        "tiny-llama",
    )
    p = parse_profile(_ramp(knee=False), "report.json", model="alias")
    assert (p.kind, p.concurrency, p.model, p.explicit) == ("ramp last step", 8, "alias", True)


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ([], "expected a tune.json or a ramp report.json object"),
        ({"steps": []}, "no capacity in it"),
        ({"baseline": {"capacity": {"concurrency": 0, "requests_per_second": 0}}}, "nothing met the SLO"),
        ({"baseline": {"capacity": {"concurrency": 4, "requests_per_second": True}}}, "no positive requests/s"),
    ],
)
def test_profiles_without_a_capacity_are_refused_in_one_line(doc: object, expected: str) -> None:
    with pytest.raises(UsageError, match=expected):
        parse_profile(doc, "f.json")


def test_load_profile_reads_model_equals_file_and_refuses_bad_files(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(_ramp(knee=True)))
    assert load_profile(str(path)).model == "tiny-llama"
    assert load_profile(f"served={path}").model == "served"
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(UsageError, match=r"bad\.json: not JSON"):
        load_profile(str(tmp_path / "bad.json"))
    with pytest.raises(UsageError, match="cannot read the file"):
        load_profile(str(tmp_path / "missing.json"))


def test_profile_for_prefers_the_model_then_the_generic_then_the_only_one() -> None:
    a = Profile("a", "m1", 4, 1, 0, "k")
    generic = Profile("g", None, 4, 1, 0, "k")
    explicit = Profile("e", "m2", 4, 1, 0, "k", explicit=True)
    assert profile_for("m1", [a, generic]) is a
    assert profile_for("other", [a, generic]) is generic
    assert profile_for("other", [a]) is a  # one profile read from its file: the replica's capacity, whatever the alias
    assert profile_for("other", [explicit]) is None  # MODEL=FILE names the model it is for
    assert profile_for("other", [a, explicit]) is None
