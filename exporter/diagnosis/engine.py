"""The diagnosis engine: window -> signals -> rules -> a verdict per cycle.

Why a class with state: counters need the window, and a cause must hold for
``persistence_cycles`` consecutive cycles before it is reported, so one noisy
sample does not page anyone. The verdict is immutable and swapped atomically;
the HTTP routes and the metrics read the latest one and never run rules.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from exporter.diagnosis import signals as sig
from exporter.diagnosis.rules import RULES, Rule
from exporter.diagnosis.thresholds import Thresholds
from exporter.diagnosis.window import Window
from exporter.samples import Point, Sample
from exporter.schema import LAYERS
from exporter.store import Snapshot

STATUSES = ("ok", "warning", "bottleneck", "unknown")
_PLAIN = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_WITH_LABELS = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}")
_SCOPE_LABEL = {"gpu": "gpu", "group": "group"}


@dataclass(frozen=True)
class Cause:
    """One cause that holds now, with the numbers that prove it."""

    layer: str
    cause: str
    score: float
    evidence: dict[str, float]
    advice: str

    def as_dict(self) -> dict[str, Any]:
        return {"layer": self.layer, "cause": self.cause, "score": self.score, "evidence": self.evidence, "advice": self.advice}


@dataclass(frozen=True)
class LayerVerdict:
    score: float | None
    status: str


@dataclass(frozen=True)
class Verdict:
    """The state of all seven layers at one instant."""

    timestamp: float
    layers: dict[str, LayerVerdict]
    bottlenecks: list[Cause] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The /diagnosis JSON body (a contract: keys exactly as documented)."""
        return {
            "timestamp": self.timestamp,
            "layers": {name: {"score": lv.score, "status": lv.status} for name, lv in self.layers.items()},
            "bottlenecks": [c.as_dict() for c in self.bottlenecks],
        }

    def active(self) -> set[tuple[str, str]]:
        return {(c.layer, c.cause) for c in self.bottlenecks}

    def points(self, rules: tuple[Rule, ...] = RULES) -> list[Point]:
        """llm_bottleneck_score per layer (NaN while unknown) and llm_bottleneck_active per cause."""
        out: list[Point] = [
            Sample("llm_bottleneck_score", {"layer": name}, lv.score if lv.score is not None else math.nan)
            for name, lv in self.layers.items()
        ]
        on = self.active()
        out += [
            Sample("llm_bottleneck_active", {"layer": r.layer, "cause": r.cause}, 1.0 if (r.layer, r.cause) in on else 0.0)
            for r in rules
        ]
        return out


def unknown_verdict(timestamp: float | None = None) -> Verdict:
    """What we know before the first cycle: nothing."""
    return Verdict(timestamp or time.time(), {layer: LayerVerdict(None, "unknown") for layer in LAYERS})


def evidence_key(name: str, scope: str, key: str) -> str:
    """Signal name made specific to its GPU or group: ``metric{gpu="0"}``."""
    label = _SCOPE_LABEL.get(scope)
    if label is None:
        return name
    pair = f'{label}="{key}"'
    if _PLAIN.fullmatch(name):
        return f"{name}{{{pair}}}"
    m = _WITH_LABELS.fullmatch(name)
    if m and "(" not in m.group(1):
        return f"{m.group(1)}{{{pair},{m.group(2)}}}"
    return f"({name}){{{pair}}}"


def _short(x: float) -> float:
    return float(f"{x:.6g}")


class DiagnosisEngine:
    """Evaluates the rules table on every snapshot it is given."""

    def __init__(
        self,
        thresholds: Thresholds | None = None,
        groups: Mapping[str, list[int]] | None = None,
        rules: tuple[Rule, ...] = RULES,
    ) -> None:
        self.thresholds = thresholds or Thresholds()
        self.rules = rules
        self.configured_groups = dict(groups or {})
        self.window = Window(self.thresholds.window_seconds)
        self._streak: dict[str, int] = {r.cause: 0 for r in rules}
        #: cause -> (last Cause reported, consecutive cycles its condition has failed since)
        self._held: dict[str, tuple[Cause, int]] = {}
        self._lock = threading.Lock()
        self._latest = unknown_verdict()

    @property
    def latest(self) -> Verdict:
        with self._lock:
            return self._latest

    def observe(self, snap: Snapshot) -> Verdict:
        """Add one snapshot to the window and judge every rule on it."""
        self.window.add(snap)
        groups = sig.resolve_groups(self.configured_groups, snap)
        signals = sig.compute(self.window, groups, self.thresholds.recent_seconds)
        verdict = self.judge(signals, snap.timestamp)
        with self._lock:
            self._latest = verdict
        return verdict

    def judge(self, signals: sig.Signals, timestamp: float) -> Verdict:
        t = self.thresholds
        judged: set[str] = set()
        causes: list[Cause] = []
        for rule in self.rules:
            best: tuple[float, str, Mapping[str, float]] | None = None
            rule_judged = False
            for key in signals.scopes[rule.scope] if rule.scope != "service" else [""]:
                view = signals.view(rule.scope, key)
                if not rule.judgeable(view):
                    continue
                rule_judged = True
                judged.add(rule.layer)
                if not rule.condition(view, t):
                    continue
                severity = min(1.0, max(0.0, float(rule.severity(view, t))))
                if best is None or severity > best[0]:
                    best = (severity, key, view)
            if best is None:
                self._streak[rule.cause] = 0
                held = self._hold(rule, judgeable=rule_judged)
                if held is not None:
                    causes.append(held)
                continue
            self._streak[rule.cause] += 1
            if self._streak[rule.cause] < t.persistence_cycles:
                continue
            severity, key, proof = best
            score = _short(t.warning_score + (1.0 - t.warning_score) * severity)
            evidence = {evidence_key(n, rule.scope, key): _short(proof[n]) for n in rule.evidence if n in proof}
            cause = Cause(rule.layer, rule.cause, score, evidence, rule.advice)
            self._held[rule.cause] = (cause, 0)
            causes.append(cause)
        causes.sort(key=lambda c: (-c.score, LAYERS.index(c.layer), c.cause))
        layers: dict[str, LayerVerdict] = {}
        for layer in LAYERS:
            if layer not in judged:
                layers[layer] = LayerVerdict(None, "unknown")
                continue
            score = max((c.score for c in causes if c.layer == layer), default=0.0)
            layers[layer] = LayerVerdict(score, self.status(score))
        return Verdict(timestamp, layers, causes)

    def _hold(self, rule: Rule, judgeable: bool) -> Cause | None:
        """A reported cause whose condition just failed stays for ``clear_cycles - 1`` more cycles.

        Its last evidence is kept (it is what proved the cause). A cause whose
        signals vanished is cleared at once: its layer is no longer judged.
        """
        held = self._held.get(rule.cause)
        if held is None:
            return None
        cause, misses = held
        misses += 1
        if not judgeable or misses >= self.thresholds.clear_cycles:
            del self._held[rule.cause]
            return None
        self._held[rule.cause] = (cause, misses)
        return cause

    def status(self, score: float) -> str:
        t = self.thresholds
        if score >= t.bottleneck_score:
            return "bottleneck"
        if score >= t.warning_score:
            return "warning"
        return "ok"
