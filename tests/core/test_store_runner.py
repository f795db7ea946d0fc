import logging
import threading
from collections.abc import Iterable

import pytest

from exporter.runner import LoopThread, RunnerGroup, SourceRunner
from exporter.samples import Sample, SampleResult, SourceError
from exporter.store import SnapshotStore


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class ScriptedSource:
    """A source that plays back a list of outcomes (results or exceptions)."""

    def __init__(
        self,
        outcomes: Iterable[SampleResult | BaseException],
        name: str = "engine:a",
        interval: float = 5.0,
        timeout: float = 3.0,
    ) -> None:
        self.name, self.interval, self.timeout = name, interval, timeout
        self.outcomes = list(outcomes)
        self.closed = False

    def sample(self) -> SampleResult:
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def close(self) -> None:
        self.closed = True


def _ok(value: float) -> SampleResult:
    return SampleResult([Sample("llm_scheduler_requests_waiting", {"server": "a"}, value)])


def test_values_vanish_after_two_intervals_and_come_back() -> None:
    clock = FakeClock()
    store = SnapshotStore(clock=clock)
    src = ScriptedSource([_ok(3), SourceError("connection", "refused"), _ok(4)])
    runner = SourceRunner(src, store)
    runner.sample_once()
    assert store.snapshot().values("llm_scheduler_requests_waiting") == [3]
    clock.now += 6
    runner.sample_once()  # fails: the old value is still younger than 2 intervals
    assert store.snapshot().values("llm_scheduler_requests_waiting") == [3]
    assert not store.snapshot().source_up("engine:a")
    clock.now += 5  # now 11 s old > 2 x 5 s
    assert store.snapshot().values("llm_scheduler_requests_waiting") == []
    runner.sample_once()
    snap = store.snapshot()
    assert snap.values("llm_scheduler_requests_waiting") == [4]
    assert snap.source_up("engine:a")
    assert store.states()["engine:a"].errors == {"connection": 1}


def test_a_crashing_source_is_counted_as_internal_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    store = SnapshotStore()
    src = ScriptedSource([RuntimeError("boom"), RuntimeError("boom"), _ok(1)])
    runner = SourceRunner(src, store, log_every=0.0)  # no quiet period: every transition is logged
    runner.sample_once()
    runner.sample_once()
    assert store.states()["engine:a"].errors == {"internal": 2}
    assert sum("raised unexpectedly" in r.message for r in caplog.records) == 1
    runner.sample_once()
    assert any("recovered" in r.message for r in caplog.records)


def test_partial_errors_are_counted_but_keep_the_source_up() -> None:
    store = SnapshotStore()
    res = _ok(1)
    res.partial_errors.append(SourceError("gpu_lost", "GPU 3 is lost"))
    SourceRunner(ScriptedSource([res]), store).sample_once()
    st = store.states()["engine:a"]
    assert st.up and st.errors == {"gpu_lost": 1}


def test_a_sample_slower_than_its_timeout_counts_as_timeout() -> None:
    ticks = iter([0.0, 5.0])
    store = SnapshotStore()
    src = ScriptedSource([_ok(1)], timeout=3.0)
    runner = SourceRunner(src, store, clock=lambda: next(ticks))
    runner.sample_once()
    st = store.states()["engine:a"]
    assert not st.up and st.errors == {"timeout": 1}


def test_ready_after_first_success_only() -> None:
    store = SnapshotStore()
    runner = SourceRunner(ScriptedSource([SourceError("connection", "x"), _ok(1)]), store)
    runner.sample_once()
    assert not store.ready()
    runner.sample_once()
    assert store.ready()


def test_unknown_error_reason_is_rejected() -> None:
    with pytest.raises(ValueError):
        SourceError("made_up", "x")


def test_group_runs_loops_in_threads_and_stops_them() -> None:
    store = SnapshotStore()
    calls = threading.Event()

    class Looping:
        name, interval, timeout = "gpu", 0.01, 1.0
        closed = False

        def sample(self) -> SampleResult:
            calls.set()
            return _ok(1)

        def close(self) -> None:
            self.closed = True

    src = Looping()
    group = RunnerGroup(store)
    group.add(src)
    group.start()
    assert calls.wait(5)
    group.stop()
    assert src.closed
    assert all(isinstance(r, LoopThread) and not r._thread.is_alive() for r in group.runners)


def test_a_sources_own_counters_outlive_its_values_while_it_is_down() -> None:
    """A down engine keeps publishing how many series it dropped (no reset in Prometheus), not its values."""
    clock = FakeClock()
    store = SnapshotStore(clock=clock)
    dropped = Sample("llm_exporter_series_dropped_total", {"source": "engine:a", "reason": "budget"}, 7.0)
    src = ScriptedSource([SampleResult([*_ok(3).points, dropped]), SourceError("connection", "refused")])
    runner = SourceRunner(src, store)
    runner.sample_once()
    clock.now += 11
    runner.sample_once()
    snap = store.snapshot()
    assert snap.values("llm_scheduler_requests_waiting") == []
    assert snap.values("llm_exporter_series_dropped_total") == [7.0]
    store.unregister("engine:a")  # a source that is gone takes its counters with it
    assert store.snapshot().values("llm_exporter_series_dropped_total") == []
