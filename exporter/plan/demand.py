"""The demand and capacity series of one model on the plan's step grid, and the hours and spans read from them.

Why a grid: query_range evaluates every expression at ``start + k * step``, so
index k is the same instant in every series; a step where a series has no
point is None (no data), never 0 (no demand) - a scrape gap must not look like
a quiet hour. Hours are UTC clock hours; a step belongs to the hour it starts in.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from exporter.plan.prometheus import Series, Window

HOUR = 3600.0
DAY = 86400.0
#: a UTC day counts towards the typical peak hour when it has data in at least this many hours
MIN_HOURS_PER_DAY = 12


def grid(series: Iterable[Series], window: Window) -> list[float | None]:
    """The sum of ``series`` at each grid step (None where none of them has a point)."""
    out: list[float | None] = [None] * window.points
    for s in series:
        for t, v in s.points:
            k = round((t - window.start) / window.step)
            if 0 <= k < len(out):
                out[k] = (out[k] or 0.0) + v
    return out


def per_replica(series: Iterable[Series]) -> dict[tuple[str, str, str], Series]:
    """Series keyed by the replica they belong to: (job, instance, engine)."""
    return {(s.labels.get("job", ""), s.labels.get("instance", ""), s.labels.get("engine", "")): s for s in series}


def last_value(s: Series) -> float | None:
    return s.points[-1][1] if s.points else None


def median(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100): always one of the measured values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def times(window: Window) -> list[float]:
    return [window.start + k * window.step for k in range(window.points)]


def hourly_means(ts: Sequence[float], values: Sequence[float | None]) -> dict[float, float]:
    """UTC hour start -> mean of the steps of that hour that have data (hours without data are absent)."""
    sums: dict[float, list[float]] = defaultdict(list)
    for t, v in zip(ts, values):
        if v is not None:
            sums[math.floor(t / HOUR) * HOUR].append(v)
    return {h: sum(vs) / len(vs) for h, vs in sorted(sums.items())}


@dataclass(frozen=True)
class Span:
    """Consecutive steps above capacity: [start, end), with the worst demand over capacity in it."""

    start: float
    end: float
    steps: int
    worst_ratio: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


def spans(ts: Sequence[float], ratio: Sequence[float | None], step: float) -> list[Span]:
    """Runs of steps whose ratio (demand over fleet capacity) is above 1; a step without data ends a run."""
    out: list[Span] = []
    run: list[tuple[float, float]] = []
    for t, r in [*zip(ts, ratio), (math.inf, None)]:
        if r is not None and r > 1.0:
            run.append((t, r))
            continue
        if run:
            out.append(Span(run[0][0], run[-1][0] + step, len(run), max(x for _, x in run)))
            run = []
    return out


@dataclass(frozen=True)
class DayProfile:
    """The hour of day (UTC) demand peaks at: per day, and across the days (mean per hour of day)."""

    daily_peaks: list[tuple[float, int]] = field(default_factory=list)  # (day start, hour of day)
    by_hour_of_day: dict[int, float] = field(default_factory=dict)
    typical_peak_hour: int | None = None
    #: share of the counted days whose own peak hour is the typical one
    agreement: float | None = None


def day_profile(hours: dict[float, float]) -> DayProfile:
    """Why the mean per hour of day: one odd day moves it less than it moves a vote among daily peaks."""
    days: dict[float, dict[int, float]] = defaultdict(dict)
    for h, v in hours.items():
        days[math.floor(h / DAY) * DAY][int((h % DAY) // HOUR)] = v
    full = {d: hs for d, hs in sorted(days.items()) if len(hs) >= MIN_HOURS_PER_DAY}
    if not full:
        return DayProfile()
    peaks = [(d, max(sorted(hs), key=lambda k: hs[k])) for d, hs in full.items()]
    by_hour: dict[int, list[float]] = defaultdict(list)
    for hs in full.values():
        for hour, v in hs.items():
            by_hour[hour].append(v)
    means = {hour: sum(vs) / len(vs) for hour, vs in sorted(by_hour.items())}
    typical = max(sorted(means), key=lambda k: means[k])
    agreement = sum(1 for _, hour in peaks if hour == typical) / len(peaks)
    return DayProfile(peaks, means, typical, agreement)


__all__ = [
    "DAY",
    "HOUR",
    "DayProfile",
    "Span",
    "day_profile",
    "grid",
    "hourly_means",
    "last_value",
    "median",
    "per_replica",
    "percentile",
    "spans",
    "times",
]
