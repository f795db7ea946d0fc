"""The diagnosis engine: window -> signals -> symptoms and rules -> one verdict per cycle.

The method is symptom-first. A cycle

1. evaluates every rule of the table (``rules.py``) on the signals, per GPU,
   group or service, and keeps the causes that hold (a cause must hold for
   ``persistence_cycles`` cycles to count and is cleared after failing
   ``clear_cycles`` in a row, so one noisy sample neither pages nor flickers);
2. observes the user-visible symptoms (``symptoms.py``), with the same
   hysteresis (``symptom_persistence_cycles`` / ``symptom_clear_cycles``);
3. decides the state: ``degraded`` when a symptom holds, ``healthy`` when none
   does and there was the data to judge, ``unknown`` otherwise;
4. in ``degraded``, names ONE primary: the holding cause that explains the most
   symptoms with its own evidence (``causality.py``), then by severity and time
   held, the causal order last
   (``ranking.py``), with the chain from symptom to cause in numbers; the other
   explaining causes contribute;
5. reports every layer's headroom: how near its nearest limit is.

A cause that holds while nothing suffers is headroom information, not an alarm,
except the ones that are waste or danger on their own (``Rule.warns_alone``).

Why a missed sample does not blank the verdict: an engine busy enough to be
the problem is also the one whose ``/metrics`` answers late (a vLLM front end
sharing starved cores, a gateway timing out). The store drops a source's
points the moment an attempt times out, so a snapshot taken then holds no
engine data and would read "unknown", and the hysteresis would start over
("healthy" for a cycle with nine requests waiting). While an input that was
fresh has been missing for at most ``source_gap_seconds``, the engine therefore
does not judge that snapshot: it re-issues the last verdict, stamped now, with
a notice naming the source and its error, and adds nothing to the window (the
counters of the next good sample span the gap). A longer outage is judged as
it is: the source is down and its layers are unknown.

The verdict is immutable and swapped atomically; the HTTP routes and the
metrics read the latest one and never run rules.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from exporter.diagnosis import causality
from exporter.diagnosis import signals as sig
from exporter.diagnosis.capacity_profile import capacity_body
from exporter.diagnosis.finite import clamp01
from exporter.diagnosis.notices import notices_for
from exporter.diagnosis.ranking import Holding, pick_primary, score
from exporter.diagnosis.rules import RULES, Rule
from exporter.diagnosis.symptoms import ObservedSymptom, observe
from exporter.diagnosis.thresholds import Thresholds
from exporter.diagnosis.verdict import STATUSES, Cause, LayerVerdict, Verdict, unknown_verdict
from exporter.diagnosis.window import Window
from exporter.schema import LAYERS
from exporter.store import Snapshot

__all__ = ["STATUSES", "Cause", "DiagnosisEngine", "LayerVerdict", "Verdict", "evidence_key", "unknown_verdict"]

_PLAIN = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_WITH_LABELS = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\}")
_SCOPE_LABEL = {"gpu": "gpu", "group": "group"}
#: symptoms ordered for the chain: what users feel first, then the queue behind it
_CHAIN_ORDER = ("ttft_high", "itl_high", "failures", "queueing", "throughput_saturated")


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


@dataclass
class _Judged:
    """One rule's outcome in one cycle."""

    rule: Rule
    judged: bool
    #: (severity, scope key, view) of its worst instance, when it holds
    worst: tuple[float, str, Mapping[str, float]] | None
    #: 0-1 nearness of its resource to the limit (max over instances), when it has one
    proximity: float | None


class DiagnosisEngine:
    """Evaluates the symptoms and the rules table on every snapshot it is given."""

    def __init__(
        self,
        thresholds: Thresholds | None = None,
        groups: Mapping[str, list[int]] | None = None,
        rules: tuple[Rule, ...] = RULES,
    ) -> None:
        self.thresholds = thresholds or Thresholds()
        self.rules = rules
        self.configured_groups = dict(groups or {})
        self.window = Window(self.thresholds.window_seconds, keep=sig.reads)
        self._streak: dict[str, int] = {r.cause: 0 for r in rules}
        #: last cycle's primary cause: it keeps the primary through noise (ranking.pick_primary's band)
        self._primary: str | None = None
        #: cause -> (last Holding reported, consecutive cycles its condition has failed since)
        self._held: dict[str, tuple[Holding, int]] = {}
        self._symptom_streak: dict[str, int] = {}
        self._symptom_held: dict[str, tuple[ObservedSymptom, int]] = {}
        self._lock = threading.Lock()
        self._latest = unknown_verdict()
        #: the last verdict judged (not held), the inputs fresh in its snapshot, and when the current gap began
        self._judged = self._latest
        self._fresh_inputs: frozenset[str] = frozenset()
        self._gap_since: float | None = None

    @property
    def latest(self) -> Verdict:
        with self._lock:
            return self._latest

    def observe(self, snap: Snapshot) -> Verdict:
        """Add one snapshot to the window and judge it (or bridge a short gap in an input)."""
        fresh = fresh_inputs(snap)
        verdict = self._bridge(snap, fresh)
        if verdict is None:
            self.window.add(snap)
            groups = sig.resolve_groups(self.configured_groups, snap)
            signals = sig.compute(self.window, groups, self.thresholds.recent_seconds)
            verdict = self._judged = self.judge(signals, snap.timestamp, snap)
            self._fresh_inputs = fresh
        with self._lock:
            self._latest = verdict
        return verdict

    def _bridge(self, snap: Snapshot, fresh: frozenset[str]) -> Verdict | None:
        """The last verdict judged again, while an input fresh at that judgement has been missing
        for at most ``source_gap_seconds`` (see the module docstring); None: judge ``snap``."""
        sources = snap.sources or {}
        lost = sorted(n for n in self._fresh_inputs - fresh if n in sources)
        if not lost:
            self._gap_since = None
            return None
        if self._gap_since is None:
            self._gap_since = snap.monotonic
        gap = snap.monotonic - self._gap_since
        last = self._judged
        if self.thresholds.source_gap_seconds <= 0 or gap > self.thresholds.source_gap_seconds or last.state == "unknown":
            return None
        missing = []
        for name in lost:
            st = sources[name]
            why = st.last_error.reason if not st.up and st.last_error is not None else "late"
            missing.append(f"{name} ({why})")
        notice = (
            f"source {', '.join(missing)} missed its latest sample: verdict held from {gap:.0f} s ago"
            f" (for up to {self.thresholds.source_gap_seconds:g} s)"
        )
        return replace(last, timestamp=snap.timestamp, notices=[notice, *last.notices])

    # ------------------------------------------------------------------ one cycle

    def judge(self, signals: sig.Signals, timestamp: float, snap: Snapshot | None = None) -> Verdict:
        t = self.thresholds
        outcomes = [self._evaluate(rule, signals) for rule in self.rules]
        holding = [h for o in outcomes if (h := self._persist(o)) is not None]
        symptoms, app_judged = self._symptoms(signals.service)
        state = "degraded" if symptoms else ("healthy" if app_judged else "unknown")
        observed = [x.id for x in symptoms]

        explains = {h.rule.cause: causality.EXPLAINS.get(h.rule.cause, frozenset()) & frozenset(observed) for h in holding}
        # what each cause explains with its own evidence, and its confidence (exporter/diagnosis/ranking.py)
        scored = score(holding, observed, t)
        primary = pick_primary(scored, t, incumbent=self._primary) if state == "degraded" else None
        self._primary = primary.rule.cause if primary is not None else None

        driven = _driven_by_overload(scored, primary)
        held = {h.rule.cause for h in holding}
        refined = frozenset(generic for specific, generic in causality.REFINES.items() if specific in held)
        causes = [
            c
            for item in scored
            if (c := self._report(item, explains[item[0].rule.cause], state, primary, symptoms, driven, refined)) is not None
        ]
        causes.sort(key=lambda c: (c.role != "primary", -c.score, LAYERS.index(c.layer), c.cause))
        layers = self._layers(outcomes, causes)
        notices = notices_for(signals, snap, {name: lv.status for name, lv in layers.items()}, app_judged, t)
        if signals.non_finite:  # left out by sig.compute: say so, or a missing layer reads as a quiet one
            shown = ", ".join(signals.non_finite[:5]) + (
                f" (+{len(signals.non_finite) - 5} more)" if len(signals.non_finite) > 5 else ""
            )
            notices.append(
                f"the engine reported a non-finite value (NaN or ±Inf) or one whose arithmetic overflows for {shown}: not judged on it"
            )
        main = next((c for c in causes if c.role == "primary"), None)
        return Verdict(
            timestamp,
            layers,
            causes,
            state=state,
            symptoms=symptoms,
            primary=main,
            notices=notices,
            holding=tuple(h.rule.cause for h in holding),
            signals={k: _short(x) for k, x in signals.service.items()},
            capacity=capacity_body(signals.service),
        )

    def _evaluate(self, rule: Rule, signals: sig.Signals) -> _Judged:
        t = self.thresholds
        worst: tuple[float, str, Mapping[str, float]] | None = None
        judged = False
        near: float | None = None
        # a held cause with a release line stays until the signal falls below that line (Rule.sustain)
        holds = rule.sustain if rule.sustain is not None and rule.cause in self._held else rule.condition
        for key in signals.scopes[rule.scope] if rule.scope != "service" else [""]:
            view = signals.view(rule.scope, key)
            if not rule.judgeable(view):
                continue
            judged = True
            if rule.proximity is not None:
                p = clamp01(float(rule.proximity(view, t)))
                near = p if near is None else max(near, p)
            if not holds(view, t):
                continue
            severity = clamp01(float(rule.severity(view, t)))
            if worst is None or severity > worst[0]:
                worst = (severity, key, view)
        return _Judged(rule, judged, worst, near)

    def _persist(self, o: _Judged) -> Holding | None:
        """Persistence on the way in, ``clear_cycles`` of hold on the way out.

        A held-over cause keeps its last evidence (it is what proved it). A cause
        whose signals vanished is cleared at once: its layer is no longer judged.
        A cause still held when its condition holds again is reported that same
        cycle, as a held symptom is: it proved itself already, and making it
        persist anew blanked it for exactly the cycle it came back.
        """
        t = self.thresholds
        cause = o.rule.cause
        if o.worst is None:
            self._streak[cause] = 0
            held = self._held.get(cause)
            if held is None:
                return None
            last, misses = held
            misses += 1
            if not o.judged or misses >= t.clear_cycles:
                del self._held[cause]
                return None
            self._held[cause] = (last, misses)
            return Holding(last.rule, last.severity, last.view, last.cycles + 1, last.key, last.recent)
        self._streak[cause] += 1
        if self._streak[cause] < t.persistence_cycles and cause not in self._held:
            return None
        severity, key, view = o.worst
        previous = self._held.get(cause)
        cycles = previous[0].cycles + 1 if previous else 1
        recent = ((*previous[0].recent, severity) if previous else (severity,))[-max(1, t.confidence_settled_cycles) :]
        h = Holding(o.rule, severity, view, cycles, key, recent)
        self._held[cause] = (h, 0)
        return h

    def _symptoms(self, view: Mapping[str, float]) -> tuple[list[ObservedSymptom], bool]:
        """Symptoms with hysteresis: on after ``symptom_persistence_cycles``, off after ``symptom_clear_cycles``."""
        t = self.thresholds
        now, judged = observe(view, t)
        current = {x.id: x for x in now}
        out: list[ObservedSymptom] = []
        for sid in {*current, *self._streak_ids()}:
            if sid in current:
                self._symptom_streak[sid] = self._symptom_streak.get(sid, 0) + 1
                if self._symptom_streak[sid] >= t.symptom_persistence_cycles or sid in self._symptom_held:
                    self._symptom_held[sid] = (current[sid], 0)
                    out.append(current[sid])
                continue
            self._symptom_streak[sid] = 0
            held = self._symptom_held.get(sid)
            if held is None:
                continue
            last, misses = held
            misses += 1
            if not judged or misses >= t.symptom_clear_cycles:
                del self._symptom_held[sid]
                continue
            self._symptom_held[sid] = (last, misses)
            out.append(last)
        order = {sid: i for i, sid in enumerate(_CHAIN_ORDER)}
        out.sort(key=lambda x: order.get(x.id, len(order)))
        return out, judged

    def _streak_ids(self) -> set[str]:
        return {sid for sid, n in self._symptom_streak.items() if n > 0} | set(self._symptom_held)

    # ------------------------------------------------------------------ speaking

    def _report(
        self,
        item: tuple[Holding, frozenset[str], float],
        shown: frozenset[str],
        state: str,
        primary: Holding | None,
        symptoms: list[ObservedSymptom],
        driven: Sequence[str] = (),
        refined: frozenset[str] = frozenset(),
    ) -> Cause | None:
        """The cause as shown, or None when it is only headroom information. ``shown``: every
        observed symptom it can explain (for a symptom-cause, also those a real cause explains);
        ``driven``: the layer causes an overload primary's load explains (named in its chain);
        ``refined``: the generic causes whose refinement holds this cycle (``causality.REFINES``)."""
        t = self.thresholds
        h, explained, conf = item
        rule = h.rule
        alone = rule.warns_alone is not None and bool(rule.warns_alone(h.view, t))
        if primary is not None and h.rule.cause == primary.rule.cause:
            role = "primary"
        elif state == "unknown":
            role = "candidate"
        elif shown and rule.cause in causality.SYMPTOM_CAUSES:
            role = "symptom"
        elif explained or (shown and rule.cause in refined):
            # a generic cause whose refinement holds explains nothing of its own, but it still holds
            role = "contributing"
        elif alone:
            role = "warning"
        else:
            return None
        if role == "primary":
            score = t.bottleneck_score + (1.0 - t.bottleneck_score) * h.severity
        else:
            score = t.warning_score + (t.bottleneck_score - t.warning_score) * 0.99 * h.severity
        evidence = {evidence_key(n, rule.scope, h.key): _short(h.view[n]) for n in rule.evidence if n in h.view}
        summary = rule.describe(h.view, t) if rule.describe else ""
        if rule.scope == "gpu" and h.key:
            summary += f" on GPU {h.key}"
        elif rule.scope == "group" and h.key:
            summary += f" in group {h.key}"
        advice = rule.advice
        chain = ""
        if role == "primary":
            if rule.cause in causality.SYMPTOM_CAUSES:
                advice = causality.symptom_advice(advice, h.view, explained, t)
                because = causality.symptom_link(h.view, explained, t)
            else:
                because = f"{summary}, which drives {', '.join(driven)}" if driven else summary
            chain = _chain(symptoms, explained, because, rule.cause)
        return Cause(
            rule.layer,
            rule.cause,
            _short(score),
            evidence,
            advice,
            confidence=conf,
            role=role,
            summary=summary,
            explains=tuple(x.id for x in symptoms if x.id in (shown if role == "symptom" else explained)),
            chain=chain,
        )

    def _layers(self, outcomes: list[_Judged], causes: list[Cause]) -> dict[str, LayerVerdict]:
        t = self.thresholds
        out: dict[str, LayerVerdict] = {}
        for layer in LAYERS:
            mine = [o for o in outcomes if o.rule.layer == layer]
            if not any(o.judged for o in mine):
                out[layer] = LayerVerdict(None, "unknown")
                continue
            headroom, limit = _headroom(mine)
            reported = [c for c in causes if c.layer == layer]
            if reported:
                worst = max(reported, key=lambda c: c.score)
                if worst.role in ("primary", "contributing"):
                    headroom = 0.0
                    limit = f"at its limit: {worst.summary}"
                out[layer] = LayerVerdict(worst.score, self.status(worst.score), headroom, limit)
                continue
            score = 0.0 if headroom is None else _short(0.98 * t.warning_score * (1.0 - headroom))
            out[layer] = LayerVerdict(score, "ok", headroom, limit)
        return out

    def status(self, score: float) -> str:
        t = self.thresholds
        if score >= t.bottleneck_score:
            return "bottleneck"
        if score >= t.warning_score:
            return "warning"
        return "ok"


def fresh_inputs(snap: Snapshot) -> frozenset[str]:
    """The sources whose points ``snap`` serves (derived sources, which the store marks, left out)."""
    return frozenset(name for name, st in (snap.sources or {}).items() if not st.derived and st.fresh(snap.monotonic))


def _headroom(outcomes: list[_Judged]) -> tuple[float | None, str]:
    """1 - the nearest limit among the layer's rules that measure one; its sentence."""
    measured = [(o.proximity, o.rule.limit) for o in outcomes if o.judged and o.proximity is not None]
    if not measured:
        return None, "no measured limit"
    near, what = max(measured, key=lambda m: m[0])
    room = _short(1.0 - near)
    return room, f"{what} {100 * near:.0f} % of its limit; {100 * room:.0f} % headroom"


def _driven_by_overload(scored: Sequence[tuple[Holding, frozenset[str], float]], primary: Holding | None) -> list[str]:
    """With an overload cause as the primary, the layer causes that explain a symptom beside it: what the
    load past the measured knee drives (ranking.pick_primary makes it the primary only when every one of
    them is a consequence of load, causality.LOAD_CONSEQUENCES)."""
    if primary is None or primary.rule.cause not in causality.OVERLOAD_CAUSES:
        return []
    return sorted(
        h.rule.cause
        for h, explained, _ in scored
        if explained and h is not primary and h.rule.cause not in causality.SYMPTOM_CAUSES
    )


def _chain(symptoms: list[ObservedSymptom], explained: frozenset[str], because: str, cause: str) -> str:
    """ "TTFT p95 3.3 s > SLO 2 s ← 39 requests waiting, queue p95 9.7 s ← KV cache 100 % full, …".

    ``because`` is the last link: the cause's own summary, or for a symptom-only primary what stands
    behind the symptom (no layer at its limit, or the inputs missing): a chain whose only link is the
    queue named no reason (found on queue_backlog with TTFT inside its SLO)."""
    felt = [x.text for x in symptoms if x.id in explained and x.id in ("ttft_high", "itl_high", "failures")]
    queue = [x.text for x in symptoms if x.id in explained and x.id in ("queueing", "throughput_saturated")]
    links = [part for part in ("; ".join(felt), "; ".join(queue)) if part]
    links.append(because)
    return " ← ".join(links)
