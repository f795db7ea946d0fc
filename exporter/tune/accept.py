"""The accept rule: a candidate wins only beyond the noise, and only if it did not break where the best held.

Why worse-above-better: each configuration is measured ``--repeats`` times; the
candidate's *worse* repeat must beat the best's *better* repeat (capacity at SLO,
requests/s), and its mean must be at least ``MIN_GAIN`` above the best's mean. A
candidate that did not start, exited or ran out of memory, or that failed requests
or preempted under load beyond the best's own rates (``MAX_ERROR_SHARE``,
``PREEMPTION_RATIO`` / ``PREEMPTION_MARGIN``), is rejected with that reason: a memory
setting that starts and then fails under load is caught here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from exporter.tune.capacity import SLO, capacity_at_slo

MIN_GAIN = 0.05
#: a candidate's failed-request share may exceed the best's own by this much (one reset connection in
#: hundreds on a loaded host is not the candidate's doing); beyond it, "fails requests under load".
#: Relative to the best's own share (issue 32): a candidate that went from 0.1 % to 4.9 % failed
#: passed the old "over 1 % where the best failed none, or over 5 %" rule
MAX_ERROR_SHARE = 0.01
#: preemptions per attempted request a candidate may have over the best's: more than PREEMPTION_RATIO
#: times the best's rate and at least PREEMPTION_MARGIN more (one preemption per hundred requests). One
#: preemption in the best's run used to switch the check off, and one in the candidate's to reject it
PREEMPTION_RATIO = 2.0
PREEMPTION_MARGIN = 0.01
RULE = (
    "accepted only if the candidate's worse repeat has a higher capacity at SLO (requests/s) than the best's "
    f"better repeat and its mean is at least {MIN_GAIN:.0%} higher; rejected when it fails to start, exits, runs "
    f"out of memory, fails more requests than the best by over {MAX_ERROR_SHARE:.0%} of its requests, or "
    f"preempts more than {PREEMPTION_RATIO:g}x as often per request as the best and by over {PREEMPTION_MARGIN:g} "
    "preemptions per request"
)


@dataclass(frozen=True)
class Judgement:
    accepted: bool
    why: str
    #: mean capacity ratio candidate / best (None when the best's is 0)
    gain: float | None


def _total(runs: Sequence[dict[str, Any]], pick: str) -> float:
    out = 0.0
    for r in runs:
        for s in r.get("steps") or []:
            client = s.get("client") or {}
            if pick == "errors":
                out += float(client.get("errors") or 0)
            elif pick == "attempted":
                out += float(client.get("errors") or 0) + float(client.get("requests") or 0)
            else:
                out += float(((s.get("exporter") or {}).get("counters") or {}).get("preemptions") or 0)
    return out


def spread(runs: Sequence[dict[str, Any]], slo: SLO) -> tuple[float, float, float]:
    """(worst, mean, best) capacity at SLO in requests/s over the repeats."""
    values = [capacity_at_slo(r, slo).requests_per_second for r in runs] or [0.0]
    return min(values), sum(values) / len(values), max(values)


def judge(candidate: Sequence[dict[str, Any]], best: Sequence[dict[str, Any]], slo: SLO, failure: str | None) -> Judgement:
    if failure:
        return Judgement(False, f"rejected: {failure}", None)
    if not candidate:
        return Judgement(False, "rejected: no run completed", None)
    attempted, best_attempted = max(1.0, _total(candidate, "attempted")), max(1.0, _total(best, "attempted"))
    share = _total(candidate, "errors") / attempted
    best_share = _total(best, "errors") / best_attempted
    if share > best_share + MAX_ERROR_SHARE:
        return Judgement(
            False, f"rejected: {share:.1%} of its requests failed under load where the best failed {best_share:.1%}", None
        )
    pre, best_pre = _total(candidate, "preemptions") / attempted, _total(best, "preemptions") / best_attempted
    if pre > max(PREEMPTION_RATIO * best_pre, best_pre + PREEMPTION_MARGIN):
        return Judgement(
            False,
            f"rejected: {pre:.3g} preemptions per request under load where the best had {best_pre:.3g}",
            None,
        )
    c_low, c_mean, _ = spread(candidate, slo)
    _, b_mean, b_high = spread(best, slo)
    gain = c_mean / b_mean if b_mean > 0 else None
    figures = f"capacity {c_low:.2f}-{spread(candidate, slo)[2]:.2f} req/s vs best {spread(best, slo)[0]:.2f}-{b_high:.2f}"
    if c_low <= b_high:
        return Judgement(False, f"rejected: within the noise ({figures}: worse repeat not above the best's better)", gain)
    if gain is not None and gain < 1 + MIN_GAIN:
        return Judgement(False, f"rejected: gain {gain - 1:+.1%} below {MIN_GAIN:.0%} ({figures})", gain)
    shown = "from none" if gain is None else f"{gain - 1:+.1%}"
    return Judgement(True, f"accepted: {shown} ({figures})", gain)


__all__ = ["MAX_ERROR_SHARE", "MIN_GAIN", "PREEMPTION_MARGIN", "PREEMPTION_RATIO", "RULE", "Judgement", "judge", "spread"]
