"""On a starved node sources do not flap: down only on a real miss, back-off, quiet logs."""

from __future__ import annotations

import logging

import pytest

from exporter.runner import BACKOFF_AFTER, BACKOFF_CAP, SourceRunner, TransitionLog, backoff_delay
from exporter.samples import Sample, SampleResult, SourceError
from exporter.store import SnapshotStore


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Scripted:
    name, interval, timeout = "engine:a", 1.0, 0.5

    def __init__(self, outcomes: list[object]) -> None:
        self.outcomes = list(outcomes)

    def sample(self) -> SampleResult:
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        assert isinstance(outcome, SampleResult)
        return outcome

    def close(self) -> None:
        pass


def _ok() -> SampleResult:
    return SampleResult([Sample("llm_scheduler_requests_waiting", {"server": "a"}, 1.0)])


def _runner_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "exporter.runner"]


def test_a_loop_that_wakes_late_keeps_its_source_up_and_its_values() -> None:
    mono = FakeClock()
    store = SnapshotStore(clock=lambda: 1.7e9, monotonic=mono)
    store.register("engine:a", 1.0, timeout=0.5)
    store.record_success("engine:a", _ok().points, 0.01)
    mono.now += 1.8  # the loop should have woken at +1.0: it is starved and wakes only now
    store.begin_attempt("engine:a")
    mono.now += 0.4  # 2.2 s since the last success, but the attempt is within its timeout
    snap = store.snapshot()
    assert snap.source_up("engine:a") and snap.values("llm_scheduler_requests_waiting") == [1.0]
    store.record_success("engine:a", _ok().points, 0.4)
    assert store.states()["engine:a"].errors == {}
    # a loop starved so long that no attempt started at all: the values go stale, the source is not marked down
    mono.now += 2.5
    snap = store.snapshot()
    assert snap.values("llm_scheduler_requests_waiting") == [] and snap.source_up("engine:a")


def test_a_late_attempt_that_overruns_its_timeout_is_a_real_miss() -> None:
    mono = FakeClock()
    store = SnapshotStore(clock=lambda: 1.7e9, monotonic=mono)
    store.register("engine:a", 1.0, timeout=0.5)
    store.record_success("engine:a", _ok().points, 0.01)
    mono.now += 1.0
    store.begin_attempt("engine:a")
    mono.now += 0.6
    snap = store.snapshot()
    assert not snap.source_up("engine:a") and snap.values("llm_scheduler_requests_waiting") == []
    assert store.states()["engine:a"].errors == {"timeout": 1}


def test_stale_values_are_not_revived_by_an_attempt_that_starts_after_they_expired() -> None:
    mono = FakeClock()
    store = SnapshotStore(clock=lambda: 1.7e9, monotonic=mono)
    store.register("engine:a", 1.0, timeout=0.5)
    store.record_success("engine:a", _ok().points, 0.01)
    mono.now += 2.2
    store.begin_attempt("engine:a")
    assert store.snapshot().values("llm_scheduler_requests_waiting") == []


def test_backoff_grows_after_consecutive_failures_up_to_a_cap() -> None:
    assert [backoff_delay(5.0, n) for n in range(BACKOFF_AFTER + 1)] == [5.0] * (BACKOFF_AFTER + 1)
    assert backoff_delay(5.0, BACKOFF_AFTER + 1) == 10.0
    assert backoff_delay(5.0, BACKOFF_AFTER + 2) == 20.0
    assert backoff_delay(5.0, 50) == 5.0 * BACKOFF_CAP


def test_the_runner_backs_off_while_failing_and_resets_on_success() -> None:
    failures = [SourceError("connection", "refused")] * 6
    runner = SourceRunner(Scripted([*failures, _ok()]), SnapshotStore())
    delays = []
    for _ in range(7):
        runner.sample_once()
        delays.append(runner.next_delay())
    assert delays == [1.0, 1.0, 2.0, 4.0, 4.0, 4.0, 1.0]


def test_flapping_logs_one_line_a_minute_and_counts_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="exporter.runner")
    clock = FakeClock()
    outcomes: list[object] = [_ok()]
    for _ in range(10):
        outcomes += [SourceError("timeout", "sample took 0.6s"), _ok()]
    runner = SourceRunner(Scripted(outcomes), SnapshotStore())
    runner.transitions = TransitionLog("engine:a", 60.0, clock=clock)
    runner.sample_once()  # up from the start: nothing to say
    for _ in range(20):  # 20 transitions, one every 2 s (40 s in all)
        clock.now += 2.0
        runner.sample_once()
        runner.transitions.flush()
    lines = _runner_lines(caplog)
    assert lines == ["source engine:a down: timeout: sample took 0.6s"]
    assert runner.transitions.suppressed == 19
    clock.now += 30.0  # the quiet minute is over: the current state and the count come out
    runner.check_overdue()
    lines = _runner_lines(caplog)
    assert len(lines) == 2 and lines[1] == "source engine:a recovered (19 transition(s) not logged in the last 68s)"
    assert runner.transitions.suppressed == 0 and runner.transitions.suppressed_total == 19
    runner.transitions.flush()
    assert len(_runner_lines(caplog)) == 2  # nothing left to say


def test_a_transition_after_a_quiet_minute_is_logged_at_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="exporter.runner")
    clock = FakeClock()
    log = TransitionLog("gpu", 60.0, clock=clock)
    log.note(True)
    log.note(False, "gpu_lost: GPU 3")
    clock.now += 61.0
    log.note(True)
    assert _runner_lines(caplog) == ["source gpu down: gpu_lost: GPU 3", "source gpu recovered"]
