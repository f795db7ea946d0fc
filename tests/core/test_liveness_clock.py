"""A wall-clock step of +/-1 h leaves staleness and rates right; only exported timestamps follow it.

The wall clock is stepped by monkeypatching ``time.time`` itself, as NTP or
``date -s`` would step it for the whole process.
"""

from __future__ import annotations

import time

import pytest

from exporter.collector import meta_points
from exporter.diagnosis.window import Window
from exporter.samples import Sample
from exporter.store import SnapshotStore

LABELS = {"server": "a", "engine": "vllm", "model": "m", "rank": "", "reason": "stop"}
COUNTER = "llm_requests_finished_total"
WALL0 = 1_700_000_000.0


class SteppedWall:
    """A wall clock that runs with the monotonic one, plus whatever step was applied."""

    def __init__(self, mono: FakeMono) -> None:
        self.mono = mono
        self.offset = WALL0 - mono.now

    def __call__(self) -> float:
        return self.mono.now + self.offset


class FakeMono:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


def _last_success_exported(store: SnapshotStore, source: str) -> float:
    (value,) = [
        p.value
        for p in meta_points(store.states().values())
        if isinstance(p, Sample)
        and p.name == "llm_exporter_source_last_success_timestamp_seconds"
        and p.labels["source"] == source
    ]
    return value


@pytest.mark.parametrize("step", [3600.0, -3600.0])
def test_a_wall_clock_step_changes_neither_freshness_nor_rates(monkeypatch: pytest.MonkeyPatch, step: float) -> None:
    mono = FakeMono()
    wall = SteppedWall(mono)
    monkeypatch.setattr(time, "time", wall)
    store = SnapshotStore(monotonic=mono)  # the wall clock is the (patched) time.time
    store.register("engine:a", 1.0, timeout=0.5)
    window = Window(60.0)
    count = 0.0
    for second in range(12):
        count += 10.0  # 10 requests per (real) second
        store.record_success("engine:a", [Sample(COUNTER, LABELS, count)], 0.01)
        assert _last_success_exported(store, "engine:a") == pytest.approx(time.time())  # exported: wall time
        if second in (6, 11):
            wall.offset += step  # the clock steps between a sample and the next read
        snap = store.snapshot()
        assert snap.values(COUNTER) == [count], f"fresh values dropped at second {second}"
        window.add(snap)
        mono.now += 1.0
    assert window.span == pytest.approx(11.0)
    assert window.rate(COUNTER) == pytest.approx(10.0)
    assert window.counter_delta(COUNTER) == pytest.approx(110.0)
    # no more samples: the values go stale two intervals after the last one, whatever the wall clock says
    mono.now += 0.9  # 1.9 s after the last success
    assert store.snapshot().values(COUNTER) == [count]
    mono.now += 0.2  # 2.1 s
    assert store.snapshot().values(COUNTER) == []
    assert store.snapshot().source_up("engine:a")  # stale is not down: nothing failed


def test_default_clocks_keep_values_across_a_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the store's own clocks (real monotonic, patched wall): a step back of 1 h does not
    keep dead values alive, a step forward does not expire live ones."""
    real_time = time.time
    store = SnapshotStore()
    store.register("gpu", 0.1)
    store.record_success("gpu", [Sample("llm_gpu_power_watts", {"gpu": "0", "uuid": "u"}, 100.0)], 0.0)
    monkeypatch.setattr(time, "time", lambda: real_time() + 3600.0)
    assert store.snapshot().values("llm_gpu_power_watts") == [100.0]
    monkeypatch.setattr(time, "time", lambda: real_time() - 3600.0)
    time.sleep(0.25)  # > 2 intervals of real (monotonic) time
    assert store.snapshot().values("llm_gpu_power_watts") == []
    assert store.snapshot().timestamp == pytest.approx(real_time() - 3600.0, abs=5.0)  # the snapshot's wall time
