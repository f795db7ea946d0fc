"""The OTLP trace receiver of ``serve``: OTLP/gRPC and OTLP/HTTP, bounded (docs/tracing.md, "Receiver").

Engines export their request spans here; the receiver checks each export request against
``ReceiverLimits`` (exporter/tracing/limits.py), removes the spans it does not keep, and hands
the rest, as the OpenTelemetry project's own ``ExportTraceServiceRequest``, to a sink (the
normaliser). Decoding is the OpenTelemetry classes' and protobuf's (``FromString``, and
``json_format`` for OTLP/JSON); nothing here reads the wire format by hand.

Why these servers:

- OTLP/gRPC: ``grpc.server`` with a thread pool of ``limits.workers`` and
  ``maximum_concurrent_rpcs`` = ``limits.max_concurrent_requests``. The Export method is
  registered with no deserializer, under the service name of the OpenTelemetry descriptor,
  so the handler receives the bytes: a body over the cap and an undecodable one are then
  counted (``llm_trace_requests_rejected_total``) instead of vanishing inside gRPC, which
  is why ``add_TraceServiceServicer_to_server`` (it would decode first) is not used. gRPC's
  own ``max_receive_message_length`` is twice the cap, so what gRPC alone refuses (and
  cannot count) is only the grossly oversized. ``grpc.so_reuseport`` is off, so a second
  receiver on a used port fails at start instead of sharing it.
- OTLP/HTTP: a small ASGI app served by its own ``uvicorn.Server`` on a thread of its own,
  like the main server (exporter/server.py) but on its own event loop, so a flood of spans
  never delays /metrics. Why not ``http.server``: uvicorn already parses HTTP/1.1 with
  keep-alive and chunked bodies (which OTLP exporters use), applies flow control to the
  body (it is read in chunks, never buffered beyond the cap), serves the web config's TLS
  context exactly as the main server does (``TLSSettings.uvicorn_kwargs``), and bounds
  connections (``limit_concurrency``); and the basic-auth verifier
  (exporter/basicauth.py) is async, made for an event loop. Why not FastAPI: one route
  whose body must be streamed under a cap; FastAPI would add nothing but its stack. Bodies
  are read under ``limits.read_timeout``; decoding and the sink run on a pool of
  ``limits.workers`` threads, at most ``limits.max_concurrent_requests`` requests at once
  (503 with Retry-After past it).

Answers follow the OTLP specification: HTTP 200 with an ``ExportTraceServiceResponse`` in
the request's content type (``partial_success`` with ``rejected_spans`` and an
``error_message`` when spans were dropped); 400 for a body that does not decode; 413 over
the byte cap; 415 for another content type or encoding; 429 with Retry-After over the span
rate; 401 without valid credentials; 503 with Retry-After when busy; 404 / 405 otherwise.
Error bodies are a ``google.rpc.Status``. gRPC: OK with the same response; INVALID_ARGUMENT,
RESOURCE_EXHAUSTED (over the rate: with a ``google.rpc.RetryInfo``, so exporters retry),
UNAUTHENTICATED, UNAVAILABLE.

When the sink raises, its spans are counted as dropped (reason ``internal``), the failure is
logged at most once a minute, and the client gets 200 / OK with ``partial_success`` naming
every span of the request as rejected. Why not 500 / INTERNAL: both tell the client the
spans were not kept and neither is retried by OTLP exporters, but partial success says how
many, keeps the engine's exporter out of its error path (no backoff, no "export failed" log
storm on the engine side for a fault of ours), and is what the specification provides for
a server that accepted the request and could not keep its data.

Security: TLS on both protocols from the web config's ``tls_server_config``. OTLP/gRPC takes
the certificate, key and client CA files through ``grpc.ssl_server_credentials``; gRPC's
Python API cannot set TLS versions or TLS 1.2 cipher suites (it serves TLS 1.2 and 1.3), so
a ``min_version``, ``max_version`` or ``cipher_suites`` it cannot honour is refused at start
(ValueError naming the key), as exporter/tlscontext.py refuses what Python's ``ssl``
cannot do. gRPC can only require and verify a client certificate or not ask for one:
``VerifyClientCertIfGiven`` asks for none (a client without a certificate is accepted in
either case). Basic auth (the web config's ``basic_auth_users``) is checked on both: the
``Authorization`` header on HTTP, the ``authorization`` metadata on gRPC, by the same
``BasicAuthVerifier`` (its success cache answers an authorised exporter at once; a
password spray over gRPC holds the gRPC workers while its checks run, so it can slow the
gRPC receiver, never the main server).

The sink is called from the receiver's worker threads (both protocols'), possibly at once:
it must be thread-safe.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import logging
import math
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import grpc
from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, duration_pb2, json_format, message_factory
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceServicer
from opentelemetry.proto.trace.v1 import trace_pb2

from exporter.basicauth import BasicAuthVerifier, Verdict
from exporter.listen import bind_tcp
from exporter.samples import Sample
from exporter.tlscontext import TLSSettings
from exporter.tracing.limits import EPSILON, ReceiverCounters, ReceiverLimits, TokenBucket, retry_after_seconds

log = logging.getLogger("exporter.tracing")

Sink = Callable[[ExportTraceServiceRequest], None]

#: the OTLP/HTTP path of traces (OTLP specification)
TRACES_PATH = "/v1/traces"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
#: the service and method the OpenTelemetry descriptor names (what TraceServiceStub calls)
SERVICE = trace_service_pb2.DESCRIPTOR.services_by_name["TraceService"].full_name
#: gRPC refuses, uncounted, only messages over this many times the byte cap (see module doc)
GRPC_MESSAGE_SLACK = 2
#: seconds start() waits for the HTTP server's thread to serve
START_TIMEOUT = 10.0
#: a failing sink is logged at most once per this many seconds
LOG_EVERY = 60.0

# google.rpc.Status codes
_INVALID_ARGUMENT = 3
_DEADLINE_EXCEEDED = 4
_RESOURCE_EXHAUSTED = 8
_INTERNAL = 13
_UNAVAILABLE = 14
_UNAUTHENTICATED = 16


def _rpc_classes() -> tuple[Any, Any]:
    """``google.rpc.Status`` and ``google.rpc.RetryInfo`` from their published schema.

    Why built here: the OTLP error bodies and gRPC's retry hint are these two messages, whose
    classes live in googleapis-common-protos, not a dependency. Protobuf builds them from
    their descriptors (field numbers and types as in google/rpc/status.proto and
    error_details.proto), in a pool of our own so an installed googleapis package never
    clashes; protobuf encodes them, nothing is hand-written on the wire.
    """
    pool = descriptor_pool.DescriptorPool()
    for dep in (any_pb2, duration_pb2):
        pool.Add(descriptor_pb2.FileDescriptorProto.FromString(dep.DESCRIPTOR.serialized_pb))
    f = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="exporter/tracing/google_rpc.proto",
        package="google.rpc",
        syntax="proto3",
        dependency=["google/protobuf/any.proto", "google/protobuf/duration.proto"],
    )
    status = proto.message_type.add(name="Status")
    status.field.add(name="code", number=1, type=f.TYPE_INT32, label=f.LABEL_OPTIONAL, json_name="code")
    status.field.add(name="message", number=2, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL, json_name="message")
    status.field.add(
        name="details",
        number=3,
        type=f.TYPE_MESSAGE,
        label=f.LABEL_REPEATED,
        type_name=".google.protobuf.Any",
        json_name="details",
    )
    retry = proto.message_type.add(name="RetryInfo")
    retry.field.add(
        name="retry_delay",
        number=1,
        type=f.TYPE_MESSAGE,
        label=f.LABEL_OPTIONAL,
        type_name=".google.protobuf.Duration",
        json_name="retryDelay",
    )
    pool.Add(proto)
    return (
        message_factory.GetMessageClass(pool.FindMessageTypeByName("google.rpc.Status")),
        message_factory.GetMessageClass(pool.FindMessageTypeByName("google.rpc.RetryInfo")),
    )


RpcStatus, RetryInfo = _rpc_classes()


def _status(code: int, message: str, retry_after: float | None = None) -> Any:
    status = RpcStatus(code=code, message=message)
    if retry_after is not None:
        hint = RetryInfo()
        hint.retry_delay.FromTimedelta(datetime.timedelta(seconds=retry_after_seconds(retry_after)))
        status.details.add().Pack(hint)
    return status


# --------------------------------------------------------------------------- addresses


def parse_address(value: str, what: str) -> tuple[str, int]:
    """HOST:PORT (``[v6]:PORT``; an empty host is every IPv4 interface; port 0: the kernel picks)."""
    host, sep, port = str(value).rpartition(":")
    if not sep or not port.isascii() or not port.isdigit() or len(port) > 5 or int(port) > 65535:
        raise ValueError(f"{what}: expected HOST:PORT with a port 0-65535, got {value!r}")
    host = host.strip("[]") or "0.0.0.0"
    if not host.isascii() or not host.isprintable() or " " in host or len(host) > 253:
        raise ValueError(f"{what}: expected HOST:PORT with an IP address or a DNS name, got {value!r}")
    return host, int(port)


def _bind(host: str, port: int, address: str, what: str) -> socket.socket:
    """A bound TCP socket (exporter/listen.py); OSError naming the address and the receiver."""
    return bind_tcp(host, port, f"{address} ({what})")


# --------------------------------------------------------------------------- decoding


def decode_protobuf(body: bytes) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    return request


#: OTLP/JSON writes these bytes fields as hex, where protobuf's JSON mapping expects base64
_HEX_ID_KEYS = ("traceId", "trace_id", "spanId", "span_id", "parentSpanId", "parent_span_id")


def decode_json(body: bytes) -> ExportTraceServiceRequest:
    """OTLP/JSON: protobuf's JSON mapping, except that trace and span ids are hex (the OTLP rule)."""
    doc = json.loads(body)
    for rs in _dicts(doc, "resourceSpans", "resource_spans"):
        for ss in _dicts(rs, "scopeSpans", "scope_spans"):
            for span in _dicts(ss, "spans"):
                _hex_to_base64(span)
                for link in _dicts(span, "links"):
                    _hex_to_base64(link)
    request = ExportTraceServiceRequest()
    json_format.ParseDict(doc, request, ignore_unknown_fields=True)
    return request


def _dicts(parent: Any, *keys: str) -> Iterable[dict[str, Any]]:
    if not isinstance(parent, dict):
        raise ValueError("expected a JSON object")
    for key in keys:
        items = parent.get(key)
        if items is None:
            continue
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise ValueError(f"{key}: expected a list of objects")
        return items
    return ()


def _hex_to_base64(obj: dict[str, Any]) -> None:
    for key in _HEX_ID_KEYS:
        value = obj.get(key)
        if isinstance(value, str):
            obj[key] = base64.b64encode(bytes.fromhex(value)).decode("ascii")


# --------------------------------------------------------------------------- the shared core


@dataclass(frozen=True)
class Outcome:
    """What one decoded request came to: a response, or (rate-limited) seconds to retry after."""

    response: ExportTraceServiceResponse | None
    retry_after: float = 0.0
    message: str = ""


class _Throttled:
    """log.warning at most once per ``every`` seconds (a failing sink must not flood the log)."""

    def __init__(self, clock: Callable[[], float], every: float = LOG_EVERY) -> None:
        self._clock = clock
        self._every = every
        self._last: float | None = None
        self._lock = threading.Lock()

    def warning(self, msg: str, *args: object, exc_info: bool = False) -> None:
        with self._lock:
            now = self._clock()
            if self._last is not None and now - self._last < self._every:
                return
            self._last = now
        log.warning(msg + " (logged at most once a minute)", *args, exc_info=exc_info)


class ReceiverCore:
    """Limits, counters and the sink, shared by both protocols."""

    def __init__(self, sink: Sink, limits: ReceiverLimits) -> None:
        self.sink = sink
        self.limits = limits
        self.counters = ReceiverCounters()
        self.bucket = TokenBucket(limits.spans_per_second, limits.burst_spans, limits.clock)
        self.log = _Throttled(limits.clock)

    def rate_exhausted(self) -> float:
        """Seconds until one span would pass when the budget is empty, else 0 (the body then need not be read)."""
        tokens = self.bucket.available()
        return 0.0 if tokens + EPSILON >= 1 else (1 - tokens) / self.limits.spans_per_second

    def process(self, request: ExportTraceServiceRequest, protocol: str) -> Outcome:
        """Apply the span limits, take the rate, hand the rest to the sink; count everything."""
        limits = self.limits
        kept = too_many_attributes = too_many_spans = 0
        plan: list[tuple[trace_pb2.ResourceSpans, list[tuple[trace_pb2.ScopeSpans, list[trace_pb2.Span]]]]] = []
        for rs in request.resource_spans:
            scopes = []
            for ss in rs.scope_spans:
                keep = []
                for span in ss.spans:
                    if len(span.attributes) > limits.max_attributes_per_span:
                        too_many_attributes += 1
                    elif kept >= limits.max_spans_per_request:
                        too_many_spans += 1
                    else:
                        kept += 1
                        keep.append(span)
                scopes.append((ss, keep))
            plan.append((rs, scopes))
        notes = []
        if too_many_attributes:
            self.counters.dropped("too_many_attributes", too_many_attributes)
            notes.append(f"{too_many_attributes} span(s) over {limits.max_attributes_per_span} attributes dropped")
        if too_many_spans:
            self.counters.dropped("too_many_spans", too_many_spans)
            notes.append(f"{too_many_spans} span(s) past {limits.max_spans_per_request} per request dropped")
        if too_many_attributes or too_many_spans:
            request = _rebuilt(plan)
        if kept:
            wait = self.bucket.take(kept)
            if wait > 0:
                self.counters.dropped("rate_limited", kept)
                message = f"over {limits.spans_per_second:g} spans per second; retry later"
                return Outcome(None, wait, "; ".join([message, *notes]))
            try:
                self.sink(request)
            except Exception as err:  # a fault of ours: counted, logged, never the client's traceback
                self.counters.dropped("internal", kept)
                self.log.warning("trace receiver: the span consumer failed: %r", err, exc_info=True)
                notes.append(f"{kept} span(s) not kept: internal error (see the exporter's log)")
                rejected = too_many_attributes + too_many_spans + kept
                return Outcome(_response(rejected, notes))
            self.counters.received(protocol, kept)
        return Outcome(_response(too_many_attributes + too_many_spans, notes))

    def internal_error(self, err: BaseException) -> None:
        self.log.warning("trace receiver: request failed: %r", err, exc_info=True)


def _rebuilt(
    plan: list[tuple[trace_pb2.ResourceSpans, list[tuple[trace_pb2.ScopeSpans, list[trace_pb2.Span]]]]],
) -> ExportTraceServiceRequest:
    """A request holding only the kept spans (their resource and scope copied; empty ones left out)."""
    out = ExportTraceServiceRequest()
    for rs, scopes in plan:
        if not any(keep for _, keep in scopes):
            continue
        new_rs = out.resource_spans.add()
        new_rs.resource.CopyFrom(rs.resource)
        new_rs.schema_url = rs.schema_url
        for ss, keep in scopes:
            if not keep:
                continue
            new_ss = new_rs.scope_spans.add()
            new_ss.scope.CopyFrom(ss.scope)
            new_ss.schema_url = ss.schema_url
            new_ss.spans.extend(keep)
    return out


def _response(rejected: int, notes: list[str]) -> ExportTraceServiceResponse:
    response = ExportTraceServiceResponse()
    if rejected:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = "; ".join(notes)
    return response


# --------------------------------------------------------------------------- OTLP/gRPC


class _GrpcStatus(grpc.Status):  # type: ignore[misc]  # grpc is untyped
    def __init__(self, code: grpc.StatusCode, details: str, trailing_metadata: tuple[tuple[str, bytes], ...]) -> None:
        self.code = code
        self.details = details
        self.trailing_metadata = trailing_metadata


@dataclass(frozen=True)
class _Refusal:
    code: grpc.StatusCode
    message: str
    retry_after: float | None = None


class _GrpcServicer(TraceServiceServicer):
    """Export with raw bytes in and out (see the module doc: so size and decoding are counted)."""

    def __init__(self, core: ReceiverCore, verifier: BasicAuthVerifier | None) -> None:
        self.core = core
        self.verifier = verifier

    def Export(self, request: bytes, context: grpc.ServicerContext) -> bytes:  # noqa: N802 - the OTLP name
        try:
            result = self._export(request, context)
        except Exception as err:
            self.core.internal_error(err)
            result = _Refusal(grpc.StatusCode.INTERNAL, "internal error (see the exporter's log)")
        if isinstance(result, bytes):
            return result
        if result.retry_after is not None:
            status = _status(_RESOURCE_EXHAUSTED, result.message, result.retry_after)
            context.abort_with_status(
                _GrpcStatus(result.code, result.message, (("grpc-status-details-bin", status.SerializeToString()),))
            )
        context.abort(result.code, result.message)
        raise AssertionError("unreachable: abort raises")  # pragma: no cover

    def _export(self, data: bytes, context: grpc.ServicerContext) -> bytes | _Refusal:
        core = self.core
        if self.verifier is not None:
            header = next((v for k, v in context.invocation_metadata() if k == "authorization"), None)
            verdict = asyncio.run(self.verifier.verify(header if isinstance(header, str) else None, _grpc_peer(context)))
            if verdict is Verdict.DENIED:
                core.counters.rejected("grpc", "unauthorized")
                return _Refusal(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong credentials")
            if verdict is Verdict.BUSY:
                core.counters.rejected("grpc", "busy")
                return _Refusal(grpc.StatusCode.UNAVAILABLE, "too many password checks in progress; retry")
        if len(data) > core.limits.max_body_bytes:
            core.counters.rejected("grpc", "too_large")
            return _Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, f"message over the {core.limits.max_body_bytes}-byte limit")
        wait = core.rate_exhausted()
        if wait:
            core.counters.rejected("grpc", "rate_limited")
            return _Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, "span rate exhausted; retry later", wait)
        try:
            request = decode_protobuf(data)
        except Exception:  # DecodeError, and whatever a hostile message makes upb say
            core.counters.rejected("grpc", "malformed")
            return _Refusal(grpc.StatusCode.INVALID_ARGUMENT, "not an OTLP ExportTraceServiceRequest")
        outcome = core.process(request, "grpc")
        if outcome.response is None:
            return _Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, outcome.message, outcome.retry_after)
        serialized: bytes = outcome.response.SerializeToString()
        return serialized


def _grpc_peer(context: grpc.ServicerContext) -> str | None:
    """The client's address from gRPC's peer string (``ipv4:1.2.3.4:5``, ``ipv6:%5B::1%5D:5``)."""
    peer = unquote(str(context.peer() or ""))
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6") or ":" not in rest:
        return None
    return rest.rsplit(":", 1)[0].strip("[]")


def grpc_credentials(tls: TLSSettings) -> Any:
    """``grpc.ssl_server_credentials`` from the web config, refusing what gRPC cannot honour (module doc)."""
    tls.context()  # every file loaded and every value checked, with the main server's messages
    if tls.min_version != "TLS12":
        raise ValueError(
            f"tls_server_config.min_version: {tls.min_version} cannot be enforced on the OTLP/gRPC receiver "
            "(gRPC's Python API sets no TLS version); leave it at TLS12 or receive traces over OTLP/HTTP only"
        )
    if tls.max_version != "TLS13":
        raise ValueError(
            f"tls_server_config.max_version: {tls.max_version} cannot be enforced on the OTLP/gRPC receiver "
            "(gRPC's Python API sets no TLS version); leave it at TLS13 or receive traces over OTLP/HTTP only"
        )
    if tls.cipher_suites:
        raise ValueError(
            "tls_server_config.cipher_suites: cannot be enforced on the OTLP/gRPC receiver (gRPC's Python API "
            "sets no cipher suite); leave them out or receive traces over OTLP/HTTP only"
        )
    with open(tls.cert_file, "rb") as f:
        cert = f.read()
    with open(tls.key_file, "rb") as f:
        key = f.read()
    require = tls.client_auth_type == "RequireAndVerifyClientCert"
    root = None
    if require and tls.client_ca_file:
        with open(tls.client_ca_file, "rb") as f:
            root = f.read()
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=root, require_client_auth=require)


# --------------------------------------------------------------------------- OTLP/HTTP


class _TooLarge(Exception):
    pass


class _Disconnected(Exception):
    pass


class _BadEncoding(Exception):
    pass


class HttpApp:
    """The ASGI app of OTLP/HTTP: ``POST /v1/traces``, nothing else."""

    def __init__(
        self, core: ReceiverCore, verifier: BasicAuthVerifier | None, executor: Callable[[], ThreadPoolExecutor]
    ) -> None:
        self.core = core
        self.verifier = verifier
        self._executor = executor
        self.in_flight = 0

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Any], send: Callable[[Any], Any]) -> None:
        started = False

        async def tracked(message: Any) -> None:
            nonlocal started
            started = started or message.get("type") == "http.response.start"
            await send(message)

        try:
            await self._serve(scope, receive, tracked)
        except Exception as err:  # a fault of ours: one throttled log line and a 500, never uvicorn's traceback
            self.core.internal_error(err)
            if not started and scope.get("type") == "http":
                await _plain(send, 500, "internal error (see the exporter's log)\n")

    async def _serve(self, scope: dict[str, Any], receive: Callable[[], Any], send: Callable[[Any], Any]) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            return
        if scope["path"] != TRACES_PATH:
            await _plain(send, 404, "not found: OTLP/HTTP traces are received at POST /v1/traces\n")
            return
        if scope["method"] != "POST":
            await _plain(send, 405, "method not allowed: POST /v1/traces\n", [(b"allow", b"POST")])
            return
        headers: dict[bytes, bytes] = {k.lower(): v for k, v in scope["headers"]}
        content_type = headers.get(b"content-type", b"").split(b";", 1)[0].strip().lower().decode("latin-1")
        as_json = content_type == JSON
        core, counters = self.core, self.core.counters

        async def refuse(status: int, code: int, message: str, reason: str | None, extra: list[tuple[bytes, bytes]]) -> None:
            if reason is not None:
                counters.rejected("http", reason)
            await _error(send, status, code, message, as_json, extra)

        if self.verifier is not None:
            client = scope.get("client")
            auth = headers.get(b"authorization")
            verdict = await self.verifier.verify(
                auth.decode("latin-1") if auth is not None else None, client[0] if client else None
            )
            if verdict is Verdict.DENIED:
                challenge = [(b"www-authenticate", b'Basic realm="llm-layer-exporter"')]
                await refuse(401, _UNAUTHENTICATED, "missing or wrong credentials", "unauthorized", challenge)
                return
            if verdict is Verdict.BUSY:
                busy = "too many password checks in progress; retry"
                await refuse(503, _UNAVAILABLE, busy, "busy", [(b"retry-after", b"1")])
                return
        if content_type not in (PROTOBUF, JSON):
            message = f"content type {content_type or '(none)'!r} is not OTLP: send {PROTOBUF} or {JSON}"
            await refuse(415, _INVALID_ARGUMENT, message, "unsupported_media_type", [])
            return
        encoding = headers.get(b"content-encoding", b"identity").strip().lower()
        if encoding not in (b"identity", b"gzip"):
            message = f"content encoding {encoding.decode('latin-1')!r} is not supported: send gzip or none"
            await refuse(415, _INVALID_ARGUMENT, message, "unsupported_media_type", [])
            return
        cap = core.limits.max_body_bytes
        too_large = f"body over the {cap}-byte limit (inflated size for gzip)"
        length = headers.get(b"content-length")
        if length is not None and length.strip().isdigit() and int(length) > cap:
            await refuse(413, _RESOURCE_EXHAUSTED, too_large, "too_large", [(b"connection", b"close")])
            return
        if self.in_flight >= core.limits.max_concurrent_requests:
            await refuse(503, _UNAVAILABLE, "too many export requests at once; retry", "busy", [(b"retry-after", b"1")])
            return
        wait = core.rate_exhausted()
        if wait:
            retry = [(b"retry-after", str(retry_after_seconds(wait)).encode())]
            await refuse(429, _RESOURCE_EXHAUSTED, "span rate exhausted; retry later", "rate_limited", retry)
            return
        self.in_flight += 1
        try:
            try:
                body = await asyncio.wait_for(_read_body(receive, cap, encoding == b"gzip"), core.limits.read_timeout)
            except _Disconnected:
                return
            except _TooLarge:
                await refuse(413, _RESOURCE_EXHAUSTED, too_large, "too_large", [(b"connection", b"close")])
                return
            except _BadEncoding:
                await refuse(400, _INVALID_ARGUMENT, "body is not valid gzip", "malformed", [])
                return
            except asyncio.TimeoutError:
                message = f"body not received within {core.limits.read_timeout:g} s"
                await refuse(408, _DEADLINE_EXCEEDED, message, "timeout", [(b"connection", b"close")])
                return
            loop = asyncio.get_running_loop()
            try:
                status, payload, extra = await loop.run_in_executor(self._executor(), self._handle, body, as_json)
            except Exception as err:  # a fault of ours: one line in the log (throttled), a 500 with a Status
                core.internal_error(err)
                await refuse(500, _INTERNAL, "internal error (see the exporter's log)", None, [])
                return
            await _send(send, status, payload, JSON if as_json else PROTOBUF, extra)
        finally:
            self.in_flight -= 1

    def _handle(self, body: bytes, as_json: bool) -> tuple[int, bytes, list[tuple[bytes, bytes]]]:
        """On a worker: decode, apply the limits, call the sink; the status, body and headers to send."""
        core = self.core
        try:
            request = decode_json(body) if as_json else decode_protobuf(body)
        except Exception:  # DecodeError, ParseError, ValueError, RecursionError: the body's fault, never a traceback
            core.counters.rejected("http", "malformed")
            kind = "OTLP/JSON" if as_json else "OTLP protobuf"
            return 400, _encode(_status(_INVALID_ARGUMENT, f"body is not an {kind} ExportTraceServiceRequest"), as_json), []
        outcome = core.process(request, "http")
        if outcome.response is None:
            retry = [(b"retry-after", str(retry_after_seconds(outcome.retry_after)).encode())]
            return 429, _encode(_status(_RESOURCE_EXHAUSTED, outcome.message), as_json), retry
        return 200, _encode(outcome.response, as_json), []


async def _read_body(receive: Callable[[], Any], cap: int, gzip: bool) -> bytes:
    """The request body, stream-inflated when gzip, never more than ``cap`` bytes (wire or inflated)."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS) if gzip else None
    parts: list[bytes] = []
    wire = size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        chunk: bytes = message.get("body", b"")
        wire += len(chunk)
        if wire > cap:
            raise _TooLarge
        if inflater is not None and chunk:
            if inflater.eof:
                raise _BadEncoding  # data after the gzip member's end
            try:
                chunk = inflater.decompress(chunk, cap + 1 - size)
            except zlib.error:
                raise _BadEncoding from None
            if inflater.unconsumed_tail:
                raise _TooLarge  # the output limit was hit with input left
        size += len(chunk)
        if size > cap:
            raise _TooLarge
        parts.append(chunk)
        if not message.get("more_body", False):
            break
    if inflater is not None and (not inflater.eof or inflater.unused_data):
        raise _BadEncoding  # truncated, or more than one member
    return b"".join(parts)


def _encode(message: Any, as_json: bool) -> bytes:
    if as_json:
        text: str = json_format.MessageToJson(message, indent=None)
        return text.encode()
    data: bytes = message.SerializeToString()
    return data


async def _send(
    send: Callable[[Any], Any], status: int, body: bytes, content_type: str, extra: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _error(
    send: Callable[[Any], Any], status: int, code: int, message: str, as_json: bool, extra: list[tuple[bytes, bytes]]
) -> None:
    await _send(send, status, _encode(_status(code, message), as_json), JSON if as_json else PROTOBUF, extra)


async def _plain(send: Callable[[Any], Any], status: int, text: str, extra: Iterable[tuple[bytes, bytes]] = ()) -> None:
    await _send(send, status, text.encode(), "text/plain; charset=utf-8", extra)


# --------------------------------------------------------------------------- the receiver


class TraceReceiver:
    """OTLP/gRPC and/or OTLP/HTTP on the given addresses, each request through ``limits`` to ``sink``.

    ``tls`` (the web config's ``tls_server_config``) and ``basic_auth`` (a verifier of the web
    config's users; the caller owns and closes it) apply to both protocols. Construction checks
    the addresses and TLS settings (ValueError naming them); ``start()`` binds (OSError naming
    the address); ``stop(grace)`` returns within ``grace`` + 3 seconds, the ports closed.
    """

    def __init__(
        self,
        sink: Sink,
        limits: ReceiverLimits | None = None,
        grpc_address: str | None = None,
        http_address: str | None = None,
        tls: TLSSettings | None = None,
        basic_auth: BasicAuthVerifier | None = None,
    ) -> None:
        if grpc_address is None and http_address is None:
            raise ValueError("trace receiver: give a gRPC address, an HTTP address or both")
        self.limits = limits or ReceiverLimits()
        self.core = ReceiverCore(sink, self.limits)
        self.grpc_address = grpc_address
        self.http_address = http_address
        self._grpc_bind = parse_address(grpc_address, "OTLP/gRPC address") if grpc_address is not None else None
        self._http_bind = parse_address(http_address, "OTLP/HTTP address") if http_address is not None else None
        self.tls = tls
        self.basic_auth = basic_auth
        self._grpc_credentials = grpc_credentials(tls) if tls is not None and grpc_address is not None else None
        if tls is not None:
            tls.context()  # files loaded and values checked now, not on the serving thread
        self._grpc_server: Any = None
        self._grpc_port: int | None = None
        self._http_server: Any = None
        self._http_thread: threading.Thread | None = None
        self._http_socket: socket.socket | None = None
        self._http_port: int | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._grpc_pool: ThreadPoolExecutor | None = None
        self._started = False

    # -- ports and counters

    @property
    def grpc_port(self) -> int | None:
        """The bound OTLP/gRPC port (None before start or without a gRPC address)."""
        return self._grpc_port

    @property
    def http_port(self) -> int | None:
        """The bound OTLP/HTTP port (None before start or without an HTTP address)."""
        return self._http_port

    def points(self) -> list[Sample]:
        """The receiver's counters as schema samples (every series, zeros included)."""
        return self.core.counters.points()

    # -- life

    def start(self) -> None:
        if self._started:
            raise RuntimeError("trace receiver: already started")
        self._started = True
        try:
            if self._grpc_bind is not None:
                self._start_grpc(*self._grpc_bind)
            if self._http_bind is not None:
                self._start_http(*self._http_bind)
        except BaseException:
            self.stop(0)
            raise

    def _start_grpc(self, host: str, port: int) -> None:
        address = self.grpc_address
        what = "OTLP/gRPC receiver"
        if port:  # say why a fixed port cannot be used (gRPC's own error names no reason)
            _bind(host, port, str(address), what).close()
        limits = self.limits
        pool = self._grpc_pool = ThreadPoolExecutor(max_workers=limits.workers, thread_name_prefix="otlp-grpc")
        server = grpc.server(
            pool,
            options=[
                ("grpc.max_receive_message_length", limits.max_body_bytes * GRPC_MESSAGE_SLACK),
                ("grpc.so_reuseport", 0),
            ],
            maximum_concurrent_rpcs=limits.max_concurrent_requests,
        )
        servicer = _GrpcServicer(self.core, self.basic_auth)
        handler = grpc.unary_unary_rpc_method_handler(servicer.Export)  # bytes in, bytes out (module doc)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),))
        target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            if self._grpc_credentials is not None:
                bound = server.add_secure_port(target, self._grpc_credentials)
            else:
                bound = server.add_insecure_port(target)
        except RuntimeError as err:
            server.stop(0)
            raise OSError(f"cannot listen on {address} ({what}): {str(err).split(';')[0]}") from None
        if not bound:  # older gRPC answers 0 instead of raising
            server.stop(0)
            raise OSError(f"cannot listen on {address} ({what}): gRPC could not bind it")
        server.start()
        self._grpc_server = server
        self._grpc_port = int(bound)

    def _start_http(self, host: str, port: int) -> None:
        import uvicorn

        sock = _bind(host, port, str(self.http_address), "OTLP/HTTP receiver")
        self._http_socket = sock
        self._http_port = int(sock.getsockname()[1])
        app = HttpApp(self.core, self.basic_auth, self._executor)
        tls_kwargs: dict[str, Any] = dict(self.tls.uvicorn_kwargs()) if self.tls is not None else {}
        config = uvicorn.Config(
            app,
            log_config=None,  # never reconfigure the process's logging (the main server's is set up already)
            access_log=False,
            lifespan="off",
            limit_concurrency=self.limits.max_connections,
            timeout_keep_alive=5,
            server_header=False,
            **tls_kwargs,
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="otlp-http", daemon=True)
        self._http_server, self._http_thread = server, thread
        thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not server.started and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not server.started:
            raise OSError(f"cannot serve on {self.http_address} (OTLP/HTTP receiver): the server did not start")

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.limits.workers, thread_name_prefix="otlp-http")
        return self._pool

    def stop(self, grace: float = 5.0) -> None:
        """Stop both servers: requests in flight get ``grace`` seconds; returns within grace + 3 s, the ports closed."""
        grace = max(0.0, float(grace)) if math.isfinite(grace) else 0.0
        deadline = time.monotonic() + grace + 2.5
        stopped = None
        if self._grpc_server is not None:
            stopped = self._grpc_server.stop(grace)  # closes its port at once; in-flight RPCs get `grace`
            self._grpc_server = None
        server, thread = self._http_server, self._http_thread
        if server is not None and thread is not None:
            server.config.timeout_graceful_shutdown = grace
            server.should_exit = True
            thread.join(max(0.0, deadline - 0.5 - time.monotonic()))
            if thread.is_alive():  # past the grace: stop waiting for connections
                server.force_exit = True
                thread.join(max(0.0, deadline - time.monotonic()))
        self._http_server = self._http_thread = None
        if self._http_socket is not None:
            self._http_socket.close()
            self._http_socket = None
        if stopped is not None:
            stopped.wait(max(0.0, deadline - time.monotonic()))
        for pool in (self._pool, self._grpc_pool):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
        self._pool = self._grpc_pool = None
