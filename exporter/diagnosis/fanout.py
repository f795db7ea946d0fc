"""One verdict per engine: the node's snapshot cut into each engine's scope and judged apart.

Why a fan-out rather than a wider engine: the DiagnosisEngine's method (symptoms,
rules, one primary) is right for one service; what was wrong is *what* it was
shown. Each engine gets its own DiagnosisEngine (its own window, hysteresis and
held causes) fed with the scoped snapshot of exporter/diagnosis/scope.py, so
engine B's throttled GPU is never engine A's primary and two pods are never one
tensor-parallel group.

Engines are the configured ones plus any the store holds an ``engine:NAME``
source for (Kubernetes discovery adds them while serving); an engine gone is
forgotten. On a node with no engine at all one verdict judges every GPU (metric
label ``engine=""``). GPUs no engine uses are judged for hardware warnings only
(their throttling or full framebuffer is worth knowing) and shown under
``unassigned_gpus`` in ``/diagnosis``; they never reach an engine's verdict.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from exporter.diagnosis.engine import DiagnosisEngine
from exporter.diagnosis.rules import RULES, Rule
from exporter.diagnosis.scope import EngineSpec, ProcessGpus, Scope, live_of, partition, resolve, scope_groups, scoped
from exporter.diagnosis.thresholds import Thresholds
from exporter.diagnosis.verdict import Cause, Verdict, unknown_verdict
from exporter.samples import Point
from exporter.store import Snapshot

#: the rules a GPU no engine uses is judged by: hardware causes that are news on their own
SPARE_RULES: tuple[Rule, ...] = tuple(r for r in RULES if r.layer == "hardware" and r.warns_alone is not None)
#: a verdict older than this many diagnosis cycles reads unknown (the diagnosis has stopped)
STALE_CYCLES = 3
#: severity order of the node's state: the worst engine's state is the node's
_STATE_RANK = {"degraded": 0, "unknown": 1, "healthy": 2}


@dataclass(frozen=True)
class NodeVerdict:
    """Every engine's verdict of one cycle, the scopes they were judged over, the spare GPUs' warnings."""

    #: engine name -> verdict ("" -> the node's, when there is no engine)
    engines: dict[str, Verdict]
    scopes: dict[str, Scope] = field(default_factory=dict)
    spare_gpus: tuple[str, ...] = ()
    spare_warnings: tuple[Cause, ...] = ()
    #: monotonic time of the cycle (None before the first)
    observed_at: float | None = None

    def points(self, rules: Any = None) -> list[Point]:
        """Each engine's diagnosis series, labelled ``engine`` (exporter/schema.py)."""
        out: list[Point] = []
        for name, verdict in self.engines.items():
            out += verdict.points(rules, engine=name)
        return out

    def worst(self) -> tuple[str, Verdict]:
        """The engine whose state is worst (degraded > unknown > healthy; then the most confident primary)."""

        def rank(item: tuple[str, Verdict]) -> tuple[int, float, str]:
            name, v = item
            return (_STATE_RANK.get(v.state, 1), -(v.primary.confidence if v.primary else 0.0), name)

        return min(self.engines.items(), key=rank)


class NodeDiagnosis:
    """Runs one DiagnosisEngine per engine scope each cycle; what DiagnosisStep (exporter/diagnosis/source.py) and the API read."""

    def __init__(
        self,
        thresholds: Thresholds | None = None,
        groups: Mapping[str, list[int]] | None = None,
        engines: Sequence[EngineSpec] = (),
        interval: float = 1.0,
        process_gpus: ProcessGpus | None = None,
        rules: tuple[Rule, ...] = RULES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.thresholds = thresholds or Thresholds()
        self.configured_groups = dict(groups or {})
        self.specs = {s.name: s for s in engines}
        self.interval = interval
        self.rules = rules
        self.process_gpus = process_gpus
        self._clock = clock
        self._engines: dict[str, DiagnosisEngine] = {}
        self._spare = DiagnosisEngine(self.thresholds, rules=SPARE_RULES)
        self._lock = threading.Lock()
        first = unknown_verdict()
        self._latest = NodeVerdict({n: first for n in self.specs} or {"": first})

    @property
    def latest(self) -> NodeVerdict:
        with self._lock:
            return self._latest

    def engine(self, name: str) -> DiagnosisEngine | None:
        """The engine judging ``name`` ("" on a node without engines)."""
        return self._engines.get(name)

    def names(self, snap: Snapshot) -> list[str]:
        """Configured engines, then those the store scrapes under ``engine:NAME`` (discovered)."""
        seen = dict.fromkeys(self.specs)
        for source in sorted(snap.sources or {}):
            kind, sep, owner = source.partition(":")
            if kind == "engine" and sep and owner:
                seen.setdefault(owner, None)
        return list(seen)

    def observe(self, snap: Snapshot) -> NodeVerdict:
        """Judge every engine on its own scope of ``snap``."""
        names = self.names(snap)
        verdicts: dict[str, Verdict] = {}
        scopes: dict[str, Scope] = {}
        spare: tuple[str, ...] = ()
        warnings: tuple[Cause, ...] = ()
        if not names:
            verdicts[""] = self._judge("", snap, self.configured_groups)
        else:
            specs = [self.specs.get(n, EngineSpec(n)) for n in names]
            part = partition(snap)
            scopes = resolve(specs, part, self.process_gpus)
            for name in names:
                sc = scopes[name]
                view = scoped(part, name, sc.gpus, names)
                groups = self.configured_groups if sc.origin == "node" else scope_groups(self.configured_groups, sc.gpus)
                v = self._judge(name, view, groups)
                verdicts[name] = replace(v, notices=[sc.notice, *v.notices]) if sc.notice else v
            used = {g for sc in scopes.values() for g in sc.gpus}
            spare = tuple(g for g in live_of(part) if g not in used)
            if spare:
                judged = self._spare.observe(scoped(part, None, spare, names))
                warnings = tuple(replace(c, role="warning") for c in judged.bottlenecks)
        for gone in set(self._engines) - set(verdicts):
            del self._engines[gone]
        node = NodeVerdict(verdicts, scopes, spare, warnings, observed_at=self._clock())
        with self._lock:
            self._latest = node
        return node

    def _judge(self, name: str, snap: Snapshot, groups: Mapping[str, list[int]]) -> Verdict:
        engine = self._engines.get(name)
        if engine is None:
            engine = self._engines[name] = DiagnosisEngine(self.thresholds, groups, self.rules)
        engine.configured_groups = dict(groups)
        return engine.observe(snap)

    def close(self) -> None:
        """Ends the NVML session the process-GPU lookup may hold."""
        if self.process_gpus is not None:
            self.process_gpus.close()

    # ------------------------------------------------------------------ speaking

    def age(self, node: NodeVerdict) -> float | None:
        return None if node.observed_at is None else max(0.0, self._clock() - node.observed_at)

    def body(self, engine: str | None = None, signals: bool = False) -> dict[str, Any] | None:
        """The /diagnosis JSON: one engine's verdict (``engine``; None when unknown), or the node's.

        The node's is the single engine's verdict as it always was; with several engines it is the
        worst engine's, plus ``engine`` (its name) and ``engines`` (name -> verdict). Every body
        carries ``age_seconds``, and turns ``unknown`` once older than STALE_CYCLES cycles.
        """
        node = self.latest
        age = self.age(node)
        stale = age is not None and age > STALE_CYCLES * self.interval
        if engine is not None:
            v = node.engines.get(engine)
            if v is None:
                return None
            return self._one(v, age, stale, signals)
        if len(node.engines) == 1:
            ((_, v),) = node.engines.items()
            body = self._one(v, age, stale, signals)
        else:
            name, v = node.worst()
            body = self._one(v, age, stale, signals)
            body["engine"] = name
            body["engines"] = {n: self._one(x, age, stale, False) for n, x in node.engines.items()}
        if node.spare_gpus:
            body["unassigned_gpus"] = {
                "gpus": list(node.spare_gpus),
                "warnings": [c.as_dict() for c in node.spare_warnings],
            }
        return body

    def _one(self, v: Verdict, age: float | None, stale: bool, signals: bool) -> dict[str, Any]:
        body = v.as_dict()
        body["age_seconds"] = None if age is None else round(age, 3)
        if stale and age is not None:
            body["state"] = "unknown"
            body["primary"] = None
            body["notices"] = [
                f"verdict is {age:.0f} s old, more than {STALE_CYCLES} diagnosis cycles of {self.interval:g} s:"
                " the diagnosis has stopped, state unknown",
                *body["notices"],
            ]
        if signals:
            body["signals"] = v.signals
        return body
