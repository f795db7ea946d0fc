"""The simulated engine's own bookkeeping: counters, histograms, a small summary.

Why engine-neutral: the engine records what happened once (a token, a
preemption, a TTFT) and every dialect renders the same numbers under its own
names, units and bucket bounds. Histogram bounds are chosen by the dialect at
start-up (``EngineStats(buckets=...)``) because real engines differ there too.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: Fallback bounds (seconds) for a histogram the dialect did not name.
DEFAULT_SECONDS_BOUNDS: tuple[float, ...] = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

LabelKey = tuple[tuple[str, str], ...]


def label_key(labels: Mapping[str, str] | LabelKey | None) -> LabelKey:
    """Canonical (sorted) label pairs; a tuple is taken as already canonical (hot paths pre-build it)."""
    if not labels:
        return ()
    if isinstance(labels, tuple):
        return labels
    return tuple(sorted(labels.items()))


def streaming_key(streaming: bool) -> LabelKey:
    return STREAMING_TRUE if streaming else STREAMING_FALSE


STREAMING_TRUE: LabelKey = (("streaming", "true"),)
STREAMING_FALSE: LabelKey = (("streaming", "false"),)


@dataclass(frozen=True)
class HistogramData:
    """A frozen copy of one histogram: cumulative counts per upper bound, +Inf last."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    sum: float
    count: float

    def merged(self, other: HistogramData) -> HistogramData:
        if other.bounds != self.bounds:
            raise ValueError("cannot merge histograms with different bounds")
        return HistogramData(
            self.bounds,
            tuple(a + b for a, b in zip(self.cumulative, other.cumulative)),
            self.sum + other.sum,
            self.count + other.count,
        )


class Histogram:
    """Fixed-bound histogram (observations counted per bucket, rendered cumulative)."""

    def __init__(self, bounds: Iterable[float]) -> None:
        finite = sorted({float(b) for b in bounds if not math.isinf(float(b))})
        self.bounds: tuple[float, ...] = tuple(finite) + (math.inf,)
        self._counts = [0] * len(self.bounds)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self._counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def data(self) -> HistogramData:
        cumulative, running = [], 0
        for c in self._counts:
            running += c
            cumulative.append(float(running))
        return HistogramData(self.bounds, tuple(cumulative), self.sum, float(self.count))


class Reservoir:
    """The last ``size`` observations plus exact sum and count: enough for a summary's quantiles."""

    def __init__(self, size: int = 1024) -> None:
        self.values: deque[float] = deque(maxlen=size)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.values.append(value)
        self.sum += value
        self.count += 1

    def quantiles(self, qs: Iterable[float]) -> list[tuple[float, float]]:
        ordered = sorted(self.values)
        out = []
        for q in qs:
            if not ordered:
                out.append((q, 0.0))
                continue
            idx = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
            out.append((q, ordered[idx]))
        return out


class EngineStats:
    """Counters (optionally labelled), gauges and histograms keyed by neutral names.

    Not thread-safe by itself: the engine mutates it under its lock and takes
    frozen copies (``freeze``) for renderers.
    """

    def __init__(self, buckets: Mapping[str, Iterable[float]] | None = None) -> None:
        self._bounds = {k: tuple(v) for k, v in (buckets or {}).items()}
        self.counters: dict[tuple[str, LabelKey], float] = {}
        self.histograms: dict[tuple[str, LabelKey], Histogram] = {}
        self.reservoirs: dict[str, Reservoir] = {}

    def inc(self, name: str, amount: float = 1.0, labels: Mapping[str, str] | LabelKey | None = None) -> None:
        key = (name, label_key(labels))
        self.counters[key] = self.counters.get(key, 0.0) + amount

    def total(self, name: str) -> float:
        """A counter summed over all its label sets."""
        return sum(v for (n, _), v in self.counters.items() if n == name)

    def observe(self, name: str, value: float, labels: Mapping[str, str] | LabelKey | None = None) -> None:
        key = (name, label_key(labels))
        hist = self.histograms.get(key)
        if hist is None:
            hist = self.histograms[key] = Histogram(self._bounds.get(name, DEFAULT_SECONDS_BOUNDS))
        hist.observe(value)

    def sample(self, name: str, value: float) -> None:
        """Observation kept for a summary (quantiles over recent values)."""
        res = self.reservoirs.get(name)
        if res is None:
            res = self.reservoirs[name] = Reservoir()
        res.observe(value)

    def freeze(self) -> FrozenStats:
        return FrozenStats(
            counters=dict(self.counters),
            histograms={k: h.data() for k, h in self.histograms.items()},
            summaries={k: (tuple(r.values), r.sum, r.count) for k, r in self.reservoirs.items()},
            bounds=dict(self._bounds),
        )


@dataclass(frozen=True)
class FrozenStats:
    """Read-only copy of :class:`EngineStats` with query helpers for renderers."""

    counters: dict[tuple[str, LabelKey], float]
    histograms: dict[tuple[str, LabelKey], HistogramData]
    summaries: dict[str, tuple[tuple[float, ...], float, int]]
    bounds: dict[str, tuple[float, ...]]

    def counter(self, name: str, **match: str) -> float:
        """Sum of a counter over every label set that includes ``match``."""
        total = 0.0
        for (n, labels), value in self.counters.items():
            if n == name and all((k, v) in labels for k, v in match.items()):
                total += value
        return total

    def counter_by(self, name: str, label: str) -> dict[str, float]:
        """A counter split by one label's values."""
        out: dict[str, float] = {}
        for (n, labels), value in self.counters.items():
            if n != name:
                continue
            key = dict(labels).get(label, "")
            out[key] = out.get(key, 0.0) + value
        return out

    def histogram(self, name: str, **match: str) -> HistogramData:
        """The merge of every label set of ``name`` that includes ``match`` (empty if none)."""
        merged: HistogramData | None = None
        for (n, labels), data in self.histograms.items():
            if n == name and all((k, v) in labels for k, v in match.items()):
                merged = data if merged is None else merged.merged(data)
        if merged is None:
            finite = {b for b in self.bounds.get(name, DEFAULT_SECONDS_BOUNDS) if not math.isinf(b)}
            bounds = tuple(sorted(finite)) + (math.inf,)
            merged = HistogramData(bounds, tuple(0.0 for _ in bounds), 0.0, 0.0)
        return merged

    def summary(self, name: str, qs: Iterable[float]) -> tuple[list[tuple[float, float]], float, int]:
        values, total, count = self.summaries.get(name, ((), 0.0, 0))
        res = Reservoir(max(1, len(values)))
        res.values.extend(values)
        return res.quantiles(qs), total, count
