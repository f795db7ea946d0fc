"""The store wakes a waiter when a sample lands, writes a batch at once, and tells derived from measured."""

from __future__ import annotations

import threading

from exporter.samples import Sample, SourceError
from exporter.store import Outcome, SnapshotStore


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _point(name: str, value: float = 1.0) -> Sample:
    return Sample("llm_gpu_power_watts", {"gpu": name}, value)


def test_wait_for_write_wakes_on_a_write_and_returns_the_new_version() -> None:
    store = SnapshotStore()
    store.register("gpu", 1.0)
    version = store.version
    assert store.wait_for_write(version - 1, 10.0) == version  # already differs: no wait at all
    started = threading.Event()

    def write() -> None:
        started.wait(5)
        store.record_success("gpu", [_point("0")], 0.01)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    started.set()
    # a 60 s timeout: only the write can end this wait in a test's lifetime
    assert store.wait_for_write(version, 60.0) == version + 1
    writer.join(5)


def test_wait_for_write_gives_up_after_its_timeout_when_nothing_lands() -> None:
    store = SnapshotStore()
    store.register("gpu", 1.0)
    version = store.version
    assert store.wait_for_write(version, 0.05) == version
    assert store.wait_for_write(version, 0.0) == version


def test_a_batch_lands_in_one_write_and_drops_unregistered_names() -> None:
    store = SnapshotStore()
    for name in ("parallel", "diagnosis"):
        store.register(name, 1.0, derived=True)
    before = store.version
    store.record_batch(
        [
            Outcome("parallel", 0.01, [_point("0")]),
            Outcome("diagnosis", 0.02, error=SourceError("internal", "boom")),
            Outcome("gone", 0.01, [_point("1")]),
        ]
    )
    states = store.states()
    assert states["parallel"].up and states["parallel"].points == [_point("0")]
    assert not states["diagnosis"].up and states["diagnosis"].errors == {"internal": 1}
    assert "gone" not in states and store.version == before + 2


def test_an_input_snapshot_leaves_the_derived_sources_out() -> None:
    store = SnapshotStore()
    store.register("gpu", 1.0)
    store.register("parallel", 1.0, derived=True)
    store.record_success("gpu", [_point("0")], 0.01)
    store.record_success("parallel", [_point("9")], 0.01)
    inputs = store.snapshot(inputs_only=True)
    assert set(inputs.sources) == {"gpu"} and inputs.values("llm_gpu_power_watts") == [1.0]
    assert [p.labels["gpu"] for p in inputs.extended([_point("9")]).points] == ["0", "9"]
    everything = store.snapshot()
    assert set(everything.sources) == {"gpu", "parallel"} and len(everything.points) == 2


def test_an_ended_attempt_is_not_failed_as_overdue_while_its_pass_goes_on() -> None:
    clock = Clock()
    store = SnapshotStore(clock=clock)
    store.register("parallel", 1.0, timeout=0.5, derived=True)
    store.register("diagnosis", 1.0, timeout=0.5, derived=True)
    store.begin_attempt("parallel")
    store.end_attempt("parallel")
    store.begin_attempt("diagnosis")
    clock.t += 0.6  # the diagnosis of the same pass hangs past its timeout
    assert store.overdue("parallel") is None
    err = store.overdue("diagnosis")
    assert err is not None and err.reason == "timeout"
