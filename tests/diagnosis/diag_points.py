"""Builders of schema points for synthetic diagnosis tests (names from exporter.schema)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from exporter.diagnosis.engine import DiagnosisEngine, Verdict
from exporter.diagnosis.thresholds import Thresholds
from exporter.samples import HistogramSample, Point, Sample
from exporter.schema import SPECS
from exporter.store import Snapshot

GIB = 1024**3

ENG = {"server": "sim", "engine": "vllm", "model": "m", "rank": ""}


def _s(name: str, labels: dict[str, str], value: float) -> Sample:
    assert name in SPECS, name
    return Sample(name, labels, float(value))


def gpu(
    index: int = 0,
    *,
    util: float | None = None,
    sm: float | None = None,
    tensor: float | None = None,
    dram: float | None = None,
    occupancy: float | None = None,
    mem_used: float | None = None,
    mem_total: float | None = 141 * GIB,
    power: float | None = None,
    power_limit: float | None = 700.0,
    clock: float | None = 1980e6,
    clock_max: float | None = 1980e6,
    pcie: float | None = None,
    nvlink: float | None = None,
    temp: float | None = None,
    reasons: Iterable[str] = (),
) -> list[Point]:
    """One GPU's points; a None argument leaves that metric absent."""
    labels = {"gpu": str(index), "uuid": f"GPU-{index}"}
    values = {
        "llm_gpu_utilization_ratio": util,
        "llm_gpu_sm_active_ratio": sm,
        "llm_gpu_tensor_active_ratio": tensor,
        "llm_gpu_dram_active_ratio": dram,
        "llm_gpu_sm_occupancy_ratio": occupancy,
        "llm_gpu_memory_used_bytes": mem_used,
        "llm_gpu_memory_total_bytes": mem_total,
        "llm_gpu_power_watts": power,
        "llm_gpu_power_limit_watts": power_limit,
        "llm_gpu_sm_clock_hertz": clock,
        "llm_gpu_sm_clock_max_hertz": clock_max,
        "llm_gpu_temperature_celsius": temp,
    }
    points: list[Point] = [_s("llm_gpu_up", labels, 1.0)]
    points += [_s(n, labels, v) for n, v in values.items() if v is not None]
    if pcie is not None:
        points.append(_s("llm_gpu_pcie_transmit_bytes_per_second", labels, pcie / 2))
        points.append(_s("llm_gpu_pcie_receive_bytes_per_second", labels, pcie / 2))
    if nvlink is not None:
        points.append(_s("llm_gpu_nvlink_transmit_bytes_per_second", labels, nvlink / 2))
        points.append(_s("llm_gpu_nvlink_receive_bytes_per_second", labels, nvlink / 2))
    active = set(reasons)
    for reason in (
        "gpu_idle",
        "sw_power_cap",
        "hw_slowdown",
        "sw_thermal_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
    ):
        points.append(_s("llm_gpu_throttle_reason_active", {**labels, "reason": reason}, 1.0 if reason in active else 0.0))
    return points


def healthy_gpu(index: int = 0) -> list[Point]:
    """A GPU doing moderate, balanced decode work: nothing at a limit."""
    return gpu(index, util=0.6, sm=0.45, tensor=0.2, dram=0.4, mem_used=100 * GIB, power=400, pcie=0.1e9)


def engine(
    *,
    waiting: float | None = 0,
    running: float | None = 4,
    kv: float | None = 0.4,
    preemptions: float | None = 0,
    finished: dict[str, float] | None = None,
    rejected: float | None = None,
    drafted: float | None = None,
    accepted: float | None = None,
) -> list[Point]:
    vals = {
        "llm_scheduler_requests_waiting": waiting,
        "llm_scheduler_requests_running": running,
        "llm_kv_cache_usage_ratio": kv,
        "llm_kv_cache_preemptions_total": preemptions,
        "llm_spec_decode_draft_tokens_total": drafted,
        "llm_spec_decode_accepted_tokens_total": accepted,
    }
    points: list[Point] = [_s(n, ENG, v) for n, v in vals.items() if v is not None]
    for reason, count in (finished or {}).items():
        points.append(_s("llm_requests_finished_total", {**ENG, "reason": reason}, count))
    if rejected is not None:
        points.append(_s("llm_requests_rejected_total", {**ENG, "reason": "queue_full"}, rejected))
    return points


def process(busiest: float, total: float | None = None, server: str = "sim", demand: float | None = None) -> list[Point]:
    labels = {"server": server}
    points: list[Point] = [
        _s("llm_process_busiest_thread_cpu_ratio", labels, busiest),
        _s("llm_process_cpu_ratio", labels, busiest if total is None else total),
    ]
    if demand is not None:
        points.append(_s("llm_process_busiest_thread_cpu_demand_ratio", labels, demand))
    return points


BOUNDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, math.inf)


def histogram(name: str, observations: Iterable[float], bounds: tuple[float, ...] = BOUNDS) -> HistogramSample:
    """A cumulative histogram of ``observations`` under engine labels."""
    obs = list(observations)
    buckets = tuple((le, float(sum(1 for o in obs if o <= le))) for le in bounds)
    return HistogramSample(name, ENG, buckets, float(sum(obs)), float(len(obs)))


def run(
    cycles: list[list[Point]],
    thresholds: Thresholds | None = None,
    interval: float = 1.0,
    groups: dict[str, list[int]] | None = None,
) -> list[Verdict]:
    """Feed one snapshot per cycle to a fresh engine; every verdict, in order."""
    eng = DiagnosisEngine(thresholds or Thresholds(), groups)
    return [eng.observe(Snapshot(1000.0 + i * interval, pts, {})) for i, pts in enumerate(cycles)]


def steady(points: list[Point], cycles: int = 3) -> list[list[Point]]:
    return [list(points) for _ in range(cycles)]


def samples(points: Iterable[Point]) -> list[Sample]:
    """``points`` as plain samples (what the diagnosis publishes are gauges): a histogram fails the test."""
    out: list[Sample] = []
    for p in points:
        assert isinstance(p, Sample), f"not a plain sample: {p!r}"
        out.append(p)
    return out


def causes(verdict: Verdict) -> set[str]:
    """Every cause whose condition holds (reported or only headroom information)."""
    return set(verdict.holding)


def reported(verdict: Verdict) -> set[str]:
    """The causes the verdict reports (primary, contributing, symptoms, warnings, candidates)."""
    return {c.cause for c in verdict.bottlenecks}


def primary(verdict: Verdict) -> str | None:
    return verdict.primary.cause if verdict.primary else None
