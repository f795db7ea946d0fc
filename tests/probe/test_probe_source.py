"""``ProbeSource`` with a real local streaming server and a store: what it publishes and promises.

Proven here:
* every series carries the engine's labels; every result value is published from
  the first sample (rates work), the probe's own tokens are counted (from usage, or
  the chunks), histograms are cumulative;
* never two probes in flight per engine: concurrent ``sample()`` calls send one
  request, and a runner loop whose probes outlast the interval never overlaps them;
* the probe respects its timeout (the whole sample ends by it when there is no engine
  scrape to wait for);
* an engine without the OpenAI routes gives ``result="http_error"`` and one log
  line, nothing more (no outside-engine or frozen gauge, the source stays up);
* time outside the engine = probe TTFT minus the engine's own: its reported prefill
  when the stream carries it, else its TTFT histogram between the scrapes around the probe;
* a timed-out probe while the engine's counters stand still is ``frozen``; while they
  move it is not;
* credentials go to the engine's own origin only; none reaches a log line or a label.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.engines.config import EngineConfig
from exporter.engines.source import EngineSource
from exporter.probe.config import ProbeConfig
from exporter.probe.source import ProbeSource, engine_server
from exporter.runner import RunnerGroup, SourceRunner
from exporter.samples import HistogramSample, Point, Sample, SampleResult
from exporter.store import SnapshotStore
from tests.probe.probe_http import Behaviour, ProbeHTTPServer

LABELS = {"server": "fake", "engine": "vllm", "model": "tiny-model", "rank": ""}
ENGINE_TTFT = 0.05


class FakeEngine:
    """The engine source of ``fake`` as the store sees it: engine info, progress counters and a TTFT
    histogram that gains one 50 ms observation per completion the server finished (``frozen``: never)."""

    name = "engine:fake"
    interval = 0.1
    timeout = 0.5

    def __init__(self, server: ProbeHTTPServer, frozen: bool = False) -> None:
        self.server = server
        self.frozen = frozen
        self.n = 0
        self.ticks = 0

    def sample(self) -> SampleResult:
        if not self.frozen:
            self.n = self.server.record.served
            self.ticks += 1
        labels = {"server": "fake", "engine": "vllm", "model": "tiny-model", "rank": ""}
        inf = float("inf")
        return SampleResult(
            [
                Sample("llm_engine_info", {"server": "fake", "engine": "vllm", "model": "tiny-model", "generation": "v1"}, 1.0),
                Sample("llm_generation_tokens_total", labels, float(self.ticks)),  # moves on every scrape of a live engine
                HistogramSample(
                    "llm_request_ttft_seconds",
                    labels,
                    ((0.1, float(self.n)), (inf, float(self.n))),
                    ENGINE_TTFT * self.n,
                    float(self.n),
                ),
            ]
        )

    def close(self) -> None:
        pass


def engine_cfg(server: ProbeHTTPServer, **probe: Any) -> EngineConfig:
    settings: dict[str, Any] = {"interval": 1.0, "timeout": 0.8, **probe}
    return EngineConfig(
        url=server.url + "/metrics", name="fake", type="auto", interval=0.1, timeout=0.09, probe=ProbeConfig(**settings)
    )


def points(result: SampleResult) -> dict[str, list[Point]]:
    out: dict[str, list[Point]] = {}
    for p in result.points:
        out.setdefault(p.name, []).append(p)
    return out


def value(res: SampleResult, name: str, **labels: str) -> float:
    (p,) = [p for p in res.points if p.name == name and all(p.labels.get(k) == v for k, v in labels.items())]
    return p.value if isinstance(p, Sample) else p.count


@pytest.fixture()
def live_engine() -> Iterator[tuple[ProbeHTTPServer, SnapshotStore, FakeEngine]]:
    """A fake server, its engine source running in the store, and a way to build the probe."""
    with ProbeHTTPServer(Behaviour(tokens=4, gap=0.002)) as server:
        store = SnapshotStore()
        fake = FakeEngine(server)
        runner = SourceRunner(fake, store)
        runner.start()
        try:
            yield server, store, fake
        finally:
            runner.stop()


def test_publishes_engine_labels_every_result_tokens_and_the_time_outside(
    live_engine: tuple[ProbeHTTPServer, SnapshotStore, FakeEngine],
) -> None:
    server, store, _ = live_engine
    src = ProbeSource(engine_cfg(server), store)
    for _ in range(3):
        result = src.sample()
    by = points(result)
    assert {p.labels["result"] for p in by["llm_probe_requests_total"]} == {
        "ok",
        "timeout",
        "http_error",
        "bad_stream",
        "refused",
    }
    for p in result.points:
        assert {k: p.labels[k] for k in LABELS} == LABELS, p
    assert value(result, "llm_probe_requests_total", result="ok") == 3
    assert value(result, "llm_probe_requests_total", result="timeout") == 0
    assert value(result, "llm_probe_tokens_total", kind="prompt") == 15  # usage.prompt_tokens 5 per probe
    assert value(result, "llm_probe_tokens_total", kind="generation") == 12
    assert value(result, "llm_probe_ttft_seconds") == 3
    assert value(result, "llm_probe_inter_token_seconds") == 9  # 3 gaps per probe
    assert value(result, "llm_probe_last_result", result="ok") == 1
    assert value(result, "llm_probe_last_result", result="timeout") == 0
    assert value(result, "llm_probe_engine_frozen") == 0
    # the engine's TTFT for the window is its histogram's mean over the scrapes around the probe
    assert src.last_method == "histogram"
    assert value(result, "llm_probe_engine_ttft_seconds") == pytest.approx(ENGINE_TTFT)
    assert src.last is not None and src.last.ttft is not None
    assert value(result, "llm_probe_outside_engine_seconds") == pytest.approx(src.last.ttft - ENGINE_TTFT)
    ttft = by["llm_probe_ttft_seconds"][0]
    assert isinstance(ttft, HistogramSample)
    assert [c for _, c in ttft.buckets] == sorted(c for _, c in ttft.buckets) and ttft.buckets[-1][1] == 3


def test_engine_reported_prefill_time_comes_first() -> None:
    with ProbeHTTPServer(Behaviour(prompt_ms=3.0)) as server:
        src = ProbeSource(engine_cfg(server), SnapshotStore())
        result = src.sample()
    assert src.last_method == "engine_reported"
    assert value(result, "llm_probe_engine_ttft_seconds") == pytest.approx(0.003)
    assert src.last is not None and src.last.ttft is not None
    assert value(result, "llm_probe_outside_engine_seconds") == pytest.approx(src.last.ttft - 0.003)


def test_concurrent_samples_never_send_two_probes() -> None:
    with ProbeHTTPServer(Behaviour(first_delay=0.4)) as server:
        src = ProbeSource(engine_cfg(server), SnapshotStore())
        threads = [threading.Thread(target=src.sample) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(5)
        assert len(server.completions()) == 1
        assert server.record.max_in_flight == 1
        assert sum(src.results.values()) == 1


def test_a_runner_whose_probes_outlast_the_interval_never_overlaps_them() -> None:
    with ProbeHTTPServer(Behaviour(first_delay=0.35)) as server:
        store = SnapshotStore()
        src = ProbeSource(engine_cfg(server, interval=0.2, timeout=0.15 + 0.5), store)  # each probe ~0.35 s > interval
        group = RunnerGroup(store)
        group.add(src)
        group.start()
        deadline = time.monotonic() + 10
        while len(server.completions()) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        group.stop()
        assert len(server.completions()) >= 4
        assert server.record.max_in_flight == 1


def test_the_probe_respects_its_timeout() -> None:
    with ProbeHTTPServer(Behaviour(mode="stall")) as server:
        src = ProbeSource(engine_cfg(server, timeout=0.6), SnapshotStore())
        t0 = time.monotonic()
        result = src.sample()
        took = time.monotonic() - t0
    assert value(result, "llm_probe_requests_total", result="timeout") == 1
    assert 0.55 <= took < 0.6 + 0.5
    assert src.timeout > 0.6  # the runner's bound leaves room for the probe and the engine-scrape wait


@pytest.mark.parametrize("missing", ["models", "completions"])
def test_an_engine_without_openai_routes_is_http_error_and_one_log_line(missing: str, caplog: pytest.LogCaptureFixture) -> None:
    behaviour = Behaviour(models_status=404) if missing == "models" else Behaviour(status=404)
    with ProbeHTTPServer(behaviour) as server:
        store = SnapshotStore()
        src = ProbeSource(engine_cfg(server), store)
        with caplog.at_level(logging.DEBUG, logger="exporter.probe"):
            results = [src.sample() for _ in range(3)]
    result = results[-1]
    assert value(result, "llm_probe_requests_total", result="http_error") == 3
    assert value(result, "llm_probe_last_result", result="http_error") == 1
    lines = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert len(lines) == 1 and "http_error" in lines[0].getMessage() and "404" in lines[0].getMessage()
    names = {p.name for p in result.points}
    assert not names & {"llm_probe_outside_engine_seconds", "llm_probe_engine_ttft_seconds", "llm_probe_engine_frozen"}
    assert value(result, "llm_probe_ttft_seconds") == 0
    # the model is looked up again after an error, but the label does not churn meanwhile
    models = {p.labels["model"] for r in results for p in r.points}
    assert models == ({""} if missing == "models" else {"tiny-model"})


@pytest.mark.parametrize("frozen", [True, False])
def test_a_timeout_while_the_engine_counters_stand_still_is_frozen(frozen: bool) -> None:
    with ProbeHTTPServer(Behaviour(first_delay=5.0)) as server:
        store = SnapshotStore()
        fake = FakeEngine(server, frozen=frozen)
        runner = SourceRunner(fake, store)
        runner.start()
        try:
            time.sleep(0.3)  # a few scrapes before the probe
            src = ProbeSource(engine_cfg(server, timeout=0.6), store)
            result = src.sample()
        finally:
            runner.stop()
    assert value(result, "llm_probe_last_result", result="timeout") == 1
    assert value(result, "llm_probe_engine_frozen") == (1.0 if frozen else 0.0)


def test_credentials_go_to_the_engine_origin_only_and_never_to_logs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    token = tmp_path / "token"
    token.write_text("engine-secret-token\n")
    other_token = tmp_path / "probe-token"
    other_token.write_text("gateway-secret-token\n")
    with ProbeHTTPServer(Behaviour(status=401)) as engine, ProbeHTTPServer() as gateway:
        cfg = engine_cfg(engine)
        cfg.bearer_token_file = str(token)
        with caplog.at_level(logging.DEBUG, logger="exporter.probe"):
            same = ProbeSource(cfg, SnapshotStore()).sample()
            cfg.probe = ProbeConfig(interval=1.0, timeout=0.8, url=gateway.url)
            ProbeSource(cfg, SnapshotStore()).sample()
            cfg.probe = ProbeConfig(interval=1.0, timeout=0.8, url=gateway.url, bearer_token_file=str(other_token))
            ProbeSource(cfg, SnapshotStore()).sample()
        sent_engine = [{k.lower(): v for k, v in r["headers"].items()} for r in engine.record.requests]
        sent_gateway = [{k.lower(): v for k, v in r["headers"].items()} for r in gateway.record.requests]
    assert all(h.get("authorization") == "Bearer engine-secret-token" for h in sent_engine)
    first_gateway = [h for h in sent_gateway[: len(sent_gateway) // 2]]
    assert first_gateway and all("authorization" not in h for h in first_gateway)
    assert sent_gateway[-1]["authorization"] == "Bearer gateway-secret-token"
    assert value(same, "llm_probe_requests_total", result="http_error") == 1
    text = " ".join(r.getMessage() for r in caplog.records)
    assert "secret" not in text
    assert not any("secret" in v for p in same.points for v in p.labels.values())


def test_server_label_is_the_engine_sources_even_with_user_info_in_the_url() -> None:
    cfg = EngineConfig(
        url="http://user:hunter2pass@127.0.0.1:9/metrics", name="user:hunter2pass@127.0.0.1:9", probe=ProbeConfig()
    )
    assert engine_server(cfg) == EngineSource(cfg).server == "127.0.0.1:9"
    src = ProbeSource(cfg, SnapshotStore())
    assert src.name == "probe:127.0.0.1:9" and "hunter2" not in src.url + src.describe()
