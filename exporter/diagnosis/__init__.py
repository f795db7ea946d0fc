"""The seven-layer diagnosis: which layer limits the service now, why, and what to do.

``build_diagnosis(settings, engines, store)`` returns the derive stage (exporter/derive.py:
``parallel`` -> ``capacity`` -> ``capacity_profile`` -> ``diagnosis`` from one
snapshot per pass) and the router serving ``GET /diagnosis`` (JSON) and ``GET /``
(the live page). ``DiagnosisSettings`` is what it reads of the configuration;
serve's wiring (exporter/commands/registry.py) fills it in and hands over the
``capacity_profile`` steps (exporter/capacity). See docs/diagnosis.md for every
cause, its evidence, thresholds and advice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

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

    from exporter.engines.config import EngineConfig
    from exporter.store import SnapshotStore


@dataclass
class DiagnosisBundle:
    """What ``serve`` wires in: the derive stage for the runners (in a list, as sources are), a router, the engine."""

    sources: list[DeriveStage]
    router: APIRouter
    #: one verdict per engine scope (exporter/diagnosis/fanout.py)
    engine: NodeDiagnosis


@dataclass(frozen=True)
class DiagnosisSettings:
    """What the diagnosis reads of the configuration (the defaults are those of ``serve``)."""

    #: the raw ``diagnosis:`` section (thresholds, SLOs); ``build_diagnosis`` validates it
    thresholds: Mapping[str, Any] = field(default_factory=dict)
    #: the diagnosis cycle in seconds (``--diagnosis-interval``, else the GPU interval but at least 1 s)
    interval: float = 1.0
    #: parallel groups (``groups:``): name -> GPU indexes; empty: one group of all GPUs
    groups: Mapping[str, list[int]] = field(default_factory=dict)
    #: ``--parallel-group``: the multi-node group this node is part of
    parallel_group: str | None = None
    #: the GPU source's sampling interval; None: no GPU source (``--gpu-source none``)
    gpu_interval: float | None = 1.0
    #: the process sampler's interval (an input only for engines with ``pid`` or ``process``)
    process_interval: float = 1.0


def input_intervals(settings: DiagnosisSettings, engines: Sequence[EngineConfig]) -> list[float]:
    """The sampling intervals of the inputs the diagnosis reads (its window must hold two of the slowest)."""
    out = [settings.gpu_interval] if settings.gpu_interval is not None else []
    out += [e.interval for e in engines]
    if any(e.pid or e.process for e in engines):
        out.append(settings.process_interval)
    return out


def build_diagnosis(
    settings: DiagnosisSettings,
    engines: Sequence[EngineConfig],
    store: SnapshotStore,
    *,
    capacity_steps: Sequence[Step] = (),
) -> DiagnosisBundle:
    """Raises ValueError("diagnosis.<key>: ...") on a bad ``diagnosis:`` section.

    ``capacity_steps``: the ``capacity_profile`` steps of the engines with a profile
    (exporter/capacity: ``build_capacity_steps``), run after ``capacity`` and before the verdict.
    """
    from exporter.diagnosis.api import build_router

    interval = settings.interval
    thresholds = widen_and_log(Thresholds.from_mapping(settings.thresholds), interval, input_intervals(settings, engines))
    engine = NodeDiagnosis(thresholds, settings.groups, specs_from(engines), interval, ProcessGpus())
    # in the order they run: the diagnosis reads what parallel and capacity computed from the same snapshot
    steps: list[Step] = [ParallelStep(settings.groups, node_group=settings.parallel_group), CapacityStep()]
    steps += capacity_steps
    steps.append(DiagnosisStep(engine))
    stage = DeriveStage(steps, interval, timeout=max(1.0, interval))
    return DiagnosisBundle(sources=[stage], router=build_router(engine), engine=engine)


__all__ = ["DiagnosisBundle", "DiagnosisEngine", "DiagnosisSettings", "NodeDiagnosis", "Thresholds", "build_diagnosis"]
