"""The bounded keep of finished requests, per engine: the slowest of each recent window and a
uniform sample (docs/tracing.md).

Why both: "why was THIS request slow?" asks for the slow ones, which a uniform sample
almost never holds (1 in 1000 is the p99.9), while "what does a normal request look like
now?" asks for an unbiased sample, which the slowest never are. So, per engine:

- windows of ``window_s`` seconds by the request's **finish** time (arrival + e2e; never
  the wall clock, so a late export lands in its own window), the newest ``windows`` of them
  (the newest being the latest finish seen for that engine), each keeping its ``k`` slowest
  requests by e2e (by TTFT when e2e is unknown; a request with neither is only sampled);
- a uniform sample of ``sample_size`` of every request added (Algorithm R, seeded RNG);
- an index by trace id over what the two hold (several requests may share a trace: a caller's
  trace holding many LLM calls, since the engines honour an incoming ``traceparent``).

An export retried by the engine's OTLP exporter brings the same span again: a record whose
(trace id, span id) is already held is not added twice. A record finishing more than one
window after ``clock()`` (Unix seconds) is refused: a skewed clock must not roll the windows
away. Thread-safe: one lock (the receiver threads add while the HTTP handlers read).

Memory bound: per engine at most ``windows * k + sample_size`` records (defaults 15 * 10 +
200 = 350), each held once however many places keep it, and at most ``max_engines``
engines. Measured with ``tracemalloc`` over 10,000 records held (CPython 3.11; the index and
heaps included; tests/tracing/test_tracing_reservoir.py keeps the figure honest): about
1.1 KB per record with 32/16-hex ids and a 24-character model and request id, 1.45 KB with
the 200-character model and request id the normalizer allows at most. So the defaults hold
at most ~0.5 MB per engine, ~33 MB at ``max_engines`` = 64 with the longest strings.
"""

from __future__ import annotations

import heapq
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from exporter.tracing.record import RequestRecord

DEFAULT_WINDOW_S = 60.0
DEFAULT_WINDOWS = 15
DEFAULT_K = 10
DEFAULT_SAMPLE_SIZE = 200
DEFAULT_MAX_ENGINES = 64
#: measured bytes per held record (module docstring): typical, and with the longest strings
BYTES_PER_RECORD = 1_100
BYTES_PER_RECORD_MAX = 1_450


def slowness(record: RequestRecord) -> float | None:
    """What "slow" ranks by: e2e, else TTFT; None when neither is known."""
    if record.e2e_seconds is not None:
        return record.e2e_seconds
    return record.ttft_seconds


@dataclass
class _Held:
    """A record in the index, with how many places (a window, the sample) keep it."""

    record: RequestRecord
    places: int = 0


@dataclass
class _Engine:
    """One engine's keep."""

    #: window number (floor(finish / window_s)) -> min-heap of (slowness, order, record)
    windows: dict[int, list[tuple[float, int, RequestRecord]]] = field(default_factory=dict)
    newest: int | None = None
    sample: list[RequestRecord] = field(default_factory=list)
    seen: int = 0


class RequestReservoir:
    """Finished requests kept per engine, bounded (module docstring)."""

    def __init__(
        self,
        *,
        window_s: float = DEFAULT_WINDOW_S,
        windows: int = DEFAULT_WINDOWS,
        k: int = DEFAULT_K,
        sample_size: int = DEFAULT_SAMPLE_SIZE,
        max_engines: int = DEFAULT_MAX_ENGINES,
        seed: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not window_s > 0 or windows < 1 or k < 0 or sample_size < 0 or max_engines < 1:
            raise ValueError("window_s > 0, windows >= 1, k >= 0, sample_size >= 0 and max_engines >= 1 expected")
        self.window_s = float(window_s)
        self.windows = windows
        self.k = k
        self.sample_size = sample_size
        self.max_engines = max_engines
        self._rng = random.Random(seed)
        self._clock = clock
        self._lock = threading.Lock()
        self._engines: dict[str, _Engine] = {}
        #: trace id -> span id -> the held record
        self._index: dict[str, dict[str, _Held]] = {}
        self._order = 0
        #: records refused, by why: ``invalid`` (a finish or slowness not finite), ``future``
        #: (finishes past clock() + one window), ``engines`` (over max_engines), ``duplicate``
        #: (that span is already held)
        self.refused: dict[str, int] = {"invalid": 0, "future": 0, "engines": 0, "duplicate": 0}

    def add(self, record: RequestRecord) -> bool:
        """Offer one finished request; True when it is kept somewhere."""
        rank = slowness(record)
        with self._lock:
            if not math.isfinite(record.finish) or (rank is not None and not math.isfinite(rank)):
                self.refused["invalid"] += 1
                return False
            if record.finish > self._clock() + self.window_s:
                self.refused["future"] += 1
                return False
            spans = self._index.get(record.trace_id)
            if spans is not None and record.span_id in spans:
                self.refused["duplicate"] += 1
                return False
            engine = self._engines.get(record.engine)
            if engine is None:
                if len(self._engines) >= self.max_engines:
                    self.refused["engines"] += 1
                    return False
                engine = self._engines[record.engine] = _Engine()
            kept = self._into_windows(engine, record)
            kept = self._into_sample(engine, record) or kept
            return kept

    def slowest(self, n: int, engine: str | None = None) -> list[RequestRecord]:
        """The ``n`` slowest requests held (of one engine, or all), slowest first: the windows' slowest
        and the uniform sample together, each once. The windows alone hold only ``k`` a window, so a
        caller asking for more than they hold (every slow request of the last minutes) is given the
        sampled ones below them too; a request with no e2e and no TTFT is not ranked."""
        with self._lock:
            names = [engine] if engine is not None else list(self._engines)
            held: dict[tuple[str, str], RequestRecord] = {}
            for keep in (self._engines[name] for name in names if name in self._engines):
                for record in [r for heap in keep.windows.values() for _, _, r in heap] + keep.sample:
                    held[(record.trace_id, record.span_id)] = record
        ranked = [(rank, r) for r in held.values() if (rank := slowness(r)) is not None]
        ranked.sort(key=lambda item: (-item[0], -item[1].finish))
        return [record for _, record in ranked[: max(n, 0)]]

    def sample(self, engine: str | None = None) -> list[RequestRecord]:
        """The uniform sample (of one engine, or every engine's), in arrival order."""
        with self._lock:
            names = [engine] if engine is not None else list(self._engines)
            out = [r for name in names if name in self._engines for r in self._engines[name].sample]
        return sorted(out, key=lambda r: r.arrival)

    def by_trace_id(self, trace_id: str) -> list[RequestRecord]:
        """The held requests of one trace (lowercase hex), in arrival order; [] when none."""
        with self._lock:
            spans = self._index.get(trace_id.lower())
            out = [held.record for held in spans.values()] if spans else []
        return sorted(out, key=lambda r: r.arrival)

    def seen(self, engine: str) -> int:
        """How many requests of ``engine`` were offered to its sample."""
        with self._lock:
            keep = self._engines.get(engine)
            return keep.seen if keep is not None else 0

    def engines(self) -> list[str]:
        with self._lock:
            return list(self._engines)

    def __len__(self) -> int:
        """Distinct requests held (each once, however many places keep it)."""
        with self._lock:
            return sum(len(spans) for spans in self._index.values())

    # -- under the lock ----------------------------------------------------------------------

    def _into_windows(self, engine: _Engine, record: RequestRecord) -> bool:
        key = slowness(record)
        if key is None or self.k == 0:
            return False
        number = int(record.finish // self.window_s)
        if engine.newest is None or number > engine.newest:
            engine.newest = number
            for old in [w for w in engine.windows if w <= number - self.windows]:
                for _, _, gone in engine.windows.pop(old):
                    self._release(gone)
        if number <= engine.newest - self.windows:
            return False
        heap = engine.windows.setdefault(number, [])
        self._order += 1
        item = (key, -self._order, record)
        if len(heap) < self.k:
            heapq.heappush(heap, item)
        elif item > heap[0]:
            _, _, gone = heapq.heapreplace(heap, item)
            self._release(gone)
        else:
            return False
        self._hold(record)
        return True

    def _into_sample(self, engine: _Engine, record: RequestRecord) -> bool:
        engine.seen += 1
        if self.sample_size == 0:
            return False
        if len(engine.sample) < self.sample_size:
            engine.sample.append(record)
        else:
            slot = self._rng.randrange(engine.seen)
            if slot >= self.sample_size:
                return False
            self._release(engine.sample[slot])
            engine.sample[slot] = record
        self._hold(record)
        return True

    def _hold(self, record: RequestRecord) -> None:
        self._index.setdefault(record.trace_id, {}).setdefault(record.span_id, _Held(record)).places += 1

    def _release(self, record: RequestRecord) -> None:
        spans = self._index.get(record.trace_id)
        held = spans.get(record.span_id) if spans is not None else None
        if spans is None or held is None:
            return
        held.places -= 1
        if held.places <= 0:
            del spans[record.span_id]
            if not spans:
                del self._index[record.trace_id]
