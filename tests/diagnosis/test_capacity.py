import math

import pytest

from exporter.diagnosis.capacity import CapacityStep, predicted_max_concurrency
from exporter.diagnosis.window import Window
from exporter.samples import Point, Sample
from exporter.store import Snapshot, SnapshotStore

ENG = {"server": "a", "engine": "vllm", "model": "m", "rank": "0"}


def _snap(ts: float, finished: float, prompt: float, generated: float, capacity: float | None = 16384) -> Snapshot:
    points: list[Point] = [
        Sample("llm_requests_finished_total", {**ENG, "reason": "stop"}, finished),
        Sample("llm_prompt_tokens_total", ENG, prompt),
        Sample("llm_generation_tokens_total", ENG, generated),
    ]
    if capacity is not None:
        points.append(Sample("llm_kv_cache_capacity_tokens", ENG, capacity))
    return Snapshot(ts, points, {})


def test_capacity_over_mean_tokens_per_request() -> None:
    w = Window(60)
    w.add(_snap(0, 100, 50_000, 10_000))
    w.add(_snap(10, 120, 60_000, 12_000))  # 20 requests held 12,000 tokens: 600 each
    assert predicted_max_concurrency(w, "a") == 16384 / 600
    assert predicted_max_concurrency(w, "other") is None


def test_unknown_without_finished_requests_or_capacity() -> None:
    w = Window(60)
    w.add(_snap(0, 100, 50_000, 10_000))
    assert predicted_max_concurrency(w, "a") is None  # one snapshot: no rate yet
    w.add(_snap(10, 100, 50_000, 10_000))
    assert predicted_max_concurrency(w, "a") is None  # nothing finished
    w2 = Window(60)
    w2.add(_snap(0, 1, 1, 1, capacity=None))
    w2.add(_snap(10, 5, 100, 100, capacity=None))
    assert predicted_max_concurrency(w2, "a") is None


@pytest.mark.parametrize(
    ("later", "capacity"),
    [
        ((math.inf, 60_000, 12_000), 16384),  # infinitely many finished: a 0-token mean request
        ((120, math.inf, 12_000), 16384),
        ((120, 60_000, math.nan), 16384),
        ((120, 60_000, 12_000), math.inf),
        ((120, 60_000, 12_000), math.nan),
        ((120, 60_000, 12_000), -16384),
    ],
)
def test_non_finite_or_absurd_counts_give_no_prediction(later: tuple[float, float, float], capacity: float) -> None:
    """An engine may export +Inf/NaN or nonsense: no prediction, never an exception or a non-finite value."""
    w = Window(60)
    w.add(_snap(0, 100, 50_000, 10_000, capacity=capacity))
    w.add(_snap(10, *later, capacity=capacity))
    assert predicted_max_concurrency(w, "a") is None


def test_a_mean_request_of_almost_no_tokens_gives_no_infinite_prediction() -> None:
    w = Window(60)
    w.add(_snap(0, 100, 0, 0))
    w.add(_snap(10, 120, 1e-320, 0))  # 20 requests of 5e-322 tokens each: 16384 / 5e-322 overflows
    assert predicted_max_concurrency(w, "a") is None


def test_source_publishes_the_schema_metric() -> None:
    store = SnapshotStore()
    store.register("engine:a", 5.0)
    src = CapacityStep()
    store.record_success("engine:a", _snap(0, 10, 1000, 1000).points, 0.0)
    assert src.derive(store.snapshot()).points == []
    store.record_success("engine:a", _snap(0, 20, 2000, 2000).points, 0.0)
    (point,) = src.derive(store.snapshot()).points
    assert isinstance(point, Sample)
    assert point.name == "llm_kv_cache_predicted_max_concurrency"
    assert point.labels == {"server": "a"}
    assert point.value == 16384 / 200
