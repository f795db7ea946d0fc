"""``--otlp-forward``: the received spans re-exported with the verdict added (exporter/tracing/forward.py),
to a real OTLP/HTTP test receiver on 127.0.0.1."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from exporter.tracing.forward import SpanForwarder, parse_forward_url
from exporter.tracing.history import Moment, VerdictHistory
from exporter.tracing.log import RequestLog
from exporter.tracing.normalize import SpanNormalizer, TraceEngine, TraceRouting
from tests.support.waiting import wait_until
from tests.tracing.spans import export, make_span, merge, span_hex, trace_hex, vllm_request_span

T0 = 1_790_000_000.0


class Backend:
    """An OTLP/HTTP endpoint that keeps what it is sent (``status`` answers every POST)."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.got: list[ExportTraceServiceRequest] = []
        self.release = threading.Event()
        self.release.set()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                owner.release.wait(10)
                message = ExportTraceServiceRequest()
                message.ParseFromString(body)
                owner.got.append(message)
                self.send_response(owner.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def backend() -> Iterator[Backend]:
    b = Backend()
    yield b
    b.close()


def _log(forwarder: SpanForwarder) -> RequestLog:
    history = VerdictHistory()
    history.record({})  # nothing yet
    log = RequestLog(SpanNormalizer(TraceRouting([TraceEngine("vllm", "vllm")])), history, forwarder=forwarder)
    ring = history._engines.setdefault("vllm", __import__("collections").deque())  # noqa: SLF001
    for t in range(10):
        ring.append(
            Moment(T0 + t, "degraded", ("memory", "kv_cache_pressure"), "", {"kv_cache_usage": 1.0, "requests_waiting": 9.0})
        )
    return log


def _attributes(message: ExportTraceServiceRequest) -> dict[str, dict[str, str]]:
    return {
        span.name: {kv.key: kv.value.string_value for kv in span.attributes if kv.key.startswith("llm.")}
        for rs in message.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    }


def test_request_spans_reach_the_backend_with_their_bottleneck(backend: Backend) -> None:
    forwarder = SpanForwarder(backend.url)
    assert forwarder.url == backend.url + "/v1/traces"
    forwarder.start()
    try:
        log = _log(forwarder)
        request = vllm_request_span(trace_hex(1), T0 + 1, 2.0, 0.2, 0.5, 2.2, 2.7, 100, 10, "r1")
        other = export([make_span(trace_hex(1), span_hex(trace_hex(1), "proxy"), "proxy", T0 + 0.9, T0 + 3.8)], "gateway")
        log.consume(merge(request, other))
        wait_until(lambda: backend.got, 10, "the forwarded export")
    finally:
        forwarder.stop()
    attrs = _attributes(backend.got[0])
    assert attrs["llm_request"]["llm.bottleneck.layer"] == "memory"
    assert attrs["llm_request"]["llm.bottleneck.cause"] == "kv_cache_pressure"
    assert attrs["llm_request"]["llm.bottleneck.sentence"].startswith("TTFT 2.2 s")
    assert attrs["proxy"] == {}  # another service's span goes on as it came
    assert {p.labels["outcome"]: p.value for p in forwarder.points()} == {"sent": 2.0, "failed": 0.0, "dropped": 0.0}


def test_a_failing_or_slow_backend_costs_counted_spans_never_the_receiver() -> None:
    failing = Backend(status=503)
    forwarder = SpanForwarder(failing.url, max_queue=2, timeout=5.0)
    forwarder.start()
    try:
        log = _log(forwarder)
        failing.release.clear()  # the backend holds the first export: the queue fills behind it
        for n in range(6):
            log.consume(vllm_request_span(trace_hex(n), T0 + 1, 0.1, 0.1, 0.1, 0.2, 0.3, 10, 5, f"r{n}"))
        counts = {p.labels["outcome"]: p.value for p in forwarder.points()}
        assert counts["dropped"] >= 3  # one in flight, two queued, the rest dropped
        failing.release.set()
        wait_until(lambda: sum(p.value for p in forwarder.points()) == 6, 10, "every span counted")
    finally:
        forwarder.stop()
        failing.close()
    counts = {p.labels["outcome"]: p.value for p in forwarder.points()}
    assert counts["sent"] == 0 and counts["failed"] + counts["dropped"] == 6


def test_forward_urls_are_checked() -> None:
    assert parse_forward_url("https://collector:4318") == "https://collector:4318/v1/traces"
    assert parse_forward_url("http://c:4318/custom/path") == "http://c:4318/custom/path"
    for bad in ("collector:4318", "ftp://c", "http://u:p@c:4318", "http://c:99999"):
        with pytest.raises(ValueError):
            parse_forward_url(bad)


def test_the_collector_example_sends_engine_spans_to_the_exporter_and_annotated_ones_to_the_backend() -> None:
    """deploy/otel-collector/config.yaml, read as the collector reads its pipelines: every receiver
    and exporter a pipeline names is defined, engine spans reach the exporter's OTLP/gRPC receiver,
    and the exporter's forwarded spans reach only the backend (no loop back into the exporter)."""
    from pathlib import Path

    import yaml

    doc = yaml.safe_load((Path(__file__).resolve().parents[2] / "deploy" / "otel-collector" / "config.yaml").read_text())
    pipelines = doc["service"]["pipelines"]
    for p in pipelines.values():
        assert set(p["receivers"]) <= set(doc["receivers"]) and set(p["exporters"]) <= set(doc["exporters"])
    to_exporter = [n for n, p in pipelines.items() if "otlp/llm-layer-exporter" in p["exporters"]]
    assert to_exporter == ["traces/engines"] and pipelines["traces/engines"]["receivers"] == ["otlp"]
    annotated = pipelines["traces/annotated"]
    assert annotated["exporters"] == ["otlp/backend"]
    assert doc["receivers"][annotated["receivers"][0]]["protocols"]["http"]["endpoint"].endswith(":4318")
    assert parse_forward_url("http://otel-collector:4318") == "http://otel-collector:4318/v1/traces"
