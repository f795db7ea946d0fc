"""Source ``diagnosis``: one engine cycle per interval, published as metrics.

Why a source like any other: it gets its own loop, interval, timeout and
health series from the runner, and its verdict lands in the store, so
``llm_bottleneck_score`` is scraped exactly like a GPU metric.
"""

from __future__ import annotations

from exporter.diagnosis.engine import DiagnosisEngine
from exporter.samples import SampleResult
from exporter.store import SnapshotStore


class DiagnosisSource:
    """Reads ``store.snapshot()``, runs the rules, returns score and active points."""

    name = "diagnosis"

    def __init__(self, store: SnapshotStore, engine: DiagnosisEngine, interval: float, timeout: float) -> None:
        self.store = store
        self.engine = engine
        self.interval = interval
        self.timeout = timeout

    def sample(self) -> SampleResult:
        verdict = self.engine.observe(self.store.snapshot())
        return SampleResult(verdict.points(self.engine.rules))

    def close(self) -> None:
        """Holds nothing."""
