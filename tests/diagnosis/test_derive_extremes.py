"""The derive stage survives any finite value an engine (or a GPU) can report (issue 37, item 5).

Why: after 6 s of engine gauges at 1.7e308 and a return to normal, the diagnosis source was down
for up to 20 s (``OverflowError`` in ``rules.kv_room``: ``math.ceil`` of an overflowed token
count), while ``/diagnosis`` served a verdict that only grew older. Every value here is finite,
so the non-finite filter of ``signals.compute`` never saw it: the arithmetic after it overflowed.

Every family the derive stage reads (``signals.reads``, the capacity and capacity-profile windows)
is built from the schema, one series per closed label value, and filled with the largest and
smallest floats, alternating between snapshots; the steps run in the stage's order on each
snapshot (parallel -> capacity -> capacity_profile -> diagnosis, each seeing the points of the
ones before) and no exception may escape, every point stays a float, and the ``/diagnosis`` body
stays strict JSON.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter import jsonsafe
from exporter.capacity import live
from exporter.capacity.profile import load_profile
from exporter.capacity.source import CapacityProfileStep
from exporter.derive import DeriveStage, Step
from exporter.diagnosis import capacity as cap
from exporter.diagnosis import capacity_profile as cp
from exporter.diagnosis import probe as pr
from exporter.diagnosis import signals as s
from exporter.diagnosis.capacity import CapacityStep
from exporter.diagnosis.capacity_profile import capacity_body
from exporter.diagnosis.causality import symptom_advice
from exporter.diagnosis.engine import DiagnosisEngine
from exporter.diagnosis.fanout import NodeDiagnosis
from exporter.diagnosis.finite import clamp01
from exporter.diagnosis.parallel import ParallelStep
from exporter.diagnosis.rules import RULES, kv_room
from exporter.diagnosis.scope import EngineSpec
from exporter.diagnosis.source import DiagnosisStep
from exporter.diagnosis.symptoms import SYMPTOM_IDS, SYMPTOMS, excess
from exporter.diagnosis.thresholds import Thresholds
from exporter.samples import HistogramSample, Point, Sample
from exporter.schema import SPECS, MetricSpec
from exporter.store import Snapshot, SnapshotStore
from tests.capacity.profiles import FINGERPRINT, tune_doc, write
from tests.diagnosis.diag_points import ENG, engine, healthy_gpu, histogram

BIG = sys.float_info.max
#: the values an engine may legally report that stress the arithmetic: the extremes of a double,
#: the smallest normal and subnormal, the signed zeros, and integers past 2**53 and 2**63
EXTREMES: tuple[float, ...] = (
    BIG,
    -BIG,
    sys.float_info.min,
    5e-324,
    -5e-324,
    1e308,
    -1e308,
    1.7e308,
    0.0,
    -0.0,
    1.0,
    float(2**63),
    float(2**64 + 1),
    float(10**300),
    1e-300,
)
SERVER = ENG["server"]
GPUS = ("0", "1")
#: the families the derive stage reads: the diagnosis window's, the capacity step's, the live load's
READ = sorted(n for n in SPECS if s.reads(n) or n in cap._READS or n in live.READS)
#: labels that take a value of their own (the rest: "x")
_LABELS = {
    "server": SERVER,
    "engine": ENG["engine"],
    "model": ENG["model"],
    "rank": "",
    "attention_backend": "FLEX_ATTENTION",
    "enforce_eager": "false",
    "state": "sleeping",
}
#: families keyed to the engine under test by their ``engine`` label, not ``server`` (the capacity gauges)
_ENGINE_KEYED = ("llm_capacity_",)


def _label_sets(spec: MetricSpec, gpu: str) -> list[dict[str, str]]:
    """One label set per closed value of the family (every reason, setting, result, dimension)."""
    base = {name: _LABELS.get(name, "x") for name in spec.labels}
    if "gpu" in base:
        base.update(gpu=gpu, uuid=f"GPU-{gpu}")
    if spec.name.startswith(_ENGINE_KEYED):
        base["engine"] = SERVER
    if spec.name == "llm_scheduler_requests_waiting_by_reason":
        return [{**base, "reason": r} for r in ("capacity", "deferred")]
    for label, allowed in spec.values:
        return [{**base, label: v} for v in allowed]
    return [base]


def _bounds(pick: Callable[[], float]) -> tuple[tuple[float, ...], ...]:
    """Bucket bounds: the usual ones, and some made of extremes (sorted, unique, +Inf last)."""
    odd = tuple(sorted({pick(), pick(), pick()} - {math.inf}))
    return ((0.1, 1.0, 10.0, math.inf), (*odd, math.inf))


def scene(values: Sequence[float], offset: int = 0) -> list[Point]:
    """Every read family with each of its values taken in turn from ``values`` (from ``offset``)."""
    i = offset

    def pick() -> float:
        nonlocal i
        i += 1
        return values[i % len(values)]

    points: list[Point] = []
    for name in READ:
        spec = SPECS[name]
        gpus = GPUS if "gpu" in spec.labels else ("",)
        for gpu in gpus:
            for labels in _label_sets(spec, gpu):
                if spec.type == "histogram":
                    bounds = _bounds(pick)[i % 2]
                    buckets = tuple((le, pick()) for le in bounds)
                    points.append(HistogramSample(name, labels, buckets, pick(), pick()))
                else:
                    points.append(Sample(name, labels, pick()))
    return points


def normal() -> list[Point]:
    """The same engine back to ordinary figures: two GPUs, a light load, a fast TTFT."""
    return [
        *healthy_gpu(0),
        *healthy_gpu(1),
        *engine(waiting=0, running=2, kv=0.3, finished={"stop": 10.0}),
        histogram("llm_request_ttft_seconds", [0.2] * 40),
    ]


@pytest.fixture(scope="module")
def profile_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    doc = tune_doc(
        {"concurrency": 10, "requests_per_second": 2.0, "tokens_per_second": 200.0},
        None,
        fingerprint=FINGERPRINT,
        workload={"prompt_tokens_mean": 500.0, "output_tokens_mean": 50.0},
    )
    return write(tmp_path_factory.mktemp("profile") / "tune.json", doc)


def steps(profile: Path) -> list[Step]:
    """The stage's steps in the order ``build_diagnosis`` runs them, the engine judged per scope."""
    node = NodeDiagnosis(Thresholds(), engines=[EngineSpec(SERVER)], interval=1.0)
    return [
        ParallelStep(None, node_group="g"),
        CapacityStep(),
        CapacityProfileStep([(SERVER, load_profile(str(profile)))], clock=lambda: 1.8e9),
        DiagnosisStep(node),
    ]


def _strict(body: Any) -> Any:
    """``body`` written as ``/diagnosis`` writes it, read back refusing NaN and Infinity."""

    def refuse(word: str) -> Any:
        raise AssertionError(f"{word} in the /diagnosis JSON")

    return json.loads(jsonsafe.dumps(body), parse_constant=refuse)


#: steps whose every published figure is a finite number (the diagnosis publishes NaN for "unknown" by design)
FINITE_STEPS = frozenset({"parallel", "capacity"})


def run_pass(all_steps: Sequence[Step], snap: Snapshot) -> list[Point]:
    """One derive pass as ``DeriveStage.run_pass`` runs it, but letting any exception escape."""
    derived: list[Point] = []
    for step in all_steps:
        result = step.derive(snap.extended(derived))
        for p in result.points:
            assert isinstance(p, Sample) and isinstance(p.value, float), p
            assert step.name not in FINITE_STEPS or math.isfinite(p.value), p
        derived += result.points
    return derived


def judged_body(all_steps: Sequence[Step]) -> dict[str, Any]:
    last = all_steps[-1]
    assert isinstance(last, DiagnosisStep) and isinstance(last.engine, NodeDiagnosis)
    body = last.engine.body(signals=True)
    assert body is not None
    return body


def _snapshots(cycles: Sequence[list[Point]]) -> Iterator[Snapshot]:
    for i, points in enumerate(cycles):
        yield Snapshot(1000.0 + i, points, {})


# --------------------------------------------------------------------------- the property


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cycles=st.lists(st.lists(st.sampled_from(EXTREMES), min_size=1, max_size=6), min_size=2, max_size=4))
def test_extreme_values_never_raise_in_any_step_and_the_body_stays_strict(profile_path: Path, cycles: list[list[float]]) -> None:
    all_steps = steps(profile_path)
    for snap in _snapshots([scene(vs, k) for k, vs in enumerate(cycles)] + [normal()]):
        run_pass(all_steps, snap)
        body = _strict(judged_body(all_steps))
        assert body["timestamp"] == snap.timestamp


@pytest.mark.parametrize("value", EXTREMES)
def test_one_extreme_everywhere_then_normal(profile_path: Path, value: float) -> None:
    all_steps = steps(profile_path)
    for snap in _snapshots([scene([value]), scene([value]), scene([value]), normal(), normal()]):
        run_pass(all_steps, snap)
        assert _strict(judged_body(all_steps))["timestamp"] == snap.timestamp


@pytest.mark.parametrize("pair", [(BIG, -BIG), (BIG, 5e-324), (-BIG, 0.0), (1e308, -0.0), (5e-324, BIG)])
def test_alternating_extremes_every_rule_alone(pair: tuple[float, float]) -> None:
    """Each rule on its own engine (its hysteresis not hidden by another's), the extremes alternating."""
    for rule in RULES:
        eng = DiagnosisEngine(Thresholds(), rules=(rule,))
        for k in range(4):
            verdict = eng.observe(Snapshot(1000.0 + k, scene(pair, k), {}))
            _strict(verdict.as_dict())


# --------------------------------------------------------------------------- every rule's arithmetic, directly


def _signal_names() -> list[str]:
    """Every signal name a rule, a symptom or a notice may read: the modules' names, the throttle reasons,
    an attention backend (a view holding them all never fails on a missing key, only on arithmetic)."""
    names = {
        x
        for m in (s, pr, cp)
        for k, x in vars(m).items()
        if k.isupper() and isinstance(x, str) and x != getattr(m, "PREFIX", None)
    }
    names |= {n for r in RULES for n in (*r.requires, *r.requires_any, *r.evidence)}
    names |= {n for sym in SYMPTOMS for n in (*sym.requires_any, *sym.evidence)}
    return sorted(names - {s.ATTENTION_BACKEND_PREFIX} | {s.ATTENTION_BACKEND_PREFIX + 'FLEX_ATTENTION"}'})


SIGNAL_NAMES = _signal_names()


def every_signal(values: Sequence[float]) -> dict[str, float]:
    return {name: values[i % len(values)] for i, name in enumerate(SIGNAL_NAMES)}


def _judge_every_rule(view: dict[str, float], t: Thresholds) -> None:
    """Every function of every rule and symptom on ``view``, whether or not its condition holds."""
    observed = frozenset(SYMPTOM_IDS)
    for rule in RULES:
        for predicate in (rule.condition, rule.sustain, rule.warns_alone):
            if predicate is not None:
                assert isinstance(predicate(view, t), bool), rule.cause
        for figure in (rule.severity, rule.proximity):
            if figure is not None:
                assert 0.0 <= clamp01(float(figure(view, t))) <= 1.0, rule.cause
        if rule.share is not None:
            assert all(math.isfinite(clamp01(x)) for x in rule.share(view, t, observed).values()), rule.cause
        assert rule.describe is not None and isinstance(rule.describe(view, t), str)
    for sym in SYMPTOMS:
        sym.condition(view, t)
        assert isinstance(sym.describe(view, t), str)
        excess(view, t, sym.id)
    symptom_advice("advice", view, observed, t)
    _strict(capacity_body(view))


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.sampled_from(EXTREMES), min_size=1, max_size=7))
def test_every_rule_and_symptom_on_extreme_signals(values: list[float]) -> None:
    _judge_every_rule(every_signal(values), Thresholds())


def test_the_kv_room_of_a_huge_kv_model_is_unknown_not_an_overflow() -> None:
    # the reported trace: KV capacity and usage at 1.7e308 in the window, what the running requests
    # hold each overflowed to +Inf and math.ceil raised OverflowError in rules.kv_room
    view = {s.KV_USAGE_MAX: 1.7e308, s.KV_CAPACITY: 1.7e308, s.KV_BLOCK: 16.0, s.RUNNING: 4.0, s.WAITING: 2.0}
    assert kv_room(view, Thresholds()) is None
    slots = {s.SLOT_CONTEXT_USAGE: 0.5, s.SLOT_CONTEXT: 1e300, s.SLOTS: 1e300, s.RUNNING: 4.0}
    assert kv_room(slots, Thresholds()) is None  # slots x context per slot overflows
    tiny_block = {s.KV_USAGE_MAX: 0.5, s.KV_CAPACITY: 1e308, s.KV_BLOCK: 5e-324, s.TOKENS_PER_REQUEST: 100.0}
    assert kv_room(tiny_block, Thresholds()) is None  # tokens over a subnormal block overflow
    sane = {s.KV_USAGE_MAX: 0.5, s.KV_CAPACITY: 1600.0, s.KV_BLOCK: 16.0, s.RUNNING: 4.0, s.WAITING: 2.0}
    assert kv_room(sane, Thresholds()) == (50.0, 26.0, 13.0, 2.0)  # unchanged on ordinary figures


# --------------------------------------------------------------------------- the reported sequence


class Clock:
    """The store's wall and monotonic clock, moved by the test (no waiting, no wall-clock bound)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def engine_side(values: Sequence[float]) -> list[Point]:
    """What the engine (and its process sampler) controls: every read series labelled with its server."""
    return [p for p in scene(values) if p.labels.get("server") == SERVER]


def queued_but_normal() -> list[Point]:
    """Ordinary figures after the storm, with what makes the KV-room arithmetic run: requests held for
    capacity beside a KV cache with a capacity and a block size."""
    labels = {**ENG, "reason": "capacity"}
    return [
        *engine(waiting=2, running=2, kv=0.3, finished={"stop": 10.0}),
        Sample("llm_scheduler_requests_waiting_by_reason", labels, 2.0),
        Sample("llm_kv_cache_capacity_tokens", ENG, 1600.0),
        Sample("llm_kv_cache_block_size_tokens", ENG, 16.0),
        histogram("llm_request_ttft_seconds", [0.2] * 40),
    ]


def test_huge_engine_gauges_then_normal_never_take_the_diagnosis_down(profile_path: Path) -> None:
    # issue 37: 6 s of engine gauges at 1.7e308, then normal figures; the diagnosis step raised
    # OverflowError (rules.kv_room) for as long as the window held the huge figures (up to 20 s)
    clock = Clock()
    store = SnapshotStore(clock=clock)
    store.register("gpu", 1.0)
    store.register(f"engine:{SERVER}", 1.0)
    stage = DeriveStage(steps(profile_path), interval=1.0, timeout=60.0)
    stage.register(store)
    diagnosis = stage.steps[-1]
    assert isinstance(diagnosis, DiagnosisStep) and isinstance(diagnosis.engine, NodeDiagnosis)
    storm = [engine_side([1.7e308])] * 6
    calm = [queued_but_normal()] * 25  # longer than the 20 s window: every huge figure leaves it
    for engine_points in storm + calm:
        clock.now += 1.0
        store.record_success("gpu", [*healthy_gpu(0), *healthy_gpu(1)], 0.01)
        store.record_success(f"engine:{SERVER}", engine_points, 0.01)
        snap = stage.run_pass(store)
        states = store.states()
        for name in stage.names:
            assert states[name].up and not states[name].errors, (name, states[name].last_error)
        body = _strict(diagnosis.engine.body(signals=True))
        assert body["timestamp"] == snap.timestamp  # a fresh verdict every pass, never one growing older
    assert body["state"] in ("healthy", "degraded")
    assert not [n for n in body["notices"] if "non-finite" in n]  # the storm has left the window
