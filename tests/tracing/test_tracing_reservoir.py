"""exporter/tracing/reservoir.py: the slowest per window, the uniform sample, the lookup, the bounds."""

from __future__ import annotations

import gc
import math
import random
import threading
import tracemalloc
from dataclasses import replace

import pytest

from exporter.tracing.record import RequestRecord
from exporter.tracing.reservoir import BYTES_PER_RECORD, BYTES_PER_RECORD_MAX, RequestReservoir
from tests.tracing.spans import span_hex, trace_hex

T0 = 1_700_000_000.0


def rec(
    i: int, e2e: float | None = 1.0, finish: float | None = None, engine: str = "a", ttft: float | None = 0.1, **kw: object
) -> RequestRecord:
    """Request ``i`` of ``engine``, ending at ``finish`` (default T0 + i)."""
    end = T0 + i if finish is None else finish
    arrival = end - (e2e or 0.0)
    fields: dict[str, object] = {
        "engine": engine,
        "model": "m",
        "trace_id": trace_hex(i),
        "span_id": span_hex(trace_hex(i), "llm_request"),
        "request_id": f"cmpl-{i}",
        "arrival": arrival,
        "queue_seconds": 0.1,
        "prefill_seconds": 0.1,
        "decode_seconds": None if e2e is None else max(e2e - 0.2, 0.0),
        "ttft_seconds": ttft,
        "e2e_seconds": e2e,
        "prompt_tokens": 10,
        "completion_tokens": 10,
    }
    fields.update(kw)
    return RequestRecord(**fields)  # type: ignore[arg-type]


def reservoir(**kw: object) -> RequestReservoir:
    kw.setdefault("clock", lambda: T0 + 10**6)
    return RequestReservoir(**kw)  # type: ignore[arg-type]


def consistent(res: RequestReservoir) -> None:
    """The index holds exactly what the windows and samples hold, each counted per place."""
    places: dict[tuple[str, str], int] = {}
    for keep in res._engines.values():
        for heap in keep.windows.values():
            assert len(heap) <= res.k
            for _, _, r in heap:
                places[(r.trace_id, r.span_id)] = places.get((r.trace_id, r.span_id), 0) + 1
        assert len(keep.sample) <= res.sample_size
        assert len(keep.windows) <= res.windows
        for r in keep.sample:
            places[(r.trace_id, r.span_id)] = places.get((r.trace_id, r.span_id), 0) + 1
    indexed = {(t, s): held.places for t, spans in res._index.items() for s, held in spans.items()}
    assert indexed == places
    assert len(res) == len(places)


def test_keeps_the_k_slowest_of_each_window() -> None:
    res = reservoir(window_s=60, windows=3, k=3, sample_size=0)
    for i in range(60):  # one window: finishes T0-ish .. +59, windows split by finish // 60
        res.add(rec(i, e2e=float(i % 17) + 0.5, finish=60 * 10**7 + i))
    slow = res.slowest(10)
    assert [r.e2e_seconds for r in slow] == [16.5, 16.5, 16.5]
    assert len(res) == 3
    consistent(res)


def test_slowest_across_windows_and_engines() -> None:
    res = reservoir(window_s=10, windows=5, k=2, sample_size=0)
    for i in range(50):
        res.add(rec(i, e2e=float(i), finish=T0 + i, engine="a" if i % 2 else "b"))
    assert len(res) == 5 * 2 * 2
    top = res.slowest(3)
    assert [r.e2e_seconds for r in top] == [49.0, 48.0, 47.0]
    assert [r.e2e_seconds for r in res.slowest(3, engine="b")] == [48.0, 46.0, 38.0]
    assert res.slowest(0) == [] and res.slowest(5, engine="nope") == []
    consistent(res)


def test_slowest_beyond_what_the_windows_hold_draws_on_the_sample_each_once() -> None:
    """One window keeps its 3 slowest; asked for 10, the sampled requests below them follow, slowest first,
    and a request both places keep is listed once (``?slowest=N`` means the N slowest held)."""
    res = reservoir(window_s=60, windows=3, k=3, sample_size=100)
    base = 60 * (int(T0) // 60)
    for i in range(20):
        res.add(rec(i, e2e=float(i) + 0.5, finish=base + i))
    assert [r.e2e_seconds for r in res.slowest(3)] == [19.5, 18.5, 17.5]
    ten = res.slowest(10)
    assert [r.e2e_seconds for r in ten] == [19.5 - j for j in range(10)]
    assert len({(r.trace_id, r.span_id) for r in res.slowest(100)}) == 20 == len(res.slowest(100))
    # a request the sample holds with neither e2e nor TTFT is not ranked
    res.add(rec(99, e2e=None, ttft=None, finish=base + 30))
    assert all(r.trace_id != trace_hex(99) for r in res.slowest(100))
    consistent(res)


def test_ttft_ranks_when_e2e_is_unknown_and_neither_is_only_sampled() -> None:
    res = reservoir(k=5, sample_size=0)
    res.add(rec(1, e2e=None, ttft=3.0))
    res.add(rec(2, e2e=2.0))
    assert not res.add(rec(3, e2e=None, ttft=None))
    assert [r.trace_id for r in res.slowest(5)] == [trace_hex(1), trace_hex(2)]


def test_windows_roll_by_finish_time_not_the_clock() -> None:
    res = reservoir(window_s=60, windows=2, k=5, sample_size=0)
    base = 60 * (int(T0) // 60)
    res.add(rec(1, finish=base + 1))
    res.add(rec(2, finish=base + 61))
    assert len(res) == 2
    res.add(rec(3, finish=base + 121))  # a third window: the first rolls out, its record is let go
    assert {r.trace_id for r in res.slowest(10)} == {trace_hex(2), trace_hex(3)}
    assert res.by_trace_id(trace_hex(1)) == []
    assert not res.add(rec(4, finish=base + 5)), "too old for the recent windows"
    assert res.add(rec(5, finish=base + 70)), "late, but its window is still recent"
    consistent(res)


def test_a_far_future_record_is_refused() -> None:
    now = T0 + 1000
    res = RequestReservoir(window_s=60, clock=lambda: now)
    assert not res.add(rec(1, finish=now + 61))
    assert res.add(rec(2, finish=now + 59))
    assert res.refused["future"] == 1


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_records_are_refused(bad: float) -> None:
    res = reservoir()
    assert not res.add(replace(rec(1), e2e_seconds=bad))
    assert not res.add(replace(rec(2), arrival=bad))
    assert res.refused["invalid"] == 2 and len(res) == 0


def test_sample_is_bounded_and_seeded() -> None:
    a, b = reservoir(sample_size=20, k=0, seed=7), reservoir(sample_size=20, k=0, seed=7)
    for i in range(1000):
        a.add(rec(i))
        b.add(rec(i))
    assert len(a.sample()) == 20 == len(a)
    assert [r.trace_id for r in a.sample()] == [r.trace_id for r in b.sample()]
    assert a.seen("a") == 1000
    consistent(a)


def test_sample_is_uniform() -> None:
    """Algorithm R: each of N requests ends in the sample with probability S/N."""
    n, size, trials = 60, 6, 600
    hits = [0] * n
    records = [rec(i) for i in range(n)]
    for seed in range(trials):
        res = reservoir(sample_size=size, k=0, seed=seed)
        for r in records:
            res.add(r)
        for r in res.sample():
            hits[int(r.request_id.split("-")[1])] += 1
    expected = trials * size / n  # 60
    sd = math.sqrt(trials * (size / n) * (1 - size / n))  # ~7.3
    assert all(abs(h - expected) < 5 * sd for h in hits), hits
    # the early and the late halves are drawn alike (no bias to the first or the last)
    assert abs(sum(hits[: n // 2]) - sum(hits[n // 2 :])) < 5 * sd * math.sqrt(n)


def test_by_trace_id_and_shared_traces() -> None:
    res = reservoir(k=10, sample_size=10)
    tid = trace_hex(1)
    first = rec(1)
    second = replace(rec(1), span_id=span_hex(tid, "second"), arrival=first.arrival - 5)
    assert res.add(first) and res.add(second)
    assert res.by_trace_id(tid) == [second, first], "a caller's trace with two LLM calls, in arrival order"
    assert res.by_trace_id(tid.upper()) == [second, first]
    assert res.by_trace_id(trace_hex(99)) == []
    assert len(res) == 2
    consistent(res)


def test_a_retried_export_is_not_kept_twice() -> None:
    res = reservoir(k=10, sample_size=10)
    assert res.add(rec(1))
    assert not res.add(rec(1))
    assert res.refused["duplicate"] == 1 and len(res) == 1 and len(res.sample()) == 1


def test_engines_are_bounded() -> None:
    res = reservoir(max_engines=2)
    assert res.add(rec(1, engine="a")) and res.add(rec(2, engine="b"))
    assert not res.add(rec(3, engine="c"))
    assert res.engines() == ["a", "b"] and res.refused["engines"] == 1


def test_memory_is_bounded_whatever_arrives() -> None:
    windows, k, size = 4, 5, 30
    res = reservoir(window_s=10, windows=windows, k=k, sample_size=size, seed=1)
    rng = random.Random(3)
    for i in range(5000):
        res.add(rec(i, e2e=rng.uniform(0, 50), finish=T0 + rng.uniform(0, 2000), engine=rng.choice("xyz")))
    assert len(res) <= 3 * (windows * k + size)
    consistent(res)


@pytest.mark.parametrize(("text", "bound"), [(24, BYTES_PER_RECORD), (200, BYTES_PER_RECORD_MAX)])
def test_bytes_per_record_as_documented(text: int, bound: int) -> None:
    """The figure in exporter/tracing/reservoir.py's docstring, within 15 %: records built (fresh
    strings, as the normalizer makes them) and held by a reservoir that keeps them all."""
    n = 3000
    ids = [(trace_hex(i), span_hex(trace_hex(i), "s")) for i in range(n)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        res = reservoir(window_s=1e9, windows=1, k=n, sample_size=n)
        for i, (t, s) in enumerate(ids):
            res.add(
                RequestRecord(
                    engine="vllm-a",
                    model=f"{i:0{text}d}",
                    trace_id=bytes.fromhex(t).hex(),
                    span_id=bytes.fromhex(s).hex(),
                    request_id=f"r{i:0{text - 1}d}",
                    arrival=T0 + i * 0.001,
                    queue_seconds=0.1 + i * 1e-6,
                    prefill_seconds=0.2 + i * 1e-6,
                    decode_seconds=1.0 + i * 1e-6,
                    ttft_seconds=0.3 + i * 1e-6,
                    e2e_seconds=1.3 + i * 1e-6,
                    prompt_tokens=1000 + i,
                    completion_tokens=500 + i,
                )
            )
        gc.collect()
        per = (tracemalloc.get_traced_memory()[0] - before) / n
    finally:
        tracemalloc.stop()
    assert len(res) == n
    assert per <= bound * 1.15, f"{per:.0f} bytes per record; the docstring says about {bound}"


def test_thread_safety_smoke() -> None:
    res = reservoir(window_s=5, windows=3, k=4, sample_size=16, seed=2)
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(base: int) -> None:
        try:
            for i in range(1500):
                res.add(rec(base + i, e2e=(i * 7919 % 100) / 10, finish=T0 + i * 0.05, engine=f"e{base % 3}"))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            while not stop.is_set():
                for r in res.slowest(5):
                    res.by_trace_id(r.trace_id)
                res.sample()
                assert len(res) <= 3 * (3 * 4 + 16)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    writers = [threading.Thread(target=writer, args=(100_000 * (n + 1),)) for n in range(3)]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in writers + readers:
        t.start()
    for t in writers:
        t.join(timeout=60)
    stop.set()
    for t in readers:
        t.join(timeout=60)
    assert errors == []
    consistent(res)
