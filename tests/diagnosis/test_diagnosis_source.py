"""The diagnosis cycle judges fresh data: it waits, briefly and boundedly, for due input samples."""

from __future__ import annotations

from exporter.diagnosis.engine import DiagnosisEngine
from exporter.diagnosis.source import DiagnosisSource
from exporter.store import SnapshotStore
from tests.diagnosis.diag_points import healthy_gpu


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def setup(interval: float = 1.0):
    clock = Clock()
    store = SnapshotStore(clock=clock)
    for name in ("gpu", "engine:a", "parallel"):
        store.register(name, interval)
    return clock, store


def source(store, clock, on_sleep=None, interval: float = 1.0) -> DiagnosisSource:
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        clock.t += s
        if on_sleep:
            on_sleep(clock.t)

    src = DiagnosisSource(store, DiagnosisEngine(), interval, timeout=1.0, clock=clock, sleep=sleep)
    src.slept = slept  # type: ignore[attr-defined]
    return src


def test_waits_for_an_input_about_to_land_then_judges_its_sample():
    clock, store = setup()
    store.record_success("gpu", healthy_gpu(), 0.01)
    clock.t += 0.98  # the engine landed 0.98 s ago: its next sample is due in 0.02 s
    store.record_success("engine:a", [], 0.01)
    clock.t += 0.0
    store_gpu_at = clock.t + 0.03

    def land(now: float) -> None:
        if now >= store_gpu_at and store.states()["gpu"].last_success < store_gpu_at:
            store.record_success("gpu", healthy_gpu(), 0.01)

    src = source(store, clock, land)
    waited = src.await_inputs()
    assert 0.02 <= waited <= 0.1
    assert store.states()["gpu"].last_success >= store_gpu_at


def test_does_not_wait_for_fresh_overdue_down_or_derived_inputs():
    clock, store = setup()
    store.record_success("gpu", healthy_gpu(), 0.01)  # fresh: due in 1 s
    store.record_success("parallel", [], 0.01)  # derived: never waited for
    store.record_success("engine:a", [], 0.01)
    clock.t += 0.3
    src = source(store, clock)
    assert src.await_inputs() == 0.0 and src.slept == []
    clock.t += 1.5  # now both are overdue (stuck or slow): judge at once with what there is
    assert src.await_inputs() == 0.0 and src.slept == []


def test_the_wait_is_bounded_when_a_due_input_never_lands():
    clock, store = setup()
    store.record_success("gpu", healthy_gpu(), 0.01)
    clock.t += 0.9
    src = source(store, clock)
    waited = src.await_inputs()
    assert 0.1 <= waited <= 0.55  # up to its lateness slack, never past half our interval
    assert src.sample().points  # and the cycle still judges
