"""The last profile of each engine, one profile at a time, and the source that publishes it.

Why a source: every published point goes through the store (exporter/store.py),
so the shares appear in /metrics, in the report and next to the verdict the way
every other series does, with the same staleness rule. The source only reads
what the last profile left here; a profile never runs on its loop.

Why one profile at a time for the whole exporter, not per engine: the engines
write into the one ``--profile-dir``, and the traces of a profile are told apart
by the time they were written; two profiles running together would read each
other's files.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from exporter.samples import Point, Sample, SampleResult

SHARE = "llm_operator_time_share"
TIMESTAMP = "llm_operator_profile_timestamp_seconds"
#: the source name (``source`` label of its health series)
SOURCE_NAME = "operator_profile"


@dataclass(frozen=True)
class Published:
    """What one engine's last profile with GPU kernels publishes."""

    shares: dict[str, float]
    ended_at: float


class ProfileState:
    """Last results (JSON bodies and published shares) and the lock that keeps profiles apart."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: str | None = None
        self._bodies: dict[str, dict[str, Any]] = {}
        self._published: dict[str, Published] = {}

    def begin(self, engine: str) -> str | None:
        """Claim the profiler for ``engine``; the engine already profiling when it is taken, else None."""
        with self._lock:
            if self._running is not None:
                return self._running
            self._running = engine
            return None

    def end(self) -> None:
        with self._lock:
            self._running = None

    @property
    def running(self) -> str | None:
        with self._lock:
            return self._running

    def keep(self, engine: str, body: dict[str, Any], published: Published | None) -> None:
        """The finished profile's answer; ``published`` replaces the gauges (None: the last ones stay)."""
        with self._lock:
            self._bodies[engine] = body
            if published is not None:
                self._published[engine] = published

    def last(self, engine: str) -> dict[str, Any] | None:
        with self._lock:
            return self._bodies.get(engine)

    def all_last(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return dict(self._bodies)

    def points(self) -> list[Point]:
        with self._lock:
            published = dict(self._published)
        out: list[Point] = []
        for engine, p in sorted(published.items()):
            out.extend(Sample(SHARE, {"engine": engine, "kind": kind}, share) for kind, share in p.shares.items())
            out.append(Sample(TIMESTAMP, {"engine": engine}, p.ended_at))
        return out


class ProfileSource:
    """Publishes the last profile of every engine (nothing before the first one)."""

    name = SOURCE_NAME

    def __init__(self, state: ProfileState, interval: float = 5.0) -> None:
        self.state = state
        self.interval = interval
        self.timeout = min(1.0, interval * 0.9)

    def sample(self) -> SampleResult:
        return SampleResult(self.state.points())

    def close(self) -> None:
        """Holds nothing."""
