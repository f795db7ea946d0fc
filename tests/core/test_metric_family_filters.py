"""Family filters (issue 36, item 2): --metrics.include / --metrics.exclude (exporter/familyfilter.py).

What is proved: the three ways of giving them (flag > environment > the file's `metrics:`)
read the same; a bad glob or an empty pattern is one usage line and exit status 2; the real
collector never builds a family left out (text and OpenMetrics, parsed back with
prometheus_client's own parsers) and names each in ``llm_exporter_metric_family_excluded``;
the health families stay whatever the patterns say, with a warning; and the same store
contents give the same verdict with and without an exclude list, through serve's own wiring.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families as _parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporter import collector
from exporter.cli import build_parser, main
from exporter.commands import registry
from exporter.commands.schema import load_families, render
from exporter.config import Config, load_config
from exporter.derive import DeriveStage
from exporter.errors import UsageError
from exporter.familyfilter import FamilyFilter, family_globs
from exporter.samples import Point, Sample
from exporter.schema import HEALTH_FAMILIES, SPECS, to_json
from exporter.server import create_app
from exporter.store import SnapshotStore
from tests.diagnosis.diag_points import engine, healthy_gpu, histogram

#: client_python leaves it unannotated: its type, named once
parse_openmetrics: Callable[[str], Iterable[Metric]] = _parse_openmetrics
EXCLUDED = "llm_exporter_metric_family_excluded"
GLOBS = "llm_gpu_throttle_*,llm_gpu_energy_joules_total"


def _load(argv: list[str], env: dict[str, str] | None = None, doc: Any = None, tmp_path: Path | None = None) -> Config:
    if doc is not None:
        assert tmp_path is not None
        path = tmp_path / "c.yml"
        path.write_text(yaml.safe_dump(doc))
        argv = ["--config", str(path), *argv]
    argv = ["serve", *argv]
    return load_config(build_parser(argv).parse_args(argv), environ=env or {})


# --------------------------------------------------------------------------- flags, environment, file


def test_flag_environment_and_file_read_the_same(tmp_path: Path) -> None:
    ways = [
        _load(["--metrics.exclude", GLOBS]),
        _load([], {"LLM_EXPORTER_METRICS_EXCLUDE": GLOBS}),
        _load([], doc={"metrics": {"exclude": GLOBS}}, tmp_path=tmp_path),
        _load([], doc={"metrics": {"exclude": GLOBS.split(",")}}, tmp_path=tmp_path),
        _load(["--metrics.exclude", " llm_gpu_throttle_* , llm_gpu_energy_joules_total,llm_gpu_throttle_*"]),
    ]
    expected = FamilyFilter(exclude=("llm_gpu_throttle_*", "llm_gpu_energy_joules_total"))
    assert all(cfg.metrics == expected for cfg in ways), [cfg.metrics for cfg in ways]
    assert _load([]).metrics == FamilyFilter() and not FamilyFilter().active


def test_flags_win_over_the_environment_over_the_file(tmp_path: Path) -> None:
    doc = {"metrics": {"include": ["llm_kv_*"], "exclude": "llm_gpu_*"}}
    env = {"LLM_EXPORTER_METRICS_INCLUDE": "llm_scheduler_*"}
    cfg = _load(["--metrics.exclude", "llm_gpu_power_watts"], env, doc, tmp_path)
    assert cfg.metrics.include == ("llm_scheduler_*",)  # environment over file
    assert cfg.metrics.exclude == ("llm_gpu_power_watts",)  # flag over file
    assert cfg.metrics.origin == ("LLM_EXPORTER_METRICS_INCLUDE", "--metrics.exclude")
    only_file = _load([], {}, doc, tmp_path)
    assert only_file.metrics == FamilyFilter(("llm_kv_*",), ("llm_gpu_*",))
    assert only_file.metrics.origin[0].endswith("c.yml: metrics.include")
    assert _load([], {"LLM_EXPORTER_METRICS_EXCLUDE": ""}).metrics == FamilyFilter()  # empty variable: unset, as every other
    assert _load([], doc={"metrics": {"include": []}}, tmp_path=tmp_path).metrics == FamilyFilter()


@pytest.mark.parametrize(
    ("argv", "env", "doc", "needle"),
    [
        (["--metrics.exclude", "a,,b"], {}, None, "--metrics.exclude: an empty pattern in 'a,,b'"),
        (["--metrics.exclude", "llm_gpu_*,"], {}, None, "--metrics.exclude: an empty pattern"),
        (["--metrics.include="], {}, None, "--metrics.include: expected a comma-separated list of metric family globs"),
        (["--metrics.include", "llm gpu"], {}, None, "--metrics.include: 'llm gpu' is not a metric family glob"),
        (["--metrics.include", "llm_[gpu"], {}, None, "'llm_[gpu' is not a metric family glob"),
        (["--metrics.include", "llm_{a,b}"], {}, None, "is not a metric family glob"),
        ([], {"LLM_EXPORTER_METRICS_EXCLUDE": "x\ny"}, None, "LLM_EXPORTER_METRICS_EXCLUDE: 'x\\ny' is not a metric family glob"),
        ([], {"LLM_EXPORTER_METRICS_INCLUDE": " "}, None, "LLM_EXPORTER_METRICS_INCLUDE: expected a comma-separated list"),
        ([], {}, {"metrics": {"exclude": ["llm_gpu_*", ""]}}, "c.yml: metrics.exclude: an empty pattern"),
        ([], {}, {"metrics": {"exclude": [5]}}, "c.yml: metrics.exclude: expected a comma-separated list"),
        ([], {}, {"metrics": {"exclude": None}}, "c.yml: metrics.exclude: expected"),
        ([], {}, {"metrics": {"exlude": "llm_gpu_*"}}, "c.yml: metrics: unknown setting(s) exlude"),
        ([], {}, {"metrics": "llm_gpu_*"}, "c.yml: metrics: expected a mapping"),
        ([], {}, {"metrics.include": "llm_gpu_*"}, "unknown setting(s) metrics.include"),
        (["--metrics.exclude", ",".join(["llm_a"] * 257)], {}, None, "--metrics.exclude: at most 256 patterns"),
        (["--metrics.exclude", "l" * 201], {}, None, "is not a metric family glob"),
    ],
)
def test_a_bad_setting_is_one_usage_line_naming_it(
    tmp_path: Path, argv: list[str], env: dict[str, str], doc: Any, needle: str
) -> None:
    with pytest.raises(UsageError) as err:
        _load(argv, env, doc, tmp_path)
    text = str(err.value)
    assert needle in text and "\n" not in text and len(text) <= 400, text


def test_the_cli_exits_2_with_one_line_and_no_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--gpu-source", "none", "--metrics.exclude", "llm_gpu_*,,x"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "llm-layer-exporter serve: error: --metrics.exclude: an empty pattern in 'llm_gpu_*,,x': one glob between every two commas"
    ]


def test_globs_are_fnmatch_and_case_sensitive() -> None:
    assert family_globs("llm_gpu_[st]*,llm_kv_cache_usage_rati?") == ("llm_gpu_[st]*", "llm_kv_cache_usage_rati?")
    f = FamilyFilter(exclude=family_globs("llm_gpu_[!p]*"))
    assert not f.published("llm_gpu_sm_clock_hertz") and f.published("llm_gpu_power_watts")
    assert FamilyFilter(exclude=("LLM_GPU_*",)).published("llm_gpu_power_watts")


# --------------------------------------------------------------------------- semantics and warnings


def test_published_means_in_include_and_not_in_exclude() -> None:
    f = FamilyFilter(include=("llm_gpu_*", "llm_kv_*"), exclude=("llm_gpu_throttle_*",))
    assert f.published("llm_gpu_power_watts") and f.published("llm_kv_cache_usage_ratio")
    assert not f.published("llm_gpu_throttle_reason_active")  # in include, but excluded
    assert not f.published("llm_scheduler_requests_waiting")  # not in include
    assert set(f.excluded()) == {n for n in SPECS if not f.published(n)}
    assert list(f.excluded()) == [n for n in SPECS if n in set(f.excluded())]  # schema order


def test_the_health_families_are_never_left_out() -> None:
    assert "llm_exporter_source_up" in HEALTH_FAMILIES and EXCLUDED in HEALTH_FAMILIES
    assert HEALTH_FAMILIES == {n for n in SPECS if n.startswith("llm_exporter_")}
    for f in (
        FamilyFilter(exclude=("*",)),
        FamilyFilter(exclude=("llm_exporter_*",)),
        FamilyFilter(include=("llm_gpu_energy_joules_total",)),
    ):
        assert not set(f.excluded()) & HEALTH_FAMILIES, f
    assert FamilyFilter(exclude=("*",)).excluded() == tuple(n for n in SPECS if n not in HEALTH_FAMILIES)


def test_a_pattern_matching_nothing_or_a_health_family_is_a_warning() -> None:
    f = FamilyFilter(include=("llm_nope_*", "llm_gpu_*"), exclude=("llm_exporter_source_*", "llm_gpu_power_watts", "vllm:*"))
    lines = f.warnings()
    assert lines[0] == "--metrics.include: 'llm_nope_*' matches no metric family of the schema (docs/metrics.md)"
    assert lines[1] == "--metrics.exclude: 'vllm:*' matches no metric family of the schema (docs/metrics.md)"
    assert len(lines) == 3 and lines[2].startswith(
        "--metrics.exclude: 'llm_exporter_source_*' would exclude llm_exporter_source_"
    )
    assert "always published; kept" in lines[2] and "\n" not in lines[2]
    assert FamilyFilter(exclude=("llm_gpu_*",)).warnings() == []


def test_serve_logs_each_warning_once_at_start_up(caplog: pytest.LogCaptureFixture) -> None:
    from exporter.commands.serve import _log_family_filter

    cfg = _load([], {"LLM_EXPORTER_METRICS_EXCLUDE": "llm_nope,llm_gpu_*"})
    with caplog.at_level(logging.INFO, logger="exporter"):
        _log_family_filter(cfg)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["LLM_EXPORTER_METRICS_EXCLUDE: 'llm_nope' matches no metric family of the schema (docs/metrics.md)"]
    left = len(cfg.metrics.excluded())
    assert any(f"left out of /metrics: {left} of the schema" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- the real collector


def _gpu_points() -> list[Point]:
    labels = {"gpu": "0", "uuid": "GPU-0"}
    return [
        *healthy_gpu(0),
        Sample("llm_gpu_energy_joules_total", labels, 1234.0),
        histogram("llm_request_ttft_seconds", [0.2, 0.4, 3.0]),
    ]


def _store() -> SnapshotStore:
    store = SnapshotStore(clock=lambda: 1000.0)
    store.register("gpu", 1.0)
    store.record_success("gpu", _gpu_points(), 0.01)
    store.register("engine", 5.0)
    store.record_success("engine", engine(kv=0.5), 0.01)
    return store


def _text_families(body: bytes) -> dict[str, list[Any]]:
    return {f.name: f.samples for f in parse_text(body.decode())}


def _om_families(body: bytes) -> dict[str, list[Any]]:
    return {f.name: f.samples for f in parse_openmetrics(body.decode())}


def test_left_out_families_are_absent_and_named_in_both_formats() -> None:
    families = FamilyFilter(exclude=family_globs(GLOBS + ",llm_request_ttft_seconds"))
    cache = collector.ExpositionCache(_store(), families)
    everything = collector.ExpositionCache(_store())
    for parse, openmetrics in ((_text_families, False), (_om_families, True)):
        full = parse(everything.render(openmetrics))
        got = parse(cache.render(openmetrics))
        # prometheus_client names a counter family without _total
        left = {"llm_gpu_throttle_reason_active", "llm_gpu_energy_joules", "llm_request_ttft_seconds"}
        assert left <= set(full) and not left & set(got), sorted(got)
        assert set(full) - set(got) == left
        for name in ("llm_gpu_power_watts", "llm_kv_cache_usage_ratio", "llm_exporter_source_up"):
            assert got[name] == full[name]
        named = {s.labels["family"]: s.value for s in got[EXCLUDED]}
        assert named == {
            "llm_gpu_throttle_reason_active": 1.0,
            "llm_gpu_energy_joules_total": 1.0,
            "llm_request_ttft_seconds": 1.0,
        }
        assert EXCLUDED not in full  # nothing left out: no series


def test_a_left_out_family_is_never_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """Skipped while grouping, not rendered and then dropped: neither renderer sees it."""
    rendered: list[str] = []
    built: list[str] = []
    real_render, real_new = collector._render_family, collector._new_family

    def render_family(name: str, *args: Any) -> str:
        rendered.append(name)
        return real_render(name, *args)

    def new_family(spec: Any) -> Any:
        built.append(spec.name)
        return real_new(spec)

    monkeypatch.setattr(collector, "_render_family", render_family)
    monkeypatch.setattr(collector, "_new_family", new_family)
    cache = collector.ExpositionCache(_store(), FamilyFilter(exclude=("llm_gpu_*",)))
    cache.render()
    cache.render(openmetrics=True)
    assert rendered and built
    assert not [n for n in rendered + built if n.startswith("llm_gpu_")]
    assert "llm_kv_cache_usage_ratio" in rendered and "llm_kv_cache_usage_ratio" in built


def test_the_health_families_stay_whatever_the_patterns_say() -> None:
    store = _store()
    store.register("probe", 1.0)
    store.record_success("probe", [], 0.01)
    for families in (FamilyFilter(exclude=("*",)), FamilyFilter(include=("llm_gpu_energy_joules_total",))):
        got = _text_families(collector.ExpositionCache(store, families).render())
        assert {"llm_exporter_source_up", "llm_exporter_build_info", "llm_exporter_source_duration_seconds", EXCLUDED} <= set(got)
        assert {s.labels["source"] for s in got["llm_exporter_source_up"]} == {"gpu", "engine", "probe"}
        assert all(n.startswith("llm_exporter_") or n == "llm_gpu_energy_joules" for n in got), sorted(got)
        assert len(got[EXCLUDED]) == len(families.excluded())


def test_the_text_renderer_still_writes_what_prometheus_client_writes_when_filtered() -> None:
    from prometheus_client.exposition import generate_latest

    points = [*_gpu_points(), *engine(kv=0.5)]
    left_out = frozenset(FamilyFilter(exclude=family_globs(GLOBS)).excluded())
    ours = collector.render_text(points, left_out=left_out)
    theirs = generate_latest(collector._FamiliesCollector(collector.families_from_points(points, left_out=left_out)))
    assert ours == theirs and b"llm_gpu_throttle" not in ours and b"llm_gpu_power_watts" in ours


# --------------------------------------------------------------------------- the verdict is not filtered


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _serve_the_same_inputs(argv: list[str]) -> tuple[dict[str, Any], str, list[Point]]:
    """serve's wiring (config -> registry -> derive stage -> app) fed the same inputs, one pass a second."""
    cfg = _load(["--gpu-source", "none", *argv])
    clock = _Clock()
    store = SnapshotStore(clock=clock)
    built = registry.build(cfg, store)
    (stage,) = built.derived
    assert isinstance(stage, DeriveStage)
    stage.register(store)  # what RunnerGroup.add does
    store.register("gpu", 1.0)
    store.register("engine", 1.0)
    for cycle in range(8):  # a full KV cache preempting more every second: a verdict with a primary
        store.record_success("gpu", healthy_gpu(), 0.01)
        store.record_success("engine", engine(waiting=9, running=1, kv=1.0, preemptions=3.0 * cycle), 0.01)
        stage.run_pass(store)
        clock.now += 1.0
    client = TestClient(create_app(store, built.routers, families=cfg.metrics))
    verdict = client.get("/diagnosis").json()
    verdict.pop("age_seconds")  # how long ago the pass ran, by the process's clock
    body = client.get("/metrics").text
    derived = [p for p in store.snapshot().points if p.name.startswith(("llm_bottleneck_", "llm_service_", "llm_symptom_"))]
    stage.close()
    return verdict, body, derived


def _lines(body: str, name: str) -> list[str]:
    return [line for line in body.splitlines() if line.startswith(name + "{")]


def test_the_same_store_gives_the_same_verdict_with_and_without_an_exclude_list() -> None:
    # leave out every family the verdict above was judged from, and one the diagnosis publishes
    exclude = "llm_kv_cache_*,llm_scheduler_*,llm_gpu_*,llm_layer_headroom_ratio"
    plain_verdict, plain_body, plain_points = _serve_the_same_inputs([])
    verdict, body, points = _serve_the_same_inputs(["--metrics.exclude", exclude])
    assert plain_verdict["primary"] is not None and plain_verdict["primary"]["cause"] == "kv_cache_pressure"
    assert verdict == plain_verdict
    assert repr(points) == repr(plain_points)  # repr: a NaN score equals itself
    full, got = _text_families(plain_body.encode()), _text_families(body.encode())
    assert {"llm_kv_cache_usage_ratio", "llm_scheduler_requests_waiting", "llm_layer_headroom_ratio"} <= set(full)
    assert not [n for n in got if n.startswith(("llm_kv_cache_", "llm_scheduler_", "llm_gpu_", "llm_layer_headroom"))]
    for name in ("llm_bottleneck_primary", "llm_bottleneck_active", "llm_service_state", "llm_bottleneck_score"):
        assert got[name] and _lines(body, name) == _lines(plain_body, name), name
    named = {s.labels["family"] for s in got[EXCLUDED]}
    assert {"llm_kv_cache_usage_ratio", "llm_kv_cache_preemptions_total", "llm_layer_headroom_ratio"} <= named


def test_the_same_store_gives_the_same_verdict_with_an_include_list_of_the_verdict_alone() -> None:
    """The other way round: publish only the verdict's own families; every input it was judged from is
    left out of /metrics, and the verdict is unchanged."""
    include = "llm_bottleneck_*,llm_service_state"
    plain_verdict, plain_body, plain_points = _serve_the_same_inputs([])
    verdict, body, points = _serve_the_same_inputs(["--metrics.include", include])
    assert plain_verdict["primary"] is not None and plain_verdict["primary"]["cause"] == "kv_cache_pressure"
    assert verdict == plain_verdict
    assert repr(points) == repr(plain_points)
    got = _text_families(body.encode())
    assert not [n for n in got if n.startswith(("llm_kv_cache_", "llm_scheduler_", "llm_gpu_", "llm_layer_"))]
    for name in ("llm_bottleneck_primary", "llm_bottleneck_active", "llm_service_state", "llm_bottleneck_score"):
        assert got[name] and _lines(body, name) == _lines(plain_body, name), name
    named = {s.labels["family"] for s in got[EXCLUDED]}
    assert {"llm_kv_cache_usage_ratio", "llm_scheduler_requests_waiting", "llm_layer_headroom_ratio"} <= named


# --------------------------------------------------------------------------- the schema command


def test_schema_without_a_filter_prints_the_schema_unchanged() -> None:
    assert render("json") == to_json() + "\n"
    assert render("json", FamilyFilter()) == render("json")
    assert render("markdown", FamilyFilter()) == render("markdown")


def test_schema_marks_what_the_same_settings_leave_out(tmp_path: Path) -> None:
    conf = tmp_path / "c.yml"
    conf.write_text(yaml.safe_dump({"gpu_interval": 2, "metrics": {"exclude": GLOBS.split(",") + ["llm_exporter_*"]}}))
    argv = ["schema", "--config", str(conf)]
    families = load_families(build_parser(argv).parse_args(argv), {})
    assert families == _load([], doc={"metrics": {"exclude": GLOBS.split(",") + ["llm_exporter_*"]}}, tmp_path=tmp_path).metrics
    doc = json.loads(render("json", families))
    published = {m["name"]: m["published"] for m in doc["metrics"]}
    assert not published["llm_gpu_throttle_reason_active"] and not published["llm_gpu_energy_joules_total"]
    assert published["llm_gpu_power_watts"] and published["llm_exporter_source_up"]
    assert doc["filter"]["excluded"] == ["llm_gpu_throttle_reason_active", "llm_gpu_energy_joules_total"]
    md = render("markdown", families)
    assert md.startswith(render("markdown"))
    tail = md[len(render("markdown")) :]
    assert "## Left out of /metrics by this configuration" in tail and "| `llm_gpu_energy_joules_total` | hardware |" in tail


def test_schema_reads_the_environment_and_prints_the_warnings(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLM_EXPORTER_METRICS_INCLUDE", "llm_gpu_energy_joules_total,llm_nope")
    assert main(["schema", "--format", "json"]) == 0
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert [m["name"] for m in doc["metrics"] if m["published"] and m["layer"] != "exporter"] == ["llm_gpu_energy_joules_total"]
    assert out.err.splitlines() == [
        "llm-layer-exporter schema: warning: LLM_EXPORTER_METRICS_INCLUDE: 'llm_nope' matches no metric family of the schema (docs/metrics.md)"
    ]
    monkeypatch.setenv("LLM_EXPORTER_METRICS_INCLUDE", "a,,b")
    assert main(["schema"]) == 2
    assert "LLM_EXPORTER_METRICS_INCLUDE: an empty pattern" in capsys.readouterr().err
