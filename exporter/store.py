"""Latest sample of every source, with staleness, liveness and per-source health.

Why: each source samples on its own loop and writes here; a scrape and the
diagnosis only read. A slow or dead source therefore never slows /metrics, and
a source's values vanish once they are older than two of its intervals rather
than being served stale forever.

Why two clocks: freshness, staleness and the deadline of an attempt in flight
are measured on the monotonic clock, so a wall-clock step (NTP, a VM resumed,
an operator's ``date -s``) neither expires every value nor keeps dead ones
alive. Wall time is kept only for what is exported as a Unix time
(``llm_exporter_source_last_success_timestamp_seconds``, a verdict's time).

Why attempts are tracked here: a source whose ``sample()`` hangs writes
nothing, so the store learns of each attempt's start (``begin_attempt``) and
turns one older than its timeout into a ``timeout`` failure on its own, while
it hangs: the source reads down, its values are dropped, and the error is
counted once for that attempt.

Why writers are signalled: the derive stage (exporter/derive.py) waits for the
sample of an input that is due any moment before it takes its snapshot; the
store wakes it when a sample lands (``wait_for_write``), so it never polls.

Why a batch write: the derive stage's steps (``parallel``, ``capacity``,
``diagnosis``) are computed from one snapshot and published together
(``record_batch``), so no reader sees the verdict of one pass beside the
group metrics of another.

Why some points outlive staleness: a source's own bookkeeping counters (the
exporter layer's ``_total`` series, e.g. ``llm_exporter_series_dropped_total``)
must not vanish while the source is down, or every outage reads as a counter
reset and the count of what was cut is lost exactly when it matters.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from exporter.samples import HistogramSample, Point, Sample, SourceError
from exporter.schema import SPECS

STALE_AFTER_INTERVALS = 2.0

Clock = Callable[[], float]


def wall_now() -> float:
    """Unix time, looked up on every call (so a test can step the wall clock)."""
    return time.time()


#: counters a source keeps about itself, published from its last success even while it is down
STICKY_COUNTERS: frozenset[str] = frozenset(
    name for name, spec in SPECS.items() if spec.type == "counter" and spec.layer == "exporter"
)


def readiness_source(name: str) -> bool:
    """Whether a success of source ``name`` makes the exporter ready: the GPU or an engine.

    Why by name: ``gpu`` and ``engine:<server>`` are the ``source`` label contract
    (exporter/sources.py). The derive steps and the profile publisher succeed with
    nothing measured; the process sampler, probes and Kubernetes lookups only add to
    what a GPU or an engine reports.
    """
    return name == "gpu" or name.startswith("engine:")


@dataclass
class SourceState:
    """Health and the latest points of one source.

    ``last_success`` is wall time (exported); every ``*_mono`` field and
    ``in_flight_since`` are monotonic (freshness and deadlines).
    """

    name: str
    interval: float
    timeout: float | None = None
    up: bool = False
    attempted: bool = False
    last_duration: float = 0.0
    last_success: float | None = None
    last_success_mono: float | None = None
    last_error: SourceError | None = None
    errors: dict[str, int] = field(default_factory=dict)
    points: list[Point] = field(default_factory=list)
    #: the store version that last replaced ``points``: unique across sources, so the /metrics
    #: renderer can tell "unchanged" without holding on to an old list (that kept two
    #: generations of an engine's 20,000 points alive between scrapes)
    generation: int = 0
    #: monotonic start of the attempt running now (None between attempts)
    in_flight_since: float | None = None
    #: the running attempt outlived its timeout (already counted as a ``timeout``)
    overdue: bool = False
    #: computed by the derive stage from the other sources' points (left out of its input snapshot)
    derived: bool = False

    def overdue_at(self) -> float | None:
        """When the running attempt becomes a timeout (None: none running, no timeout, or already)."""
        if self.in_flight_since is None or self.timeout is None or self.overdue:
            return None
        return self.in_flight_since + self.timeout

    def stale_at(self) -> float | None:
        """Monotonic time after which the points are no longer served (None: not served now).

        Two intervals after the last success; an attempt that started before
        then and is still within its timeout keeps them up to one timeout
        longer, so a loop that merely woke late does not blank its source.
        """
        if self.last_success_mono is None or self.overdue:
            return None
        at = self.last_success_mono + STALE_AFTER_INTERVALS * self.interval
        running = self.overdue_at()
        if running is not None and self.in_flight_since is not None and self.in_flight_since <= at:
            at = max(at, min(running, at + (self.timeout or 0.0)))
        return at

    def fresh(self, now: float) -> bool:
        """Whether the points are served at monotonic time ``now``."""
        at = self.stale_at()
        return at is not None and now <= at


@dataclass(frozen=True)
class Outcome:
    """One attempt's result for ``record_batch``: its points, or its ``error``."""

    name: str
    duration: float
    points: list[Point] = field(default_factory=list)
    partial_errors: list[SourceError] = field(default_factory=list)
    error: SourceError | None = None


class Snapshot:
    """An immutable view of every fresh point, with small query helpers.

    ``timestamp`` is wall time (for what is shown or exported); ``monotonic``
    is the time to compute spans and rates with; ``valid_until`` is the
    monotonic time at which this view would change even without a write (a
    source going stale or an attempt timing out); ``version`` the store
    version it was taken at.
    """

    def __init__(
        self,
        timestamp: float,
        points: list[Point],
        sources: Mapping[str, SourceState],
        monotonic: float | None = None,
        valid_until: float = math.inf,
        version: int = 0,
    ):
        self.timestamp = timestamp
        self.monotonic = timestamp if monotonic is None else monotonic
        self.valid_until = valid_until
        self.version = version
        self.points = points
        self.sources = sources
        self._by_name: dict[str, list[Point]] = {}
        for p in points:
            self._by_name.setdefault(p.name, []).append(p)

    def names(self) -> set[str]:
        return set(self._by_name)

    def extended(self, points: list[Point]) -> Snapshot:
        """This view plus ``points`` (what earlier derive steps computed from it), same time and sources."""
        if not points:
            return self
        return Snapshot(
            self.timestamp,
            self.points + points,
            self.sources,
            monotonic=self.monotonic,
            valid_until=self.valid_until,
            version=self.version,
        )

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


@dataclass(frozen=True)
class View:
    """The store at one moment, per source: its state and whether its points are served.

    Why apart from ``Snapshot``: the /metrics renderer re-renders only the
    sources whose points changed (exporter/collector.py), so it needs to know
    *which* points each source publishes, not one list of all of them (20,000
    points for an engine at its budget, gathered on every write otherwise).
    """

    version: int
    #: wall time (exported); ``monotonic`` for freshness
    timestamp: float
    monotonic: float
    #: monotonic time at which this view changes even without a write
    valid_until: float
    sources: Mapping[str, SourceState]
    #: source -> its points are fresh (all served) rather than down or stale (only its sticky counters)
    served: Mapping[str, bool]

    def published_points(self, name: str) -> list[Point]:
        """The points ``name`` publishes now: all while fresh, its own counters while down or stale."""
        st = self.sources[name]
        if self.served[name]:
            return st.points
        return [p for p in st.points if p.name in STICKY_COUNTERS]  # see the module docstring


class SnapshotStore:
    """Thread-safe holder of every source's latest result.

    ``clock`` is the wall clock and ``monotonic`` the clock for freshness and
    deadlines; a test that passes only ``clock`` drives both with it.
    """

    def __init__(self, clock: Clock | None = None, monotonic: Clock | None = None) -> None:
        self._wall: Clock = clock or wall_now
        self._mono: Clock = monotonic or clock or time.monotonic
        self._lock = threading.Lock()
        #: notified on every write (see ``wait_for_write``)
        self._written = threading.Condition(self._lock)
        self._states: dict[str, SourceState] = {}
        self._version = 0

    @property
    def version(self) -> int:
        """Bumps on every write: lets the collector reuse a rendered exposition."""
        return self._version

    def monotonic(self) -> float:
        """The store's monotonic time (what ``Snapshot.valid_until`` is compared with)."""
        return self._mono()

    def register(self, name: str, interval: float, timeout: float | None = None, derived: bool = False) -> None:
        """Declare a source; with ``timeout``, an attempt running longer is failed while it runs.

        ``derived``: a step of the derive stage, whose points ``snapshot(inputs_only=True)`` leaves out.
        """
        with self._lock:
            st = self._states.setdefault(name, SourceState(name=name, interval=interval))
            st.timeout = timeout if timeout is not None else st.timeout
            st.derived = derived
            self._version += 1
            self._written.notify_all()

    def unregister(self, name: str) -> None:
        """Forget a source and its points (a removed discovered engine); a late write of it is ignored."""
        with self._lock:
            self._states.pop(name, None)
            self._version += 1
            self._written.notify_all()

    def begin_attempt(self, name: str) -> None:
        """A sample attempt of ``name`` starts now (its deadline is now + its timeout)."""
        with self._lock:
            st = self._states.get(name)
            if st is None:  # unregistered meanwhile
                return
            st.in_flight_since = self._mono()
            st.overdue = False

    def end_attempt(self, name: str) -> None:
        """The attempt of ``name`` finished; its result is written later (with its derive pass).

        Why: a pass publishes every step together, so a step that finished must
        not be failed as overdue because a later step of the same pass hangs.
        """
        with self._lock:
            st = self._states.get(name)
            if st is not None and not st.overdue:
                st.in_flight_since = None

    def wait_for_write(self, version: int, timeout: float) -> int:
        """Block until the store's version differs from ``version`` or ``timeout`` seconds passed; the version now."""
        with self._written:
            if self._version == version and timeout > 0:
                self._written.wait_for(lambda: self._version != version, timeout)
            return self._version

    def record_success(self, name: str, points: list[Point], duration: float, partial_errors: Iterable[SourceError] = ()) -> None:
        with self._lock:
            self._success(name, points, duration, partial_errors)
            self._written.notify_all()

    def record_failure(self, name: str, error: SourceError, duration: float) -> None:
        """A failed attempt; one that was already failed as overdue is not counted twice."""
        with self._lock:
            self._failure(name, error, duration)
            self._written.notify_all()

    def record_batch(self, outcomes: Iterable[Outcome]) -> None:
        """Several sources' results in one write: a reader sees all of them or none."""
        with self._lock:
            for o in outcomes:
                if o.error is None:
                    self._success(o.name, o.points, o.duration, o.partial_errors)
                else:
                    self._failure(o.name, o.error, o.duration)
            self._written.notify_all()

    def _success(self, name: str, points: list[Point], duration: float, partial_errors: Iterable[SourceError]) -> None:
        """Caller holds the lock."""
        st = self._states.get(name)
        if st is None:  # unregistered while the attempt ran: its result is dropped
            return
        st.up = True
        st.attempted = True
        st.last_duration = duration
        st.last_success = self._wall()
        st.last_success_mono = self._mono()
        st.last_error = None
        st.points = points
        st.generation = self._version + 1
        st.in_flight_since, st.overdue = None, False
        for err in partial_errors:
            st.errors[err.reason] = st.errors.get(err.reason, 0) + 1
        self._version += 1

    def _failure(self, name: str, error: SourceError, duration: float) -> None:
        """Caller holds the lock; an attempt already failed as overdue is not counted twice."""
        st = self._states.get(name)
        if st is None:
            return
        st.up = False
        st.attempted = True
        st.last_duration = duration
        st.last_error = error.detached()
        if not st.overdue:
            st.errors[error.reason] = st.errors.get(error.reason, 0) + 1
        st.in_flight_since, st.overdue = None, False
        self._version += 1

    def overdue(self, name: str) -> SourceError | None:
        """The timeout error of ``name``'s running attempt once it outlived its timeout, else None."""
        with self._lock:
            self._settle(self._mono())
            st = self._states.get(name)
            return st.last_error if st is not None and st.overdue else None

    def _settle(self, now: float) -> None:
        """Fail every attempt in flight past its deadline (caller holds the lock)."""
        for st in self._states.values():
            at = st.overdue_at()
            if at is None or now <= at:
                continue
            st.overdue = True
            st.up = False
            st.attempted = True
            st.last_duration = now - (st.in_flight_since or now)
            st.last_error = SourceError("timeout", f"attempt still running after its {st.timeout:g}s timeout")
            st.errors["timeout"] = st.errors.get("timeout", 0) + 1
            self._version += 1

    def ready(self) -> bool:
        """True once a GPU or engine source has sampled successfully (docs/guide.md, "Design": readiness).

        Why only those: the derive steps and the exporter's own sources succeed with
        nothing measured, so counting them made /readyz 200 with no GPU and no engine.
        """
        with self._lock:
            return any(st.last_success is not None and readiness_source(n) for n, st in self._states.items())

    def states(self) -> dict[str, SourceState]:
        """A copy of every source's state (points lists are shared, never mutated)."""
        with self._lock:
            self._settle(self._mono())
            return self._copy_states()

    def _copy_states(self) -> dict[str, SourceState]:
        return {n: replace(st, errors=dict(st.errors)) for n, st in self._states.items()}

    def view(self) -> View:
        """What is published now, per source, without gathering the points (the /metrics renderer's read)."""
        with self._lock:
            now = self._mono()
            self._settle(now)
            wall = self._wall()
            version = self._version
            states = self._copy_states()
        served: dict[str, bool] = {}
        valid_until = math.inf
        for name, st in states.items():
            stale_at = st.stale_at()
            served[name] = stale_at is not None and now <= stale_at
            if served[name] and stale_at is not None:
                valid_until = min(valid_until, stale_at)
            overdue_at = st.overdue_at()
            if overdue_at is not None:
                valid_until = min(valid_until, overdue_at)
        return View(version, wall, now, valid_until, states, served)

    def snapshot(self, inputs_only: bool = False) -> Snapshot:
        """Every published point; ``inputs_only``: without the derived sources' points and states
        (what the derive stage computes from, so nothing it derives is read back a pass later)."""
        view = self.view()
        sources = view.sources
        if inputs_only:
            sources = {n: st for n, st in sources.items() if not st.derived}
        points: list[Point] = []
        for name in sources:
            points.extend(view.published_points(name))
        return Snapshot(
            view.timestamp, points, sources, monotonic=view.monotonic, valid_until=view.valid_until, version=view.version
        )

    def __iter__(self) -> Iterator[SourceState]:
        return iter(self.states().values())
