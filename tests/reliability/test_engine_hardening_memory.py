"""Bounded memory on the engine path: huge bodies stop at the cap, failed scrapes keep nothing.

Measured with ``tracemalloc`` (every Python allocation, all threads) around
real scrapes of real local servers. The servers stream from one preallocated
block, so what is measured is the exporter's side.
"""

from __future__ import annotations

import gc
import socket
import tracemalloc
from collections.abc import Callable, Iterator

import pytest

from exporter.engines.config import EngineConfig
from exporter.engines.source import EngineSource
from exporter.runner import SourceRunner
from exporter.samples import SourceError
from exporter.store import SnapshotStore
from tests.engines.engine_helpers import fixture
from tests.support.fake_engine import RawServer, head_for, whole

MB = 1024 * 1024
CAP = 1 * MB
HUGE = 50 * MB
BLOCK = b"vllm:num_requests_running 1\n" * (64 * 1024 // 28)
VLLM = fixture("vllm-0.33-v1-2dp.prom").encode()
BAD_LINE = b'vllm:num_requests_running{engine="0"} not-a-number\n'


def huge_body(framing: str) -> Callable[[socket.socket, RawServer], None]:
    """A 50 MB body in ``framing``, written 64 KiB at a time until done or the client hangs up."""

    def handle(conn: socket.socket, srv: RawServer) -> None:
        srv.send(conn, head_for(framing, HUGE))
        chunk = b"%x\r\n%s\r\n" % (len(BLOCK), BLOCK) if framing == "chunked" else BLOCK
        sent = 0
        while sent < HUGE and not srv.stopping.is_set():
            srv.send(conn, chunk)
            sent += len(BLOCK)

    return handle


@pytest.fixture
def traced() -> Iterator[None]:
    gc.collect()
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


def source_for(url: str, **overrides: object) -> EngineSource:
    cfg = EngineConfig(url=url, name="mem", timeout=5.0, interval=10.0, max_body_bytes=CAP)
    for key, val in overrides.items():
        setattr(cfg, key, val)
    return EngineSource(cfg)


@pytest.mark.parametrize("framing", ["chunked", "content-length", "close"])
def test_a_50mb_body_is_refused_at_the_cap_whatever_its_framing(traced: None, framing: str) -> None:
    with RawServer(huge_body(framing)) as srv:
        source = source_for(srv.url)
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        with pytest.raises(SourceError) as caught:
            source.sample()
        peak = tracemalloc.get_traced_memory()[1] - base
        err = caught.value
        del caught
    assert err.reason == "too_large", err
    assert peak < 3 * CAP, f"{framing}: peak {peak / MB:.1f} MiB for a {CAP / MB:.0f} MiB cap"
    assert srv.sent < 10 * MB, f"{framing}: the exporter read on past the cap ({srv.sent / MB:.0f} MB sent)"


def _bodies() -> dict[str, tuple[bytes, dict[str, object], str]]:
    big_ok = VLLM * (2 * MB // len(VLLM))  # ~2 MB of valid text ...
    # 86-89 bytes a line, over 1 000 families: each under its share, so the body as a whole is refused
    # (one family over its share would be dropped alone: tests/reliability/test_engine_family_budget.py)
    unwanted = "".join(
        f'some_other_exporters_metric_{i % 1_000}{{path="/a/long/label/value/that/makes/the/line/long"}} 1\n'
        for i in range(50_001)
    ).encode()
    return {
        # ... whose last line is garbage: the whole body is split and parsed, then rejected
        "parse": (big_ok + BAD_LINE, {"max_body_bytes": 8 * MB}, "parse"),
        # more sample lines than the input safety limit (50 000 for this budget)
        "too_many_series": (VLLM + unwanted, {"max_body_bytes": 8 * MB, "max_series": 100}, "too_many_series"),
    }


@pytest.mark.parametrize("case", ["parse", "too_many_series"])
def test_a_failed_scrape_holds_nothing_after_it_returns(case: str) -> None:
    body, overrides, reason = _bodies()[case]
    behaviour = {"body": VLLM}

    def handle(conn: socket.socket, srv: RawServer) -> None:
        whole("content-length", behaviour["body"], step=64 * 1024)(conn, srv)

    with RawServer(handle) as srv:
        source = source_for(srv.url, **overrides)
        store = SnapshotStore()
        runner = SourceRunner(source, store)
        runner.sample_once()  # a good scrape first: the points kept are the baseline
        assert store.states()["engine:mem"].up
        behaviour["body"] = body
        gc.collect()
        tracemalloc.start()  # from here on: what the failed scrape allocates and still holds
        try:
            runner.sample_once()
            state = store.states()["engine:mem"]
            assert not state.up and state.last_error is not None and state.last_error.reason == reason
            del state
            held, peak = tracemalloc.get_traced_memory()  # no gc.collect(): freed by reference counting alone
        finally:
            tracemalloc.stop()
        behaviour["body"] = VLLM
    assert len(body) > 1.9 * MB and peak > len(body)  # the body was read (and parsed) ...
    assert held < 256 * 1024, (
        f"{case}: {held / MB:.1f} MiB still held after a failed scrape of {len(body) / MB:.0f} MB"
    )  # ... and let go


def test_the_raised_error_pins_no_frame_of_the_attempt() -> None:
    body = VLLM * 20 + BAD_LINE
    with RawServer(whole("content-length", body)) as srv:
        with pytest.raises(SourceError) as caught:
            source_for(srv.url).sample()
    err = caught.value
    assert err.reason == "parse"
    assert err.__cause__ is None and err.__context__ is None  # nothing chained to carry a body along
    tb = err.__traceback__
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    inner = frames[-1]  # where it was raised: EngineSource.sample, holding only small values
    assert inner.f_code.co_name == "sample"
    sizes = {k: len(v) for k, v in inner.f_locals.items() if isinstance(v, (str, bytes, bytearray, list))}
    assert all(n < 1000 for n in sizes.values()), sizes
