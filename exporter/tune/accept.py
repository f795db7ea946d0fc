"""The accept rule: a candidate wins only beyond the noise, and only if it did not break where the best held.

Why worse-above-better: each configuration is measured ``--repeats`` times; the
candidate's *worse* repeat must beat the best's *better* repeat (capacity at SLO,
requests/s), and its mean must be at least ``MIN_GAIN`` above the best's mean. A
candidate that did not start, exited or ran out of memory, or that failed requests
or preempted under load where the best did not, is rejected with that reason:
a memory setting that starts and then fails under load is caught here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from exporter.tune.capacity import SLO, capacity_at_slo

MIN_GAIN = 0.05
#: failed requests above this share of a configuration's requests count as "fails requests under load"
#: (one reset connection in hundreds on a loaded host is not the candidate's doing)
MAX_ERROR_SHARE = 0.01
#: ... and above this share always (the ramp's default knee criterion for errors)
LOAD_ERROR_SHARE = 0.05
RULE = (
    "accepted only if the candidate's worse repeat has a higher capacity at SLO (requests/s) than the best's "
    f"better repeat and its mean is at least {MIN_GAIN:.0%} higher; rejected when it fails to start, exits, runs "
    f"out of memory, fails requests (over {MAX_ERROR_SHARE:.0%} where the best failed none, or over "
    f"{LOAD_ERROR_SHARE:.0%}) or preempts under load where the best did not"
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
    share = _total(candidate, "errors") / max(1.0, _total(candidate, "attempted"))
    best_share = _total(best, "errors") / max(1.0, _total(best, "attempted"))
    # new failures (the best failed none), or failures past the knee's error share (exporter/ramp/knee.py)
    if (share > MAX_ERROR_SHARE and best_share == 0) or share > LOAD_ERROR_SHARE >= best_share:
        return Judgement(
            False, f"rejected: {share:.1%} of its requests failed under load where the best failed {best_share:.1%}", None
        )
    pre, best_pre = _total(candidate, "preemptions"), _total(best, "preemptions")
    if pre and not best_pre:
        return Judgement(False, f"rejected: {pre:.0f} preemptions under load where the best had none", None)
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


__all__ = ["MIN_GAIN", "RULE", "Judgement", "judge", "spread"]
