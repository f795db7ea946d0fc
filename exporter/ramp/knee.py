"""Find the knee of a ramp and the first layer that gave out at or before it.

Why these definitions (documented in docs/ramp.md):

- *Throughput stops scaling*: the scaling of a step is its relative throughput
  gain over its relative concurrency gain against the previous step (output
  tokens/s; 1.0 = linear, 0 = flat, negative = worse). It is scale-free, so the
  same threshold works for 1->2 and 16->32 and for any model speed. A step whose
  scaling falls below ``min_scaling`` is flagged ``throughput_flat``.
- *TTFT p95 jumps*: the step's TTFT p95 is at least ``ttft_jump_ratio`` times the
  previous step's AND larger by ``ttft_jump_min_s``; the absolute floor keeps a
  2 ms -> 5 ms wobble on an idle server from counting as a jump.
- *Errors*: more than ``max_error_share`` of the step's requests failed or timed out
  (an overloaded server sheds load before its throughput curve bends).

A flag must hold up: it is confirmed when the same condition still holds from the
step before the flagged one to the step after it (throughput from step i-1 to
i+1 still below ``min_scaling``, TTFT p95 of i+1 still ``ttft_jump_ratio`` above
that of i-1, the error share of i+1 still too high), or when the flagged step
is the last one. An unconfirmed flag is kept as ``transient_flags``: one noisy
step (a stall on a shared host) does not make a knee when the next step scales
on from where the ramp was.

The knee is the first step with a confirmed flag.

The layer that gave out first is the diagnosis's own answer, symptom-first: the
``primary`` cause named most often in the *degraded* readings of the knee step
(``source = "primary"``). Why: the diagnosis names a primary only while users
suffer (a symptom holds) and picks the one cause that explains those symptoms;
a layer near its limit while nothing suffers is ``ok`` with its headroom, not
an alarm. When the knee step has no degraded reading, the first step at or
before the knee that has one is used; when none has, the step right after the
knee, the one whose figures confirmed it (the diagnosis lags the load by its
window: a knee at the last figures of a step is judged degraded in the next).

Only when none of those was degraded (an exporter without a service state, or
one that never saw a symptom) does the older, layer-status logic name the layer
(``source = "saturation"``, with a ``note`` saying so):

A layer *crosses* into a status at the first step that shows it after every
earlier step, the baseline (first step) included, was ``ok`` or ``unknown``.
A layer that showed ``warning`` or ``bottleneck`` in any sample of the baseline does not cross:
that is the baseline, not what the ramp broke. The first saturated layer is the earliest
layer to cross into ``bottleneck`` at or before the knee; only when none reached
``bottleneck`` by then, the earliest to cross into ``warning``. Why the two
tiers: a warning is a layer getting busy; a bottleneck is a layer at its limit,
which is what bends the curve.
Between layers reaching ``bottleneck`` at the same step, the one that reached
``warning`` earlier wins, then the higher mean score. When no layer crossed at all, the
fallback is the most severe layer at the knee among those saturated at the
baseline (``crossed`` false).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter.ramp.model import SATURATED_STATUSES, STATUS_SEVERITY, LayerFigures, PrimaryFigures, Step

FLAG_THROUGHPUT = "throughput_flat"
FLAG_TTFT = "ttft_jump"
FLAG_ERRORS = "errors"

#: how the layer that gave out was found
SOURCE_PRIMARY = "primary"
SOURCE_SATURATION = "saturation"


@dataclass(frozen=True)
class KneeCriteria:
    """Thresholds of the knee; CLI flags override the defaults."""

    min_scaling: float = 0.5
    ttft_jump_ratio: float = 2.0
    ttft_jump_min_s: float = 0.05
    max_error_share: float = 0.05


@dataclass
class Saturation:
    """The layer that gave out first, where, and why."""

    layer: str
    #: the layer's status over that step
    status: str
    score: float | None
    step_index: int
    concurrency: int
    cause: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    advice: str = ""
    #: False when the layer was already saturated (or the same primary degraded the service) at the baseline
    crossed: bool = True
    #: "primary": the diagnosis's primary in the degraded readings; "saturation": layer statuses (the fallback)
    source: str = SOURCE_SATURATION
    #: the primary's chain, symptom <- cause with numbers ("" for the fallback)
    chain: str = ""
    #: the primary's own link of the chain ("KV cache 93 % full, 7.5 preemptions/s")
    summary: str = ""
    #: the symptom ids the primary explained
    explains: list[str] = field(default_factory=list)
    #: mean confidence of the readings that named it (None for the fallback)
    confidence: float | None = None
    #: degraded readings of the step that named it, out of ``degraded_readings``
    readings: int = 0
    degraded_readings: int = 0
    #: the step's service state
    state: str = "unknown"
    #: why the answer is not the knee step's primary, when it is not ("" when it is)
    note: str = ""


def scaling(prev: Step, step: Step) -> float | None:
    """Relative throughput gain / relative concurrency gain; None when it cannot be judged."""
    t0, t1 = prev.client.output_tokens_per_s, step.client.output_tokens_per_s
    c0, c1 = prev.concurrency, step.concurrency
    if t0 <= 0 or c0 <= 0 or c1 <= c0:
        return None
    return ((t1 - t0) / t0) / ((c1 - c0) / c0)


def _error_flag(step: Step, criteria: KneeCriteria) -> bool:
    c = step.client
    return bool(c.attempted) and c.errors / c.attempted > criteria.max_error_share


def _ttft_ratio(before: Step, now: Step) -> float | None:
    a, b = before.client.ttft_s.p95, now.client.ttft_s.p95
    if a is None or b is None or a <= 0:
        return None
    return b / a


def _flags_between(before: Step, now: Step, criteria: KneeCriteria) -> list[str]:
    """The throughput and TTFT flags of ``now`` judged against ``before``."""
    flags = []
    sc = scaling(before, now)
    if sc is not None and sc < criteria.min_scaling:
        flags.append(FLAG_THROUGHPUT)
    ratio = _ttft_ratio(before, now)
    if ratio is not None and ratio >= criteria.ttft_jump_ratio:
        assert before.client.ttft_s.p95 is not None and now.client.ttft_s.p95 is not None
        if now.client.ttft_s.p95 - before.client.ttft_s.p95 >= criteria.ttft_jump_min_s:
            flags.append(FLAG_TTFT)
    return flags


def annotate(steps: Sequence[Step], criteria: KneeCriteria) -> None:
    """Fill ``scaling``, ``ttft_p95_ratio``, ``flags`` and ``transient_flags`` of every step in place."""
    raw: list[list[str]] = []
    for i, step in enumerate(steps):
        prev = steps[i - 1] if i > 0 else None
        step.scaling = scaling(prev, step) if prev is not None else None
        step.ttft_p95_ratio = _ttft_ratio(prev, step) if prev is not None else None
        flags = [FLAG_ERRORS] if _error_flag(step, criteria) else []
        if prev is not None:
            flags = _flags_between(prev, step, criteria) + flags
        raw.append(flags)
    for i, step in enumerate(steps):
        if i == len(steps) - 1:
            confirmed = list(raw[i])
        else:
            nxt = steps[i + 1]
            still = _flags_between(steps[i - 1], nxt, criteria) if i > 0 else []
            if _error_flag(nxt, criteria):
                still.append(FLAG_ERRORS)
            confirmed = [f for f in raw[i] if f in still]
        step.flags = confirmed
        step.transient_flags = [f for f in raw[i] if f not in confirmed]


def find_knee(steps: Sequence[Step], criteria: KneeCriteria = KneeCriteria()) -> Step | None:
    """Annotate the steps and return the first flagged one (the knee), or None."""
    annotate(steps, criteria)
    for step in steps:
        if step.flags:
            return step
    return None


def _pick(step: Step, layers: Sequence[str], statuses: Sequence[str]) -> tuple[str, LayerFigures] | None:
    """The most severe (then highest-scoring) layer of ``step`` among ``layers`` with one of ``statuses``."""
    found = [(name, lf) for name, lf in step.diagnosis.layers.items() if name in layers and lf.status in statuses]
    if not found:
        return None
    return max(found, key=lambda item: (STATUS_SEVERITY[item[1].status], item[1].score_mean or 0.0))


def _saturation(step: Step, name: str, lf: LayerFigures, crossed: bool) -> Saturation:
    found = Saturation(
        layer=name,
        status=lf.status,
        score=lf.score_mean,
        step_index=step.index,
        concurrency=step.concurrency,
        crossed=crossed,
        state=step.diagnosis.state,
    )
    causes = sorted((c for c in step.diagnosis.causes if c.layer == name), key=lambda c: (c.share, c.score_max), reverse=True)
    if causes:
        found.cause, found.evidence, found.advice = causes[0].cause, dict(causes[0].evidence), causes[0].advice
    return found


def baseline_saturated(steps: Sequence[Step]) -> list[str]:
    """Layers that showed warning/bottleneck in any sample of the first step (they cannot cross).

    Any sample, not the step's status: a layer hovering at a threshold at the
    baseline (DRAM at 0.6 while decoding one request) is a baseline condition
    even when the baseline's median sample happened to fall just under it.
    """
    if not steps:
        return []
    layers = steps[0].diagnosis.layers.items()
    return sorted(n for n, lf in layers if lf.status in SATURATED_STATUSES or lf.worst_status in SATURATED_STATUSES)


def _first_index(steps: Sequence[Step], layer: str, statuses: Sequence[str], last: int) -> int | None:
    for step in steps[1 : last + 1]:
        lf = step.diagnosis.layers.get(layer)
        if lf is not None and lf.status in statuses:
            return step.index
    return None


def _first_crossing(steps: Sequence[Step], knee: Step) -> Saturation | None:
    """Earliest crossing into bottleneck (ties: earlier warning, then score), else into warning."""
    baseline = set(baseline_saturated(steps))
    layers = sorted({n for step in steps[: knee.index + 1] for n in step.diagnosis.layers} - baseline)
    warned = {n: _first_index(steps, n, SATURATED_STATUSES, knee.index) for n in layers}
    broke = {n: _first_index(steps, n, ("bottleneck",), knee.index) for n in layers}

    def score(name: str, index: int) -> float:
        return steps[index].diagnosis.layers[name].score_mean or 0.0

    tier: list[tuple[int, int, float, str]] = []
    for n in layers:
        b, w = broke[n], warned[n]
        if b is not None:  # a bottleneck step is a saturated one too: w is set, at most b
            tier.append((b, b if w is None else w, -score(n, b), n))
    if not tier:
        tier = [(w, w, -score(n, w), n) for n in layers if (w := warned[n]) is not None]
    if not tier:
        return None
    index, _, _, name = min(tier)
    return _saturation(steps[index], name, steps[index].diagnosis.layers[name], crossed=True)


def _from_layers(steps: Sequence[Step], knee: Step) -> Saturation | None:
    """The older answer, from layer statuses: the first crossing into bottleneck (else warning)."""
    found = _first_crossing(steps, knee)
    if found is not None:
        return found
    picked = _pick(knee, baseline_saturated(steps), SATURATED_STATUSES)
    return None if picked is None else _saturation(knee, picked[0], picked[1], crossed=False)


def _from_primary(steps: Sequence[Step], step: Step, primary: PrimaryFigures) -> Saturation:
    lf = step.diagnosis.layers.get(primary.layer)
    base = steps[0].diagnosis
    at_baseline = step.index > 0 and any((p.layer, p.cause) == (primary.layer, primary.cause) for p in base.primaries)
    return Saturation(
        layer=primary.layer,
        status=lf.status if lf is not None else "unknown",
        score=lf.score_mean if lf is not None else None,
        step_index=step.index,
        concurrency=step.concurrency,
        cause=primary.cause,
        evidence=dict(primary.evidence),
        advice=primary.advice,
        crossed=not (step.index == 0 or at_baseline),
        source=SOURCE_PRIMARY,
        chain=primary.chain,
        summary=primary.summary,
        explains=list(primary.explains),
        confidence=primary.confidence_mean,
        readings=primary.readings,
        degraded_readings=step.diagnosis.degraded_readings,
        state=step.diagnosis.state,
    )


def first_degraded(steps: Sequence[Step], last: int | None = None) -> Step | None:
    """The first step (up to index ``last``) with a degraded reading that named a primary."""
    for step in steps[: None if last is None else last + 1]:
        if step.diagnosis.primary is not None:
            return step
    return None


def first_saturated_layer(steps: Sequence[Step], knee: Step | None) -> Saturation | None:
    """The layer that gave out first at (or, the diagnosis lagging, just after) the knee; None without a knee.

    The knee step's most named primary; else that of the first degraded step at
    or before the knee; else that of the step after the knee (the one that
    confirmed it); else (none of those degraded) the layer-status logic, with a
    note saying so.
    """
    if knee is None:
        return None
    if knee.diagnosis.primary is not None:
        return _from_primary(steps, knee, knee.diagnosis.primary)
    earlier = first_degraded(steps, knee.index)
    if earlier is not None:
        assert earlier.diagnosis.primary is not None
        found = _from_primary(steps, earlier, earlier.diagnosis.primary)
        found.note = (
            f"no reading of the knee step (concurrency {knee.concurrency}) was degraded with a primary; "
            f"named from the first degraded step, concurrency {earlier.concurrency}"
        )
        return found
    confirming = steps[knee.index + 1] if knee.index + 1 < len(steps) else None
    if confirming is not None and confirming.diagnosis.primary is not None:
        found = _from_primary(steps, confirming, confirming.diagnosis.primary)
        found.note = (
            f"no reading at or before the knee (concurrency {knee.concurrency}) was degraded (the diagnosis lags the "
            f"load by its window); named from the step that confirmed the knee, concurrency {confirming.concurrency}"
        )
        return found
    layered = _from_layers(steps, knee)
    if layered is None:
        return None
    layered.note = _not_degraded(steps, knee) + "; named from the layer statuses instead"
    return layered


def _not_degraded(steps: Sequence[Step], knee: Step) -> str:
    """ "no reading at or before the knee was degraded", naming the first degraded step after it, if any."""
    why = f"no reading at or before the knee (concurrency {knee.concurrency}) was degraded"
    later = first_degraded(steps)
    if later is not None and later.diagnosis.primary is not None:
        p = later.diagnosis.primary
        why += f" (the first degraded step came after it: concurrency {later.concurrency}, primary {p.layer}/{p.cause})"
    return why


def fallback_note(steps: Sequence[Step], knee: Step | None, found: Saturation | None) -> str:
    """What to say when the ramp has a knee but names no layer at all ("" otherwise)."""
    if knee is None or found is not None:
        return ""
    return _not_degraded(steps, knee) + ", and no layer reached warning at or before it"
