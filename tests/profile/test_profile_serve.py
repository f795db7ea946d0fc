"""``POST /profile`` end to end: a real ``serve`` on 127.0.0.1, a real HTTP engine with profiler
routes that writes its trace into the profile directory, the gauges in real exposition text."""

from __future__ import annotations

import argparse
import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml

from exporter.config import Config, add_serve_arguments, load_config
from exporter.errors import UsageError
from exporter.httpget import Client, Target
from exporter.profile.config import ProfileConfig
from exporter.profile.state import SOURCE_NAME as PROFILE_SOURCE
from exporter.report import Context, render_html, render_markdown
from exporter.report.operator import fetch_profiles
from exporter.schema import OPERATOR_KINDS
from tests.profile.profiling_engine import KERNEL_US, ProfilingEngine
from tests.reliability.rel_helpers import Serve

TOTAL_US = sum(KERNEL_US.values())


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Serve, ProfilingEngine]]:
    tmp = tmp_path_factory.mktemp("profile")
    traces = tmp / "traces"
    traces.mkdir()
    with ProfilingEngine(traces) as engine:
        config = {
            "engines": [
                {"url": engine.url, "name": "A", "interval": 0.5},  # type found by the scrape: vllm
                {"url": "http://127.0.0.1:9/metrics", "name": "L", "type": "llamacpp", "interval": 0.5},
                {"url": engine.url, "name": "B", "type": "vllm", "interval": 0.5},  # type as configured
                {"url": "http://127.0.0.1:9/metrics", "name": "D", "interval": 0.5},  # never scraped: type unknown
            ]
        }
        path = tmp / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        args = ["--config", str(path), "--gpu-source", "none", "--enable-profile", "--profile-dir", str(traces)]
        serve = Serve([*args, "--profile-max-trace-bytes", str(1024 * 1024)])
        try:
            serve.wait_metrics(lambda m: m.get("llm_engine_info", server="A") == 1, 30, "engine A scraped")
            yield serve, engine
        finally:
            serve.stop()


def post(serve: Serve, **params: str) -> requests.Response:
    return serve.session.post(serve.base + "/profile", params=params, timeout=60)


def test_a_profile_answers_the_split_and_publishes_it(stack: tuple[Serve, ProfilingEngine]) -> None:
    serve, engine = stack
    engine.mode = "gpu"
    r = post(serve, engine="A", seconds="0.5")
    assert r.status_code == 200, r.text
    body = r.json()
    assert engine.calls[-2:] == ["/start_profile", "/stop_profile"]
    assert body["engine"] == "A" and body["family"] == "vllm" and body["seconds"] == 0.5
    assert math.isclose(body["kernel_seconds"], TOTAL_US / 1e6, rel_tol=1e-9)
    assert body["kernels"] == 36 and body["basis"] == "gpu_kernels"
    assert math.isclose(sum(body["shares"].values()), 1.0, rel_tol=1e-9)
    assert body["shares"]["attention"] == pytest.approx(620 / TOTAL_US)
    assert body["top_kernels"]["communication"][0]["name"].startswith("ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
    assert body["trace_files"] == [f"fake-vllm_rank0.{engine.written}.pt.trace.json.gz"]

    m = serve.wait_metrics(
        lambda m: m.get("llm_operator_time_share", engine="A", kind="gemm") is not None, 15, "the shares in /metrics"
    )
    for kind in OPERATOR_KINDS:
        assert m.get("llm_operator_time_share", engine="A", kind=kind) == pytest.approx(KERNEL_US[kind] / TOTAL_US)
    assert m.get("llm_operator_profile_timestamp_seconds", engine="A") == pytest.approx(body["ended_at"])
    got = serve.session.get(serve.base + "/profile", params={"engine": "A"}, timeout=5)
    assert got.status_code == 200 and got.json() == body
    assert serve.session.get(serve.base + "/profile", timeout=5).json()["profiles"]["A"] == body

    # the report reads the same (GET /profile through its own client) and shows the split beside the verdict
    profiles = fetch_profiles(Client(Target(serve.base), "the exporter"), serve.base, 5.0)
    assert profiles == {"A": body}
    ctx = Context(exporter_url=serve.base, profiles=profiles)
    markdown = render_markdown({"state": "healthy"}, ctx)
    assert "## Operator profile (last POST /profile)" in markdown
    assert "| A | " in markdown and "| 62 % | 25 % | 6 % | 4 % | 2 % | 1 % |" in markdown
    html = render_html({"state": "healthy"}, ctx)
    assert '<table id="operator-shares">' in html and '<td class="value">62 %</td>' in html
    # ... and in one sentence: the largest kind at the prompt p50 the engine saw (its histogram did not
    # move during the profile here, so the median since it started, said so)
    assert body["prompt_tokens_p50"] > 0 and body["prompt_tokens_during_profile"] is False
    assert body["summary"].startswith("62 % attention at ") and body["summary"].endswith("(of GPU kernel time)")
    assert f"- A: {body['summary']}" in markdown
    assert '<p class="operator-split">A: 62 % attention at ' in html


def test_one_profile_at_a_time(stack: tuple[Serve, ProfilingEngine]) -> None:
    serve, engine = stack
    engine.mode = "gpu"
    engine.started.clear()
    engine.release.clear()  # the first profile's stop is held: it runs until the test lets it end
    first: dict[str, requests.Response] = {}
    worker = threading.Thread(target=lambda: first.setdefault("r", post(serve, engine="A", seconds="0.5")))
    worker.start()
    try:
        assert engine.started.wait(20), "the first profile never started"
        for other in ("A", "B"):  # the same engine, or another one: the traces share one directory
            second = post(serve, engine=other, seconds="1")
            assert second.status_code == 409, second.text
            assert "a profile of engine 'A' is running" in second.json()["error"]
        assert serve.session.get(serve.base + "/profile", timeout=5).json()["running"] == "A"
        assert serve.session.get(serve.base + "/metrics", timeout=5).status_code == 200
    finally:
        engine.release.set()
        worker.join(60)
    assert first["r"].status_code == 200, first["r"].text
    assert serve.session.get(serve.base + "/profile", timeout=5).json()["running"] is None


@pytest.mark.parametrize(
    ("params", "status", "says"),
    [
        ({"engine": "L"}, 422, "is llamacpp: llama.cpp's server has no profiler route"),
        ({"engine": "nope"}, 404, "unknown engine 'nope'"),
        ({"engine": "D"}, 503, "its type is not known yet (no successful scrape)"),
        ({}, 400, "name the engine"),
        ({"engine": "A", "seconds": "abc"}, 400, "seconds: expected a number"),
        ({"engine": "A", "seconds": "61"}, 400, "seconds: expected 0.5-60"),
        ({"engine": "A", "seconds": "nan"}, 400, "seconds: expected a number of seconds in ASCII digits"),
    ],
    ids=["llamacpp", "unknown", "type-unknown", "no-engine", "not-a-number", "too-long", "nan"],
)
def test_refusals_are_clear_and_touch_no_engine(
    stack: tuple[Serve, ProfilingEngine], params: dict[str, str], status: int, says: str
) -> None:
    serve, engine = stack
    calls = len(engine.calls)
    r = post(serve, **params)
    assert r.status_code == status, r.text
    assert says in r.json()["error"]
    assert len(engine.calls) == calls


@pytest.mark.parametrize(
    ("mode", "status", "says"),
    [
        ("garbled", 422, "trace refused: fake-vllm_rank0"),
        ("huge", 422, "over the 1048576 byte read cap"),
        ("empty", 200, "neither GPU kernels nor CPU operators in the trace"),
        ("none", 502, "wrote no trace file"),
    ],
)
def test_a_bad_or_empty_trace_is_a_clear_answer_and_serving_goes_on(
    stack: tuple[Serve, ProfilingEngine], mode: str, status: int, says: str
) -> None:
    serve, engine = stack
    # what engine A publishes once every earlier profile is out (a publisher cycle that began after them;
    # an earlier test's, on this worker, or none): a failed or empty profile must leave it as it is
    asked = time.time()
    published = serve.wait_metrics(
        lambda m: m.last_success(PROFILE_SOURCE) > asked, 30, "a profile publisher cycle after the earlier profiles"
    ).get("llm_operator_profile_timestamp_seconds", engine="A")
    engine.mode = mode
    try:
        r = post(serve, engine="A", seconds="0.5")
    finally:
        engine.mode = "gpu"
    assert r.status_code == status, r.text
    assert says in (r.json().get("message") or r.json().get("error"))
    assert engine.calls[-1] == "/stop_profile"  # a started profiler is always stopped
    # the last shares stay published; a failed or empty profile changes nothing (the module's tests may
    # run on several workers, each with its own serve: what was published before is read here, not assumed)
    assert serve.metrics(timeout=5).get("llm_operator_profile_timestamp_seconds", engine="A") == published


def test_a_cpu_engine_trace_is_split_by_its_cpu_operators_and_published(stack: tuple[Serve, ProfilingEngine]) -> None:
    """No GPU kernels (a CPU vLLM): the CPU operators' self time is the split, said by ``basis``.
    traces.cpu_trace: 50 back-to-back operators of 120 us over five names, two of them matmuls."""
    serve, engine = stack
    engine.mode = "cpu"
    try:
        r = post(serve, engine="B", seconds="0.5")
    finally:
        engine.mode = "gpu"
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["kernels"] == 0 and body["basis"] == "cpu_ops" and "message" not in body
    assert body["cpu_ops"] == 50 and math.isclose(body["cpu_op_seconds"], 50 * 120 / 1e6, rel_tol=1e-9)
    want = {"gemm": 0.4, "attention": 0.2, "memory_copy": 0.2, "sampling": 0.2, "communication": 0.0, "other": 0.0}
    assert body["shares"] == pytest.approx(want) and body["cpu_op_shares"] == body["shares"]
    m = serve.wait_metrics(
        lambda m: m.get("llm_operator_profile_timestamp_seconds", engine="B") == pytest.approx(body["ended_at"]),
        15,
        "engine B's CPU split in /metrics",
    )
    for kind, share in want.items():
        assert m.get("llm_operator_time_share", engine="B", kind=kind) == pytest.approx(share)


def test_an_engine_without_profiler_routes_is_told_how_to_start_it(stack: tuple[Serve, ProfilingEngine]) -> None:
    serve, engine = stack
    engine.routes = False
    try:
        r = post(serve, engine="A", seconds="0.5")
    finally:
        engine.routes = True
    assert r.status_code == 422
    assert "the engine serves no profiler route" in r.json()["error"] and "torch_profiler_dir" in r.json()["error"]


def test_profiling_is_off_by_default(tmp_path: Path) -> None:
    with ProfilingEngine(tmp_path) as engine:
        serve = Serve(["--gpu-source", "none", "--engine", engine.url])
        try:
            for method in (serve.session.post, serve.session.get):
                r = method(serve.base + "/profile", params={"engine": engine.url}, timeout=5)
                assert r.status_code == 404
                assert "the on-demand profile is off: start serve with --enable-profile" in r.json()["error"]
            assert engine.calls == []
            assert fetch_profiles(Client(Target(serve.base), "the exporter"), serve.base, 5.0) == {}
        finally:
            serve.stop()


def _load(argv: list[str], env: dict[str, str] | None = None) -> Config:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return load_config(parser.parse_args(argv), env or {})


def _settings(argv: list[str], env: dict[str, str] | None = None) -> ProfileConfig:
    profile = _load(argv, env).profile
    assert profile is not None  # load_config always sets it
    return profile


def test_the_settings_are_checked_at_start(tmp_path: Path) -> None:
    assert _settings([]).enabled is False
    with pytest.raises(UsageError, match="--enable-profile: needs --profile-dir"):
        _load(["--enable-profile"])
    with pytest.raises(UsageError, match="--profile-dir: expected an absolute path"):
        _load(["--enable-profile", "--profile-dir", "rel/dir"])
    with pytest.raises(UsageError, match="is not a readable directory"):
        _load(["--enable-profile", "--profile-dir", str(tmp_path / "missing")])
    with pytest.raises(UsageError, match="--profile-max-trace-bytes: expected a whole number"):
        _load(["--profile-max-trace-bytes", "lots"])
    on = _settings([], {"LLM_EXPORTER_ENABLE_PROFILE": "true", "LLM_EXPORTER_PROFILE_DIR": str(tmp_path)})
    assert on.enabled and on.directory == str(tmp_path)


def test_the_live_page_shows_the_last_split(stack: tuple[Serve, ProfilingEngine], tmp_path: Path) -> None:
    """Headless Chromium renders / : the page's JavaScript built the shares table from GET /profile."""
    from tests.support.browser import run_chromium

    serve, engine = stack
    engine.mode = "gpu"
    assert post(serve, engine="A", seconds="0.5").status_code == 200
    result = run_chromium(["--virtual-time-budget=5000", "--dump-dom", serve.base + "/"], tmp_path / "chromium")
    dom = result.stdout
    assert result.returncode == 0, result.stderr[-2000:]
    assert '<section id="operator-profile" aria-label="operator profile">' in dom, dom[-3000:]  # no longer hidden
    assert '<tr data-engine="A">' in dom
    assert '<td data-kind="attention">62 %</td>' in dom and '<td data-kind="gemm">25 %</td>' in dom
    assert '<p class="split" id="operator-split">' in dom and "62 % attention at " in dom  # beside the verdict
    served = serve.session.get(serve.base + "/", timeout=5).text
    assert (
        '<tr data-engine="A">' not in served and '<section id="operator-profile" aria-label="operator profile" hidden>' in served
    )
