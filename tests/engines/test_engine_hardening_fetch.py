"""The engine fetch path against hostile local HTTP servers: one deadline, framings, redirects.

Every server here is a real socket on 127.0.0.1 (``RawServer``, tests/support/fake_engine.py) whose handler
writes the response by hand, so the framing (Content-Length, chunked, ended by
closing the connection), the pace (a byte at a time) and the redirects are
exactly what a misbehaving engine could send. Every wait is bounded by the
server's stop event; every server stops itself on leaving its ``with`` block.
"""

from __future__ import annotations

import gzip
import socket
import time

import pytest

from exporter.engines.config import EngineConfig
from exporter.engines.source import EngineSource
from exporter.samples import Sample, SourceError
from tests.engines.engine_helpers import fixture
from tests.support.fake_engine import RawServer, head_for, redirect, trickle, whole

VLLM = fixture("vllm-0.33-v1-2dp.prom").encode()
TIMEOUT = 0.6
#: the promised bound (docs/engine-hardening.md): a slow engine fails within timeout + 1 s. It stays in the gate under
#: issue 31's rule for promised bounds: the overrun measured under the whole suite on 2 busy cores is
#: tens of milliseconds, far below half of this slack
SLACK = 1.0
FRAMINGS = ("content-length", "chunked", "close")


def make_source(url: str, **overrides: object) -> EngineSource:
    cfg = EngineConfig(url=url, name="eng1", timeout=TIMEOUT, interval=5.0)
    for key, val in overrides.items():
        setattr(cfg, key, val)
    return EngineSource(cfg)


def failure(source: EngineSource) -> tuple[SourceError, float]:
    t0 = time.monotonic()
    with pytest.raises(SourceError) as caught:
        source.sample()
    return caught.value, time.monotonic() - t0


# --------------------------------------------------------------------------- one deadline for the whole response


@pytest.mark.parametrize("framing", FRAMINGS)
def test_a_body_trickled_a_byte_at_a_time_fails_within_timeout_plus_one_second(framing: str) -> None:
    # 20 bytes/s: every read returns quickly, so only a deadline on the whole response stops it
    with RawServer(trickle(framing, VLLM, gap=0.05)) as srv:
        err, took = failure(make_source(srv.url))
    assert err.reason == "timeout", err
    assert TIMEOUT - 0.05 <= took <= TIMEOUT + SLACK, took
    assert "during the body" in err.message
    assert srv.sent < 200  # the trickle was cut off, not waited out


def test_headers_trickled_a_byte_at_a_time_fail_within_timeout_plus_one_second() -> None:
    head = head_for("content-length", len(VLLM))

    def handle(conn: socket.socket, srv: RawServer) -> None:
        for i in range(len(head)):
            srv.send(conn, head[i : i + 1])
            if srv.stopping.wait(0.05):
                return

    with RawServer(handle) as srv:
        err, took = failure(make_source(srv.url))
    assert err.reason == "timeout" and "during the response headers" in err.message
    assert took <= TIMEOUT + SLACK


def test_a_server_that_accepts_and_never_answers_fails_within_the_deadline() -> None:
    def hang(conn: socket.socket, srv: RawServer) -> None:
        srv.stopping.wait(10)

    with RawServer(hang) as srv:
        err, took = failure(make_source(srv.url))
    assert err.reason == "timeout" and took <= TIMEOUT + SLACK


@pytest.mark.parametrize("framing", FRAMINGS)
def test_every_framing_delivers_the_body_intact(framing: str) -> None:
    with RawServer(whole(framing, VLLM)) as srv:
        result = make_source(srv.url).sample()
    running = sorted(p.value for p in result.points if p.name == "llm_scheduler_requests_running" and isinstance(p, Sample))
    assert running == [3.0, 5.0]
    request = srv.requests[0].decode()
    assert request.startswith("GET /metrics HTTP/1.1\r\n") and f"Host: 127.0.0.1:{srv.port}\r\n" in request


def test_a_gzip_body_is_inflated_under_the_cap() -> None:
    packed = gzip.compress(VLLM)
    with RawServer(whole("content-length", packed, extra="Content-Encoding: gzip")) as srv:
        ok = make_source(srv.url).sample()
        err, _ = failure(make_source(srv.url, max_body_bytes=len(VLLM) - 1))
    assert any(p.name == "llm_scheduler_requests_running" for p in ok.points)
    assert err.reason == "too_large" and "decompressed" in err.message  # a gzip bomb stops at the cap


@pytest.mark.parametrize("framing", FRAMINGS)
def test_a_body_ending_early_is_a_failure_not_a_partial_result(framing: str) -> None:
    cut = VLLM[: len(VLLM) // 2]

    def handle(conn: socket.socket, srv: RawServer) -> None:
        srv.send(conn, head_for(framing, len(VLLM)))
        srv.send(conn, b"%x\r\n%s" % (len(VLLM), cut) if framing == "chunked" else cut)

    with RawServer(handle) as srv:
        err, _ = failure(make_source(srv.url))
    # close-delimited: the cut body is all there is, and it ends mid-line
    assert err.reason == ("parse" if framing == "close" else "connection"), err


@pytest.mark.parametrize(
    "raw",
    [b"SSH-2.0-OpenSSH_9.6\r\n\r\n", b"HTTP/1.1 2000 OK\r\n\r\n", b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n"],
)
def test_an_answer_that_is_not_http_is_a_parse_error(raw: bytes) -> None:
    with RawServer(lambda conn, srv: srv.send(conn, raw)) as srv:
        err, _ = failure(make_source(srv.url))
    assert err.reason == "parse"


def test_a_bad_chunk_size_is_a_parse_error() -> None:
    def handle(conn: socket.socket, srv: RawServer) -> None:
        srv.send(conn, head_for("chunked", 0) + b"zz\r\nabc\r\n0\r\n\r\n")

    with RawServer(handle) as srv:
        err, _ = failure(make_source(srv.url))
    assert err.reason == "parse" and "chunk" in err.message


# --------------------------------------------------------------------------- redirects


def test_a_redirect_to_another_port_is_not_followed_and_names_its_target() -> None:
    with RawServer(whole("content-length", VLLM)) as other:
        target = f"http://user:hunter2pw@127.0.0.1:{other.port}/metrics"
        with RawServer(redirect(lambda srv: target)) as srv:
            err, _ = failure(make_source(srv.url))
            followed, _ = failure(make_source(srv.url, follow_redirects=True))
    assert err.reason == "redirect" and f"redirect to http://127.0.0.1:{other.port}/metrics" in err.message
    assert "follow_redirects" in err.message
    assert followed.reason == "redirect" and "only same-host" in followed.message
    for e in (err, followed):
        assert "hunter2pw" not in e.message and "user" not in e.message
    assert other.requests == []  # never published another server's numbers under this name


def test_a_same_host_redirect_is_followed_only_when_asked() -> None:
    def handle(conn: socket.socket, srv: RawServer) -> None:
        if b"GET /old " in srv.requests[-1]:
            redirect(lambda s: "/metrics", 301)(conn, srv)
        else:
            whole("content-length", VLLM)(conn, srv)

    with RawServer(handle) as srv:
        old = srv.url.replace("/metrics", "/old")
        err, _ = failure(make_source(old))
        result = make_source(old, follow_redirects=True).sample()
    assert err.reason == "redirect"
    assert any(p.name == "llm_scheduler_requests_running" for p in result.points)


@pytest.mark.parametrize("follow", [False, True])
def test_a_redirect_loop_makes_a_bounded_number_of_requests(follow: bool) -> None:
    with RawServer(redirect(lambda srv: srv.url)) as srv:
        err, took = failure(make_source(srv.url, follow_redirects=follow))
        requests = len(srv.requests)
    assert err.reason == "redirect"
    assert requests == (4 if follow else 1)  # the first request and at most 3 redirects followed
    if follow:
        assert "more than 3 redirects" in err.message
    assert took < TIMEOUT + SLACK


def test_redirects_share_the_one_deadline() -> None:
    def handle(conn: socket.socket, srv: RawServer) -> None:
        srv.stopping.wait(0.25)
        redirect(lambda s: s.url)(conn, srv)

    with RawServer(handle) as srv:
        err, took = failure(make_source(srv.url, follow_redirects=True))
    assert err.reason == "timeout" and took <= TIMEOUT + SLACK


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1:99999/metrics", "malformed"),
        ("http://127.0.0.1:abc/metrics", "malformed"),
        ("http://" + "a" * 70 + ".invalid/metrics", "connection"),  # a label IDNA cannot encode
    ],
)
def test_a_url_that_cannot_be_fetched_is_a_bounded_reason_not_an_internal_error(url: str, reason: str) -> None:
    err, took = failure(make_source(url))
    assert err.reason == reason and took <= TIMEOUT + SLACK
