"""Find the knee of a ramp and the first layer that saturated at or before it.

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

A layer *crosses* into a status at the first step that shows it after every
earlier step, the baseline (first step) included, was ``ok`` or ``unknown``.
A layer that showed ``warning`` or ``bottleneck`` in any sample of the baseline does not cross:
a decoding GPU is memory-bandwidth-bound at concurrency 1 already, and that is
the baseline, not what the ramp broke. The first saturated layer is the earliest
layer to cross into ``bottleneck`` at or before the knee; only when none reached
``bottleneck`` by then, the earliest to cross into ``warning``. Why the two
tiers: a warning is a layer getting busy (DRAM at 65 % while throughput still
scales); a bottleneck is a layer at its limit, which is what bends the curve.
Between layers reaching ``bottleneck`` at the same step, the one that reached
``warning`` earlier wins, then the higher mean score. When no layer crossed at all, the
fallback is the most severe layer at the knee among those saturated at the
baseline (``crossed`` false).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from exporter.ramp.model import SATURATED_STATUSES, STATUS_SEVERITY, LayerFigures, Step

FLAG_THROUGHPUT = "throughput_flat"
FLAG_TTFT = "ttft_jump"
FLAG_ERRORS = "errors"


@dataclass(frozen=True)
class KneeCriteria:
    """Thresholds of the knee; CLI flags override the defaults."""

    min_scaling: float = 0.5
    ttft_jump_ratio: float = 2.0
    ttft_jump_min_s: float = 0.05
    max_error_share: float = 0.05


@dataclass
class Saturation:
    """The first layer that crossed into warning/bottleneck, where, and why."""

    layer: str
    status: str
    score: float | None
    step_index: int
    concurrency: int
    cause: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    advice: str = ""
    #: False when the layer was already saturated at the baseline (the fallback)
    crossed: bool = True


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
        layer=name, status=lf.status, score=lf.score_mean, step_index=step.index, concurrency=step.concurrency,
        crossed=crossed,
    )
    causes = sorted(
        (c for c in step.diagnosis.causes if c.layer == name), key=lambda c: (c.share, c.score_max), reverse=True
    )
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

    tier = [(broke[n], warned[n], -score(n, broke[n]), n) for n in layers if broke[n] is not None]
    if not tier:
        tier = [(warned[n], warned[n], -score(n, warned[n]), n) for n in layers if warned[n] is not None]
    if not tier:
        return None
    index, _, _, name = min(tier)  # type: ignore[type-var]
    return _saturation(steps[index], name, steps[index].diagnosis.layers[name], crossed=True)


def first_saturated_layer(steps: Sequence[Step], knee: Step | None) -> Saturation | None:
    """The first layer that crossed into bottleneck (else warning) at or before the knee; None without a knee."""
    if knee is None:
        return None
    found = _first_crossing(steps, knee)
    if found is not None:
        return found
    picked = _pick(knee, baseline_saturated(steps), SATURATED_STATUSES)
    return None if picked is None else _saturation(knee, picked[0], picked[1], crossed=False)
