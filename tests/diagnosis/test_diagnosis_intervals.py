"""Time, not cycles (issue 20, item 3): spans are widened to two cycles at start-up, so any
interval a user can set works; a verdict older than three cycles reads unknown."""

from __future__ import annotations

import logging

import pytest

from exporter.diagnosis import DiagnosisSettings, build_diagnosis
from exporter.diagnosis.engine import DiagnosisEngine
from exporter.diagnosis.intervals import fit_spans
from exporter.diagnosis.thresholds import Thresholds
from exporter.engines.config import EngineConfig
from exporter.samples import Point
from exporter.store import Snapshot, SnapshotStore
from tests.diagnosis.diag_points import engine, healthy_gpu


def test_spans_shorter_than_two_cycles_are_widened_and_said_once() -> None:
    t, changes = fit_spans(Thresholds(), cycle=6.0, inputs=[1.0, 5.0])
    assert (t.recent_seconds, t.window_seconds) == (12.0, 20.0)
    assert changes == ["recent_seconds 5 -> 12 s (2 diagnosis cycles of 6 s)"]
    t, changes = fit_spans(Thresholds(), cycle=1.0, inputs=[30.0])  # an engine scraped every 30 s
    assert (t.recent_seconds, t.window_seconds) == (5.0, 60.0)
    assert changes == ["window_seconds 20 -> 60 s (2 cycles of the slowest interval, 30 s)"]
    same, none = fit_spans(Thresholds(), cycle=1.0, inputs=[1.0, 5.0])
    assert none == [] and same == Thresholds()


def never_draining(i: int) -> list[Point]:
    """20 requests waiting in every look, nothing admitted: no queue-time or TTFT histogram moves."""
    return [*healthy_gpu(0), *engine(waiting=20, running=2, kv=0.3)]


@pytest.mark.parametrize("interval", [6.0, 10.0])
def test_a_queue_that_never_drains_reads_degraded_at_long_diagnosis_intervals(
    interval: float, caplog: pytest.LogCaptureFixture
) -> None:
    engines = [EngineConfig(url="http://127.0.0.1:1/metrics", name="sim")]  # scraped every 5 s, the GPU every 1 s
    with caplog.at_level(logging.WARNING, logger="exporter.diagnosis.intervals"):
        bundle = build_diagnosis(DiagnosisSettings(interval=interval), engines, SnapshotStore())
    widened = [r.getMessage() for r in caplog.records if "widened" in r.getMessage()]
    assert len(widened) == 1 and f"recent_seconds 5 -> {2 * interval:g} s" in widened[0]
    node, bare = bundle.engine, DiagnosisEngine()  # bare: today's 5 s recent span, unwidened
    for i in range(5):
        snap = Snapshot(1000.0 + i * interval, never_draining(i), {})
        verdict = node.observe(snap).engines["sim"]
        old = bare.observe(snap)
    assert old.state == "healthy"  # one look per recent span: "never drained" cannot be told
    assert verdict.state == "degraded", verdict.notices
    assert "queueing" in {x.id for x in verdict.symptoms}
    assert verdict.primary is not None  # which cause is the ranking's business (ranking.py), not this test's
