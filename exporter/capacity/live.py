"""The live load and workload of one engine, over a short window of its own series.

Why a window per engine: the used ratio's second half is a rate (finished
requests per second) and the drift compares mean lengths, both deltas over
time; cutting the store's snapshot to one engine's series first lets the
window's histogram arithmetic (exporter/diagnosis/window.py) work unfiltered.

* in flight: requests running plus waiting (``llm_scheduler_requests_*``): the
  concurrency the clients hold, queued ones included (a queue is load the
  engine has not served yet, not load it does not have);
* finished rate: ``rate(llm_requests_finished_total)`` over the window;
* offered rate: the finished rate plus the growth of the requests in flight over
  the window (issue 32): what the clients ask for, whether the engine serves it
  or queues it. A bottleneck that slows the engine lowers the finished rate by
  exactly what it adds to the queue's growth, so its own queue does not raise
  the offered rate; only more arrivals do. A draining queue lowers it (never
  below 0);
* output tokens/s: ``rate(llm_generation_tokens_total)`` over the window, what the
  engine generates now (its per-GPU figure against a profile's: exporter/capacity/source.py);
* mean lengths: the engine's prompt / generation token histograms
  (``llm_request_prompt_tokens``, ``llm_request_generation_tokens``: sum over
  count), else its token counters over its finished requests. llama.cpp has
  neither histograms nor a finished-request counter: no rate and no drift there.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.diagnosis.finite import finite_or_none, ratio, total
from exporter.diagnosis.window import Window
from exporter.schema import reduce_series
from exporter.store import Snapshot

RUNNING = "llm_scheduler_requests_running"
WAITING = "llm_scheduler_requests_waiting"
FINISHED = "llm_requests_finished_total"
PROMPT_HIST = "llm_request_prompt_tokens"
OUTPUT_HIST = "llm_request_generation_tokens"
PROMPT_TOTAL = "llm_prompt_tokens_total"
OUTPUT_TOTAL = "llm_generation_tokens_total"
#: the families the live figures read (the window keeps only these)
READS = frozenset({RUNNING, WAITING, FINISHED, PROMPT_HIST, OUTPUT_HIST, PROMPT_TOTAL, OUTPUT_TOTAL})
#: default look-back of the rate and the mean lengths
WINDOW_SECONDS = 30.0


@dataclass(frozen=True)
class LiveLoad:
    """What one engine carries now (None: not measurable from what it publishes)."""

    in_flight: float | None
    finished_per_second: float | None
    prompt_tokens_mean: float | None
    output_tokens_mean: float | None
    #: finished per second plus the in-flight growth per second (None: no finished rate, or one snapshot)
    offered_per_second: float | None = None
    #: generated tokens per second over the window (None: no token counter, or one snapshot)
    output_tokens_per_second: float | None = None


def engine_snapshot(snap: Snapshot, server: str) -> Snapshot:
    """``snap`` cut to the series of ``server`` that the live figures read."""
    points = [p for p in snap.points if p.name in READS and p.labels.get("server") == server]
    return Snapshot(snap.timestamp, points, {}, monotonic=snap.monotonic)


def _in_flight(snap: Snapshot) -> float | None:
    """Running plus waiting in ``snap``; None where neither is published or the sum is not finite
    (an engine's 1.7e308 running plus as many waiting overflows: unknown, never +Inf, issue 37)."""
    parts = [reduce_series(name, snap.values(name)) for name in (RUNNING, WAITING)]
    return total([p for p in parts if p is not None])


class LiveWindow:
    """The recent snapshots of one engine and the figures they support."""

    def __init__(self, seconds: float = WINDOW_SECONDS) -> None:
        self.window = Window(seconds, keep=lambda name: name in READS)

    def add(self, snap: Snapshot, server: str) -> LiveLoad:
        self.window.add(engine_snapshot(snap, server))
        return self.load()

    def load(self) -> LiveLoad:
        w = self.window
        snap = w.latest
        if snap is None:
            return LiveLoad(None, None, None, None)
        in_flight = _in_flight(snap)
        finished = finite_or_none(w.counter_delta(FINISHED))
        rate = finite_or_none(w.rate(FINISHED)) if finished is not None else None
        return LiveLoad(
            in_flight,
            rate,
            self._mean(PROMPT_HIST, PROMPT_TOTAL, finished),
            self._mean(OUTPUT_HIST, OUTPUT_TOTAL, finished),
            self._offered(rate),
            finite_or_none(w.rate(OUTPUT_TOTAL)),
        )

    def _offered(self, finished_rate: float | None) -> float | None:
        """The finished rate plus the in-flight growth over the window (growth 0 where in flight is unknown)."""
        if finished_rate is None:
            return None
        known = [(s.monotonic, n) for s in self.window.snapshots if (n := _in_flight(s)) is not None]
        growth = 0.0
        if len(known) >= 2 and known[-1][0] > known[0][0]:
            growth = (known[-1][1] - known[0][1]) / (known[-1][0] - known[0][0])
        return finite_or_none(max(0.0, finished_rate + growth))

    def _mean(self, hist: str, counter: str, finished: float | None) -> float | None:
        """Tokens per request over the window: the histogram's sum over its count, else the counter over finished."""
        count = self.window.histogram_delta_count(hist)
        if count:
            tokens = self.window.histogram_delta_sum(hist)
            return ratio(tokens, count) if tokens is not None and tokens >= 0 else None
        tokens = self.window.counter_delta(counter)
        if finished and tokens is not None and tokens >= 0:
            return ratio(tokens, finished)
        return None


__all__ = ["READS", "WINDOW_SECONDS", "LiveLoad", "LiveWindow", "engine_snapshot"]
