"""The verdict: what one diagnosis cycle concluded, as data, JSON and metrics.

Why its own module: the engine decides, this module only says it, the same way
everywhere: ``/diagnosis`` (``as_dict``, a contract whose keys are documented in
docs/diagnosis.md), the metrics (``points``), and through them the alerts, the
dashboards, ``diagnose``, the ``/`` page, ``demo`` and ``ramp``.

Roles of a cause that holds:

* ``primary``: the one cause that best explains the symptoms (degraded only).
* ``contributing``: another holding cause that explains some of the symptoms.
* ``symptom``: ``queue_backlog`` / ``slo_breach`` holding while a real cause explains them.
* ``warning``: waste or danger on its own (preemptions, throttling, a full
  framebuffer, rejected drafts, failures), shown even when healthy.
* ``candidate``: holds while we cannot tell whether users suffer (no engine data).

A cause that holds while no symptom does and that is not alarming alone is not
reported at all: its layer is ``ok`` and says how near it is in ``headroom``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from exporter.diagnosis.symptoms import SYMPTOM_IDS, ObservedSymptom
from exporter.samples import Point, Sample
from exporter.schema import LAYERS

SCHEMA_VERSION = 2
STATES: tuple[str, ...] = ("degraded", "healthy", "unknown")
STATUSES = ("ok", "warning", "bottleneck", "unknown")
ROLES = ("primary", "contributing", "symptom", "warning", "candidate")


@dataclass(frozen=True)
class Cause:
    """One cause that holds now, with the numbers that prove it."""

    layer: str
    cause: str
    score: float
    evidence: dict[str, float]
    advice: str
    confidence: float = 0.0
    role: str = "warning"
    #: the cause's own link of the chain ("KV cache 100 % full, 2.7 preemptions/s")
    summary: str = ""
    #: the observed symptom ids this cause explains
    explains: tuple[str, ...] = ()
    #: symptom -> cause, with numbers (the primary only)
    chain: str = ""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "layer": self.layer,
            "cause": self.cause,
            "score": self.score,
            "confidence": self.confidence,
            "role": self.role,
            "summary": self.summary,
            "explains": list(self.explains),
            "evidence": self.evidence,
            "advice": self.advice,
        }
        if self.role == "primary":
            out["chain"] = self.chain
        return out


@dataclass(frozen=True)
class LayerVerdict:
    score: float | None
    status: str
    #: 0-1: how far the layer is from its nearest limit (None while unknown or unmeasurable)
    headroom: float | None = None
    #: the sentence behind ``headroom`` ("HBM bandwidth 70 % busy; 30 % headroom")
    limit: str = ""


@dataclass(frozen=True)
class Verdict:
    """The state of the service and of all seven layers at one instant."""

    timestamp: float
    layers: dict[str, LayerVerdict]
    #: every cause reported (primary, contributing, symptoms, warnings, candidates), worst first
    bottlenecks: list[Cause] = field(default_factory=list)
    state: str = "unknown"
    symptoms: list[ObservedSymptom] = field(default_factory=list)
    primary: Cause | None = None
    notices: list[str] = field(default_factory=list)
    #: every cause whose condition holds, reported or not (headroom-only ones included)
    holding: tuple[str, ...] = ()
    #: the service-scope signals the cycle judged (``GET /diagnosis?signals=1``)
    signals: dict[str, float] = field(default_factory=dict)
    #: the load against the measured capacity at SLO (exporter/diagnosis/capacity_profile.py); None: no profile
    capacity: dict[str, Any] | None = None

    @property
    def contributing(self) -> list[Cause]:
        return [c for c in self.bottlenecks if c.role == "contributing"]

    def as_dict(self) -> dict[str, Any]:
        """The /diagnosis JSON body (a contract: keys exactly as documented)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "timestamp": self.timestamp,
            "state": self.state,
            "notices": list(self.notices),
            "symptoms": [x.as_dict() for x in self.symptoms],
            "primary": self.primary.as_dict() if self.primary else None,
            "contributing": [c.as_dict() for c in self.contributing],
            "layers": {
                name: {"score": lv.score, "status": lv.status, "headroom": lv.headroom, "limit": lv.limit}
                for name, lv in self.layers.items()
            },
            "bottlenecks": [c.as_dict() for c in self.bottlenecks],
            "holding": list(self.holding),
            "capacity": self.capacity,
        }

    def active(self) -> set[tuple[str, str]]:
        return {(c.layer, c.cause) for c in self.bottlenecks}

    def points(self, rules: Any = None, engine: str = "") -> list[Point]:
        """Per layer: score and headroom (NaN while unknown); per cause: active, primary,
        confidence (every cause id present, so alerts and panels never see a gap); the
        service state one-hot; each symptom 0/1. Every series carries ``engine``: the engine
        judged ("" on a node without engines, exporter/diagnosis/fanout.py)."""
        from exporter.diagnosis.rules import RULES

        table = rules if rules is not None else RULES
        e = {"engine": engine}
        out: list[Point] = []
        for name, lv in self.layers.items():
            out.append(Sample("llm_bottleneck_score", {**e, "layer": name}, _nan(lv.score)))
            out.append(Sample("llm_layer_headroom_ratio", {**e, "layer": name}, _nan(lv.headroom)))
        reported = {(c.layer, c.cause): c for c in self.bottlenecks}
        main = (self.primary.layer, self.primary.cause) if self.primary else None
        for r in table:
            key = (r.layer, r.cause)
            c = reported.get(key)
            labels = {**e, "layer": r.layer, "cause": r.cause}
            out.append(Sample("llm_bottleneck_active", labels, 1.0 if c else 0.0))
            out.append(Sample("llm_bottleneck_primary", labels, 1.0 if key == main else 0.0))
            out.append(Sample("llm_bottleneck_confidence", labels, c.confidence if c else 0.0))
        out += [Sample("llm_service_state", {**e, "state": s}, 1.0 if s == self.state else 0.0) for s in STATES]
        held = {x.id for x in self.symptoms}
        out += [Sample("llm_symptom_active", {**e, "symptom": s}, 1.0 if s in held else 0.0) for s in SYMPTOM_IDS]
        return out


def _nan(x: float | None) -> float:
    return math.nan if x is None else x


def unknown_verdict(timestamp: float | None = None) -> Verdict:
    """What we know before the first cycle: nothing."""
    return Verdict(
        timestamp or time.time(),
        {layer: LayerVerdict(None, "unknown") for layer in LAYERS},
        notices=["no diagnosis cycle has run yet"],
    )
