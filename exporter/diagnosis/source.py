"""Derived source ``diagnosis``: one engine cycle per derive pass, published as metrics.

Why a step of the derive stage (exporter/derive.py): it runs last in the pass,
on the snapshot ``parallel`` and ``capacity`` were computed from plus their
points, so the verdict judges one moment; its verdict lands in the store under
``source="diagnosis"``, so ``llm_bottleneck_score`` is scraped exactly like a
GPU metric and the step has its own health series.
"""

from __future__ import annotations

from exporter.diagnosis.engine import DiagnosisEngine
from exporter.diagnosis.fanout import NodeDiagnosis
from exporter.samples import SampleResult
from exporter.store import Snapshot


class DiagnosisStep:
    """Runs the rules on the pass's snapshot (per engine scope, with a NodeDiagnosis); returns the verdict's points."""

    name = "diagnosis"

    def __init__(self, engine: DiagnosisEngine | NodeDiagnosis) -> None:
        self.engine = engine

    def derive(self, snap: Snapshot) -> SampleResult:
        verdict = self.engine.observe(snap)
        return SampleResult(verdict.points(self.engine.rules))

    def close(self) -> None:
        """Holds nothing of its own; a NodeDiagnosis may hold an NVML session (scope lookups)."""
        if isinstance(self.engine, NodeDiagnosis):
            self.engine.close()
