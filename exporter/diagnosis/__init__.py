"""The seven-layer diagnosis: which layer limits the service now, why, and what to do.

``build_diagnosis(config, store)`` returns the derived sources (``parallel``,
``diagnosis`` and ``capacity``) and the router serving ``GET /diagnosis`` (JSON) and ``GET /``
(the live page). See docs/diagnosis.md for every cause, its evidence,
thresholds and advice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from exporter.diagnosis.capacity import CapacitySource
from exporter.diagnosis.engine import DiagnosisEngine
from exporter.diagnosis.fanout import NodeDiagnosis
from exporter.diagnosis.intervals import widen_and_log
from exporter.diagnosis.parallel import ParallelSource
from exporter.diagnosis.scope import ProcessGpus, specs_from
from exporter.diagnosis.source import DiagnosisSource
from exporter.diagnosis.thresholds import Thresholds

if TYPE_CHECKING:  # FastAPI is imported only when the router is built
    from fastapi import APIRouter

    from exporter.config import Config
    from exporter.sources import Source
    from exporter.store import SnapshotStore


@dataclass
class DiagnosisBundle:
    """What ``serve`` wires in: sources for the runners, a router for the app, the engine."""

    sources: list[Source]
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
    sources: list[Source] = [
        ParallelSource(
            store, config.groups, config.gpu_interval, timeout=max(1.0, config.gpu_interval), node_group=config.parallel_group
        ),
        DiagnosisSource(store, engine, interval, timeout=max(1.0, interval)),
        CapacitySource(store, config.engine_interval, timeout=max(1.0, config.engine_interval)),
    ]
    # the measured capacity at SLO of engines with a profile (exporter/capacity, docs/capacity.md)
    from exporter.capacity import build_capacity_sources

    sources += build_capacity_sources(config, store)
    return DiagnosisBundle(sources=sources, router=build_router(engine), engine=engine)


__all__ = ["DiagnosisBundle", "DiagnosisEngine", "NodeDiagnosis", "Thresholds", "build_diagnosis"]
