"""``POST /profile`` as bounded as a scrape: one deadline per profiler call, bounded trace decoding,
ASCII-only ``seconds``, and a shutdown that never waits on a profiler call past its grace.

In-process: the profiler (exporter/profile/run.py) against engines on 127.0.0.1 run by threads
here. Every assertion is on a mechanism (the error naming the deadline, the bytes a trickling
server got to send, the lock free again, the stop still held by the engine when the call
returned), never on how long something took on this host.
"""

from __future__ import annotations

import gzip
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from exporter.engines.config import EngineConfig
from exporter.profile import driver, run
from exporter.profile.calls import CallDeadline, Shutdown
from exporter.profile.config import ProfileConfig
from exporter.profile.driver import EngineProfiler, ProfilerError
from exporter.profile.run import Outcome, Profiler, parse_seconds
from exporter.profile.state import ProfileState
from exporter.profile.trace import MAX_EVENT_DEPTH, Budget, TraceError, events
from exporter.store import SnapshotStore
from tests.profile.profiling_engine import ProfilingEngine

if TYPE_CHECKING:
    from typing_extensions import Self

#: what the trickling engine would send in all, one byte per TRICKLE_EVERY_S: 40 s of answer
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 1900\r\n\r\n" + b"x" * 1900
TRICKLE_EVERY_S = 0.02


class Trickler:
    """An engine that answers every POST one byte at a time, so no single read ever waits long."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}/metrics"
        self.sent = 0
        self.connected = threading.Event()
        #: set once the client went away before the whole answer was sent
        self.cut = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            with conn:
                self.connected.set()
                conn.settimeout(5.0)
                try:
                    conn.recv(65536)  # the request (head and empty body): small, one segment
                except OSError:
                    continue
                self._trickle(conn)

    def _trickle(self, conn: socket.socket) -> None:
        for i in range(len(ANSWER)):
            if self._stop.is_set():
                return
            try:
                conn.sendall(ANSWER[i : i + 1])
            except OSError:  # the client closed: the second send after its close fails
                self.cut.set()
                return
            self.sent += 1
            self._stop.wait(TRICKLE_EVERY_S)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5.0)
        self._listener.close()


def _profiler(directory: Path, url: str, grace: float = 5.0) -> Profiler:
    cfg = EngineConfig(url=url, name="e", type="vllm")
    settings = ProfileConfig(True, str(directory), 64 * 1024 * 1024)
    return Profiler(settings, [cfg], SnapshotStore(), ProfileState(), shutdown_grace=grace)


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """Profiles of 0.05 s and a 20 ms settle poll: the procedure, not its pace, is under test."""
    monkeypatch.setattr(run, "MIN_SECONDS", 0.01)
    monkeypatch.setattr(run, "SETTLE_POLL_S", 0.02)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[ProfilingEngine]:
    with ProfilingEngine(tmp_path) as e:
        yield e
        e.release.set()  # a test that held /stop_profile lets the handler go


def _in_thread(profiler: Profiler, seconds: str) -> tuple[threading.Thread, list[Outcome]]:
    out: list[Outcome] = []
    worker = threading.Thread(target=lambda: out.append(profiler.take("e", seconds)), daemon=True)
    worker.start()
    return worker, out


def _one_line(outcome: Outcome) -> str:
    text = outcome.body["error"]
    assert isinstance(text, str) and "\n" not in text and "Traceback" not in text, text
    return text


# ------------------------------------------------------------------ one deadline per call


def test_a_trickled_start_answer_ends_at_the_deadline_naming_it() -> None:
    with Trickler() as engine:
        profiler = EngineProfiler(EngineConfig(url=engine.url, name="e", type="vllm"), "vllm")
        with pytest.raises(ProfilerError) as err:
            profiler.start("/ignored", timeout=0.5)
        assert engine.cut.wait(10.0)  # the exporter closed the connection: the server saw it go
    assert err.value.status == 502
    assert err.value.message.endswith("/start_profile: no complete answer within the 0.5 s deadline")
    assert 0 < engine.sent < len(ANSWER) // 2  # every read was short, yet the call ended


def test_a_trickled_start_frees_the_profile_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(driver, "START_TIMEOUT_S", 0.5)
    with Trickler() as engine:
        profiler = _profiler(tmp_path, engine.url)
        worker, out = _in_thread(profiler, "1")
        assert engine.connected.wait(10.0)
        assert profiler.take("e", "1").status == 409  # the lock is held while the start trickles
        worker.join(20.0)
        assert not worker.is_alive()
    assert out[0].status == 502 and "within the 0.5 s deadline" in _one_line(out[0])
    assert profiler.state.running is None and profiler.state.begin("e") is None  # free again


# ------------------------------------------------------------------ bounded trace decoding


def _nested(levels: int) -> bytes:
    inner = b"[" * (levels - 1) + b"]" * (levels - 1)  # the event object itself is one level
    return b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "args": ' + inner + b"}]}"


@pytest.mark.parametrize("levels", [MAX_EVENT_DEPTH + 1, 100_000])
def test_an_event_nested_past_the_bound_is_one_trace_error(tmp_path: Path, levels: int) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(_nested(levels)))
    with pytest.raises(TraceError) as err:
        list(events(path, Budget(64 * 1024 * 1024)))
    assert str(err.value) == f"t.json.gz: an event nested deeper than {MAX_EVENT_DEPTH} levels (not a profiler trace?)"


def test_an_event_at_the_bound_and_brackets_in_strings_are_read(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(_nested(MAX_EVENT_DEPTH))
    assert len(list(events(path, Budget(1 << 20)))) == 1
    named = {"ph": "X", "cat": "kernel", "name": "[" * 500 + "{" * 500, "dur": 1.0}
    path.write_text(json.dumps({"traceEvents": [named]}))
    assert list(events(path, Budget(1 << 20))) == [named]


def test_an_integer_of_5000_digits_is_one_trace_error(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": [{"ph": "X", "dur": ' + b"9" * 5000 + b"}]}")
    with pytest.raises(TraceError, match="malformed trace event .*4300 digits"):
        list(events(path, Budget(1 << 20)))


def test_a_deeply_nested_trace_is_the_documented_422_in_one_line(engine: ProfilingEngine, quick: None) -> None:
    engine.mode = "deep"
    outcome = _profiler(engine.trace_dir, engine.url).take("e", "0.05")
    assert outcome.status == 422, outcome
    assert _one_line(outcome).startswith("trace refused: fake-vllm_rank0.1.pt.trace.json.gz: an event nested deeper than 64")
    assert engine.calls == ["/start_profile", "/stop_profile"]


# ------------------------------------------------------------------ seconds


@pytest.mark.parametrize(
    "raw", ["0_1", "1_0", "١", "٥", "５", "²", "1e1", "inf", "nan", " 5", "5 ", "+5", "-1", "0x10", "5s", ""]
)
def test_seconds_take_ascii_digits_only(engine: ProfilingEngine, raw: str) -> None:
    if raw == "":
        assert parse_seconds(raw) == run.DEFAULT_SECONDS  # absent: the default, as documented
        return
    outcome = _profiler(engine.trace_dir, engine.url).take("e", raw)
    assert outcome.status == 400 and _one_line(outcome).startswith("seconds: expected")
    assert engine.calls == []  # refused before the engine was touched


@pytest.mark.parametrize(("raw", "value"), [("0.5", 0.5), (".5", 0.5), ("5", 5.0), ("60", 60.0), ("12.25", 12.25)])
def test_seconds_as_the_docs_write_them(raw: str, value: float) -> None:
    assert parse_seconds(raw) == value


# ------------------------------------------------------------------ shutdown


def test_shutdown_cuts_a_hung_stop_within_its_grace(engine: ProfilingEngine, quick: None) -> None:
    engine.release.clear()  # /stop_profile hangs (up to 30 s in the fake; 120 s allowed by the exporter)
    profiler = _profiler(engine.trace_dir, engine.url, grace=0.2)
    worker, out = _in_thread(profiler, "0.05")
    _wait_for_call(engine, "/stop_profile")
    profiler.begin_shutdown()
    worker.join(20.0)  # far under the stop's own 120 s: only the grace can end it this soon
    assert not worker.is_alive()
    assert not engine.release.is_set()  # the engine never answered: the exporter cut the call
    assert out[0].status == 503 and "cut short, the exporter is shutting down" in _one_line(out[0])
    assert profiler.state.running is None
    assert profiler.take("e", "1").status == 503  # no new profile once shutting down


def test_shutdown_during_the_wait_still_sends_the_stop_and_reads_no_trace(engine: ProfilingEngine, quick: None) -> None:
    profiler = _profiler(engine.trace_dir, engine.url, grace=0.2)
    worker, out = _in_thread(profiler, "60")
    assert engine.started.wait(10.0)
    profiler.begin_shutdown()
    worker.join(20.0)
    assert not worker.is_alive()
    assert engine.calls == ["/start_profile", "/stop_profile"]  # the profiler is never left running
    assert out[0].status == 503 and "traces not read" in _one_line(out[0])


def test_a_deadline_is_brought_forward_by_shutdown_and_fires() -> None:
    shutdown = Shutdown(grace=0.0)
    deadline = CallDeadline(120.0, shutdown)
    fired = threading.Event()
    cancel = deadline.when_passed(fired.set)
    assert not fired.is_set() and deadline.remaining() > 60
    shutdown.begin()
    assert fired.wait(10.0) and deadline.remaining() == 0.0
    cancel()
    late = CallDeadline(120.0, shutdown)  # made after shutdown began: cut from the start
    assert late.remaining() == 0.0


def _wait_for_call(engine: ProfilingEngine, path: str) -> None:
    """Until the engine got ``path`` (bounded: 10 s of 10 ms polls)."""
    tick = threading.Event()
    for _ in range(1000):
        if path in engine.calls:
            return
        tick.wait(0.01)
    pytest.fail(f"the engine never got {path}: {engine.calls}")
