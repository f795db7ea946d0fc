"""Spans in seconds, checked against the cycles that fill them (issue 20, item 3).

Why: every window and "recent" look-back is in seconds, but what it can see is
counted in cycles. A "recent" span shorter than two diagnosis cycles holds one
look, and "the queue never drained" needs two: with ``--diagnosis-interval 6`` a
queue that never drains read "healthy". A window shorter than two samples of the
slowest input has no rate of that input at all. So at start-up each span shorter
than two cycles is widened to two, with one log line saying what and why.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace

from exporter.diagnosis.thresholds import Thresholds

log = logging.getLogger(__name__)

#: a span must hold at least this many cycles
MIN_CYCLES = 2


def fit_spans(thresholds: Thresholds, cycle: float, inputs: Iterable[float] = ()) -> tuple[Thresholds, list[str]]:
    """``thresholds`` with ``recent_seconds`` >= 2 diagnosis cycles and ``window_seconds`` >= 2 cycles
    of the diagnosis and of its slowest input (and >= the recent span); the changes, in words."""
    slowest = max([cycle, *inputs])
    changes: list[str] = []
    recent = thresholds.recent_seconds
    if recent < MIN_CYCLES * cycle:
        recent = MIN_CYCLES * cycle
        changes.append(
            f"recent_seconds {thresholds.recent_seconds:g} -> {recent:g} s ({MIN_CYCLES} diagnosis cycles of {cycle:g} s)"
        )
    window = thresholds.window_seconds
    need = max(MIN_CYCLES * slowest, recent)
    if window < need:
        window = need
        changes.append(
            f"window_seconds {thresholds.window_seconds:g} -> {window:g} s "
            f"({MIN_CYCLES} cycles of the slowest interval, {slowest:g} s)"
        )
    if not changes:
        return thresholds, []
    return replace(thresholds, recent_seconds=recent, window_seconds=window), changes


def widen_and_log(thresholds: Thresholds, cycle: float, inputs: Iterable[float] = ()) -> Thresholds:
    """``fit_spans``, logging one line when something was widened."""
    fitted, changes = fit_spans(thresholds, cycle, inputs)
    if changes:
        log.warning("diagnosis: spans shorter than %d cycles widened: %s", MIN_CYCLES, "; ".join(changes))
    return fitted
