"""Our own clients send W3C ``traceparent`` (exporter/tracing/traceparent.py): the canary probe's
completion and every load-generator request, one trace per request, a new parent per attempt."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from exporter.loadgen.client import issue
from exporter.loadgen.spec import LoadSpec
from exporter.probe.stream import probe_headers
from exporter.tracing.traceparent import new_trace_id, trace_id_of, traceparent


def test_headers_are_well_formed_and_never_repeat() -> None:
    ids = {new_trace_id() for _ in range(1000)}
    assert len(ids) == 1000
    header = traceparent(next(iter(ids)))
    assert trace_id_of(header) in ids and header.startswith("00-") and header.endswith("-01")
    for bad in ("00-" + "0" * 32 + "-" + "1" * 16 + "-01", "01-" + "a" * 32 + "-" + "b" * 16 + "-01", "garbage", "00-abc-def-01"):
        assert trace_id_of(bad) is None


def test_the_probe_traces_its_completion_only() -> None:
    assert trace_id_of(probe_headers(None)["traceparent"])
    assert probe_headers(None)["traceparent"] != probe_headers(None)["traceparent"]
    assert "traceparent" not in probe_headers(None, sse=False)  # GET /v1/models is not a request to follow


class Engine:
    """Answers /v1/completions with 503 ``fail`` times, then 200; keeps each request's traceparent."""

    def __init__(self, fail: int) -> None:
        self.fail = fail
        self.seen: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                owner.seen.append(self.headers.get("traceparent", ""))
                ok = len(owner.seen) > owner.fail
                body = json.dumps(
                    {"choices": [{"text": "ok", "finish_reason": "length"}], "usage": {"completion_tokens": 1}}
                ).encode()
                self.send_response(200 if ok else 503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def engine() -> Iterator[Engine]:
    e = Engine(fail=1)
    yield e
    e.server.shutdown()
    e.server.server_close()


def test_a_load_request_keeps_its_trace_across_retries(engine: Engine) -> None:
    spec = LoadSpec(base_url=engine.url, stream=False, retries=2, retry_backoff_s=0.0)

    async def go() -> object:
        async with httpx.AsyncClient(base_url=engine.url) as client:
            return await issue(client, spec, "m", 0, "hello", 5, 1, 0.0)

    record = asyncio.run(go())
    assert len(engine.seen) == 2  # a 503, then the answer
    traces = {trace_id_of(h) for h in engine.seen}
    assert traces == {record.trace_id}  # type: ignore[attr-defined]
    assert engine.seen[0] != engine.seen[1]  # a new parent span per attempt
