"""Spans in, explained requests out: the request log, ``GET /requests``, the OpenMetrics exemplars
and the ``requests`` command (exporter/tracing/log.py, api.py; exporter/commands/requests.py)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from exporter.collector import _FamiliesCollector, families_from_points, generate_latest_openmetrics
from exporter.commands.requests import render
from exporter.tracing.api import build_router
from exporter.tracing.history import Moment, VerdictHistory
from exporter.tracing.log import RequestLog
from exporter.tracing.normalize import SpanNormalizer, TraceEngine, TraceRouting
from tests.tracing.spans import trace_hex, vllm_request_span

T0 = 1_790_000_000.0  # 2026-09: spans carry Unix times, in the past
KV = {"kv_cache_usage": 1.0, "requests_waiting": 44.0, "preemptions_per_second": 10.0}


def _log() -> RequestLog:
    history = VerdictHistory()
    log = RequestLog(SpanNormalizer(TraceRouting([TraceEngine("vllm", "vllm")])), history)
    # a KV-starved stretch from T0 + 1000 s to T0 + 1010 s, then healthy
    for t in range(1000, 1020):
        primary = ("memory", "kv_cache_pressure") if t < 1010 else None
        history._engines.setdefault("vllm", __import__("collections").deque()).append(  # noqa: SLF001
            Moment(T0 + t, "degraded" if primary else "healthy", primary, "", KV if primary else {"kv_cache_usage": 0.2})
        )
    return log


def _span(n: int, start: float, queue: float, prefill: float, decode: float) -> ExportTraceServiceRequest:
    ttft = queue + prefill
    return vllm_request_span(trace_hex(n), start, queue, prefill, decode, ttft, ttft + decode, 2000, 40, f"req-{n}")


@pytest.fixture
def log() -> RequestLog:
    log = _log()
    log.consume(_span(1, T0 + 1001.0, 2.1, 0.3, 1.0))  # waited in the KV-starved stretch
    log.consume(_span(2, T0 + 1012.0, 0.0, 0.05, 0.4))  # a quick one after it
    return log


@pytest.fixture
def client(log: RequestLog) -> Iterator[TestClient]:
    app = FastAPI()
    app.include_router(build_router(log, receiving=True))
    with TestClient(app) as c:
        yield c


def test_a_request_that_lived_through_kv_pressure_is_explained_by_it(client: TestClient) -> None:
    body = client.get("/requests", params={"slowest": "1"}).json()
    (slow,) = body["requests"]
    assert slow["trace_id"] == trace_hex(1) and slow["engine"] == "vllm" and slow["request_id"] == "req-1"
    assert slow["primary"] == {"layer": "memory", "cause": "kv_cache_pressure"}
    assert slow["queue_seconds"] == pytest.approx(2.1) and slow["ttft_seconds"] == pytest.approx(2.4)
    assert slow["sentence"].startswith("TTFT 2.4 s of 3.4 s: 2.1 s in the queue")
    assert "the KV cache was 100 % full with 44 waiting and 10.0 preemptions/s -> memory/kv_cache_pressure" in slow["sentence"]
    assert body["held"] == 2 and body["engines"] == ["vllm"] and body["receiving"] is True
    quick = client.get("/requests", params={"trace_id": trace_hex(2).upper()}).json()["requests"]
    assert [r["primary"] for r in quick] == [None]


def test_bad_parameters_are_a_400_with_the_reason(client: TestClient) -> None:
    for params in ({"slowest": "0"}, {"slowest": "1001"}, {"slowest": "x"}, {"trace_id": "abc"}, {"engine": "e" * 201}):
        answer = client.get("/requests", params=params)
        assert answer.status_code == 400, params
        assert answer.json()["error"].split(":")[0] in params, answer.json()
    assert client.get("/requests", params={"trace_id": "0" * 31 + "1"}).json()["requests"] == []


def test_phase_histograms_carry_exemplars_with_the_trace_id(log: RequestLog) -> None:
    text = generate_latest_openmetrics(_FamiliesCollector(families_from_points(log.points()))).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}  # type: ignore[no-untyped-call]
    queue = [s for s in families["llm_traced_request_seconds"].samples if s.labels.get("phase") == "queue"]
    buckets = {s.labels["le"]: s for s in queue if s.name.endswith("_bucket")}
    assert buckets["2.5"].exemplar is not None and buckets["2.5"].exemplar.labels == {"trace_id": trace_hex(1)}
    assert buckets["2.5"].value == 2.0  # 0.0 s and 2.1 s
    by_cause = {
        (s.labels["layer"], s.labels["cause"]): s.value
        for s in families["llm_traced_requests"].samples
        if s.name.endswith("_total")
    }
    assert by_cause == {("memory", "kv_cache_pressure"): 1.0, ("", ""): 1.0}


def test_the_command_prints_each_request_and_its_sentence(client: TestClient) -> None:
    out = io.StringIO()
    render(client.get("/requests", params={"slowest": "2"}).json(), out)
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:3] == ["engine", "trace_id", "ttft_s"]
    assert lines[1].split()[0] == "vllm" and lines[1].split()[1] == trace_hex(1) and lines[1].endswith("memory/kv_cache_pressure")
    assert lines[2].strip().startswith("TTFT 2.4 s")
    empty = io.StringIO()
    render({"requests": [], "receiving": False}, empty)
    assert "no OTLP receiver" in empty.getvalue()
    json.dumps(client.get("/requests").json())  # the sample, newest first: plain JSON


def test_a_request_shorter_than_a_cycle_is_told_the_cycle_in_force_when_it_arrived() -> None:
    """Cycles every second (T0 + 1000 ... 1019); a 0.2 s request received before the cycle after it ends
    finds no cycle over its life: it is told the latest one before its arrival, at most a cycle old."""
    log = _log()
    log.history._engines["vllm"].pop()  # noqa: SLF001  the cycle at T0 + 1019 has not run yet
    log.consume(_span(3, T0 + 1018.4, 0.0, 0.01, 0.19))  # lives 1018.4-1018.6: no cycle until 1019.6
    quiet = _by_trace(log, trace_hex(3))
    assert quiet["primary"] is None and "no diagnosis cycle recorded" not in str(quiet["sentence"])
    # the same inside the KV-starved stretch, with the cycles after it not yet run: told the starved one
    ring = log.history._engines["vllm"]  # noqa: SLF001
    while ring[-1].timestamp > T0 + 1005:  # cycles up to T0 + 1005 held
        ring.pop()
    log.consume(_span(4, T0 + 1005.5, 0.0, 0.01, 0.19))
    assert _by_trace(log, trace_hex(4))["primary"] == {"layer": "memory", "cause": "kv_cache_pressure"}
    # older than a cycle before its arrival is not "in force": a request after a gap in the history finds none
    log.consume(_span(5, T0 + 1030.0, 0.0, 0.01, 0.19))
    assert str(_by_trace(log, trace_hex(5))["sentence"]).endswith("no diagnosis cycle recorded while it lived")


def _by_trace(log: RequestLog, trace_id: str) -> dict[str, object]:
    found: dict[str, object] = log.query(trace_id=trace_id)[0]
    return found
