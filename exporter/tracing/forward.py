"""``--otlp-forward URL``: the spans received, re-exported to the user's tracing backend with the verdict added.

Why: a slow request found in Tempo or Jaeger should carry its bottleneck there, not only in
``GET /requests``. Each request span that became a record gets three attributes,
``llm.bottleneck.layer``, ``llm.bottleneck.cause`` (absent when no cause was named while the
request lived) and ``llm.bottleneck.sentence``; every other span is forwarded as it came. The
export is OTLP/HTTP protobuf (``POST URL``; a URL without a path gets ``/v1/traces``), what an
OpenTelemetry Collector's ``otlphttp`` receiver takes (deploy/otel-collector/ shows one that
sends the engines' spans to both the exporter and the backend).

Bounded and off the receiver's path: exports wait in a queue of ``max_queue`` requests, sent by
one thread with ``timeout`` seconds each; a full queue drops the new export, a failed send is not
retried (the backend's own collector retries; here a backlog would only grow). Every outcome is
counted: ``llm_trace_spans_forwarded_total{outcome}`` (sent, failed, dropped).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import requests

from exporter.engines.urls import plain_http_url
from exporter.samples import Sample
from exporter.schema import TRACE_FORWARD_OUTCOMES
from exporter.tracing.join import Explanation

if TYPE_CHECKING:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

log = logging.getLogger(__name__)

DEFAULT_MAX_QUEUE = 64
DEFAULT_TIMEOUT_S = 5.0
#: the most characters of the sentence attribute (a backend's attribute limits are often 4 KiB)
MAX_SENTENCE = 1000
_LOG_EVERY_S = 60.0


def parse_forward_url(value: str) -> str:
    """An http(s) OTLP/HTTP URL, ``/v1/traces`` added when it has no path; ValueError otherwise."""
    return plain_http_url(value, "OTLP/HTTP", "/v1/traces")


def annotate(request: ExportTraceServiceRequest, explained: Mapping[tuple[str, str], Explanation]) -> int:
    """Add the verdict attributes to the request spans ``explained`` names ((trace id, span id) in hex),
    in place; returns the number of spans in the request."""
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    spans = 0
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans += 1
                ex = explained.get((span.trace_id.hex(), span.span_id.hex()))
                if ex is None:
                    continue
                if ex.primary is not None:
                    span.attributes.append(KeyValue(key="llm.bottleneck.layer", value=AnyValue(string_value=ex.primary[0])))
                    span.attributes.append(KeyValue(key="llm.bottleneck.cause", value=AnyValue(string_value=ex.primary[1])))
                sentence = ex.sentence[:MAX_SENTENCE]
                span.attributes.append(KeyValue(key="llm.bottleneck.sentence", value=AnyValue(string_value=sentence)))
    return spans


class SpanForwarder:
    """One sending thread behind a bounded queue (see the module docstring)."""

    def __init__(self, url: str, *, timeout: float = DEFAULT_TIMEOUT_S, max_queue: int = DEFAULT_MAX_QUEUE) -> None:
        self.url = parse_forward_url(url)
        self.timeout = timeout
        self._queue: queue.Queue[tuple[bytes, int] | None] = queue.Queue(maxsize=max_queue)
        self._counts = dict.fromkeys(TRACE_FORWARD_OUTCOMES, 0)
        self._lock = threading.Lock()
        self._session = requests.Session()
        self._thread: threading.Thread | None = None
        self._last_log = -_LOG_EVERY_S

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="otlp-forward", daemon=True)
        self._thread.start()

    def offer(self, request: ExportTraceServiceRequest, explained: Mapping[tuple[str, str], Explanation]) -> None:
        """Annotate a copy of ``request`` and queue it; a full queue drops it (counted)."""
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        copy = ExportTraceServiceRequest()
        copy.CopyFrom(request)
        spans = annotate(copy, explained)
        if spans == 0:
            return
        try:
            self._queue.put_nowait((copy.SerializeToString(), spans))
        except queue.Full:
            self._count("dropped", spans)

    def stop(self, grace: float = 2.0) -> None:
        """Stop after what is queued was tried, within ``grace`` plus one send's timeout."""
        if self._thread is None:
            return
        deadline = time.monotonic() + grace
        while not self._queue.empty() and time.monotonic() < deadline:
            time.sleep(0.05)
        while True:  # what is left is dropped: make room for the stop mark
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                self._count("dropped", item[1])
        self._queue.put(None)
        self._thread.join(self.timeout + 1.0)
        self._session.close()

    def points(self) -> list[Sample]:
        with self._lock:
            return [Sample("llm_trace_spans_forwarded_total", {"outcome": k}, float(v)) for k, v in self._counts.items()]

    def _count(self, outcome: str, spans: int) -> None:
        with self._lock:
            self._counts[outcome] += spans

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            body, spans = item
            try:
                answer = self._session.post(
                    self.url, data=body, headers={"Content-Type": "application/x-protobuf"}, timeout=self.timeout
                )
                ok = 200 <= answer.status_code < 300
                why = f"HTTP {answer.status_code}"
            except requests.RequestException as err:
                ok, why = False, type(err).__name__
            self._count("sent" if ok else "failed", spans)
            if not ok and time.monotonic() - self._last_log >= _LOG_EVERY_S:
                self._last_log = time.monotonic()
                log.warning("OTLP forward to %s failed (%s); further failures are counted, logged once a minute", self.url, why)
