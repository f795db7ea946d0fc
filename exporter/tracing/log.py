"""The request log of ``serve``: spans in, explained requests out (``GET /requests``, metrics).

The receiver (exporter/tracing/receiver.py) hands each OTLP export to :meth:`RequestLog.consume`;
the normaliser turns its spans into records (exporter/tracing/normalize.py); each record is
joined at once with the verdict history over its life (exporter/tracing/join.py: the history
is bounded in time, so a record is explained while its life is still held) and kept in the
bounded reservoir (exporter/tracing/reservoir.py). Publishing is a source of its own
(``TracingSource``, name ``tracing``): per engine and phase one histogram whose buckets carry
an exemplar with the trace id of their latest request, the requests by the cause named over
their life, the receiver's and the normaliser's counters.

Bounded: the reservoir and the normaliser's buffers (their docstrings), histograms for at most
``MAX_ENGINES`` engines, at most one exemplar per bucket.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from exporter.samples import BucketExemplar, HistogramSample, Point, Sample, SampleResult
from exporter.schema import TRACE_PHASES
from exporter.tracing.forward import SpanForwarder
from exporter.tracing.history import Moment, VerdictHistory
from exporter.tracing.join import Explanation, explain
from exporter.tracing.normalize import SpanNormalizer
from exporter.tracing.record import RequestRecord
from exporter.tracing.reservoir import RequestReservoir

if TYPE_CHECKING:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

#: bucket bounds of llm_traced_request_seconds: 5 ms to 5 min, about doubling (TTFT and queue
#: waits of interactive serving sit at the low end, end-to-end of long generations at the top)
BOUNDS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
MAX_ENGINES = 64
#: the most (engine, layer, cause) series of llm_traced_requests_total
MAX_CAUSE_SERIES = 1024


@dataclass(frozen=True)
class ExplainedRecord(RequestRecord):
    """A record with what the layers did while it lived (None until joined)."""

    explanation: Explanation | None = None

    def as_dict(self) -> dict[str, Any]:
        """The ``GET /requests`` shape of one request (keys are a contract: docs/tracing.md)."""
        ex = self.explanation
        return {
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "request_id": self.request_id,
            "engine": self.engine,
            "model": self.model,
            "arrival": self.arrival,
            "ttft_seconds": self.ttft_seconds,
            "queue_seconds": self.queue_seconds,
            "prefill_seconds": self.prefill_seconds,
            "decode_seconds": self.decode_seconds,
            "e2e_seconds": self.e2e_seconds,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "primary": ex.as_dict()["primary"] if ex else None,
            "sentence": ex.sentence if ex else "",
            "layers": ex.figures if ex else {},
            "degraded_share": ex.degraded_share if ex else None,
        }


@dataclass
class _Histogram:
    counts: list[float] = field(default_factory=lambda: [0.0] * (len(BOUNDS) + 1))
    total: float = 0.0
    exemplars: dict[int, BucketExemplar] = field(default_factory=dict)

    def observe(self, value: float, trace_id: str, at: float) -> None:
        i = next((i for i, le in enumerate(BOUNDS) if value <= le), len(BOUNDS))
        self.counts[i] += 1
        self.total += value
        le = BOUNDS[i] if i < len(BOUNDS) else float("inf")
        self.exemplars[i] = BucketExemplar(le, trace_id, value, at)

    def sample(self, labels: dict[str, str]) -> HistogramSample:
        cumulative, running = [], 0.0
        for le, n in zip((*BOUNDS, float("inf")), self.counts, strict=True):
            running += n
            cumulative.append((le, running))
        ordered = tuple(self.exemplars[i] for i in sorted(self.exemplars))
        return HistogramSample("llm_traced_request_seconds", labels, tuple(cumulative), self.total, running, ordered)


class RequestLog:
    """Spans -> explained, kept requests; what ``/requests`` and the ``tracing`` source read."""

    def __init__(
        self,
        normalizer: SpanNormalizer,
        history: VerdictHistory,
        reservoir: RequestReservoir | None = None,
        *,
        slack_s: float = 1.0,
        forwarder: SpanForwarder | None = None,
    ) -> None:
        self.normalizer = normalizer
        #: --otlp-forward: every export re-sent with the verdict on its request spans
        self.forwarder = forwarder
        self.history = history
        self.reservoir = reservoir or RequestReservoir()
        #: a cycle judges what was sampled up to it: read one cycle past the request's end
        self.slack_s = slack_s
        self._lock = threading.Lock()
        self._histograms: dict[tuple[str, str], _Histogram] = {}
        self._by_cause: dict[tuple[str, str, str], float] = {}

    def consume(self, request: ExportTraceServiceRequest) -> None:
        """The receiver's sink: normalise, explain, keep, count (and forward, with the verdict)."""
        explained = self.add(self.normalizer.records(request))
        if self.forwarder is not None:
            self.forwarder.offer(request, {(r.trace_id, r.span_id): r.explanation for r in explained if r.explanation})

    def add(self, records: Sequence[RequestRecord]) -> list[ExplainedRecord]:
        out = []
        for record in records:
            explained = ExplainedRecord(**record.__dict__, explanation=explain(record, self.moments_of(record)))
            self.reservoir.add(explained)
            self._count(explained)
            out.append(explained)
        return out

    def moments_of(self, record: RequestRecord) -> list[Moment]:
        """The cycles over the request's life: from its arrival to one cycle past its end (a cycle judges
        what was sampled up to it). A request shorter than a cycle may see none there, as it is received
        a moment after it ends: it is then told the cycle in force when it arrived (the latest at most
        one cycle before), not "nothing recorded" (most requests of a healthy service are such)."""
        moments = self.history.between(record.engine, record.arrival, record.finish + self.slack_s)
        if moments:
            return moments
        return self.history.between(record.engine, record.arrival - self.slack_s, record.arrival)[-1:]

    def flush(self) -> None:
        """Records the normaliser held back (an SGLang request span whose slices never came)."""
        self.add(self.normalizer.flush())

    def _count(self, r: ExplainedRecord) -> None:
        phases = {**r.phases(), "ttft": r.ttft_seconds, "e2e": r.e2e_seconds}
        primary = r.explanation.primary if r.explanation else None
        key = (r.engine, *(primary or ("", "")))
        with self._lock:
            engines = {e for e, _ in self._histograms}
            if r.engine not in engines and len(engines) >= MAX_ENGINES:
                return
            for phase, value in phases.items():
                if value is not None:
                    self._histograms.setdefault((r.engine, phase), _Histogram()).observe(value, r.trace_id, r.finish)
            if key in self._by_cause or len(self._by_cause) < MAX_CAUSE_SERIES:
                self._by_cause[key] = self._by_cause.get(key, 0.0) + 1

    def points(self) -> list[Point]:
        with self._lock:
            points: list[Point] = [
                h.sample({"engine": engine, "phase": phase})
                for (engine, phase), h in sorted(
                    self._histograms.items(), key=lambda kv: (kv[0][0], TRACE_PHASES.index(kv[0][1]))
                )
            ]
            points += [
                Sample("llm_traced_requests_total", {"engine": e, "layer": layer, "cause": cause}, n)
                for (e, layer, cause), n in sorted(self._by_cause.items())
            ]
        points += [Sample("llm_trace_spans_ignored_total", {"reason": k}, float(v)) for k, v in self.normalizer.dropped().items()]
        if self.forwarder is not None:
            points += self.forwarder.points()
        points.append(Sample("llm_traced_requests_held", {}, float(len(self.reservoir))))
        return points

    def query(
        self, *, slowest: int | None = None, engine: str | None = None, trace_id: str | None = None
    ) -> list[dict[str, Any]]:
        """Requests as ``GET /requests`` returns them: by trace id, else the slowest ``slowest``
        (every engine or one), else the uniform sample (newest first)."""
        if trace_id is not None:
            found = [r for r in self.reservoir.by_trace_id(trace_id) if engine is None or r.engine == engine]
        elif slowest is not None:
            found = self.reservoir.slowest(slowest, engine)
        else:
            found = sorted(self.reservoir.sample(engine), key=lambda r: -r.finish)
        return [r.as_dict() if isinstance(r, ExplainedRecord) else ExplainedRecord(**r.__dict__).as_dict() for r in found]


class TracingSource:
    """Source ``tracing``: the receiver's, the normaliser's and the request log's series."""

    name = "tracing"

    def __init__(self, log: RequestLog, receiver_points: Callable[[], list[Point]], interval: float) -> None:
        self.log = log
        self._receiver_points = receiver_points
        self.interval = interval
        self.timeout = min(2.0, 0.9 * interval)

    def sample(self) -> SampleResult:
        self.log.flush()
        return SampleResult([*self._receiver_points(), *self.log.points()])

    def close(self) -> None:
        """The receiver is stopped by serve (it owns the listening sockets)."""
