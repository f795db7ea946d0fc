"""The seven-layer diagnosis: which layer limits the service now, why, and what to do.

``build_diagnosis(config, store)`` returns the derive stage (exporter/derive.py:
``parallel`` -> ``capacity`` -> ``capacity_profile`` -> ``diagnosis`` from one
snapshot per pass) and the router serving ``GET /diagnosis`` (JSON) and ``GET /``
(the live page). See docs/diagnosis.md for every cause, its evidence,
thresholds and advice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from exporter.derive import DeriveStage, Step
from exporter.diagnosis.capacity import CapacityStep
from exporter.diagnosis.engine import DiagnosisEngine
from exporter.diagnosis.fanout import NodeDiagnosis
from exporter.diagnosis.intervals import widen_and_log
from exporter.diagnosis.parallel import ParallelStep
from exporter.diagnosis.scope import ProcessGpus, specs_from
from exporter.diagnosis.source import DiagnosisStep
from exporter.diagnosis.thresholds import Thresholds

if TYPE_CHECKING:  # FastAPI is imported only when the router is built
    from fastapi import APIRouter

    from exporter.config import Config
    from exporter.store import SnapshotStore


@dataclass
class DiagnosisBundle:
    """What ``serve`` wires in: the derive stage for the runners (in a list, as sources are), a router, the engine."""

    sources: list[DeriveStage]
    router: APIRouter
    #: one verdict per engine scope (exporter/diagnosis/fanout.py)
    engine: NodeDiagnosis


def input_intervals(config: Config) -> list[float]:
    """The sampling intervals of the inputs the diagnosis reads (its window must hold two of the slowest)."""
    out = [config.gpu_interval] if config.gpu_source != "none" else []
    out += [e.interval for e in config.engines]
    if any(e.pid or e.process for e in config.engines):
        out.append(config.process_interval)
    return out


def build_diagnosis(config: Config, store: SnapshotStore) -> DiagnosisBundle:
    """Raises ValueError("diagnosis.<key>: ...") on a bad ``diagnosis:`` section."""
    from exporter.diagnosis.api import build_router

    interval = config.effective_diagnosis_interval
    thresholds = widen_and_log(Thresholds.from_mapping(config.diagnosis), interval, input_intervals(config))
    engine = NodeDiagnosis(thresholds, config.groups, specs_from(config.engines), interval, ProcessGpus())
    # the measured capacity at SLO of engines with a profile (exporter/capacity, docs/capacity.md)
    from exporter.capacity import build_capacity_steps

    # in the order they run: the diagnosis reads what parallel and capacity computed from the same snapshot
    steps: list[Step] = [ParallelStep(config.groups, node_group=config.parallel_group), CapacityStep()]
    steps += build_capacity_steps(config)
    steps.append(DiagnosisStep(engine))
    stage = DeriveStage(steps, interval, timeout=max(1.0, interval))
    return DiagnosisBundle(sources=[stage], router=build_router(engine), engine=engine)


__all__ = ["DiagnosisBundle", "DiagnosisEngine", "NodeDiagnosis", "Thresholds", "build_diagnosis"]
