"""How sure we are of a cause, and which holding cause is the primary.

Why these ingredients: an on-call engineer trusts a verdict whose evidence is
complete (every signal the rule names is there), independent (engine, GPU and
process data agree, e.g. the engine's ITL with the GPU's HBM activity), lasting
(it held for several cycles, not one noisy sample) and clear (far past its
line). The confidence (0-1) adds those up with fixed weights; the weights are
not tuned to any scenario, they only order the ingredients by how much each
should move trust. It falls for every input that is missing while a cause it
would judge could explain the same symptoms (no SM activity, no process
sampler, no queue-time histogram: ``notices.missing_inputs``): the verdict did
not look there.

Choosing the primary follows the evidence, not a hand-written order: the cause
that explains the most of the observed symptoms *with evidence of its own*
(each rule's ``share``: a full KV cache explains the queue it holds back, but a
slow decode only with preemptions; a throttled clock only the share of the
slowdown its clock loss accounts for; a preallocated framebuffer nothing while
the KV cache has room) wins; among those explaining about as much, the most
severe (within ``primary_tie_margin`` of the best, or all at least
``primary_confident``: far past their lines both), severity read as the
median of the cycles each has held lately (``Holding.depth``), so one noisy
sample does not hand the verdict to another cause; then the one that has held
longer (cycles, up to ``confidence_settled_cycles``: settled causes tie); and
only then the causal order of ``causality.py`` (upstream first).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from exporter.diagnosis import causality
from exporter.diagnosis.finite import clamp01
from exporter.diagnosis.notices import missing_inputs
from exporter.diagnosis.rules import Rule
from exporter.diagnosis.thresholds import Thresholds

#: weights of the confidence ingredients (sum to 1 with the floor)
_FLOOR = 0.25
_W_SEVERITY = 0.25
_W_SETTLED = 0.15
_W_COMPLETE = 0.15
_W_INDEPENDENT = 0.10
_W_EXPLAINS = 0.10
#: taken off for each missing input that leaves a rival explanation unjudged (at most three)
_W_UNJUDGED = 0.10
#: explained amounts closer than this are equal (sums of shares)
_AMOUNT_EPS = 0.01


def origin(signal: str) -> str:
    """Which kind of data a signal comes from: ``gpu``, ``process`` or ``engine``."""
    if "llm_gpu_" in signal or "llm_parallel_" in signal:
        return "gpu"
    if "llm_process_" in signal:
        return "process"
    return "engine"


@dataclass(frozen=True)
class Holding:
    """A rule whose condition holds (or is held over), with what it saw."""

    rule: Rule
    severity: float
    view: Mapping[str, float]
    #: consecutive cycles it has held, this one included
    cycles: int
    key: str = ""
    #: its severity in the last cycles it held (at most ``confidence_settled_cycles``, newest last)
    recent: tuple[float, ...] = ()

    @property
    def depth(self) -> float:
        """How far past its line it has been lately: the median of ``recent`` (this cycle's severity
        while it has none). The primary is chosen on this, not on one cycle's sample: one low NVML
        utilisation reading or one spike of a full cache is noise, not a change of bottleneck."""
        return statistics.median(self.recent) if self.recent else self.severity


def confidence(h: Holding, explained: Iterable[str], observed: Sequence[str], t: Thresholds) -> float:
    """0-1 trust in one holding cause (see the module docstring)."""
    names = set(h.rule.evidence) | set(h.rule.requires)
    present = [n for n in names if n in h.view]
    complete = len(present) / len(names) if names else 1.0
    kinds = {origin(n) for n in present}
    explained = list(explained)
    if explained:
        kinds.add("engine")  # the symptoms themselves are the engine's (or the user's) account
    independent = min(1.0, len(kinds) / 2.0)
    share = len(explained) / len(observed) if observed else 0.0
    settled = min(1.0, h.cycles / max(1, t.confidence_settled_cycles))
    value = (
        _FLOOR
        + _W_SEVERITY * h.severity
        + _W_SETTLED * settled
        + _W_COMPLETE * complete
        + _W_INDEPENDENT * independent
        + _W_EXPLAINS * share
        - _W_UNJUDGED * len(rivals_unjudged(h, frozenset(explained), t))
    )
    return round(min(1.0, max(0.0, value)), 3)


def rivals_unjudged(h: Holding, explained: frozenset[str], t: Thresholds) -> list[str]:
    """The missing inputs (``notices.missing_inputs``) behind which a cause other than ``h`` could
    explain some of the same symptoms: what the verdict could not look at."""
    out = []
    for m in missing_inputs(h.view, t):
        if any(c != h.rule.cause and causality.EXPLAINS.get(c, frozenset()) & explained for c in m.causes):
            out.append(m.what)
    return out[:3]


def shares(h: Holding, symptoms: frozenset[str], t: Thresholds) -> dict[str, float]:
    """Observed symptom -> 0-1 share of it ``h`` explains with evidence of its own (only the
    symptoms it can explain at all, ``causality.EXPLAINS``)."""
    can = causality.EXPLAINS.get(h.rule.cause, frozenset()) & symptoms
    if h.rule.share is None:
        return {sym: 1.0 for sym in can}
    got = h.rule.share(h.view, t, frozenset(can))
    return {sym: clamp01(float(got.get(sym, 0.0))) for sym in can}


def score(holding: Sequence[Holding], observed: Sequence[str], t: Thresholds) -> list[tuple[Holding, frozenset[str], float]]:
    """(holding, the symptoms it explains, confidence) for every holding cause.

    A real cause explains the observed symptoms of which its own evidence accounts for a share;
    a generic cause whose refinement holds (``causality.REFINES``) only those its refinement does not;
    a symptom-cause (queue_backlog, slo_breach) stands only for those no real cause explains.
    """
    seen = frozenset(observed)
    own = {h.rule.cause: frozenset(x for x, part in shares(h, seen, t).items() if part > 0) for h in holding}
    for specific, generic in causality.REFINES.items():  # the reason found explains what its effect did
        if specific in own and generic in own:
            own[generic] = own[generic] - own[specific]
    by_real = frozenset().union(*(e for c, e in own.items() if c not in causality.SYMPTOM_CAUSES))
    out = []
    for h in holding:
        explained = own[h.rule.cause]
        if h.rule.cause in causality.SYMPTOM_CAUSES:
            explained = (causality.EXPLAINS.get(h.rule.cause, frozenset()) & seen) - by_real
        out.append((h, explained, confidence(h, explained, observed, t)))
    return out


def amount(h: Holding, explained: frozenset[str], t: Thresholds) -> float:
    """How much of the observed symptoms ``h`` explains: the sum of its shares of ``explained``."""
    if h.rule.cause in causality.SYMPTOM_CAUSES:
        return float(len(explained))
    return sum(shares(h, explained, t).values())


def unexplained_by_load(causes: Iterable[str]) -> list[str]:
    """The causes among ``causes`` that load past the measured knee does not produce by itself
    (``causality.LOAD_CONSEQUENCES``): while one holds, the capacity cause is not the primary."""
    return [c for c in causes if c not in causality.LOAD_CONSEQUENCES]


def pick_primary(
    candidates: Sequence[tuple[Holding, frozenset[str], float]], t: Thresholds, incumbent: str | None = None
) -> Holding | None:
    """The primary among (holding, explained symptoms, confidence); None when nothing explains anything.

    ``incumbent``, last cycle's primary, stays among the most severe while it explains as much as the
    best and its severity is within twice ``primary_tie_margin`` of the worst (a hysteresis band):
    two causes whose severities trade places in the noise of a full cache or a link's traffic do not
    flip the verdict every few cycles; the usual tie-breaks (held longer, causal order) still decide
    between them, and a challenger clearly deeper, or explaining more, takes over.

    The symptom-causes (queue_backlog, slo_breach) come with only the symptoms no
    real cause explains (``score`` subtracts those), so they win only where the
    symptoms are left unexplained: a queue behind which no layer is at its limit
    is a capacity problem, even when some failures beside it have their own cause.
    """
    pool = [c for c in candidates if c[1]]
    if not pool:
        return None
    outages = [c for c in pool if c[0].rule.cause in causality.OUTAGE_CAUSES]
    overload = [c for c in pool if c[0].rule.cause in causality.OVERLOAD_CAUSES]
    layer_causes = [c for c in pool if c[0].rule.cause not in causality.OVERLOAD_CAUSES]
    if outages:  # an outage outranks every slowdown (causality.OUTAGE_CAUSES)
        pool = outages
    elif overload and not unexplained_by_load(c[0].rule.cause for c in layer_causes):
        pool = overload  # load past the measured knee explains every layer at its limit
    elif overload:  # a cause load does not produce holds: it, not the knee it moved, is the story
        pool = layer_causes
    # a consequence is not the primary while what it follows holds, whatever explains that (the queue's
    # own cause, or the queue itself): timeouts behind a queue a power cap built are the cap's
    leading = {c[0].rule.cause for c in candidates}
    pool = [c for c in pool if causality.FOLLOWS.get(c[0].rule.cause) not in leading] or pool
    amounts = [amount(c[0], c[1], t) for c in pool]
    most = max(amounts)
    widest = [c for c, a in zip(pool, amounts, strict=True) if a >= most - _AMOUNT_EPS]
    worst = max(c[0].depth for c in widest)
    severe = [
        c
        for c in widest
        if c[0].depth >= min(worst - t.primary_tie_margin * (2 if c[0].rule.cause == incumbent else 1), t.primary_confident)
    ]
    settle = max(1, t.confidence_settled_cycles)
    longest = max(min(c[0].cycles, settle) for c in severe)
    held = [c for c in severe if min(c[0].cycles, settle) >= longest]
    return min(held, key=lambda c: (causality.causal_rank(c[0].rule.cause), -c[2]))[0]
