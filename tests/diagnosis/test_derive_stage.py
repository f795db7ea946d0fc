"""The derive stage: one snapshot, parallel -> capacity -> diagnosis in order, published together,
woken by the store (never polling) when it waits for an input about to land."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

import pytest

from exporter.derive import DeriveStage
from exporter.diagnosis.capacity import CapacityStep
from exporter.diagnosis.engine import DiagnosisEngine
from exporter.diagnosis.parallel import ParallelStep
from exporter.diagnosis.source import DiagnosisStep
from exporter.runner import RunnerGroup
from exporter.samples import SampleResult, SourceError
from exporter.store import Outcome, Snapshot, SnapshotStore
from tests.diagnosis.diag_points import engine, gpu, healthy_gpu
from tests.support.waiting import wait_until


class Offset:
    """The monotonic clock plus an offset a test moves forward (to age a sample without waiting)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


class Seen:
    """A step that keeps the snapshot it was given (what a later step of the pass reads)."""

    def __init__(self, name: str = "seen") -> None:
        self.name = name
        self.snaps: list[Snapshot] = []

    def derive(self, snap: Snapshot) -> SampleResult:
        self.snaps.append(snap)
        return SampleResult([])

    def close(self) -> None:
        pass


class Failing:
    name = "failing"

    def derive(self, snap: Snapshot) -> SampleResult:
        raise SourceError("internal", "this step always fails")

    def close(self) -> None:
        pass


class Hanging:
    """Blocks inside ``derive`` until released (a step stuck in the middle of its work)."""

    name = "hanging"

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.release = threading.Event()

    def derive(self, snap: Snapshot) -> SampleResult:
        self.inside.set()
        self.release.wait(10)
        return SampleResult([])

    def close(self) -> None:
        self.release.set()


def _gpu_store(clock: Offset | None = None, interval: float = 1.0) -> SnapshotStore:
    store = SnapshotStore(monotonic=clock) if clock else SnapshotStore()
    store.register("gpu", interval)
    store.record_success("gpu", [p for i in range(2) for p in gpu(i, util=0.5, sm=0.5, tensor=0.1, dram=0.2)], 0.01)
    return store


def test_a_pass_runs_the_steps_in_order_on_one_snapshot_and_reads_nothing_back() -> None:
    store = _gpu_store()
    seen = Seen()
    stage = DeriveStage([ParallelStep(None), seen], interval=1.0, timeout=1.0)
    stage.register(store)
    for _ in range(2):
        snap = stage.run_pass(store)
        # the later step read the parallel points computed from this very snapshot, once
        assert len(seen.snaps[-1].samples("llm_parallel_group_gpus")) == 1
        assert seen.snaps[-1].monotonic == snap.monotonic and seen.snaps[-1].version == snap.version
        # the input snapshot holds no derived source: neither its points nor its state
        assert not snap.samples("llm_parallel_group_gpus") and set(snap.sources) == {"gpu"}
    assert store.states()["parallel"].derived and not store.states()["gpu"].derived
    assert store.snapshot().samples("llm_parallel_group_gpus")  # what /metrics publishes


def test_the_steps_are_published_in_one_write() -> None:
    store = _gpu_store()
    stage = DeriveStage([ParallelStep(None), CapacityStep(), Seen()], interval=1.0, timeout=1.0)
    stage.register(store)
    before = store.version
    seen_versions: list[int] = []
    real = store.record_batch

    def batch(outcomes: Iterable[Outcome]) -> None:
        seen_versions.append(store.version)
        real(outcomes)

    store.record_batch = batch  # type: ignore[method-assign]
    stage.run_pass(store)
    assert seen_versions == [before]  # nothing written before the batch
    assert store.version == before + 3  # one generation per step, all in that one write
    assert all(store.states()[n].up for n in ("parallel", "capacity", "seen"))


def test_a_failing_step_reads_down_alone_and_the_steps_after_it_still_run() -> None:
    store = _gpu_store()
    seen = Seen()
    stage = DeriveStage([ParallelStep(None), Failing(), seen], interval=1.0, timeout=1.0)
    stage.register(store)
    stage.run_pass(store)
    states = store.states()
    assert not states["failing"].up and states["failing"].errors == {"internal": 1}
    assert states["parallel"].up and states["seen"].up
    assert seen.snaps[-1].samples("llm_parallel_group_gpus")


def test_a_hung_step_reads_down_while_it_hangs_and_the_finished_ones_do_not() -> None:
    store = _gpu_store()
    hanging = Hanging()
    stage = DeriveStage([ParallelStep(None), hanging], interval=0.2, timeout=0.2)
    stage.register(store)
    worker = threading.Thread(target=stage.run_pass, args=(store,), daemon=True)
    worker.start()
    try:
        assert hanging.inside.wait(5)
        err = wait_until(lambda: store.overdue("hanging"), 5, "the hung step to be failed as overdue")
        assert err.reason == "timeout" and store.overdue("parallel") is None
    finally:
        hanging.release.set()
        worker.join(5)
    assert not worker.is_alive()
    states = store.states()
    assert states["hanging"].errors == {"timeout": 1}  # counted once, not again when the late result came
    assert states["parallel"].up


def test_step_names_must_not_repeat() -> None:
    with pytest.raises(ValueError, match="repeat"):
        DeriveStage([Seen("a"), Seen("a")], interval=1.0, timeout=1.0)


def test_waits_for_an_input_about_to_land_woken_by_the_write_not_by_polling() -> None:
    clock = Offset()
    store = _gpu_store(clock, interval=10.0)
    clock.offset += 9.5  # the GPU's next sample is due in 0.5 s (its lateness slack: 2.5 s)
    stage = DeriveStage([Seen()], interval=10.0, timeout=10.0)
    stage.register(store)
    assert set(stage.due_inputs(store, store.monotonic())) == {"gpu"}
    landed_at = store.states()["gpu"].last_success_mono
    waiting = threading.Event()
    calls: list[float] = []
    real = store.wait_for_write

    def wait_for_write(version: int, timeout: float) -> int:
        calls.append(timeout)
        waiting.set()
        return real(version, timeout)

    store.wait_for_write = wait_for_write  # type: ignore[method-assign]

    def land() -> None:
        assert waiting.wait(5)
        store.record_success("gpu", healthy_gpu(), 0.01)

    writer = threading.Thread(target=land, daemon=True)
    writer.start()
    stage.await_inputs(store)
    writer.join(5)
    assert store.states()["gpu"].last_success_mono != landed_at  # it returned once the sample landed
    assert len(calls) == 1  # one wait, ended by the write: no poll loop


def test_the_first_pass_waits_for_the_first_sample_of_an_input_that_has_not_landed_yet() -> None:
    store = SnapshotStore()
    store.register("gpu", 10.0)
    stage = DeriveStage([ParallelStep(None)], interval=10.0, timeout=10.0)
    stage.register(store)
    assert set(stage.due_inputs(store, store.monotonic())) == {"gpu"}  # registered, never attempted
    waiting = threading.Event()
    real = store.wait_for_write

    def wait_for_write(version: int, timeout: float) -> int:
        waiting.set()
        return real(version, timeout)

    store.wait_for_write = wait_for_write  # type: ignore[method-assign]

    def land() -> None:
        assert waiting.wait(5)  # only once the stage waits: it must have waited for this write
        store.record_success("gpu", healthy_gpu(), 0.01)

    writer = threading.Thread(target=land, daemon=True)
    writer.start()
    stage.await_inputs(store)
    assert store.states()["gpu"].up  # it returned after the first sample landed
    writer.join(5)
    stage.run_pass(store)
    assert store.snapshot().samples("llm_parallel_group_gpus")  # judged from the first sample, not an empty store


def test_does_not_wait_for_fresh_overdue_down_or_derived_inputs() -> None:
    clock = Offset()
    store = _gpu_store(clock)
    store.register("parallel", 1.0, derived=True)
    store.register("engine:a", 1.0)
    store.record_success("parallel", [], 0.01)
    store.record_failure("engine:a", SourceError("connection", "refused"), 0.01)
    stage = DeriveStage([Seen()], interval=1.0, timeout=1.0)
    assert stage.due_inputs(store, store.monotonic()) == {}  # the GPU is fresh: due in 1 s
    clock.offset += 0.9
    assert set(stage.due_inputs(store, store.monotonic())) == {"gpu"}  # derived and down ones never
    clock.offset += 1.0  # now overdue (stuck or slow): judge at once with what there is
    assert stage.due_inputs(store, store.monotonic()) == {}
    assert stage.await_inputs(store) == 0.0


def test_the_wait_is_bounded_when_a_due_input_never_lands() -> None:
    clock = Offset()
    store = _gpu_store(clock, interval=2.0)
    clock.offset += 1.9  # due in 0.1 s, late after 0.6 s
    stage = DeriveStage([DiagnosisStep(DiagnosisEngine())], interval=2.0, timeout=2.0)
    stage.register(store)
    waited = stage.await_inputs(store)
    assert 0.5 <= waited < 2.0  # it waited out the lateness slack, never a whole interval
    stage.run_pass(store)
    assert store.states()["diagnosis"].up  # and the pass still judges


def test_the_runner_group_runs_the_stage_and_each_step_keeps_its_source_name() -> None:
    store = SnapshotStore()
    store.register("gpu", 0.2)
    store.record_success("gpu", healthy_gpu() + engine(waiting=0, running=1, kv=0.1), 0.01)
    stage = DeriveStage([ParallelStep(None), CapacityStep(), DiagnosisStep(DiagnosisEngine())], interval=0.2, timeout=1.0)
    group = RunnerGroup(store, watch_period=0.05)
    runner = group.add(stage)
    assert runner.name == "derive"
    group.start()
    try:
        wait_until(lambda: all(store.states()[n].up for n in ("parallel", "capacity", "diagnosis")), 10, "every step up")
        assert store.snapshot().samples("llm_bottleneck_score")
    finally:
        group.stop(timeout=5)
    assert "derive" not in store.states()  # the stage itself is no source
