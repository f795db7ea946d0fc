"""What each layer was doing, cycle by cycle: the verdict history a request is joined with.

Why a history of its own: a request's span arrives when the request ends (vLLM writes it
at finish, in batches seconds later), so the verdict of *now* is not what the request
lived through. Each diagnosis cycle appends one ``Moment`` per engine: the state, the
primary cause with its chain link, and the headline figure of each layer read from the
signals the cycle judged. The join (exporter/tracing/join.py) then reads the moments
over [arrival, finish].

Bounded: ``max_age_s`` (default 15 min: a request older than that is no longer
explained) and ``max_moments`` per engine (default 3,600: one hour of 1 s cycles,
whichever ends first), at most ``max_engines`` engines (engines gone from the
diagnosis stop being appended to and age out). About 0.5 KB a moment: 64 engines ×
3,600 moments is ~115 MB in the worst case; one engine at 1 s cycles, 15 min, ~0.5 MB.

The step runs in the derive stage right after the diagnosis (``HistoryStep``), on the
same pass: no thread of its own, no read of the store.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from exporter.diagnosis import signals as s
from exporter.diagnosis.verdict import Verdict
from exporter.samples import SampleResult
from exporter.store import Snapshot

#: headline figure -> the service-scope signal it is read from (exporter/diagnosis/signals.py)
FIGURES: dict[str, str] = {
    "kv_cache_usage": s.KV_USAGE,
    "requests_waiting": s.WAITING,
    "requests_running": s.RUNNING,
    "preemptions_per_second": s.PREEMPTION_RATE,
    "sm_active": s.SM_MAX,
    "busiest_thread_cpu": s.BUSIEST_THREAD,
    "gpu_utilization": s.UTIL_MAX,
}


@dataclass(frozen=True)
class Moment:
    """One engine's verdict of one cycle, reduced to what a request's explanation needs."""

    timestamp: float
    state: str
    #: (layer, cause) of the primary, None when there is none
    primary: tuple[str, str] | None
    #: the primary's own chain link ("KV cache 100 % full, 2.7 preemptions/s"), "" without one
    summary: str
    figures: Mapping[str, float] = field(default_factory=dict)


def moment_of(verdict: Verdict) -> Moment:
    """The moment a verdict says (figures absent from its signals are left out, never 0)."""
    figures = {name: verdict.signals[key] for name, key in FIGURES.items() if key in verdict.signals}
    primary = (verdict.primary.layer, verdict.primary.cause) if verdict.primary else None
    return Moment(verdict.timestamp, verdict.state, primary, verdict.primary.summary if verdict.primary else "", figures)


class VerdictHistory:
    """Per engine, the moments of the recent cycles; appended by the derive pass, read by HTTP handlers."""

    def __init__(self, max_age_s: float = 900.0, max_moments: int = 3600, max_engines: int = 64) -> None:
        self.max_age_s = max_age_s
        self.max_moments = max_moments
        self.max_engines = max_engines
        self._lock = threading.Lock()
        self._engines: dict[str, deque[Moment]] = {}

    def record(self, engines: Mapping[str, Verdict]) -> None:
        """One cycle's verdicts (engine name -> verdict; "" is the node's when there is no engine)."""
        with self._lock:
            newest = 0.0
            for name, verdict in engines.items():
                ring = self._engines.get(name)
                if ring is None:
                    if len(self._engines) >= self.max_engines:
                        continue
                    ring = self._engines[name] = deque(maxlen=self.max_moments)
                ring.append(moment_of(verdict))
                newest = max(newest, verdict.timestamp)
            for name in list(self._engines):
                ring = self._engines[name]
                while ring and ring[0].timestamp < newest - self.max_age_s:
                    ring.popleft()
                if not ring:
                    del self._engines[name]

    def between(self, engine: str, start: float, end: float) -> list[Moment]:
        """The engine's moments with ``start <= timestamp <= end`` (oldest first)."""
        with self._lock:
            ring = self._engines.get(engine)
            if ring is None and engine not in self._engines and len(self._engines) == 1 and "" in self._engines:
                ring = self._engines[""]  # a node judged as one (no engine configured)
            return [m for m in ring or () if start <= m.timestamp <= end]

    def span(self, engine: str) -> tuple[float, float] | None:
        """(oldest, newest) timestamp held for ``engine``; None when nothing is."""
        with self._lock:
            ring = self._engines.get(engine)
            return (ring[0].timestamp, ring[-1].timestamp) if ring else None


class HistoryStep:
    """Derive step after the diagnosis: appends the cycle's verdicts to the history.

    ``latest`` returns the cycle's verdicts by engine (``NodeDiagnosis.latest.engines``); it
    is read after the diagnosis step of the same pass ran, so it is this pass's verdict.
    """

    name = "tracing_history"

    def __init__(self, history: VerdictHistory, latest: Callable[[], Mapping[str, Verdict]]) -> None:
        self.history = history
        self._latest = latest
        self._seen: float | None = None

    def derive(self, snap: Snapshot) -> SampleResult:
        engines = self._latest()
        stamp = max((v.timestamp for v in engines.values()), default=None)
        if stamp is not None and stamp != self._seen:  # a held (bridged) verdict is re-stamped: still new
            self._seen = stamp
            self.history.record(engines)
        return SampleResult([])

    def close(self) -> None:
        """Holds nothing that needs releasing."""
