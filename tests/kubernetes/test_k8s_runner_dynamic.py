"""Sources added to and removed from a running RunnerGroup (what discovery does): a new one
starts at once, a removed one is stopped, closed and its results dropped, a late write of a
removed source is ignored."""

from __future__ import annotations

import threading

from exporter.runner import RunnerGroup, SourceRunner
from exporter.samples import Sample, SampleResult
from exporter.store import SnapshotStore
from tests.support.waiting import wait_until


class Counting:
    def __init__(self, name: str, gate: threading.Event | None = None) -> None:
        self.name, self.interval, self.timeout = name, 0.1, 5.0
        self.samples = 0
        self.closed = False
        self.gate = gate

    def sample(self) -> SampleResult:
        self.samples += 1
        if self.gate is not None:
            self.gate.wait(5)
        return SampleResult([Sample("llm_scheduler_requests_running", {"server": self.name}, 1.0)])

    def close(self) -> None:
        self.closed = True


def test_add_after_start_runs_and_remove_drops() -> None:
    store = SnapshotStore()
    group = RunnerGroup(store, watch_period=0.05)
    first = Counting("engine:a")
    group.add(first)
    group.start()
    try:
        late = Counting("engine:b")
        group.add(late)
        wait_until(lambda: late.samples >= 2 and store.snapshot().source_up("engine:b"), 5, "the late source sampled and up")
        assert group.remove("engine:b", timeout=2.0)
        assert late.closed and "engine:b" not in store.states()
        assert not store.snapshot().find("llm_scheduler_requests_running", server="engine:b")
        assert not group.remove("engine:b"), "removing twice is a no-op"
        assert store.snapshot().source_up("engine:a")
    finally:
        group.stop()
    assert first.closed


def test_a_late_result_of_a_removed_source_is_dropped() -> None:
    store = SnapshotStore()
    group = RunnerGroup(store, watch_period=0.05)
    gate = threading.Event()
    slow = Counting("engine:slow", gate)
    group.start()
    try:
        group.add(slow)
        wait_until(lambda: slow.samples == 1, 5, "the slow source's first sample")
        group.remove("engine:slow", timeout=0.1)  # its sample is still running: not closed
        assert not slow.closed and "engine:slow" not in store.states()
        gate.set()  # the sample returns now and writes into a store that forgot it
        wait_until(
            lambda: not any(isinstance(r, SourceRunner) and r.source is slow for r in group.runners),
            1,
            "the slow source's runner gone",
        )
    finally:
        group.stop()
    assert "engine:slow" not in store.states()
    assert not store.snapshot().find("llm_scheduler_requests_running", server="engine:slow")


def test_a_source_is_handed_the_group() -> None:
    store = SnapshotStore()
    group = RunnerGroup(store)
    seen: list[object] = []

    class Manager(Counting):
        def bind_runner_group(self, g: RunnerGroup) -> None:
            seen.append(g)

    group.add(Manager("kubernetes:discovery"))
    assert seen == [group]
    group.stop()
