"""Header numbers an engine sends are read as ASCII digits only: a named reason, never a traceback.

``int()`` and ``str.isdigit()`` accept far more than HTTP does (``int('١٢') == 12``,
``'²'.isdigit()`` but ``int('²')`` raises): each such answer, written by hand
on a real socket on 127.0.0.1, fails the scrape with a bounded reason that
``llm_exporter_source_errors_total`` counts, and nothing reaches the log with a
traceback. The real runner and store record the attempt.
"""

from __future__ import annotations

import logging
import socket

import pytest

from exporter.collector import meta_points
from exporter.engines.config import EngineConfig
from exporter.engines.source import EngineSource
from exporter.runner import SourceRunner
from exporter.samples import Sample
from exporter.store import SnapshotStore
from tests.engines.engine_helpers import fixture
from tests.support.fake_engine import Handler, RawServer

VLLM = fixture("vllm-0.33-v1-2dp.prom").encode()


def answer(head: str, body: bytes = VLLM) -> Handler:
    """A handler that sends ``head`` (UTF-8, as a hostile server may) and then ``body``."""

    def handle(conn: socket.socket, srv: RawServer) -> None:
        srv.send(conn, head.encode("utf-8") + b"\r\n\r\n" + body)

    return handle


def errors_after_one_scrape(handler: Handler, caplog: pytest.LogCaptureFixture) -> tuple[str, str, dict[str, float]]:
    caplog.set_level(logging.DEBUG)
    store = SnapshotStore()
    with RawServer(handler) as srv:
        source = EngineSource(EngineConfig(url=srv.url, name="eng1", timeout=2.0, interval=5.0))
        runner = SourceRunner(source, store)
        assert not runner.sample_once()
    state = store.states()[source.name]
    assert state.last_error is not None
    counted = {
        p.labels["reason"]: p.value
        for p in meta_points(store.states().values())
        if p.name == "llm_exporter_source_errors_total" and p.labels["source"] == source.name and isinstance(p, Sample)
    }
    assert not [r for r in caplog.records if r.exc_info], "a traceback reached the log"
    assert "Traceback" not in caplog.text and "internal" not in counted
    return state.last_error.reason, state.last_error.message, counted


@pytest.mark.parametrize(
    "length",
    [
        "١٢",  # Arabic-Indic digits: int() reads 12
        "²",  # a superscript: isdigit() is True, int() raises
        "１２",  # fullwidth digits
        "1" * 40,  # ASCII, but no body is that long
        "-12",
        "+12",
        " 1 2",
    ],
)
def test_a_content_length_that_is_not_ascii_digits_is_a_bad_response(length: str, caplog: pytest.LogCaptureFixture) -> None:
    head = f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {length}"
    reason, message, counted = errors_after_one_scrape(answer(head), caplog)
    assert reason == "bad_response", message
    assert "Content-Length" in message and "ASCII digits" in message
    assert counted == {"bad_response": 1.0}


@pytest.mark.parametrize("status", ["２００ OK", "²⁰⁰ OK", "٢٠٠ OK"])
def test_a_status_code_in_other_digits_is_not_http(status: str, caplog: pytest.LogCaptureFixture) -> None:
    reason, message, counted = errors_after_one_scrape(answer(f"HTTP/1.1 {status}\r\nContent-Length: 0"), caplog)
    assert (reason, counted) == ("parse", {"parse": 1.0}) and "not an HTTP response" in message


@pytest.mark.parametrize("size", ["+a", "-1", "1_0", "٣", "12345678901234567"])
def test_a_chunk_size_that_is_not_plain_hex_is_a_malformed_body(size: str, caplog: pytest.LogCaptureFixture) -> None:
    head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked"
    reason, message, counted = errors_after_one_scrape(
        answer(head, f"{size}\r\n".encode() + VLLM[:16] + b"\r\n0\r\n\r\n"), caplog
    )
    assert (reason, counted) == ("parse", {"parse": 1.0}) and "bad chunk size" in message


def test_a_plain_content_length_still_reads_the_body() -> None:
    head = f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {len(VLLM)}"
    with RawServer(answer(head)) as srv:
        result = EngineSource(EngineConfig(url=srv.url, name="eng1", timeout=2.0, interval=5.0)).sample()
    assert any(p.name == "llm_kv_cache_usage_ratio" for p in result.points)
