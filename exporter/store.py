"""Latest sample of every source, with staleness and per-source health.

Why: each source samples on its own loop and writes here; a scrape and the
diagnosis only read. A slow or dead source therefore never slows /metrics, and
a source's values vanish once they are older than two of its intervals rather
than being served stale forever.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping

from exporter.samples import HistogramSample, Point, Sample, SourceError

STALE_AFTER_INTERVALS = 2.0


@dataclass
class SourceState:
    """Health and the latest points of one source."""

    name: str
    interval: float
    up: bool = False
    attempted: bool = False
    last_duration: float = 0.0
    last_success: float | None = None
    last_error: SourceError | None = None
    errors: dict[str, int] = field(default_factory=dict)
    points: list[Point] = field(default_factory=list)

    def fresh(self, now: float) -> bool:
        return self.last_success is not None and now - self.last_success <= STALE_AFTER_INTERVALS * self.interval


class Snapshot:
    """An immutable, timestamped view of every fresh point, with small query helpers."""

    def __init__(self, timestamp: float, points: list[Point], sources: Mapping[str, SourceState]):
        self.timestamp = timestamp
        self.points = points
        self.sources = sources
        self._by_name: dict[str, list[Point]] = {}
        for p in points:
            self._by_name.setdefault(p.name, []).append(p)

    def names(self) -> set[str]:
        return set(self._by_name)

    def find(self, name: str, **match: str) -> list[Point]:
        """Points of ``name`` whose labels include every ``match`` pair."""
        found = self._by_name.get(name, [])
        if not match:
            return list(found)
        return [p for p in found if all(p.labels.get(k) == v for k, v in match.items())]

    def samples(self, name: str, **match: str) -> list[Sample]:
        return [p for p in self.find(name, **match) if isinstance(p, Sample)]

    def histograms(self, name: str, **match: str) -> list[HistogramSample]:
        return [p for p in self.find(name, **match) if isinstance(p, HistogramSample)]

    def values(self, name: str, **match: str) -> list[float]:
        return [s.value for s in self.samples(name, **match)]

    def total(self, name: str, **match: str) -> float | None:
        """Sum of the matching values, or None when the metric is absent."""
        vals = self.values(name, **match)
        return sum(vals) if vals else None

    def maximum(self, name: str, **match: str) -> float | None:
        vals = self.values(name, **match)
        return max(vals) if vals else None

    def mean(self, name: str, **match: str) -> float | None:
        vals = self.values(name, **match)
        return sum(vals) / len(vals) if vals else None

    def source_up(self, source: str) -> bool:
        st = self.sources.get(source)
        return bool(st and st.up)


class SnapshotStore:
    """Thread-safe holder of every source's latest result."""

    def __init__(self, clock=time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._states: dict[str, SourceState] = {}
        self._version = 0

    @property
    def version(self) -> int:
        """Bumps on every write: lets the collector reuse a rendered exposition."""
        return self._version

    def register(self, name: str, interval: float) -> None:
        with self._lock:
            self._states.setdefault(name, SourceState(name=name, interval=interval))
            self._version += 1

    def unregister(self, name: str) -> None:
        with self._lock:
            self._states.pop(name, None)
            self._version += 1

    def record_success(
        self, name: str, points: list[Point], duration: float, partial_errors: Iterable[SourceError] = ()
    ) -> None:
        with self._lock:
            st = self._states[name]
            st.up = True
            st.attempted = True
            st.last_duration = duration
            st.last_success = self._clock()
            st.last_error = None
            st.points = points
            for err in partial_errors:
                st.errors[err.reason] = st.errors.get(err.reason, 0) + 1
            self._version += 1

    def record_failure(self, name: str, error: SourceError, duration: float) -> None:
        with self._lock:
            st = self._states[name]
            st.up = False
            st.attempted = True
            st.last_duration = duration
            st.last_error = error
            st.errors[error.reason] = st.errors.get(error.reason, 0) + 1
            self._version += 1

    def ready(self) -> bool:
        """True once any source has sampled successfully (see README: readiness)."""
        with self._lock:
            return any(st.last_success is not None for st in self._states.values())

    def states(self) -> dict[str, SourceState]:
        """A copy of every source's state (points lists are shared, never mutated)."""
        with self._lock:
            return {
                n: SourceState(
                    name=st.name,
                    interval=st.interval,
                    up=st.up,
                    attempted=st.attempted,
                    last_duration=st.last_duration,
                    last_success=st.last_success,
                    last_error=st.last_error,
                    errors=dict(st.errors),
                    points=st.points,
                )
                for n, st in self._states.items()
            }

    def snapshot(self) -> Snapshot:
        now = self._clock()
        states = self.states()
        points: list[Point] = []
        for st in states.values():
            if st.fresh(now):
                points.extend(st.points)
        return Snapshot(now, points, states)

    def __iter__(self) -> Iterator[SourceState]:
        return iter(self.states().values())
