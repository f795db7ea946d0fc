"""A live `serve` against a hostile local engine: no credentials out, slow bodies marked down in time.

One exporter subprocess scrapes one engine given as ``http://user:password@…``.
The engine (a raw socket server) answers healthy, then trickles its body in
each framing (Content-Length, chunked, connection-close) at 20 bytes/s. For
each: the source reads down with reason ``timeout``, the failed attempt took
at most timeout + 1 s (``llm_exporter_source_duration_seconds``), and the
source recovers on its own once the engine is healthy. Throughout, the
password is in no page (/metrics, /diagnosis, /) and no log line, and the
engine received it only as basic auth.
"""

from __future__ import annotations

import base64
import socket
import time
from collections.abc import Iterator

import pytest
import requests

from tests.engines.engine_helpers import fixture
from tests.reliability.rel_helpers import Metrics, Serve
from tests.support.fake_engine import RawServer, trickle, whole

VLLM = fixture("vllm-0.33-v1-2dp.prom").encode()
USER, PASSWORD = "scraper", "Pa55-w0rd-hunter2"
INTERVAL, TIMEOUT = 1.0, 0.5
WAIT = 20.0  # bound on every wait (a busy CI machine)


class Engine:
    """A RawServer whose answer follows ``mode``: ``healthy`` or ``trickle:<framing>``."""

    def __init__(self) -> None:
        self.mode = "healthy"
        self.server = RawServer(self._handle)

    def _handle(self, conn: socket.socket, srv: RawServer) -> None:
        if self.mode == "healthy":
            whole("content-length", VLLM)(conn, srv)
        else:
            trickle(self.mode.split(":", 1)[1], VLLM, gap=0.05)(conn, srv)


@pytest.fixture(scope="module")
def rig() -> Iterator[tuple[Serve, Engine, str]]:
    engine = Engine()
    with engine.server as srv:
        url = srv.url.replace("http://", f"http://{USER}:{PASSWORD}@")
        args = ["--engine", url, "--gpu-source", "none", "--engine-interval", str(INTERVAL), "--engine-timeout", str(TIMEOUT)]
        with Serve(args) as serve:
            source = f"engine:127.0.0.1:{srv.port}"
            serve.wait_metrics(lambda m: m.up(source) == 1, WAIT, "the engine source up")
            yield serve, engine, source
            serve.check_clean()


def test_credentials_reach_only_the_authorization_header(rig: tuple[Serve, Engine, str]) -> None:
    serve, engine, source = rig
    pages = [serve.session.get(serve.base + path, timeout=5) for path in ("/metrics", "/diagnosis", "/")]
    assert [p.status_code for p in pages] == [200, 200, 200]
    m = Metrics(pages[0].text)
    assert m.find("llm_engine_info", server=source.removeprefix("engine:"))
    log = serve.log_path.read_text(errors="replace")
    for text in [*(p.text for p in pages), log]:
        assert PASSWORD not in text and f"{USER}:" not in text and f"{USER}@" not in text
    expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert all(f"Authorization: {expected}".encode() in head for head in engine.server.requests)


@pytest.mark.parametrize("framing", ["content-length", "chunked", "close"])
def test_a_trickled_body_is_marked_down_in_time_and_recovers(rig: tuple[Serve, Engine, str], framing: str) -> None:
    serve, engine, source = rig
    before = serve.metrics(timeout=2).errors(source, "timeout")
    engine.mode = f"trickle:{framing}"
    t0 = time.monotonic()
    m = serve.wait_metrics(lambda m: m.up(source) == 0 and m.errors(source, "timeout") > before, WAIT, f"{source} down (timeout)")
    detected = time.monotonic() - t0
    duration = m.get("llm_exporter_source_duration_seconds", source=source)
    engine.mode = "healthy"
    t1 = time.monotonic()
    serve.wait_metrics(lambda m: m.up(source) == 1, WAIT, f"{source} recovered")
    recovered = time.monotonic() - t1
    assert duration is not None and duration <= TIMEOUT + 1.0, f"the failed attempt took {duration:.2f}s"
    # the next attempt starts within one interval, and it fails within timeout + 1 s; 1.5 s of polling slack
    assert detected <= INTERVAL + TIMEOUT + 1.0 + 1.5, f"{framing}: marked down after {detected:.1f}s"
    assert recovered <= 2 * INTERVAL + TIMEOUT + 1.5, f"{framing}: recovered after {recovered:.1f}s"
    assert not requests.get(serve.base + "/metrics", timeout=2).text.count(PASSWORD)
