"""How sure we are of a cause, and which holding cause is the primary.

Why these ingredients: an on-call engineer trusts a verdict whose evidence is
complete (every signal the rule names is there), independent (engine, GPU and
process data agree, e.g. the engine's ITL with the GPU's HBM activity), lasting
(it held for several cycles, not one noisy sample) and clear (far past its
line). The confidence (0-1) adds those up with fixed weights; the weights are
not tuned to any scenario, they only order the ingredients by how much each
should move trust.

Choosing the primary: the cause that explains the most observed symptoms wins;
among those, causes whose confidence is within ``primary_tie_margin`` of the
best, or at least ``primary_confident``, are a tie, broken by the causal order of
``causality.py`` (upstream first): confidence says how much to trust a cause, not
how far upstream it sits, so two causes we trust both are ordered by causality.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from exporter.diagnosis import causality
from exporter.diagnosis.rules import Rule
from exporter.diagnosis.thresholds import Thresholds

#: weights of the confidence ingredients (sum to 1 with the floor)
_FLOOR = 0.25
_W_SEVERITY = 0.25
_W_SETTLED = 0.15
_W_COMPLETE = 0.15
_W_INDEPENDENT = 0.10
_W_EXPLAINS = 0.10


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
    )
    return round(min(1.0, max(0.0, value)), 3)


def pick_primary(candidates: Sequence[tuple[Holding, frozenset[str], float]], t: Thresholds) -> Holding | None:
    """The primary among (holding, explained symptoms, confidence); None when nothing explains anything.

    The symptom-causes (queue_backlog, slo_breach) come with only the symptoms no
    real cause explains (the caller subtracts those), so they win only where the
    symptoms are left unexplained: a queue behind which no layer is at its limit
    is a capacity problem, even when some failures beside it have their own cause.
    """
    pool = [c for c in candidates if c[1]]
    if not pool:
        return None
    outages = [c for c in pool if c[0].rule.cause in causality.OUTAGE_CAUSES]
    if outages:  # an outage outranks every slowdown (causality.OUTAGE_CAUSES)
        pool = outages
    most = max(len(c[1]) for c in pool)
    widest = [c for c in pool if len(c[1]) == most]
    best = max(c[2] for c in widest)
    tied = [c for c in widest if c[2] >= min(best - t.primary_tie_margin, t.primary_confident)]
    return min(tied, key=lambda c: (causality.causal_rank(c[0].rule.cause), -c[2]))[0]
