"""The join of a request with the verdict history over its life (exporter/tracing/join.py, history.py)."""

from __future__ import annotations

from exporter.diagnosis import signals as s
from exporter.diagnosis.verdict import Cause, Verdict
from exporter.store import Snapshot
from exporter.tracing.history import HistoryStep, Moment, VerdictHistory, moment_of
from exporter.tracing.join import explain
from exporter.tracing.record import RequestRecord


def record(
    arrival: float = 100.0, queue: float | None = 2.1, prefill: float | None = 0.3, decode: float | None = 1.0
) -> RequestRecord:
    ttft = None if queue is None or prefill is None else queue + prefill
    e2e = sum(x for x in (queue, prefill, decode) if x is not None)
    return RequestRecord("vllm", "m", "ab" * 16, "cd" * 8, "req-1", arrival, queue, prefill, decode, ttft, e2e, 2000, 40)


def kv_moment(t: float, primary: tuple[str, str] | None = ("memory", "kv_cache_pressure")) -> Moment:
    figures = {"kv_cache_usage": 1.0, "requests_waiting": 44.0, "preemptions_per_second": 10.0, "sm_active": 0.4}
    return Moment(t, "degraded" if primary else "healthy", primary, "KV cache 100 % full", figures)


def test_a_request_that_waited_is_told_the_queue_and_what_held_it() -> None:
    moments = [kv_moment(t) for t in (100.0, 101.0, 102.0, 103.0)]
    ex = explain(record(), moments)
    assert ex.primary == ("memory", "kv_cache_pressure")
    assert ex.sentence == (
        "TTFT 2.4 s of 3.4 s: 2.1 s in the queue, prefill 300 ms, decode 1.0 s for 40 tokens, while the KV cache was "
        "100 % full with 44 waiting and 10.0 preemptions/s -> memory/kv_cache_pressure"
    )
    assert ex.degraded_share == 1.0 and ex.moments == 4 and ex.figures["requests_waiting"] == 44.0


def test_a_request_slow_in_decode_is_told_the_gpu_and_the_thread() -> None:
    m = Moment(101.0, "degraded", ("scheduler", "serial_host_ceiling"), "", {"sm_active": 0.06, "busiest_thread_cpu": 0.99})
    ex = explain(record(queue=0.01, prefill=0.05, decode=3.0), [m])
    assert ex.sentence.endswith(
        "while SMs 6 % active with the busiest serving thread at 99 % of a core -> scheduler/serial_host_ceiling"
    )


def test_the_cause_named_most_wins_and_a_tie_goes_to_the_later() -> None:
    a, b = ("memory", "kv_cache_pressure"), ("hardware", "power_throttled")
    assert explain(record(), [kv_moment(100, a), kv_moment(101, b), kv_moment(102, b)]).primary == b
    assert explain(record(), [kv_moment(100, b), kv_moment(101, a)]).primary == a
    healthy = explain(record(), [kv_moment(100, None)])
    assert healthy.primary is None and healthy.sentence.endswith("; no bottleneck named") and healthy.degraded_share == 0.0


def test_nothing_recorded_is_said_not_guessed() -> None:
    ex = explain(record(), [])
    assert ex.primary is None and ex.degraded_share is None
    assert ex.sentence.endswith("no diagnosis cycle recorded while it lived")


def _verdict(t: float, kv: float) -> Verdict:
    cause = Cause("memory", "kv_cache_pressure", 0.9, {}, "", role="primary", summary="KV full")
    return Verdict(t, {}, [cause], "degraded", primary=cause, signals={s.KV_USAGE: kv, s.WAITING: 3.0})


def test_history_keeps_the_recent_cycles_bounded_and_reads_a_life() -> None:
    h = VerdictHistory(max_age_s=10.0, max_moments=5, max_engines=2)
    for t in range(20):
        h.record({"a": _verdict(float(t), t / 20), "b": _verdict(float(t), 0.1), "c": _verdict(float(t), 0.2)})
    assert h.span("a") == (15.0, 19.0)  # 5 moments at most
    assert h.span("c") is None  # over max_engines: not kept
    got = h.between("a", 16.0, 18.0)
    assert [m.timestamp for m in got] == [16.0, 17.0, 18.0]
    assert moment_of(_verdict(1.0, 0.5)).figures == {"kv_cache_usage": 0.5, "requests_waiting": 3.0}
    h.record({"a": _verdict(40.0, 0.1)})  # b stops: its moments age out
    assert h.span("b") is None and h.span("a") == (40.0, 40.0)


def test_the_step_records_each_new_cycle_once() -> None:
    h = VerdictHistory()
    latest = {"a": _verdict(1.0, 0.5)}
    step = HistoryStep(h, lambda: latest)
    snap = Snapshot(1.0, [], {})
    step.derive(snap)
    step.derive(snap)
    assert len(h.between("a", 0, 10)) == 1
    latest = {"a": _verdict(2.0, 0.5)}
    step.derive(snap)
    assert len(h.between("a", 0, 10)) == 2
