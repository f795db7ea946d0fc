"""Every cause of the rules table, on synthetic snapshots: it fires on its signature,
and stays quiet on the near miss that distinguishes it from a neighbour."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from exporter.diagnosis import signals as s
from exporter.diagnosis.engine import Verdict
from exporter.diagnosis.rules import CAUSES, RULES
from exporter.diagnosis.thresholds import Thresholds
from exporter.samples import Point, Sample
from exporter.schema import LAYERS
from tests.diagnosis.diag_points import (
    ENG,
    GIB,
    causes,
    engine,
    gpu,
    healthy_gpu,
    histogram,
    primary,
    process,
    run,
    steady,
)

#: keyword arguments of gpu(): a GPU busy with large matrix multiplies
GEMM: dict[str, Any] = {"util": 0.95, "sm": 0.93, "tensor": 0.9, "dram": 0.17, "mem_used": 20 * GIB, "power": 650}


def last(cycles: list[list[Point]], **kw: Any) -> Verdict:
    return run(cycles, **kw)[-1]


def test_contract_cause_ids_per_layer() -> None:
    assert CAUSES == {
        "hardware": (
            "compute_bound",
            "memory_bandwidth_bound",
            "pcie_transfer_bound",
            "power_or_thermal_throttling",
            "memory_capacity_exhausted",
        ),
        # the launch settings against what the engine sees (issue 23)
        "operator": (
            "launch_bound_small_kernels",
            "tensor_cores_unused",
            "cuda_graphs_not_covering_batches",
            "prefill_chunk_too_small",
        ),
        # the prefix cache's hit ratio falling (issue 36, exporter/diagnosis/prefix_cache.py)
        "memory": (
            "kv_cache_pressure",
            "kv_fragmentation_or_capacity_misjudged",
            "context_reserved_not_used",
            "prefix_cache_hit_drop",
        ),
        "scheduler": ("serial_host_ceiling", "queue_backlog"),
        # the group's links near their capacity while its SMs wait (issue 33)
        "parallel": ("gpu_imbalance", "communication_bound"),
        "speculative_decoding": ("low_acceptance",),
        "application": (
            "batching_window_too_large",
            "retries_and_timeouts",
            "slo_breach",
            # the canary probe (issue 16, exporter/probe)
            "front_end_overhead",
            "engine_unresponsive",
            # the measured capacity at SLO (issue 22, exporter/capacity)
            "capacity_nearly_used",
        ),
    }
    assert {r.layer for r in RULES} == set(LAYERS)
    assert all(r.advice and r.evidence for r in RULES)


def test_healthy_service_has_no_cause_and_every_layer_judged_ok() -> None:
    pts = healthy_gpu(0) + healthy_gpu(1) + engine(finished={"stop": 0}, drafted=0, accepted=0) + process(0.4)
    cycles: list[list[Point]] = []
    for i in range(4):
        e = engine(finished={"stop": 10.0 * i}, drafted=100.0 * i, accepted=70.0 * i)
        hist: list[Point] = [
            histogram("llm_request_ttft_seconds", [0.2] * (10 * i)),
            histogram("llm_request_inter_token_seconds", [0.03] * (50 * i)),
        ]
        cycles.append(healthy_gpu(0) + healthy_gpu(1) + e + process(0.4) + hist)
    v = last(cycles)
    assert v.bottlenecks == []
    assert {n: lv.status for n, lv in v.layers.items()} == {layer: "ok" for layer in LAYERS}
    assert pts  # the builder itself produced points


# ---------------------------------------------------------------- hardware


def test_compute_bound_on_saturated_tensor_pipes() -> None:
    v = last(steady(gpu(**GEMM)))
    assert "compute_bound" in causes(v)
    # GPU data alone: nobody can say whether users suffer, so it is a candidate, not a bottleneck
    assert v.state == "unknown" and v.layers["hardware"].status == "warning"
    assert "memory_bandwidth_bound" not in causes(v)
    slow_prefill = [
        gpu(**GEMM) + engine(waiting=0, running=8) + [histogram("llm_request_ttft_seconds", [3.0] * n)] for n in (0, 20, 40, 60)
    ]
    v = last(slow_prefill)
    assert v.state == "degraded" and primary(v) == "compute_bound"
    assert v.layers["hardware"].status == "bottleneck"


def test_memory_bandwidth_bound_on_busy_dram_not_compute_bound() -> None:
    v = last(steady(gpu(util=0.83, sm=0.63, tensor=0.11, dram=0.72, mem_used=2 * GIB)))
    assert causes(v) == {"memory_bandwidth_bound"}
    ev = v.bottlenecks[0].evidence
    assert ev['llm_gpu_dram_active_ratio{gpu="0"}'] == 0.72


def test_pcie_transfer_bound_when_util_high_sms_idle_and_bus_busy() -> None:
    v = last(steady(gpu(util=0.99, sm=0.0, tensor=0.0, dram=0.01, pcie=58e9)))
    assert causes(v) == {"pcie_transfer_bound"}
    assert v.layers["operator"].status == "ok"


def test_small_pcie_traffic_is_not_a_transfer_bottleneck_but_launch_bound() -> None:
    v = last(steady(gpu(util=0.27, sm=0.001, tensor=0.0, dram=0.0, pcie=0.25e9)))
    assert causes(v) == {"launch_bound_small_kernels"}
    assert v.layers["hardware"].status == "ok"


def test_power_throttling_needs_a_lowered_clock_and_a_power_or_thermal_reason() -> None:
    throttled = last(steady(gpu(**GEMM, clock=1500e6, reasons=["sw_power_cap"])))
    assert "power_or_thermal_throttling" in causes(throttled)
    c = next(c for c in throttled.bottlenecks if c.cause == "power_or_thermal_throttling")
    assert c.evidence['(llm_gpu_sm_clock_hertz / llm_gpu_sm_clock_max_hertz){gpu="0"}'] == round(1500 / 1980, 6)
    assert c.evidence['llm_gpu_throttle_reason_active{gpu="0",reason="sw_power_cap"}'] == 1.0
    thermal = last(steady(gpu(**GEMM, clock=1200e6, reasons=["hw_thermal_slowdown"])))
    assert "power_or_thermal_throttling" in causes(thermal)
    # a lowered clock with no power/thermal reason (e.g. application clocks) is not throttling
    capped_by_user = last(steady(gpu(**{**GEMM, "power": 400}, clock=1500e6, reasons=[])))
    assert "power_or_thermal_throttling" not in causes(capped_by_user)
    # the idle reason with an idle clock is not throttling either
    idle = last(steady(gpu(util=0.0, sm=0.0, tensor=0.0, dram=0.0, clock=345e6, power=81, reasons=["gpu_idle"])))
    assert causes(idle) == set()


def test_memory_capacity_exhausted_above_ratio_only() -> None:
    full = last(steady(gpu(**{**GEMM, "mem_used": 139.5 * GIB})))
    assert "memory_capacity_exhausted" in causes(full)
    vllm_default = last(steady(gpu(**{**GEMM, "mem_used": 0.9 * 141 * GIB})))
    assert "memory_capacity_exhausted" not in causes(vllm_default)


# ---------------------------------------------------------------- operator


def test_launch_bound_gives_way_to_serial_host_ceiling_when_a_thread_is_saturated() -> None:
    sig = gpu(util=0.27, sm=0.001, tensor=0.0, dram=0.0, pcie=0.25e9)
    v = last(steady(sig + process(1.0)))
    assert "launch_bound_small_kernels" not in causes(v)
    assert "serial_host_ceiling" in causes(v)


def test_tensor_cores_unused_when_sms_busy_without_tensor_or_dram() -> None:
    v = last(steady(gpu(util=0.9, sm=0.8, tensor=0.0, dram=0.3)))
    assert causes(v) == {"tensor_cores_unused"}
    copy = last(steady(gpu(util=0.98, sm=0.97, tensor=0.0, dram=0.87)))
    assert causes(copy) == {"memory_bandwidth_bound"}


# ---------------------------------------------------------------- memory


def test_kv_cache_pressure_needs_full_cache_and_rising_preemptions() -> None:
    rising = run([healthy_gpu() + engine(kv=0.97, preemptions=p, waiting=3) for p in (0, 3, 6)])
    assert "kv_cache_pressure" not in causes(rising[0])  # one snapshot: no rate yet
    assert "kv_cache_pressure" in causes(rising[-1])
    flat = last([healthy_gpu() + engine(kv=0.97, preemptions=5) for _ in range(3)])
    assert "kv_cache_pressure" not in causes(flat)
    roomy = last([healthy_gpu() + engine(kv=0.3, preemptions=p) for p in (0, 3, 6)])
    assert "kv_cache_pressure" not in causes(roomy)
    # a real CPU vLLM with 10 blocks (9 usable): the sampled gauge reads 8/9 = 0.889 between
    # steps while the engine preempts 6 times a second; the preemptions prove the cache full
    sampled = last([healthy_gpu() + engine(kv=0.889, preemptions=p, waiting=7) for p in (0, 12, 24)])
    assert "kv_cache_pressure" in causes(sampled)


def test_kv_fragmentation_when_requests_wait_with_most_of_the_cache_free() -> None:
    v = last(steady(healthy_gpu() + engine(waiting=6, running=2, kv=0.2)))
    assert "kv_fragmentation_or_capacity_misjudged" in causes(v)
    assert last(steady(healthy_gpu() + engine(waiting=0, running=2, kv=0.2))).bottlenecks == []
    assert "kv_fragmentation_or_capacity_misjudged" not in causes(last(steady(healthy_gpu() + engine(waiting=6, kv=0.8))))
    # requests held while the GPU idles are a batching window, not a misjudged cache
    idle = gpu(util=0.2, sm=0.1, tensor=0.05, dram=0.1)
    assert "kv_fragmentation_or_capacity_misjudged" not in causes(last(steady(idle + engine(waiting=6, running=2, kv=0.2))))


def test_kv_fragmentation_not_claimed_while_a_gpu_is_compute_bound_either_way() -> None:
    """Slots full with the cache free is an admission limit only while a larger batch could run faster:
    not with the tensor pipes at their line, nor with the SMs busy while HBM is not (the other half of
    ``compute_bound``: a power-capped clock makes the same batch keep its SMs busier)."""
    queued = engine(waiting=6, running=2, kv=0.2)
    sm_busy = gpu(util=0.97, sm=0.9, tensor=0.4, dram=0.3, clock=1200e6, power=400, power_limit=400)
    v = last(steady(sm_busy + queued))
    assert "compute_bound" in causes(v) and "kv_fragmentation_or_capacity_misjudged" not in causes(v)
    tensor_busy = gpu(util=0.97, sm=0.9, tensor=0.7, dram=0.8)
    assert "kv_fragmentation_or_capacity_misjudged" not in causes(last(steady(tensor_busy + queued)))
    # SMs as busy but HBM at its line: a bandwidth-bound decode, where more sequences per weight read help
    hbm_bound = gpu(util=0.97, sm=0.9, tensor=0.4, dram=0.8)
    named = last(steady(hbm_bound + queued))
    misjudged = next(c for c in named.bottlenecks if c.cause == "kv_fragmentation_or_capacity_misjudged")
    # the figures the exclusion read are its evidence
    assert misjudged.evidence[s.SM_MAX] == 0.9 and misjudged.evidence[s.DRAM_MAX] == 0.8
    # DRAM activity unknown: the SM way is not claimed (as compute_bound needs it too)
    no_dram = gpu(util=0.97, sm=0.9, tensor=0.4)
    got = last(steady(no_dram + queued))
    assert "kv_fragmentation_or_capacity_misjudged" in causes(got), got.bottlenecks


def test_kv_fragmentation_needs_sustained_queueing_where_queue_time_is_known() -> None:
    """With a queue-time histogram, one waiting request on a healthy server is not enough."""
    busy = gpu(util=0.85, sm=0.68, tensor=0.3, dram=0.55)

    def cycles(queue_wait: float) -> list[list[Point]]:
        return [
            busy + engine(waiting=w, running=14, kv=0.2) + [histogram("llm_scheduler_queue_seconds", [queue_wait] * n)]
            for w, n in ((0, 0), (1, 20), (0, 40))
        ]

    assert "kv_fragmentation_or_capacity_misjudged" in causes(last(cycles(queue_wait=0.4)))
    assert "kv_fragmentation_or_capacity_misjudged" not in causes(last(cycles(queue_wait=0.01)))


def test_waits_the_queue_time_histogram_proves_are_judged_over_the_span_they_waited() -> None:
    """The gauges read 0 running, 0 waiting in every look of the recent seconds (scrapes that
    land between bursts, or only succeed when the server is momentarily idle) while the
    queue-time histogram shows the admitted requests waited ~4 s: the queue, its capacity
    reason and the one running request are read over that span instead."""
    busy = gpu(util=0.85, sm=0.68, tensor=0.3, dram=0.55)

    def cycles(queue_wait: float) -> list[list[Point]]:
        out = []
        for i in range(12):
            queued = i < 5  # 9 waiting for the one slot, then the gauges read 0 / 0
            points = busy + engine(waiting=9 if queued else 0, running=1 if queued else 0, kv=0.13)
            points.append(_capacity(9 if queued else 0))
            points.append(histogram("llm_scheduler_queue_seconds", [queue_wait] * (6 * i)))
            out.append(points)
        return out

    long_waits = run(cycles(queue_wait=4.0))[-1]
    assert long_waits.signals[s.WAITING_MAX] == 0 and long_waits.signals[s.WAITING_MAX_QUEUE] == 9
    assert long_waits.signals[s.WAITING_CAPACITY_MAX_QUEUE] == 9 and long_waits.signals[s.RUNNING_MAX_QUEUE] == 1
    assert "kv_fragmentation_or_capacity_misjudged" in causes(long_waits)
    # waits of 10 ms keep the span at the recent seconds: nothing waits there, nothing is claimed
    short_waits = run(cycles(queue_wait=0.01))[-1]
    assert short_waits.signals[s.WAITING_MAX_QUEUE] == 0
    assert "kv_fragmentation_or_capacity_misjudged" not in causes(short_waits)


def _capacity(waiting: float) -> Sample:
    return Sample("llm_scheduler_requests_waiting_by_reason", {**ENG, "reason": "capacity"}, float(waiting))


# ---------------------------------------------------------------- scheduler


def test_serial_host_ceiling_busy_thread_idle_sms_work_queued() -> None:
    v = last(steady(gpu(util=0.08, sm=0.02, tensor=0.001, dram=0.02) + process(0.997) + engine(waiting=5, running=1, kv=0.1)))
    assert "serial_host_ceiling" in causes(v)
    assert v.layers["scheduler"].status == "bottleneck"
    c = next(c for c in v.bottlenecks if c.cause == "serial_host_ceiling")
    assert c.evidence["max(llm_process_busiest_thread_cpu_ratio)"] == 0.997
    # the GPU's SMs are busy: the host is not the ceiling
    assert "serial_host_ceiling" not in causes(last(steady(gpu(**GEMM) + process(0.997) + engine(waiting=5, running=1))))
    # no work at all (a server loading its model burns a core too)
    assert "serial_host_ceiling" not in causes(
        last(steady(gpu(util=0, sm=0, tensor=0, dram=0) + process(0.99) + engine(waiting=0, running=0)))
    )


def test_a_starved_serial_thread_is_a_host_ceiling_too() -> None:
    """On a contended node the scheduler thread gets 30 % of a core but wants all of it."""
    idle_gpu = gpu(util=0.05, sm=0.04, tensor=0.01, dram=0.03)
    starved = last(steady(idle_gpu + process(0.3, demand=1.0) + engine(waiting=40, running=64, kv=0.3)))
    c = next(c for c in starved.bottlenecks if c.cause == "serial_host_ceiling")
    assert c.evidence["max(llm_process_busiest_thread_cpu_demand_ratio)"] == 1.0
    relaxed = last(steady(idle_gpu + process(0.3, demand=0.4) + engine(waiting=40, running=64, kv=0.3)))
    assert "serial_host_ceiling" not in causes(relaxed)


def test_queue_backlog_above_threshold_only() -> None:
    assert "queue_backlog" in causes(last(steady(gpu(**GEMM) + engine(waiting=20, running=64, kv=0.7))))
    # a few requests waiting now and then (the queue drains between looks) is no backlog
    flicker = [gpu(**GEMM) + engine(waiting=w, running=64, kv=0.7) for w in (3, 0, 3)]
    assert "queue_backlog" not in causes(last(flicker))
    # ... but a queue that never drains is, even a short one
    assert "queue_backlog" in causes(last(steady(gpu(**GEMM) + engine(waiting=3, running=64, kv=0.7))))


# ---------------------------------------------------------------- parallel


def test_gpu_imbalance_in_the_default_group_of_all_gpus() -> None:
    pts = [p for i, sm in enumerate((0.8, 0.2, 0.2, 0.2)) for p in gpu(i, util=0.9, sm=sm, tensor=sm / 2, dram=0.3)]
    v = last(steady(pts))
    assert causes(v) == {"gpu_imbalance"}
    ev = v.bottlenecks[0].evidence
    assert ev['llm_parallel_sm_active_skew_ratio{group="all"}'] == round(0.8 / 0.35, 5)
    balanced = [p for i, sm in enumerate((0.5, 0.5, 0.45, 0.55)) for p in gpu(i, util=0.9, sm=sm, tensor=0.2, dram=0.3)]
    assert last(steady(balanced)).bottlenecks == []
    idle = [p for i, sm in enumerate((0.02, 0.0, 0.0, 0.0)) for p in gpu(i, util=0.05, sm=sm, tensor=0.0, dram=0.0)]
    assert last(steady(idle)).bottlenecks == []


def test_gpu_imbalance_names_the_configured_group() -> None:
    pts = [p for i, sm in enumerate((0.8, 0.1, 0.5, 0.5)) for p in gpu(i, util=0.9, sm=sm, tensor=0.2, dram=0.3)]
    v = last(steady(pts), groups={"tp0": [0, 1], "tp1": [2, 3]})
    assert causes(v) == {"gpu_imbalance"}
    assert any('group="tp0"' in k for k in v.bottlenecks[0].evidence)


# ---------------------------------------------------------------- speculative decoding


def test_low_acceptance_over_the_window() -> None:
    low = run([healthy_gpu() + engine(drafted=d, accepted=d * 0.2) for d in (0, 500, 1000)])
    assert "low_acceptance" in causes(low[-1])
    good = run([healthy_gpu() + engine(drafted=d, accepted=d * 0.8) for d in (0, 500, 1000)])
    assert "low_acceptance" not in causes(good[-1])
    too_few = run([healthy_gpu() + engine(drafted=d, accepted=0) for d in (0, 5, 10)])
    assert "low_acceptance" not in causes(too_few[-1])


# ---------------------------------------------------------------- application


def _ttft_cycles(sm: float, slow: float, waiting: float = 0) -> list[list[Point]]:
    return [
        gpu(util=0.2, sm=sm, tensor=0.05, dram=0.1)
        + engine(waiting=waiting, running=2, kv=0.2)
        + [histogram("llm_request_ttft_seconds", [slow] * n)]
        for n in (0, 20, 40)
    ]


def test_batching_window_when_ttft_high_while_gpu_idles() -> None:
    v = last(_ttft_cycles(sm=0.1, slow=1.0, waiting=3))
    assert causes(v) == {"batching_window_too_large", "queue_backlog"}
    # requests wait behind the window: the window, not the queue, is the primary
    assert v.state == "degraded" and primary(v) == "batching_window_too_large"
    assert {c.cause: c.role for c in v.bottlenecks} == {"batching_window_too_large": "primary", "queue_backlog": "symptom"}
    busy = last(_ttft_cycles(sm=0.9, slow=1.5))
    assert "batching_window_too_large" not in causes(busy)
    fast = last(_ttft_cycles(sm=0.1, slow=0.1))
    assert "batching_window_too_large" not in causes(fast)
    # the GPU was busy earlier in the window: requests queued behind work, not held back
    was_busy = _ttft_cycles(sm=0.1, slow=1.0, waiting=3)
    was_busy[0] = (
        gpu(util=0.9, sm=0.7, tensor=0.3, dram=0.5)
        + engine(waiting=3, running=2, kv=0.2)
        + [histogram("llm_request_ttft_seconds", [])]
    )
    assert "batching_window_too_large" not in causes(last(was_busy))


def _after_a_fast_hour(
    name: str, slow: float, gpu_points: list[Point], waiting: Sequence[float] = (0,) * 12, kv: float = 0.2
) -> list[list[Point]]:
    """12 cycles: 1000 fast requests long ago (cycle 1), then 6 slow ones per cycle from cycle 7."""
    out = []
    for i in range(12):
        obs = ([0.01] * 1000 if i >= 1 else []) + [slow] * (6 * max(0, i - 6))
        out.append(gpu_points + engine(waiting=waiting[i], running=14, kv=kv) + [histogram(name, obs)])
    return out


def test_batching_window_judged_on_the_recent_requests_not_the_diluted_window() -> None:
    idle = gpu(util=0.2, sm=0.1, tensor=0.05, dram=0.1)
    v = last(_after_a_fast_hour("llm_request_ttft_seconds", 1.0, idle, waiting=(2,) * 12))
    named = next(c for c in v.bottlenecks if c.cause == "batching_window_too_large")
    assert named.evidence["p95(llm_request_ttft_seconds)"] < 0.5  # 30 slow of 1030: not the window's p95
    assert named.evidence["p95_over_recent(llm_request_ttft_seconds)"] >= 0.5


def test_batching_window_not_on_the_tail_of_a_drained_backlog() -> None:
    """Slow first tokens that waited behind a queue that has just drained are no batching window."""
    idle = gpu(util=0.2, sm=0.1, tensor=0.05, dram=0.1)
    drained = (0, 0, 0, 0, 0, 0, 30, 30, 0, 0, 0, 0)
    assert "batching_window_too_large" not in causes(last(_after_a_fast_hour("llm_request_ttft_seconds", 1.0, idle, drained)))


def test_kv_fragmentation_judged_on_the_recent_queue_times() -> None:
    busy = gpu(util=0.85, sm=0.68, tensor=0.3, dram=0.55)
    v = last(_after_a_fast_hour("llm_scheduler_queue_seconds", 0.8, busy, waiting=(0,) * 7 + (10,) * 5))
    assert "kv_fragmentation_or_capacity_misjudged" in causes(v)
    quiet = last(_after_a_fast_hour("llm_scheduler_queue_seconds", 0.01, busy, waiting=(0,) * 7 + (10,) * 5))
    assert "kv_fragmentation_or_capacity_misjudged" not in causes(quiet)


def test_retries_and_timeouts_share_of_failed_requests() -> None:
    failing = run([healthy_gpu() + engine(finished={"stop": 4.0 * i, "abort": 1.0 * i}) for i in range(3)])
    c = next(c for c in failing[-1].bottlenecks if c.cause == "retries_and_timeouts")
    assert c.evidence["failed_or_rejected_share"] == 0.2
    rejected = run([healthy_gpu() + engine(finished={"stop": 10.0 * i}, rejected=3.0 * i) for i in range(3)])
    assert "retries_and_timeouts" in causes(rejected[-1])
    fine = run([healthy_gpu() + engine(finished={"stop": 100.0 * i, "abort": 1.0 * i}) for i in range(3)])
    assert "retries_and_timeouts" not in causes(fine[-1])


def test_slo_breach_against_configured_slos() -> None:
    cycles = [
        healthy_gpu()
        + engine()
        + [histogram("llm_request_inter_token_seconds", [0.4] * n), histogram("llm_request_ttft_seconds", [0.3] * n)]
        for n in (0, 50, 100)
    ]
    v = last(cycles)
    assert "slo_breach" in causes(v)
    c = next(c for c in v.bottlenecks if c.cause == "slo_breach")
    assert c.evidence["p95(llm_request_inter_token_seconds)"] > 0.2
    relaxed = last(cycles, thresholds=Thresholds.from_mapping({"slo_itl_p95_seconds": 1.0}))
    assert "slo_breach" not in causes(relaxed)
