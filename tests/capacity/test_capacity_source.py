"""The capacity_profile source over a real store, and the verdict reading what it publishes.

The store holds what an engine source would (the schema's names under engine labels);
the profile is a real file, rewritten, garbled and removed while the source runs.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pytest

from exporter.capacity.profile import load_profile
from exporter.capacity.source import CapacityProfileStep, recommended_max_concurrency
from exporter.diagnosis.rules import RULES
from exporter.samples import HistogramSample, Point, Sample
from exporter.store import SnapshotStore
from tests.capacity.profiles import FINGERPRINT, tune_doc, write
from tests.diagnosis.diag_points import engine, gpu, healthy_gpu, run
from tests.diagnosis.test_diagnosis_verdict import latency

ENG = {"server": "a", "engine": "llamacpp", "model": "tiny", "rank": ""}
CAP = {"concurrency": 10, "requests_per_second": 2.0, "tokens_per_second": 200.0}
WORKLOAD = {"prompt_tokens_mean": 500.0, "output_tokens_mean": 50.0}


def _engine(running: float, finished: float, prompt: float, output: float, slots: float = 4.0) -> list[Point]:
    return [
        Sample("llm_engine_info", {"server": "a", "engine": "llamacpp", "model": "tiny", "generation": ""}, 1.0),
        Sample("llm_engine_setting", {**ENG, "setting": "slots"}, slots),
        Sample("llm_scheduler_requests_running", ENG, running),
        Sample("llm_scheduler_requests_waiting", ENG, 1.0),
        Sample("llm_requests_finished_total", {**ENG, "reason": "stop"}, finished),
        HistogramSample("llm_request_prompt_tokens", ENG, ((math.inf, finished),), prompt * finished, finished),
        Sample("llm_generation_tokens_total", ENG, output * finished),
    ]


class Clock:
    def __init__(self) -> None:
        self.now = 1795939200.0 + 3 * 86400  # three days after the profile's generated_at

    def __call__(self) -> float:
        return self.now


def _source(tmp_path: Path, doc: dict[str, Any], headroom: float = 0.2) -> tuple[SnapshotStore, CapacityProfileStep, Path, Clock]:
    path = write(tmp_path / "tune.json", doc)
    clock = Clock()
    store = SnapshotStore(clock=lambda: clock.now)
    store.register("engine:a", 1.0)
    src = CapacityProfileStep([("a", load_profile(path))], headroom=headroom, clock=clock)
    return store, src, path, clock


def _values(store: SnapshotStore, src: CapacityProfileStep) -> dict[str, float]:
    result = src.derive(store.snapshot())
    out = {}
    for p in result.points:
        assert isinstance(p, Sample) and p.labels.get("engine") == "a"
        key = p.name + (f"{{{p.labels['dimension']}}}" if "dimension" in p.labels else "")
        out[key] = p.value
    return out


def test_gauges_used_ratio_drift_and_recommended_ceiling(tmp_path: Path) -> None:
    store, src, _, clock = _source(tmp_path, tune_doc(CAP, None, fingerprint=FINGERPRINT, workload=WORKLOAD))
    store.record_success("engine:a", _engine(running=6, finished=100, prompt=1000, output=50), 0.0)
    first = _values(store, src)
    assert first["llm_capacity_concurrency_at_slo"] == 10 and first["llm_capacity_requests_per_second_at_slo"] == 2.0
    assert first["llm_capacity_tokens_per_second_at_slo"] == 200.0
    assert first["llm_capacity_recommended_max_concurrency"] == 8  # floor(10 x 0.8)
    assert first["llm_capacity_profile_age_seconds"] == 3 * 86400
    assert first["llm_capacity_used_ratio"] == 0.7  # 6 running + 1 waiting over 10; no rate yet
    assert first["llm_capacity_profile_stale"] == 0.0  # slots 4 on both sides
    clock.now += 10
    store.record_success("engine:a", _engine(running=6, finished=150, prompt=1000, output=50), 0.0)
    later = _values(store, src)
    # 50 finished in 10 s with as many in flight as before: 5/s offered, over 2/s
    assert later["llm_capacity_offered_requests_per_second"] == 5.0 and later["llm_capacity_used_ratio"] == 2.5
    assert later["llm_capacity_workload_drift_ratio{prompt_tokens}"] == 2.0  # 1000 over 500
    assert later["llm_capacity_workload_drift_ratio{output_tokens}"] == 1.0
    # prompts twice the profile's (beyond DRIFT_TOLERANCE): the measured knee no longer holds
    assert later["llm_capacity_profile_stale"] == 1.0


def test_a_queue_the_engine_builds_itself_is_not_more_load(tmp_path: Path) -> None:
    """Arrivals stay at 2/s while the engine slows from 2/s to 0.5/s: the queue grows by exactly what
    it no longer finishes, so the offered rate (and the used ratio) stays where the arrivals are."""
    store, src, _, clock = _source(tmp_path, tune_doc({**CAP, "requests_per_second": 4.0}, None, workload=WORKLOAD))
    finished, waiting = 0.0, 1.0
    readings = []
    for second in range(40):
        served = 2.0 if second < 10 else 0.5
        finished += served
        waiting += 2.0 - served  # what arrives and is not served waits
        points = [
            p for p in _engine(running=4, finished=finished, prompt=500, output=50) if p.name != "llm_scheduler_requests_waiting"
        ]
        points.append(Sample("llm_scheduler_requests_waiting", ENG, waiting))
        store.record_success("engine:a", points, 0.0)
        readings.append(_values(store, src))
        clock.now += 1.0
    last = readings[-1]
    assert last["llm_capacity_offered_requests_per_second"] == pytest.approx(2.0)
    assert last["llm_capacity_used_ratio"] == pytest.approx(0.5)  # 2/s offered over 4/s at SLO
    # in flight over the concurrency (the figure before issue 32) would read past the knee
    assert (4 + waiting) / CAP["concurrency"] > 3


def test_the_gpus_are_part_of_what_the_profile_measured(tmp_path: Path) -> None:
    """The same flags on another GPU model, or on fewer GPUs, make the profile stale."""
    measured = {**FINGERPRINT, "gpu_model": "NVIDIA H200", "gpu_count": 2}
    store, src, _, _ = _source(tmp_path, tune_doc(CAP, None, fingerprint=measured))

    def gpus(name: str, count: int) -> list[Point]:
        return [
            Sample("llm_gpu_info", {"gpu": str(i), "uuid": f"GPU-{i}", "name": name, "source": "nvml"}, 1.0) for i in range(count)
        ]

    base = _engine(running=1, finished=1, prompt=500, output=50)
    store.record_success("engine:a", base + gpus("NVIDIA H200", 2), 0.0)
    assert _values(store, src)["llm_capacity_profile_stale"] == 0.0
    store.record_success("engine:a", base + gpus("NVIDIA H100 80GB HBM3", 2), 0.0)
    assert _values(store, src)["llm_capacity_profile_stale"] == 1.0
    store.record_success("engine:a", base + gpus("NVIDIA H200", 1), 0.0)
    assert _values(store, src)["llm_capacity_profile_stale"] == 1.0


def test_recommended_ceiling_is_at_least_one() -> None:
    assert [recommended_max_concurrency(c, 0.2) for c in (1, 4, 5, 10)] == [1, 3, 4, 8]
    assert recommended_max_concurrency(10, 0.0) == 10 and recommended_max_concurrency(3, 0.9) == 1


def test_stale_flips_when_the_engine_settings_change_and_is_absent_while_unknown(tmp_path: Path) -> None:
    store, src, _, _ = _source(tmp_path, tune_doc(CAP, None, fingerprint=FINGERPRINT))
    assert "llm_capacity_profile_stale" not in _values(store, src)  # the engine not read yet: unknown
    store.record_success("engine:a", _engine(running=1, finished=1, prompt=1, output=1, slots=4), 0.0)
    assert _values(store, src)["llm_capacity_profile_stale"] == 0.0
    store.record_success("engine:a", _engine(running=1, finished=1, prompt=1, output=1, slots=2), 0.0)
    assert _values(store, src)["llm_capacity_profile_stale"] == 1.0
    doc = tune_doc(CAP)
    del doc["baseline"]["argv"]
    store2, old, _, _ = _source(tmp_path, doc)  # a profile from before fingerprints
    store2.record_success("engine:a", _engine(running=1, finished=1, prompt=1, output=1, slots=2), 0.0)
    assert "llm_capacity_profile_stale" not in _values(store2, old)


def test_a_profile_that_changes_vanishes_or_breaks_keeps_the_last_good_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, src, path, _ = _source(tmp_path, tune_doc(CAP))
    assert _values(store, src)["llm_capacity_concurrency_at_slo"] == 10
    write(path, tune_doc({**CAP, "concurrency": 16}))
    assert _values(store, src)["llm_capacity_concurrency_at_slo"] == 16  # re-read on change
    caplog.set_level(logging.WARNING)
    path.write_text("{garbled")
    result = src.derive(store.snapshot())
    assert [e.reason for e in result.partial_errors] == ["malformed"] and "not JSON" in result.partial_errors[0].message
    assert {p.name: p.value for p in result.points if isinstance(p, Sample)}["llm_capacity_concurrency_at_slo"] == 16
    src.derive(store.snapshot())
    assert sum("keeping the last good profile" in r.message for r in caplog.records) == 1  # once, not per sample
    path.unlink()
    result = src.derive(store.snapshot())
    assert [e.reason for e in result.partial_errors] == ["file_missing"]
    assert any(isinstance(p, Sample) and p.name == "llm_capacity_concurrency_at_slo" and p.value == 16 for p in result.points)
    write(path, tune_doc({**CAP, "concurrency": 12}))
    result = src.derive(store.snapshot())
    assert result.partial_errors == [] and any(
        isinstance(p, Sample) and p.name == "llm_capacity_concurrency_at_slo" and p.value == 12 for p in result.points
    )


# ------------------------------------------------------------------ the verdict


def _capacity(used: float, stale: float = 0.0) -> list[Point]:
    e = {"engine": "sim"}
    return [
        Sample("llm_capacity_used_ratio", e, used),
        Sample("llm_capacity_concurrency_at_slo", e, 10.0),
        Sample("llm_capacity_requests_per_second_at_slo", e, 3.1),
        Sample("llm_capacity_profile_age_seconds", e, 3 * 86400.0),
        Sample("llm_capacity_profile_stale", e, stale),
        Sample("llm_capacity_recommended_max_concurrency", e, 8.0),
    ]


def _healthy(i: int, used: float, stale: float = 0.0) -> list[Point]:
    return healthy_gpu() + engine(waiting=0, running=9, kv=0.3, finished={"stop": 10.0 * i}) + latency(i) + _capacity(used, stale)


def test_healthy_carries_the_capacity_headroom_and_warns_near_the_knee() -> None:
    calm = run([_healthy(i, 0.72) for i in range(6)])[-1]
    assert calm.state == "healthy" and calm.bottlenecks == [] and calm.primary is None
    assert calm.capacity is not None and calm.capacity["text"] == "72 % of measured capacity at SLO; profile 3 days old"
    assert calm.as_dict()["capacity"]["used_ratio"] == 0.72 and calm.capacity["stale"] is False
    near = run([_healthy(i, 0.93) for i in range(6)])[-1]
    assert near.state == "healthy" and near.primary is None
    (warning,) = near.bottlenecks
    assert (warning.layer, warning.cause, warning.role) == ("application", "capacity_nearly_used", "warning")
    assert "93 % of the measured capacity at SLO" in warning.summary
    assert near.layers["application"].status == "warning"
    stale = run([_healthy(i, 0.93, stale=1.0) for i in range(6)])[-1]
    assert stale.bottlenecks == [] and stale.capacity is not None and "profile stale" in stale.capacity["text"]


def test_a_symptom_past_the_measured_knee_is_explained_as_capacity() -> None:
    def overloaded(i: int, used: float) -> list[Point]:
        e = engine(waiting=39, running=12, kv=1.0, preemptions=3.0 * i)
        return healthy_gpu() + e + latency(i, ttft=3.3, queue=9.7) + _capacity(used)

    past = run([overloaded(i, 1.4) for i in range(6)])[-1]
    assert past.state == "degraded" and past.primary is not None
    assert (past.primary.layer, past.primary.cause) == ("application", "capacity_nearly_used")
    assert "past the measured knee" in past.primary.chain and past.primary.chain.startswith("TTFT p95 ")
    roles = {c.cause: c.role for c in past.bottlenecks}
    assert roles["kv_cache_pressure"] == "contributing"
    assert "which drives kv_cache_pressure" in past.primary.chain  # what the load past the knee drives
    short = run([overloaded(i, 0.95) for i in range(6)])[-1]  # short of the knee: the layer's own cause
    assert short.primary is not None and short.primary.cause == "kv_cache_pressure"


def test_past_the_knee_a_cause_load_does_not_produce_stays_the_primary() -> None:
    """A GPU held at half its clock past the measured knee: the throttle, not "add a replica"
    (issue 32: the capacity override hid the real cause exactly when a profile was configured)."""
    capped = {"power": 400.0, "power_limit": 400.0, "reasons": ("sw_power_cap",)}

    def throttled(i: int) -> list[Point]:
        g = gpu(util=0.95, sm=0.88, tensor=0.7, dram=0.3, clock=0.52 * 1980e6, **capped)  # type: ignore[arg-type]
        return g + engine(waiting=30, running=64, kv=0.7) + latency(i, ttft=0.9, queue=0.9) + _capacity(1.4)

    v = run([throttled(i) for i in range(6)])[-1]
    assert v.primary is not None and v.primary.cause == "power_or_thermal_throttling", v.bottlenecks
    assert {c.cause: c.role for c in v.bottlenecks}.get("capacity_nearly_used") == "contributing"


def test_the_rule_is_declared_once() -> None:
    (rule,) = [r for r in RULES if r.cause == "capacity_nearly_used"]
    assert rule.layer == "application" and rule.warns_alone is not None


def test_a_live_figure_that_overflows_against_the_profile_is_no_reading_not_infinity() -> None:
    """1e308 finished a second over a profile of 0.5 req/s overflows: that part is no reading."""
    from exporter.capacity.live import LiveLoad
    from exporter.capacity.profile import Profile
    from exporter.capacity.source import drift, used_ratio

    profile = Profile("p.json", "tune.json baseline", 10, 0.5, 100.0, 0.0, None, 1e-300, 0.5)
    huge = LiveLoad(in_flight=5.0, finished_per_second=1e308, prompt_tokens_mean=1e308, output_tokens_mean=2.0)
    assert used_ratio(profile, huge) == 0.5  # the in-flight half still reads
    assert drift(profile, huge) == {"output_tokens": 4.0}  # 1e308 / 1e-300 is not a ratio
    assert used_ratio(profile, LiveLoad(None, 1e308, None, None)) is None
    assert used_ratio(profile, LiveLoad(5.0, 1e308, None, None, offered_per_second=1e308)) is None
