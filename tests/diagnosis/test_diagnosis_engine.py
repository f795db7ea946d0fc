"""The engine around the rules: unknown vs ok, persistence, ordering, JSON and metric shape."""

from __future__ import annotations

import json
import math

import pytest

from exporter.diagnosis.engine import DiagnosisEngine, evidence_key
from exporter.diagnosis.rules import RULES
from exporter.diagnosis.thresholds import Thresholds
from exporter.samples import Point
from exporter.schema import LAYERS, SPECS
from exporter.store import Snapshot, SnapshotStore
from tests.diagnosis.diag_points import (
    GIB,
    engine,
    gpu,
    healthy_gpu,
    process,
    run,
    samples,
    steady,
)


def test_no_data_means_every_layer_unknown() -> None:
    v = run([[]])[-1]
    assert {n: (lv.status, lv.score) for n, lv in v.layers.items()} == {layer: ("unknown", None) for layer in LAYERS}
    assert v.bottlenecks == []


def test_gpu_without_profiling_leaves_profiling_rules_unjudged() -> None:
    """No SM/tensor/DRAM (an old GPU): the operator layer cannot be judged, so it is unknown."""
    v = run(steady(gpu(util=0.9, mem_used=10 * GIB, power=300)))[-1]
    assert v.layers["operator"].status == "unknown"
    assert v.layers["hardware"].status == "ok"  # throttling and memory capacity can still be judged


def test_persistence_delays_a_cause_by_the_configured_cycles() -> None:
    pts = gpu(util=0.99, sm=0.0, tensor=0.0, dram=0.01, pcie=58e9)
    quick = run(steady(pts, 3))
    assert [bool(v.bottlenecks) for v in quick] == [True, True, True]
    slow = run(steady(pts, 3), thresholds=Thresholds(persistence_cycles=2))
    assert [bool(v.bottlenecks) for v in slow] == [False, True, True]
    # a single healthy cycle resets the streak
    flappy = run([pts, healthy_gpu(), pts, pts], thresholds=Thresholds(persistence_cycles=2))
    assert [bool(v.bottlenecks) for v in flappy] == [False, False, False, True]


def test_a_reported_cause_clears_after_clear_cycles_failed_cycles() -> None:
    pts = gpu(util=0.99, sm=0.0, tensor=0.0, dram=0.01, pcie=58e9)
    blinking = run([pts, healthy_gpu(), pts, healthy_gpu(), healthy_gpu(), healthy_gpu()], thresholds=Thresholds(clear_cycles=3))
    assert [bool(v.bottlenecks) for v in blinking] == [True, True, True, True, True, False]
    held = blinking[1].bottlenecks[0]
    first = blinking[0].bottlenecks[0]
    # held with the evidence that proved it (only its confidence grows with the cycles held)
    assert (held.cause, held.evidence, held.score) == (first.cause, first.evidence, first.score)
    instant = run([pts, healthy_gpu()], thresholds=Thresholds(clear_cycles=1))
    assert [bool(v.bottlenecks) for v in instant] == [True, False]
    # signals gone: the layer is unknown and the cause cleared at once
    gone = run([pts, []])
    assert gone[-1].bottlenecks == [] and gone[-1].layers["hardware"].status == "unknown"


def test_bottlenecks_sorted_by_score_and_layer_score_is_the_worst_cause() -> None:
    pts = (
        gpu(util=0.95, sm=0.93, tensor=0.99, dram=0.17, clock=1700e6, reasons=["sw_power_cap"], power=699)
        + process(0.99)
        + engine(waiting=40, running=64, kv=0.7)
    )
    v = run(steady(pts))[-1]
    scores = [c.score for c in v.bottlenecks]
    assert scores == sorted(scores, reverse=True) and len(scores) >= 3
    hw = [c.score for c in v.bottlenecks if c.layer == "hardware"]
    assert v.layers["hardware"].score == max(hw)
    assert all(0.5 <= s <= 1.0 for s in scores)


def test_status_bands_follow_the_thresholds() -> None:
    eng = DiagnosisEngine(Thresholds(warning_score=0.4, bottleneck_score=0.8))
    assert [eng.status(x) for x in (0.0, 0.39, 0.4, 0.79, 0.8, 1.0)] == [
        "ok",
        "ok",
        "warning",
        "warning",
        "bottleneck",
        "bottleneck",
    ]


def test_json_body_has_exactly_the_contract_keys() -> None:
    pts = gpu(util=0.99, sm=0.0, tensor=0.0, dram=0.01, pcie=58e9)
    body = run(steady(pts))[-1].as_dict()
    json.dumps(body, allow_nan=False)  # strict JSON: no NaN or Infinity anywhere
    assert set(body) == {
        "schema_version",
        "timestamp",
        "state",
        "notices",
        "symptoms",
        "primary",
        "contributing",
        "layers",
        "bottlenecks",
        "holding",
        "capacity",  # null without a capacity profile (exporter/diagnosis/capacity_profile.py)
    }
    assert body["capacity"] is None
    assert body["schema_version"] == 2 and body["state"] == "unknown" and body["primary"] is None
    assert any("no engine metrics" in n for n in body["notices"])
    assert list(body["layers"]) == list(LAYERS)
    assert all(set(info) == {"score", "status", "headroom", "limit"} for info in body["layers"].values())
    assert body["bottlenecks"][0]["cause"] == "pcie_transfer_bound"
    assert body["bottlenecks"][0]["role"] == "candidate"
    assert all(
        set(b) == {"layer", "cause", "score", "confidence", "role", "summary", "explains", "evidence", "advice"}
        for b in body["bottlenecks"]
    )


def test_points_cover_every_layer_and_cause_and_are_in_the_schema() -> None:
    v = run(steady(healthy_gpu()))[-1]
    pts = samples(v.points())
    scores = {p.labels["layer"]: p.value for p in pts if p.name == "llm_bottleneck_score"}
    assert set(scores) == set(LAYERS)
    assert 0.0 <= scores["hardware"] < 0.5 and math.isnan(scores["memory"])  # unknown is NaN, never 0
    headroom = {p.labels["layer"]: p.value for p in pts if p.name == "llm_layer_headroom_ratio"}
    assert set(headroom) == set(LAYERS) and 0.0 < headroom["hardware"] <= 1.0 and math.isnan(headroom["memory"])
    for name in ("llm_bottleneck_active", "llm_bottleneck_primary", "llm_bottleneck_confidence"):
        series = [p for p in pts if p.name == name]
        assert len(series) == len(RULES) and all(p.value == 0.0 for p in series), name
    state = {p.labels["state"]: p.value for p in pts if p.name == "llm_service_state"}
    assert state == {"degraded": 0.0, "healthy": 0.0, "unknown": 1.0}
    assert {p.labels["symptom"] for p in pts if p.name == "llm_symptom_active"} == {
        "ttft_high",
        "itl_high",
        "queueing",
        "throughput_saturated",
        "failures",
    }
    for p in pts:
        assert set(p.labels) == set(SPECS[p.name].labels)


def test_evidence_keys_name_the_gpu_or_group() -> None:
    assert evidence_key("llm_gpu_sm_active_ratio", "gpu", "3") == 'llm_gpu_sm_active_ratio{gpu="3"}'
    assert (
        evidence_key('llm_gpu_throttle_reason_active{reason="sw_power_cap"}', "gpu", "0")
        == 'llm_gpu_throttle_reason_active{gpu="0",reason="sw_power_cap"}'
    )
    assert evidence_key("a / b", "group", "tp0") == '(a / b){group="tp0"}'
    assert evidence_key("rate(x)", "service", "") == "rate(x)"


def test_worst_gpu_is_reported_and_lost_gpus_are_ignored() -> None:
    pts = gpu(0, util=0.7, sm=0.6, tensor=0.2, dram=0.65) + gpu(1, util=0.8, sm=0.6, tensor=0.2, dram=0.82)
    v = run(steady(pts))[-1]
    (c,) = v.bottlenecks
    assert c.cause == "memory_bandwidth_bound" and 'llm_gpu_dram_active_ratio{gpu="1"}' in c.evidence
    lost = [p for p in gpu(1, util=0.8, sm=0.6, tensor=0.2, dram=0.82) if p.name != "llm_gpu_up"]
    from exporter.samples import Sample

    lost.append(Sample("llm_gpu_up", {"gpu": "1", "uuid": "GPU-1"}, 0.0))
    v2 = run(steady(healthy_gpu(0) + lost))[-1]
    assert v2.bottlenecks == []


def test_latest_verdict_is_swapped_after_each_observation() -> None:
    eng = DiagnosisEngine()
    assert eng.latest.layers["hardware"].status == "unknown"
    eng.observe(Snapshot(5.0, gpu(util=0.99, sm=0.0, tensor=0.0, dram=0.0, pcie=58e9), {}))
    assert eng.latest.timestamp == 5.0 and eng.latest.bottlenecks[0].cause == "pcie_transfer_bound"


@pytest.mark.parametrize("window", [2.0, 20.0])
def test_window_bounds_how_long_a_rate_remembers(window: float) -> None:
    """Preemptions that stopped fall out of the window after window_seconds."""
    cycles = [healthy_gpu() + engine(kv=0.97, preemptions=p) for p in (0, 5, 10, 10, 10, 10, 10)]
    verdicts = run(cycles, thresholds=Thresholds(window_seconds=window))
    still = ["kv_cache_pressure" in {c.cause for c in v.bottlenecks} for v in verdicts]
    assert still[2]
    assert still[-1] is (window > 6)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _overloaded_engine(cycle: int) -> list[Point]:
    return engine(waiting=9, running=1, kv=1.0, preemptions=3.0 * cycle)


def test_a_late_engine_sample_holds_the_verdict_for_the_gap_then_reads_down() -> None:
    """A timed-out scrape of an overloaded engine neither blanks the verdict nor restarts its
    hysteresis: the last verdict is held with a notice for ``source_gap_seconds``, then the
    source reads down; when it answers again the verdict is judged from its data again."""
    clock = _Clock()
    store = SnapshotStore(clock=clock, monotonic=clock)
    store.register("engine:x", interval=1.0, timeout=0.8)
    eng = DiagnosisEngine(Thresholds(source_gap_seconds=5.0))

    def scrape(points: list[Point] | None) -> None:
        store.begin_attempt("engine:x")
        if points is not None:
            store.record_success("engine:x", points, 0.01)

    for i in range(6):
        scrape(_overloaded_engine(i))
        judged = eng.observe(store.snapshot())
        clock.now += 1.0
    assert judged.state == "degraded" and judged.primary is not None
    scrape(None)  # the next scrape hangs past its timeout
    held = []
    for _ in range(5):
        clock.now += 1.0
        held.append(eng.observe(store.snapshot()))
    assert [v.state for v in held] == ["degraded"] * 5
    assert all(v.primary == judged.primary for v in held)
    assert "source engine:x (timeout) missed its latest sample" in held[-1].notices[0]
    assert held[-1].timestamp == clock.now
    clock.now += 2.0  # past the gap: judged as it is
    down = eng.observe(store.snapshot())
    assert down.state == "unknown"
    assert any("source engine:x is down (timeout)" in n for n in down.notices)
    for i in range(6, 10):  # back: judged from its data again, no hold left over
        scrape(_overloaded_engine(i))
        back = eng.observe(store.snapshot())
        clock.now += 1.0
    assert back.state == "degraded" and not any("missed its latest" in n for n in back.notices)


def test_the_gap_hold_is_off_at_zero_and_never_holds_an_unknown_verdict() -> None:
    clock = _Clock()
    store = SnapshotStore(clock=clock, monotonic=clock)
    store.register("engine:x", interval=1.0, timeout=0.8)
    off = DiagnosisEngine(Thresholds(source_gap_seconds=0.0))
    for i in range(6):
        store.begin_attempt("engine:x")
        store.record_success("engine:x", _overloaded_engine(i), 0.01)
        assert off.observe(store.snapshot()).state in ("degraded", "healthy")
        clock.now += 1.0
    store.begin_attempt("engine:x")
    clock.now += 1.0
    assert off.observe(store.snapshot()).state == "unknown"
    # a verdict that was unknown (first sample, no window yet) is never held over a gap
    fresh = DiagnosisEngine()
    store2 = SnapshotStore(clock=clock, monotonic=clock)
    store2.register("engine:y", interval=1.0, timeout=0.8)
    store2.begin_attempt("engine:y")
    store2.record_success("engine:y", [], 0.01)
    assert fresh.observe(store2.snapshot()).state == "unknown"
    store2.begin_attempt("engine:y")
    clock.now += 1.0
    assert not any("missed its latest" in n for n in fresh.observe(store2.snapshot()).notices)
