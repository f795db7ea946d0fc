"""What the OTLP trace receiver accepts, and the counters of what it did not.

Why limits at all: the receiver listens on the network of an inference node, next to
the engines it watches. Whatever a client sends (a misconfigured engine exporting
every span it has, a retry storm, a hostile peer) must cost a bounded amount of memory
and CPU, and every span not kept must be counted, so "my traces are missing" has an
answer on /metrics instead of in a debugger.

What is stored: counters only (integers per protocol and reason), never a span or a
client address.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from exporter.samples import Sample
from exporter.schema import TRACE_PROTOCOLS, TRACE_REQUEST_REJECT_REASONS, TRACE_SPAN_DROP_REASONS

SPANS_RECEIVED = "llm_trace_spans_received_total"
SPANS_DROPPED = "llm_trace_spans_dropped_total"
REQUESTS_REJECTED = "llm_trace_requests_rejected_total"

MIB = 1024 * 1024
#: tokens a take may be short by (float rounding of clock differences), never a span's worth
EPSILON = 1e-6


@dataclass(frozen=True)
class ReceiverLimits:
    """The receiver's bounds; every default with its reason.

    - ``max_body_bytes`` 4 MiB: gRPC's own default message limit, so an OTLP exporter that
      talks to a collector today fits; an OpenTelemetry SDK batch (512 spans of ~1 KiB) is
      an eighth of it. A gzip body is inflated under the same cap (the inflated size counts).
    - ``spans_per_second`` 2,000 with a burst of ``burst_spans`` 4,096: a busy node serves
      on the order of 100 requests a second and an engine writes one to a few spans per
      request; 2,000/s leaves headroom while bounding what the consumer (normalise, keep)
      must do. The burst holds two maximal requests, so one large batch after a quiet spell
      is never refused. Over the rate a request is refused whole with a retry hint (HTTP 429
      and Retry-After; gRPC RESOURCE_EXHAUSTED with RetryInfo), so a well-behaved exporter
      sends it again later instead of losing it.
    - ``max_spans_per_request`` 2,048: four times the SDK's default batch
      (``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` 512); spans past it are dropped (too_many_spans).
    - ``max_attributes_per_span`` 128: the SDK's default attribute count limit
      (``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT``); a span over it did not come from an engine's
      default tracer and is dropped (too_many_attributes).
    - ``max_concurrent_requests`` 4 per protocol: requests being read, decoded or handed on
      at once. With the body cap this bounds the memory in use to a few tens of MiB (a
      decoded message is a few times its wire size). Over it: HTTP 503 with Retry-After;
      gRPC's own RESOURCE_EXHAUSTED.
    - ``workers`` 2 per protocol: the threads that decode and call the consumer (the GIL
      makes more buy nothing for protobuf decoding).
    - ``max_connections`` 64: open OTLP/HTTP connections (uvicorn's ``limit_concurrency``:
      past it, 503). Engines keep one or two connections each.
    - ``read_timeout`` 30 s: an OTLP/HTTP body must arrive within it (408), so a slow sender
      cannot hold one of the ``max_concurrent_requests`` places.
    - ``clock``: monotonic seconds, for the token bucket and the log throttle (tests pass a
      fake one; nothing here sleeps).
    """

    max_body_bytes: int = 4 * MIB
    spans_per_second: float = 2000.0
    burst_spans: int = 4096
    max_spans_per_request: int = 2048
    max_attributes_per_span: int = 128
    max_concurrent_requests: int = 4
    workers: int = 2
    max_connections: int = 64
    read_timeout: float = 30.0
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)

    def __post_init__(self) -> None:
        for name in (
            "max_body_bytes",
            "burst_spans",
            "max_spans_per_request",
            "max_attributes_per_span",
            "max_concurrent_requests",
            "workers",
            "max_connections",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"receiver limits: {name} must be a positive integer, got {value!r}")
        for name in ("spans_per_second", "read_timeout"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not (0 < value < math.inf):
                raise ValueError(f"receiver limits: {name} must be a positive number, got {value!r}")
        if self.burst_spans < self.max_spans_per_request:
            raise ValueError(
                f"receiver limits: burst_spans ({self.burst_spans}) must be at least max_spans_per_request "
                f"({self.max_spans_per_request}), or a full request could never pass"
            )
        if self.workers > self.max_concurrent_requests:
            raise ValueError(
                f"receiver limits: workers ({self.workers}) must not exceed max_concurrent_requests "
                f"({self.max_concurrent_requests})"
            )


class TokenBucket:
    """Spans per second with a burst; all-or-nothing takes, thread-safe, on an injectable clock."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._rate = float(rate)
        self._burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        if now > self._at:
            self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = max(self._at, now)

    def available(self) -> float:
        with self._lock:
            self._refill()
            return self._tokens

    def take(self, n: int) -> float:
        """Take ``n`` tokens: 0.0 when taken, else the seconds until ``n`` would be there (nothing taken)."""
        with self._lock:
            self._refill()
            if self._tokens + EPSILON >= n:
                self._tokens = max(0.0, self._tokens - n)
                return 0.0
            return (n - self._tokens) / self._rate


def retry_after_seconds(wait: float) -> int:
    """A Retry-After value: whole seconds, at least 1."""
    return max(1, math.ceil(wait))


class ReceiverCounters:
    """The receiver's only state that outlives a request: three counter families, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._received = dict.fromkeys(TRACE_PROTOCOLS, 0)
        self._dropped = dict.fromkeys(TRACE_SPAN_DROP_REASONS, 0)
        self._rejected = {(p, r): 0 for p in TRACE_PROTOCOLS for r in TRACE_REQUEST_REJECT_REASONS}

    def received(self, protocol: str, spans: int) -> None:
        with self._lock:
            self._received[protocol] += spans

    def dropped(self, reason: str, spans: int) -> None:
        if reason not in self._dropped:
            raise ValueError(f"unknown span drop reason {reason!r}")
        with self._lock:
            self._dropped[reason] += spans

    def rejected(self, protocol: str, reason: str) -> None:
        if (protocol, reason) not in self._rejected:
            raise ValueError(f"unknown request reject reason {reason!r} for {protocol!r}")
        with self._lock:
            self._rejected[(protocol, reason)] += 1

    def snapshot(self) -> tuple[dict[str, int], dict[str, int], dict[tuple[str, str], int]]:
        with self._lock:
            return dict(self._received), dict(self._dropped), dict(self._rejected)

    def points(self) -> list[Sample]:
        """Every series, zeros included (a rate over a counter that appears late misses its first step)."""
        received, dropped, rejected = self.snapshot()
        out = [Sample(SPANS_RECEIVED, {"protocol": p}, float(n)) for p, n in received.items()]
        out += [Sample(SPANS_DROPPED, {"reason": r}, float(n)) for r, n in dropped.items()]
        out += [Sample(REQUESTS_REJECTED, {"protocol": p, "reason": r}, float(n)) for (p, r), n in rejected.items()]
        return out
