"""A short ring buffer of snapshots: what turns counters and histograms into signals.

Why the diagnosis keeps its own window instead of asking Prometheus: the
verdict must work with no Prometheus at all (``diagnose`` against a bare
exporter). A counter says nothing in one snapshot; "preemptions rising" is its
delta over the window, and "TTFT p95 now" is the quantile of the histogram's
bucket deltas over the window, not of its lifetime totals.

Spans and rates use each snapshot's ``monotonic`` time, never its wall
``timestamp``: a wall-clock step must not stretch, shrink or invert a rate.

Why the window keeps slim copies: a snapshot references every fresh point of
every source, and each engine scrape makes new point objects, so keeping whole
snapshots for 20-60 s held window / interval x published series alive (a
19k-series engine drove RSS past 480 MiB). A window therefore keeps, per
snapshot, only the metric families its reader asks for (``keep``), at most
``per_name_cap`` series of each (the aggregates the diagnosis judges do not
need a per-request label's 19 000 variants), and at most ``max_points`` points
over all its snapshots, dropping the oldest snapshots first (never the last two).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping

from exporter.samples import HistogramSample, Sample
from exporter.store import Snapshot

#: hard cap on kept snapshots whatever the window length (bounds memory)
MAX_SNAPSHOTS = 600
#: series kept per metric family per snapshot, and points over the whole window
PER_NAME_CAP = 256
MAX_POINTS = 60_000

LabelFilter = Callable[[Mapping[str, str]], bool]
#: one series' identity: its labels, sorted
SeriesKey = tuple[tuple[str, str], ...]


def _key(labels: Mapping[str, str]) -> SeriesKey:
    return tuple(sorted(labels.items()))


class Window:
    """Snapshots of the last ``seconds``, oldest first."""

    def __init__(
        self,
        seconds: float,
        keep: Callable[[str], bool] | None = None,
        per_name_cap: int = PER_NAME_CAP,
        max_points: int = MAX_POINTS,
    ) -> None:
        self.seconds = seconds
        self._keep = keep
        self._per_name_cap = per_name_cap
        self._max_points = max_points
        self._snaps: deque[Snapshot] = deque(maxlen=MAX_SNAPSHOTS)
        self._points = 0

    def add(self, snap: Snapshot) -> None:
        """Append a slim copy, then drop snapshots older than needed to span ``seconds``
        (and the oldest beyond ``max_points``)."""
        slim = self._slim(snap)
        if len(self._snaps) == self._snaps.maxlen:
            self._points -= len(self._snaps[0].points)
        self._snaps.append(slim)
        self._points += len(slim.points)
        cutoff = slim.monotonic - self.seconds
        # keep one snapshot at or before the cutoff so the span covers the window
        while len(self._snaps) > 2 and (self._snaps[1].monotonic <= cutoff or self._points > self._max_points):
            self._points -= len(self._snaps.popleft().points)

    def _slim(self, snap: Snapshot) -> Snapshot:
        """``snap`` with only the kept families, each cut to ``per_name_cap`` series."""
        counts: dict[str, int] = {}
        points = []
        for p in snap.points:
            if self._keep is not None and not self._keep(p.name):
                continue
            n = counts.get(p.name, 0)
            if n >= self._per_name_cap:
                continue
            counts[p.name] = n + 1
            points.append(p)
        # no ``sources``: each source's state holds its whole point list, which would keep every
        # point of every kept snapshot alive (the reader gets the latest snapshot whole anyway)
        return Snapshot(snap.timestamp, points, {}, monotonic=snap.monotonic, valid_until=snap.valid_until, version=snap.version)

    def __len__(self) -> int:
        return len(self._snaps)

    @property
    def snapshots(self) -> list[Snapshot]:
        return list(self._snaps)

    @property
    def latest(self) -> Snapshot | None:
        return self._snaps[-1] if self._snaps else None

    @property
    def span(self) -> float:
        if len(self._snaps) < 2:
            return 0.0
        return self._snaps[-1].monotonic - self._snaps[0].monotonic

    # ------------------------------------------------------------------ counters

    def counter_delta(self, name: str, where: LabelFilter | None = None) -> float | None:
        """Increase of the matching counter series over the window, summed.

        Each series counts from the oldest snapshot of the window that holds it
        (a source that was stale or not yet sampled at the window's start must
        not blind the rate). A series that went down was reset: its increase is
        its latest value. None when no series is seen twice.
        """
        found = self._counter_ends(name, where)
        if not found:
            return None
        return sum(delta for delta, _ in found)

    def rate(self, name: str, where: LabelFilter | None = None) -> float | None:
        """Per-second increase over the window, each series over its own span (None if unknown)."""
        found = self._counter_ends(name, where)
        if not found:
            return None
        return sum(delta / span for delta, span in found)

    def _counter_ends(self, name: str, where: LabelFilter | None) -> list[tuple[float, float]]:
        """(increase, seconds) per series between its first sighting and the latest snapshot."""
        if len(self._snaps) < 2:
            return []
        latest = self._snaps[-1]
        new = _counter_values(latest, name, where)
        first: dict[SeriesKey, tuple[float, float]] = {}
        for snap in list(self._snaps)[:-1]:
            if len(first) == len(new):
                break
            for k, v in _counter_values(snap, name, where).items():
                if k in new and k not in first:
                    first[k] = (snap.monotonic, v)
        out = []
        for k, (ts, old) in first.items():
            span = latest.monotonic - ts
            if span <= 0:
                continue
            d = new[k] - old
            out.append((d if d >= 0 else new[k], span))
        return out

    # ------------------------------------------------------------------ histograms

    def histogram_delta_count(self, name: str, seconds: float | None = None) -> float | None:
        """Observations added to the histogram over the window, or its last ``seconds`` (None if unknown)."""
        deltas = self._histogram_deltas(name, seconds)
        if deltas is None:
            return None
        return sum(buckets[-1][1] for buckets in deltas)

    def histogram_delta_sum(self, name: str, seconds: float | None = None) -> float | None:
        """Sum of the observations added over the window (None if unknown)."""
        deltas = self._histogram_sum_deltas(name, seconds)
        return None if deltas is None else sum(deltas)

    def _histogram_sum_deltas(self, name: str, seconds: float | None) -> list[float] | None:
        if len(self._snaps) < 2:
            return None
        new = {_key(h.labels): h for h in self._snaps[-1].histograms(name)}
        old: dict[SeriesKey, HistogramSample] = {}
        for snap in self._since(seconds):
            for h in snap.histograms(name):
                k = _key(h.labels)
                if k in new and k not in old:
                    old[k] = h
        if not old:
            return None
        return [new[k].sum - o.sum if new[k].count >= o.count else new[k].sum for k, o in old.items()]

    def quantile(self, name: str, q: float, seconds: float | None = None) -> float | None:
        """The q-quantile of observations made during the window (or its last ``seconds``).

        Series with the same bucket bounds are merged (several ranks or servers);
        series with different bounds are judged apart and the worst is returned.
        None when nothing was observed in that time.
        """
        deltas = self._histogram_deltas(name, seconds)
        if not deltas:
            return None
        merged: dict[tuple[float, ...], list[float]] = {}
        for buckets in deltas:
            bounds = tuple(le for le, _ in buckets)
            acc = merged.setdefault(bounds, [0.0] * len(bounds))
            for i, (_, c) in enumerate(buckets):
                acc[i] += c
        found = [v for bounds, counts in merged.items() if (v := bucket_quantile(q, list(zip(bounds, counts)))) is not None]
        return max(found) if found else None

    def quantile_beyond_bounds(self, name: str, q: float, seconds: float | None = None) -> bool:
        """Whether the q-quantile of the window lies past the last finite bucket bound of a series: the
        figure ``quantile`` gives is then that bound, a floor ("above 5,000"), not the percentile."""
        deltas = self._histogram_deltas(name, seconds)
        return any(beyond_bounds(q, buckets) for buckets in deltas or ())

    def recent_quantile(self, name: str, q: float, min_count: float, seconds: float = 0.0) -> tuple[float, float] | None:
        """The q-quantile of the most recent observations: over the shortest look-back (at least
        ``seconds``, then one snapshot further at a time, up to the whole window) that holds at least
        ``min_count`` of them. Returns (quantile, seconds looked back); None when nothing was observed.

        What requests see now, without a quantile of a handful of requests: a busy server answers
        from its last second or two, a quiet one from as far back as it takes.
        """
        if len(self._snaps) < 2:
            return None
        latest = self._snaps[-1].monotonic
        ages = sorted(latest - s.monotonic + 1e-6 for s in list(self._snaps)[:-1])
        looks = ([seconds] if seconds > 0 else []) + [a for a in ages if a > seconds]
        for look in looks:
            n = self.histogram_delta_count(name, look)
            if n is not None and n >= min_count:
                value = self.quantile(name, q, look)
                return None if value is None else (value, look)
        value = self.quantile(name, q)
        return None if value is None else (value, self.span)

    def _since(self, seconds: float | None) -> list[Snapshot]:
        """Snapshots before the latest that a delta over the last ``seconds`` starts from, oldest
        first: those inside that time plus the last one at or before its start (so the delta spans it)."""
        snaps = list(self._snaps)[:-1]
        if seconds is None or not snaps:
            return snaps
        cutoff = self._snaps[-1].monotonic - seconds
        first = 0
        for i, snap in enumerate(snaps):
            if snap.monotonic <= cutoff:
                first = i
        return snaps[first:]

    def _histogram_deltas(self, name: str, seconds: float | None = None) -> list[tuple[tuple[float, float], ...]] | None:
        """Per series, bucket increases since its first sighting in the window (or its last ``seconds``)."""
        if len(self._snaps) < 2:
            return None
        new = {_key(h.labels): h for h in self._snaps[-1].histograms(name)}
        old: dict[SeriesKey, HistogramSample] = {}
        for snap in self._since(seconds):
            if len(old) == len(new):
                break
            for h in snap.histograms(name):
                k = _key(h.labels)
                if k in new and k not in old:
                    old[k] = h
        if not old:
            return None
        out = []
        for k, o in old.items():
            n = new[k]
            if n.count < o.count or [le for le, _ in n.buckets] != [le for le, _ in o.buckets]:
                out.append(n.buckets)  # reset or re-bucketed: the latest totals are all we know
                continue
            out.append(tuple((le, max(0.0, c - oc)) for (le, c), (_, oc) in zip(n.buckets, o.buckets)))
        return out

    # ------------------------------------------------------------------ gauges over time

    def gauge_history(self, reduce: Callable[[Snapshot], float | None], seconds: float | None = None) -> list[float]:
        """``reduce`` applied to each snapshot of the window (or of its last ``seconds``),
        absent values skipped, oldest first."""
        out = []
        since = None if seconds is None or not self._snaps else self._snaps[-1].monotonic - seconds
        for s in self._snaps:
            if since is not None and s.monotonic < since:
                continue
            v = reduce(s)
            if v is not None:
                out.append(v)
        return out


def _counter_values(snap: Snapshot, name: str, where: LabelFilter | None) -> dict[SeriesKey, float]:
    return {_key(p.labels): p.value for p in snap.samples(name) if isinstance(p, Sample) and (where is None or where(p.labels))}


def beyond_bounds(q: float, buckets: Iterable[tuple[float, float]]) -> bool:
    """Whether the q-quantile's rank falls in the +Inf bucket of cumulative (le, count) buckets."""
    pairs = sorted(buckets)
    if len(pairs) < 2 or not math.isinf(pairs[-1][0]) or pairs[-1][1] <= 0:
        return False
    return pairs[-2][1] < q * pairs[-1][1]


def bucket_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """Prometheus ``histogram_quantile`` over cumulative (le, count) buckets.

    Linear interpolation inside the bucket holding the rank; a rank in the +Inf
    bucket returns the highest finite bound, as Prometheus does.
    """
    pairs = sorted(buckets)
    if not pairs or not math.isinf(pairs[-1][0]):
        return None
    total = pairs[-1][1]
    if total <= 0:
        return None
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for le, count in pairs:
        if count >= rank:
            if math.isinf(le):
                return prev_le if len(pairs) > 1 else None
            if count == prev_count:
                return le
            lower = prev_le if prev_le < le else 0.0
            return lower + (le - lower) * (rank - prev_count) / (count - prev_count)
        prev_le, prev_count = le, count
    return pairs[-2][0] if len(pairs) > 1 else None
