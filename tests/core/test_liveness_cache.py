"""The /metrics cache expires at the store's earliest deadline, even with no new writes."""

from __future__ import annotations

from exporter.collector import ExpositionCache
from exporter.samples import Sample
from exporter.store import SnapshotStore

POWER = b'llm_gpu_power_watts{gpu="0",uuid="u"} 100.0'
WAITING = b'llm_scheduler_requests_waiting{engine="",model="",rank="",server="a"} 3.0'


class FakeMono:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _store() -> tuple[FakeMono, SnapshotStore]:
    mono = FakeMono()
    store = SnapshotStore(clock=lambda: 1.7e9, monotonic=mono)
    store.register("gpu", 1.0, timeout=0.5)
    store.register("engine:a", 5.0, timeout=3.0)
    store.record_success("gpu", [Sample("llm_gpu_power_watts", {"gpu": "0", "uuid": "u"}, 100.0)], 0.0)
    store.record_success("engine:a", [Sample("llm_scheduler_requests_waiting", {"server": "a"}, 3.0)], 0.0)
    return mono, store


def test_series_the_store_expired_are_never_served_from_the_cache() -> None:
    mono, store = _store()
    cache = ExpositionCache(store)
    for openmetrics in (False, True):
        body = cache.render(openmetrics)
        assert POWER.replace(b" 100.0", b"") in body and b"llm_scheduler_requests_waiting" in body
        mono.now += 1.9
        assert cache.render(openmetrics) is body  # nothing expired yet: the same bytes
        mono.now -= 1.9
    mono.now += 2.1  # the GPU's values are now older than two of its intervals; no write happened
    assert store.snapshot().values("llm_gpu_power_watts") == []
    for openmetrics in (False, True):
        body = cache.render(openmetrics)
        assert b"llm_gpu_power_watts{" not in body
        assert b"llm_scheduler_requests_waiting{" in body  # the engine's 5 s interval keeps it fresh
    assert WAITING in cache.render()
    mono.now += 8.0  # 10.1 s: the engine's values expire too
    assert b"llm_scheduler_requests_waiting{" not in cache.render()


def test_a_timed_out_attempt_shows_on_metrics_without_a_write() -> None:
    mono, store = _store()
    cache = ExpositionCache(store)
    store.begin_attempt("engine:a")
    body = cache.render()
    assert b'llm_exporter_source_up{source="engine:a"} 1.0' in body
    mono.now += 0.9
    assert cache.render() is body  # well within its 3 s timeout (and the GPU still fresh)
    mono.now += 2.0
    assert b'llm_exporter_source_up{source="engine:a"} 1.0' in cache.render()  # 2.9 s: still within it
    mono.now += 0.2
    body = cache.render()
    assert b'llm_exporter_source_up{source="engine:a"} 0.0' in body
    assert b'llm_exporter_source_errors_total{reason="timeout",source="engine:a"} 1.0' in body
    assert b"llm_scheduler_requests_waiting{" not in body


def test_snapshot_valid_until_is_the_earliest_deadline() -> None:
    mono, store = _store()
    assert store.snapshot().valid_until == 102.0  # the GPU's staleness, 2 x 1 s after its success
    mono.now += 2.5
    assert store.snapshot().valid_until == 110.0  # then the engine's, 2 x 5 s
    store.begin_attempt("engine:a")
    assert store.snapshot().valid_until == 105.5  # an attempt in flight times out first
