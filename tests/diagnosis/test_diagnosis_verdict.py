"""The verdict as a diagnosis: one primary from symptom to cause, quiet (with headroom) when nothing suffers.

Each test is a case the issue names, on synthetic snapshots built from schema names:
the symptom-first state, the one primary, the causal order, the confidence, headroom,
and the exceptions that stay warnings in a healthy service.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from exporter.diagnosis.thresholds import Thresholds
from exporter.samples import Point
from tests.diagnosis.diag_points import (
    engine,
    gpu,
    healthy_gpu,
    histogram,
    primary,
    process,
    run,
)

#: keyword arguments of gpu(): a batch-1 decode
DECODE_B1: dict[str, Any] = {"util": 0.83, "sm": 0.6, "tensor": 0.1, "dram": 0.6}


def latency(i: int, ttft: float = 0.2, itl: float = 0.03, queue: float | None = None, n: int = 30) -> list[Point]:
    """Cumulative latency histograms after ``i`` cycles of ``n`` requests each."""
    out: list[Point] = [
        histogram("llm_request_ttft_seconds", [ttft] * (n * i)),
        histogram("llm_request_inter_token_seconds", [itl] * (n * i)),
    ]
    if queue is not None:
        out.append(histogram("llm_scheduler_queue_seconds", [queue] * (n * i)))
    return out


def cycles(n: int, build: Callable[[int], list[Point]]) -> list[list[Point]]:
    return [build(i) for i in range(n)]


def test_a_healthy_batch1_decode_is_healthy_with_hbm_headroom_not_a_hardware_warning() -> None:
    v = run(
        cycles(6, lambda i: gpu(**DECODE_B1) + engine(waiting=0, running=1, kv=0.05, finished={"stop": 10.0 * i}) + latency(i))
    )[-1]
    assert v.state == "healthy" and v.primary is None and v.bottlenecks == []
    assert "memory_bandwidth_bound" not in v.holding  # 60 % is under its line; what matters is the headroom
    hw = v.layers["hardware"]
    assert hw.status == "ok" and hw.headroom is not None and abs(hw.headroom - 0.4) < 1e-6 and "40 % headroom" in hw.limit
    assert all(lv.status == "ok" for name, lv in v.layers.items() if name != "speculative_decoding")


def test_hbm_at_its_line_while_nobody_suffers_is_headroom_information() -> None:
    busy: dict[str, Any] = {"util": 0.95, "sm": 0.9, "tensor": 0.05, "dram": 0.8}
    v = run(cycles(6, lambda i: gpu(**busy) + engine(waiting=0, running=64, kv=0.3) + latency(i, itl=0.02)))[-1]
    assert v.state == "healthy" and "memory_bandwidth_bound" in v.holding and v.bottlenecks == []
    assert v.layers["hardware"].status == "ok" and v.layers["hardware"].headroom == 0.2


def test_an_overloaded_kv_cache_is_one_primary_not_three_layers_at_one() -> None:
    def build(i: int) -> list[Point]:
        return healthy_gpu() + engine(waiting=39, running=12, kv=1.0, preemptions=3.0 * i) + latency(i, ttft=3.3, queue=9.7)

    v = run(cycles(6, build))[-1]
    assert v.state == "degraded" and v.primary is not None
    assert (v.primary.layer, v.primary.cause) == ("memory", "kv_cache_pressure")
    assert [s.id for s in v.symptoms] == ["ttft_high", "queueing"]
    assert v.primary.chain.startswith("TTFT p95 ") and " ← 39 requests waiting, queue p95 " in v.primary.chain
    assert v.primary.chain.endswith("KV cache 100 % full, 3 preemptions/s")
    assert [name for name, lv in v.layers.items() if lv.status == "bottleneck"] == ["memory"]
    roles = {c.cause: c.role for c in v.bottlenecks}
    assert roles["kv_cache_pressure"] == "primary"
    assert roles.get("queue_backlog") == "symptom" and roles.get("slo_breach") == "symptom"
    assert v.layers["memory"].headroom == 0.0


def test_a_full_kv_cache_holding_requests_back_without_preemptions_is_a_memory_finding() -> None:
    """94 % full, 22 waiting, no preemption: admission limited by KV (the state vllm-doctor reports)."""
    v = run(
        cycles(
            6, lambda i: healthy_gpu() + engine(waiting=22, running=10, kv=0.94, preemptions=0) + latency(i, ttft=2.6, queue=2.0)
        )
    )[-1]
    assert v.state == "degraded" and primary(v) == "kv_cache_pressure"
    assert v.layers["memory"].status == "bottleneck"
    # with the cache roomy the same queue is a capacity misjudgment (slots, not memory)
    v = run(cycles(6, lambda i: healthy_gpu() + engine(waiting=22, running=2, kv=0.1) + latency(i, ttft=2.6, queue=2.0)))[-1]
    assert primary(v) == "kv_fragmentation_or_capacity_misjudged"


def test_requests_waiting_while_nothing_is_admitted_are_a_capacity_misjudgment_not_a_backlog() -> None:
    """The queue-time histogram does not move (nobody admitted), the cache is mostly free."""

    def build(i: int) -> list[Point]:
        return healthy_gpu() + engine(waiting=9, running=1, kv=0.08) + [histogram("llm_scheduler_queue_seconds", [0.1] * 5)]

    v = run(cycles(6, build))[-1]
    assert v.state == "degraded" and [s.id for s in v.symptoms] == ["queueing"]
    assert primary(v) == "kv_fragmentation_or_capacity_misjudged"
    assert "queue_backlog" not in {c.cause for c in v.bottlenecks if c.role == "primary"}


def test_first_party_waiting_reason_decides_memory_versus_other_waits() -> None:
    def build(capacity: float, deferred: float) -> Callable[[int], list[Point]]:
        def one(i: int) -> list[Point]:
            from tests.diagnosis.diag_points import ENG, _s

            return (
                healthy_gpu()
                + engine(waiting=capacity + deferred, running=2, kv=0.1)
                + latency(i, queue=1.5)
                + [
                    _s("llm_scheduler_requests_waiting_by_reason", {**ENG, "reason": "capacity"}, capacity),
                    _s("llm_scheduler_requests_waiting_by_reason", {**ENG, "reason": "deferred"}, deferred),
                ]
            )

        return one

    assert primary(run(cycles(6, build(9, 0)))[-1]) == "kv_fragmentation_or_capacity_misjudged"
    # deferred for a LoRA budget or a KV transfer: not a memory verdict; nothing explains it -> capacity
    v = run(cycles(6, build(0, 9)))[-1]
    assert "kv_fragmentation_or_capacity_misjudged" not in v.holding
    assert primary(v) == "queue_backlog" and v.primary is not None and "Capacity" in v.primary.advice
    # TTFT inside its SLO: the chain still says what stands behind the queue, not the queue alone
    assert v.primary.chain.endswith(" ← no layer at its limit: more load arrives than the service serves"), v.primary.chain


def test_a_busy_host_thread_outranks_the_queue_it_causes() -> None:
    def build(i: int) -> list[Point]:
        return (
            gpu(util=0.2, sm=0.05, tensor=0.01, dram=0.05)
            + process(0.99)
            + engine(waiting=30, running=64, kv=0.3)
            + latency(i, ttft=4.9, queue=4.9)
        )

    v = run(cycles(6, build))[-1]
    assert primary(v) == "serial_host_ceiling"
    assert {c.cause: c.role for c in v.bottlenecks}["queue_backlog"] == "symptom"
    assert v.primary is not None
    assert v.primary.chain.endswith("busiest serving thread at 99 % of a core while SMs are 5 % busy")


def test_batch1_host_ceiling_keeps_its_verdict_with_one_request_running_and_none_waiting() -> None:
    """A closed-loop client: one running, none waiting, ITL over the SLO, one thread at a core."""

    def build(i: int) -> list[Point]:
        return (
            gpu(util=0.3, sm=0.02, tensor=0.001, dram=0.02)
            + process(0.997)
            + engine(waiting=0, running=1, kv=0.01)
            + latency(i, itl=0.35)
        )

    v = run(cycles(6, build))[-1]
    assert [s.id for s in v.symptoms] == ["itl_high"]
    assert primary(v) == "serial_host_ceiling" and v.layers["scheduler"].status == "bottleneck"


def test_a_power_capped_gpu_outranks_compute_bound_for_the_same_symptoms() -> None:
    capped: dict[str, Any] = {
        "util": 0.98,
        "sm": 0.97,
        "tensor": 0.9,
        "dram": 0.2,
        "power": 699,
        "clock": 1.3e9,
        "reasons": ["sw_power_cap"],
    }
    v = run(cycles(6, lambda i: gpu(**capped) + engine(waiting=0, running=32, kv=0.4) + latency(i, ttft=3.0)))[-1]
    assert {"compute_bound", "power_or_thermal_throttling"} <= set(v.holding)
    assert primary(v) == "power_or_thermal_throttling"
    # issue 20: at the full clock the same work would leave the tensor pipes under their line
    # (0.9 x 0.66 = 0.59): the clock, not the math, is the limit, so compute-bound explains nothing
    # of its own and is headroom information (it was "contributing" under the fixed causal order)
    assert "compute_bound" not in {c.cause for c in v.bottlenecks}
    assert v.primary is not None
    assert v.primary.explains == ("ttft_high",) and "66 % of max" in v.primary.chain


def test_waste_and_danger_stay_warnings_in_a_healthy_service() -> None:
    capped: dict[str, Any] = {**DECODE_B1, "power": 699, "clock": 1.3e9, "reasons": ["sw_power_cap"]}

    def build(i: int) -> list[Point]:
        return (
            gpu(**capped)
            + engine(
                waiting=0,
                running=4,
                kv=0.95,
                preemptions=2.0 * i,
                drafted=400.0 * i,
                accepted=40.0 * i,
                finished={"stop": 10.0 * i},
            )
            + latency(i)
        )

    v = run(cycles(6, build))[-1]
    assert v.state == "healthy" and v.primary is None
    assert {c.cause: c.role for c in v.bottlenecks} == {
        "power_or_thermal_throttling": "warning",
        "kv_cache_pressure": "warning",
        "low_acceptance": "warning",
    }
    assert v.layers["memory"].status == "warning"


def test_gpu_only_data_gives_candidates_and_says_what_is_missing() -> None:
    pts = gpu(util=0.99, sm=0.0, tensor=0.0, dram=0.01, pcie=58e9)
    v = run([pts, pts, pts])[-1]
    assert v.state == "unknown" and v.primary is None
    assert {c.cause: c.role for c in v.bottlenecks} == {"pcie_transfer_bound": "candidate"}
    assert any("no engine metrics" in n for n in v.notices)
    assert v.layers["hardware"].status == "warning"  # never a bottleneck without a symptom


def test_nothing_measured_is_unknown_with_notices_not_a_clean_bill_of_health() -> None:
    v = run([[], []])[-1]
    assert v.state == "unknown" and all(lv.status == "unknown" for lv in v.layers.values())
    assert any("no GPU source" in n for n in v.notices) and any("not a clean bill of health" in n for n in v.notices)


def test_confidence_grows_with_time_held_and_independent_evidence() -> None:
    def build(i: int) -> list[Point]:
        return gpu(util=0.95, sm=0.9, tensor=0.05, dram=0.85) + engine(waiting=0, running=64, kv=0.3) + latency(i, itl=0.4)

    seen = [v.primary.confidence for v in run(cycles(8, build)) if v.primary]
    assert seen and seen == sorted(seen) and seen[-1] > seen[0]
    assert 0.5 < seen[-1] <= 1.0


def test_a_one_cycle_blip_does_not_degrade_the_state() -> None:
    def build(i: int) -> list[Point]:
        slow = i == 3
        return (
            healthy_gpu()
            + engine(waiting=0, running=4, kv=0.2, finished={"stop": 10.0 * i})
            + [
                histogram(
                    "llm_request_ttft_seconds", [0.2] * (30 * i) + ([5.0] * 40 if slow else []) + ([5.0] * 40 if i > 3 else [])
                )
            ]
        )

    states = [v.state for v in run(cycles(5, build), thresholds=Thresholds(symptom_persistence_cycles=2))]
    assert states[3] == "healthy"  # one cycle over the SLO is not yet a symptom


def test_a_queue_that_dips_under_its_line_keeps_the_primary_from_its_own_timeouts() -> None:
    """Clients time out and are turned away because the queue is long (causality.FOLLOWS): a cycle in
    which the waiting count dips under the backlog line (the queueing symptom still held) must not hand
    the primary to the timeouts, nor hysteresis keep it there once the queue is back."""

    def build(waiting: float) -> Callable[[int], list[Point]]:
        def one(i: int) -> list[Point]:
            finished = {"length": 10.0 * i, "abort": 30.0 * i}
            return (
                gpu(util=0.9, sm=0.5, tensor=0.2, dram=0.3)
                + engine(waiting=waiting, running=8, kv=0.7, finished=finished, rejected=10.0 * i)
                + latency(i, queue=1.5, itl=0.03)
            )

        return one

    depths = [40.0] * 6 + [4.0] * 3 + [40.0] * 6
    verdicts = run([build(w)(i) for i, w in enumerate(depths)])
    named = [primary(v) for v in verdicts if v.state == "degraded"]
    assert named and set(named) == {"queue_backlog"}, named
    roles = {c.cause: c.role for c in verdicts[-1].bottlenecks}
    assert roles["retries_and_timeouts"] == "contributing"
