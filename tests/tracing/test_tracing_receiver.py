"""The OTLP trace receiver (exporter/tracing/receiver.py) over real sockets on 127.0.0.1.

Real gRPC channels with the OpenTelemetry ``TraceServiceStub`` and real HTTP (``requests``,
raw sockets where a client must misbehave). Rate limits run on a fake clock: nothing here
sleeps and hopes, and no assertion depends on this host's speed (every wait is bounded).
"""

from __future__ import annotations

import base64
import gzip
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import bcrypt
import grpc
import pytest
import requests
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub

from exporter.basicauth import BasicAuthVerifier
from exporter.samples import Sample
from exporter.tlscontext import TLSSettings
from exporter.tracing.limits import ReceiverLimits, TokenBucket, retry_after_seconds
from exporter.tracing.receiver import SERVICE, RetryInfo, RpcStatus, TraceReceiver, parse_address
from tests.tls import self_signed_cert

PROTOBUF = {"Content-Type": "application/x-protobuf"}
#: every client call and every wait is bounded by this (seconds); never a speed assertion
BOUND = 10.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Sink:
    """Collects what the receiver hands on (thread-safe); ``fail`` makes it raise."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.fail = False
        self.lock = threading.Lock()

    def __call__(self, request: ExportTraceServiceRequest) -> None:
        if self.fail:
            raise RuntimeError("consumer broke")
        with self.lock:
            self.requests.append(request)

    def names(self) -> list[str]:
        return [s.name for r in self.requests for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]


def make_request(n: int = 1, attributes: int = 0, prefix: str = "span") -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    attr = rs.resource.attributes.add()
    attr.key, attr.value.string_value = "service.name", "vllm"
    ss = rs.scope_spans.add()
    ss.scope.name = "vllm.tracing"
    for i in range(n):
        span = ss.spans.add()
        span.trace_id = bytes([i % 256]) * 16
        span.span_id = bytes([i % 256]) * 8
        span.name = f"{prefix}-{i}"
        for a in range(attributes):
            kv = span.attributes.add()
            kv.key, kv.value.int_value = f"a{a}", a
    return request


def counts(receiver: TraceReceiver) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    points = receiver.points()
    assert all(isinstance(p, Sample) for p in points)
    return {(p.name, tuple(sorted(p.labels.items()))): p.value for p in points}


def received(receiver: TraceReceiver, protocol: str) -> float:
    return counts(receiver)[("llm_trace_spans_received_total", (("protocol", protocol),))]


def dropped(receiver: TraceReceiver, reason: str) -> float:
    return counts(receiver)[("llm_trace_spans_dropped_total", (("reason", reason),))]


def rejected(receiver: TraceReceiver, protocol: str, reason: str) -> float:
    return counts(receiver)[("llm_trace_requests_rejected_total", (("protocol", protocol), ("reason", reason)))]


def total(receiver: TraceReceiver, name: str) -> float:
    return sum(p.value for p in receiver.points() if p.name == name)


@contextmanager
def running(
    sink: Callable[[ExportTraceServiceRequest], None], limits: ReceiverLimits | None = None, **kwargs: Any
) -> Iterator[TraceReceiver]:
    kwargs.setdefault("grpc_address", "127.0.0.1:0")
    kwargs.setdefault("http_address", "127.0.0.1:0")
    receiver = TraceReceiver(sink, limits or ReceiverLimits(), **kwargs)
    receiver.start()
    try:
        yield receiver
    finally:
        receiver.stop(1.0)


def http_session() -> requests.Session:
    session = requests.Session()
    session.trust_env = False  # no proxy from the environment for 127.0.0.1
    return session


def url(receiver: TraceReceiver, scheme: str = "http", path: str = "/v1/traces") -> str:
    return f"{scheme}://127.0.0.1:{receiver.http_port}{path}"


def new_stub(channel: grpc.Channel) -> Any:
    """The OpenTelemetry stub (its generated module is untyped)."""
    return TraceServiceStub(channel)  # type: ignore[no-untyped-call]


def stub(receiver: TraceReceiver) -> tuple[grpc.Channel, Any]:
    channel = grpc.insecure_channel(f"127.0.0.1:{receiver.grpc_port}")
    return channel, new_stub(channel)


def post(receiver: TraceReceiver, body: bytes, headers: dict[str, str] | None = None) -> requests.Response:
    with http_session() as s:
        return s.post(url(receiver), data=body, headers=headers or PROTOBUF, timeout=BOUND)


def response_of(r: requests.Response) -> ExportTraceServiceResponse:
    assert r.headers["content-type"] == "application/x-protobuf"
    response = ExportTraceServiceResponse()
    response.ParseFromString(r.content)
    return response


def status_of(r: requests.Response) -> Any:
    return RpcStatus.FromString(r.content)


# --------------------------------------------------------------------------- accepted


def test_a_good_request_reaches_the_sink_over_both_protocols() -> None:
    sink = Sink()
    with running(sink) as rx:
        r = post(rx, make_request(2, prefix="http").SerializeToString())
        assert r.status_code == 200
        assert not response_of(r).HasField("partial_success")
        channel, client = stub(rx)
        with channel:
            answer = client.Export(make_request(3, prefix="grpc"), timeout=BOUND)
        assert not answer.HasField("partial_success")
        assert sorted(sink.names()) == ["grpc-0", "grpc-1", "grpc-2", "http-0", "http-1"]
        first = sink.requests[0].resource_spans[0]
        assert first.resource.attributes[0].value.string_value == "vllm"
        assert first.scope_spans[0].spans[0].trace_id == bytes(16)
        assert received(rx, "http") == 2 and received(rx, "grpc") == 3
        assert total(rx, "llm_trace_spans_dropped_total") == 0
        assert total(rx, "llm_trace_requests_rejected_total") == 0


def test_gzip_bodies_over_http_and_grpc() -> None:
    sink = Sink()
    with running(sink) as rx:
        body = gzip.compress(make_request(2).SerializeToString())
        r = post(rx, body, {**PROTOBUF, "Content-Encoding": "gzip"})
        assert r.status_code == 200
        channel, client = stub(rx)
        with channel:
            client.Export(make_request(1), timeout=BOUND, compression=grpc.Compression.Gzip)
        assert received(rx, "http") == 2 and received(rx, "grpc") == 1


def test_otlp_json_with_hex_ids_and_a_json_answer() -> None:
    sink = Sink()
    doc = {
        "resourceSpans": [
            {
                "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "sglang"}}]},
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "5B8EFFF798038103D269B633813FC60C",
                                "spanId": "eee19b7ec3c1b174",
                                "parentSpanId": "",
                                "name": "generate",
                                "kind": 2,
                                "startTimeUnixNano": "1544712660000000000",
                                "endTimeUnixNano": "1544712661000000000",
                                "links": [{"traceId": "00" * 16, "spanId": "01" * 8}],
                                "someFutureField": 1,
                            }
                        ]
                    }
                ],
            }
        ]
    }
    with running(sink) as rx, http_session() as s:
        r = s.post(url(rx), json=doc, timeout=BOUND)
        assert r.status_code == 200, r.content
        assert r.headers["content-type"] == "application/json"
        assert r.json() == {}
        span = sink.requests[0].resource_spans[0].scope_spans[0].spans[0]
        assert span.trace_id == bytes.fromhex("5b8efff798038103d269b633813fc60c")
        assert span.span_id == bytes.fromhex("eee19b7ec3c1b174")
        assert span.links[0].span_id == b"\x01" * 8
        assert span.end_time_unix_nano - span.start_time_unix_nano == 10**9
        # an undecodable JSON body: 400 with a JSON google.rpc.Status
        bad = s.post(url(rx), data=b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}',
                     headers={"Content-Type": "application/json"}, timeout=BOUND)  # fmt: skip
        assert bad.status_code == 400 and bad.headers["content-type"] == "application/json"
        assert bad.json()["code"] == 3
        assert rejected(rx, "http", "malformed") == 1


# --------------------------------------------------------------------------- refused whole


def test_oversized_bodies_are_refused_and_counted() -> None:
    limits = ReceiverLimits(max_body_bytes=64 * 1024, burst_spans=4096)
    big = make_request(1)
    big.resource_spans[0].schema_url = "x" * (100 * 1024)
    with running(Sink(), limits) as rx, http_session() as s:
        # Content-Length over the cap: refused before the body is read
        r = s.post(url(rx), data=big.SerializeToString(), headers=PROTOBUF, timeout=BOUND)
        assert r.status_code == 413
        assert status_of(r).code == 8
        # chunked (no Content-Length): the stream is cut at the cap
        chunks = iter([big.SerializeToString()[i : i + 8192] for i in range(0, big.ByteSize(), 8192)])
        r = s.post(url(rx), data=chunks, headers=PROTOBUF, timeout=BOUND)
        assert r.status_code == 413
        # a gzip bomb: small on the wire, over the cap inflated
        bomb = gzip.compress(b"\x00" * (10 * 1024 * 1024))
        assert len(bomb) < limits.max_body_bytes
        r = s.post(url(rx), data=bomb, headers={**PROTOBUF, "Content-Encoding": "gzip"}, timeout=BOUND)
        assert r.status_code == 413
        assert rejected(rx, "http", "too_large") == 3
        channel, client = stub(rx)
        with channel, pytest.raises(grpc.RpcError) as err:
            client.Export(big, timeout=BOUND)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert rejected(rx, "grpc", "too_large") == 1
        assert total(rx, "llm_trace_spans_received_total") == 0
        assert post(rx, make_request(1).SerializeToString()).status_code == 200  # still serving


@pytest.mark.parametrize(
    ("body", "encoding"),
    [
        (b"\xff\xff\xff\xff", None),
        (b"not protobuf at all, just words", None),
        (b"\x0a\x05\x0a\x03", None),  # truncated nested message
        (b"definitely not gzip", "gzip"),
        (gzip.compress(make_request(1).SerializeToString(), mtime=0)[:-6], "gzip"),  # truncated stream
    ],
    # explicit ids: xdist workers must collect the same names, and a gzip header carries a time
    ids=["bad-varint", "words", "truncated-message", "not-gzip", "gzip-cut"],
)
def test_undecodable_bodies_get_400(body: bytes, encoding: str | None) -> None:
    headers = {**PROTOBUF, **({"Content-Encoding": encoding} if encoding else {})}
    with running(Sink(), grpc_address=None) as rx:
        r = post(rx, body, headers)
        assert r.status_code == 400
        assert status_of(r).code == 3
        assert rejected(rx, "http", "malformed") == 1


def test_an_undecodable_grpc_message_is_invalid_argument() -> None:
    with running(Sink(), http_address=None) as rx, grpc.insecure_channel(f"127.0.0.1:{rx.grpc_port}") as channel:
        raw = channel.unary_unary(f"/{SERVICE}/Export")  # bytes in, bytes out
        with pytest.raises(grpc.RpcError) as err:
            raw(b"\xff\xff\xff\xff", timeout=BOUND)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert rejected(rx, "grpc", "malformed") == 1


def test_content_types_encodings_paths_and_methods() -> None:
    body = make_request(1).SerializeToString()
    with running(Sink(), grpc_address=None) as rx, http_session() as s:
        assert post(rx, body, {"Content-Type": "text/plain"}).status_code == 415
        assert post(rx, body, {**PROTOBUF, "Content-Encoding": "br"}).status_code == 415
        assert s.post(url(rx), data=body, timeout=BOUND).status_code == 415  # no content type
        assert rejected(rx, "http", "unsupported_media_type") == 3
        assert post(rx, body, {"Content-Type": "application/x-protobuf; charset=binary"}).status_code == 200
        assert s.post(url(rx, path="/v1/metrics"), data=body, headers=PROTOBUF, timeout=BOUND).status_code == 404
        r = s.get(url(rx), timeout=BOUND)
        assert r.status_code == 405 and r.headers["allow"] == "POST"


# --------------------------------------------------------------------------- limits


def test_the_span_rate_is_a_token_bucket_on_the_injected_clock() -> None:
    clock = FakeClock()
    limits = ReceiverLimits(spans_per_second=10, burst_spans=4, max_spans_per_request=4, clock=clock)
    sink = Sink()
    with running(sink, limits) as rx:
        assert post(rx, make_request(4).SerializeToString()).status_code == 200  # the whole burst
        # the bucket is empty: refused before the body is read, with a retry hint
        r = post(rx, make_request(1).SerializeToString())
        assert r.status_code == 429 and r.headers["retry-after"] == "1"
        assert rejected(rx, "http", "rate_limited") == 1
        clock.now += 0.2  # two spans' worth
        r = post(rx, make_request(3).SerializeToString())  # decoded, then over the rate: counted as spans
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        assert dropped(rx, "rate_limited") == 3
        channel, client = stub(rx)
        with channel:
            with pytest.raises(grpc.RpcError) as err:
                client.Export(make_request(3), timeout=BOUND)
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            details = dict(err.value.trailing_metadata() or ())["grpc-status-details-bin"]
            status = RpcStatus.FromString(details)
            assert status.code == 8
            hint = RetryInfo()
            assert status.details[0].Unpack(hint) and hint.retry_delay.seconds >= 1
            assert dropped(rx, "rate_limited") == 6
            clock.now += 1.0  # refilled to the burst
            client.Export(make_request(4), timeout=BOUND)
        assert received(rx, "http") == 4 and received(rx, "grpc") == 4
        assert len(sink.names()) == 8


def test_spans_over_the_attribute_and_per_request_limits_are_dropped_from_the_message() -> None:
    limits = ReceiverLimits(max_attributes_per_span=2, max_spans_per_request=3)
    sink = Sink()
    request = make_request(2, attributes=3, prefix="fat")  # both over 2 attributes
    scope = request.resource_spans[0].scope_spans.add()
    for i in range(5):
        scope.spans.add(name=f"ok-{i}", trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    with running(sink, limits) as rx:
        r = post(rx, request.SerializeToString())
        assert r.status_code == 200
        partial = response_of(r).partial_success
        assert partial.rejected_spans == 4
        assert "attributes" in partial.error_message and "per request" in partial.error_message
        assert sink.names() == ["ok-0", "ok-1", "ok-2"]
        kept = sink.requests[0].resource_spans
        assert len(kept) == 1 and len(kept[0].scope_spans) == 1  # the emptied scope is left out
        assert kept[0].resource.attributes[0].key == "service.name"
        channel, client = stub(rx)
        with channel:
            answer = client.Export(request, timeout=BOUND)
        assert answer.partial_success.rejected_spans == 4
        assert dropped(rx, "too_many_attributes") == 4 and dropped(rx, "too_many_spans") == 4
        assert received(rx, "http") == 3 and received(rx, "grpc") == 3


def test_a_failing_sink_is_counted_logged_once_a_minute_and_answered_with_partial_success(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    sink = Sink()
    sink.fail = True
    with running(sink, ReceiverLimits(clock=clock)) as rx, caplog.at_level(logging.WARNING, "exporter.tracing"):
        for _ in range(2):
            r = post(rx, make_request(2).SerializeToString())
            assert r.status_code == 200
            assert response_of(r).partial_success.rejected_spans == 2
        channel, client = stub(rx)
        with channel:
            assert client.Export(make_request(3), timeout=BOUND).partial_success.rejected_spans == 3
            assert dropped(rx, "internal") == 7
            logged = [rec for rec in caplog.records if "consumer failed" in rec.getMessage()]
            assert len(logged) == 1
            clock.now += 61
            client.Export(make_request(1), timeout=BOUND)
            assert len([rec for rec in caplog.records if "consumer failed" in rec.getMessage()]) == 2
            sink.fail = False
            assert not client.Export(make_request(1), timeout=BOUND).HasField("partial_success")
        assert received(rx, "grpc") == 1 and total(rx, "llm_trace_spans_received_total") == 1


def test_a_fault_of_the_receiver_itself_is_a_500_or_internal_and_it_keeps_serving(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with running(Sink()) as rx, caplog.at_level(logging.WARNING, "exporter.tracing"):
        healthy = rx.core.process

        def broken(request: ExportTraceServiceRequest, protocol: str) -> Any:
            raise KeyError("a bug")

        monkeypatch.setattr(rx.core, "process", broken)
        r = post(rx, make_request(1).SerializeToString())
        assert r.status_code == 500 and status_of(r).code == 13
        channel, client = stub(rx)
        with channel:
            with pytest.raises(grpc.RpcError) as err:
                client.Export(make_request(1), timeout=BOUND)
            assert err.value.code() == grpc.StatusCode.INTERNAL
            assert "request failed" in caplog.text
            monkeypatch.setattr(rx.core, "process", healthy)
            client.Export(make_request(1), timeout=BOUND)
        assert post(rx, make_request(1).SerializeToString()).status_code == 200


def test_over_the_concurrency_bound_http_answers_503() -> None:
    entered, release = threading.Event(), threading.Event()

    def slow(request: ExportTraceServiceRequest) -> None:
        entered.set()
        release.wait(BOUND)

    limits = ReceiverLimits(max_concurrent_requests=1, workers=1)
    with running(slow, limits, grpc_address=None) as rx, ThreadPoolExecutor(1) as pool:
        first = pool.submit(post, rx, make_request(1).SerializeToString())
        assert entered.wait(BOUND)
        r = post(rx, make_request(1).SerializeToString())
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        release.set()
        assert first.result(BOUND).status_code == 200
        assert rejected(rx, "http", "busy") == 1


def test_a_body_that_does_not_arrive_in_time_gets_408() -> None:
    with running(Sink(), ReceiverLimits(read_timeout=0.2), grpc_address=None) as rx:
        with socket.create_connection(("127.0.0.1", rx.http_port or 0), timeout=BOUND) as conn:
            conn.sendall(
                b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: 100\r\n\r\n\x0a"
            )
            answer = conn.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408")
        assert rejected(rx, "http", "timeout") == 1


# --------------------------------------------------------------------------- security


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    paths: dict[str, Path] = {}
    for who in ("server", "client"):
        paths[f"{who}_cert"], paths[f"{who}_key"] = self_signed_cert(tmp_path_factory.mktemp(who))
    return paths


def test_tls_over_http_and_grpc(pki: dict[str, Path]) -> None:
    tls = TLSSettings(cert_file=str(pki["server_cert"]), key_file=str(pki["server_key"]))
    sink = Sink()
    with running(sink, tls=tls) as rx, http_session() as s:
        # the status only: a response object alive holds its socket (and the server's TLS shutdown) open
        status = s.post(url(rx, "https"), data=make_request(1).SerializeToString(), headers=PROTOBUF,
                        verify=str(pki["server_cert"]), timeout=BOUND).status_code  # fmt: skip
        assert status == 200
        with pytest.raises(requests.exceptions.ConnectionError):
            s.post(url(rx), data=b"", headers=PROTOBUF, timeout=BOUND)  # plain HTTP to a TLS port
        creds = grpc.ssl_channel_credentials(root_certificates=pki["server_cert"].read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{rx.grpc_port}", creds) as channel:
            new_stub(channel).Export(make_request(2), timeout=BOUND)
        with grpc.insecure_channel(f"127.0.0.1:{rx.grpc_port}") as channel, pytest.raises(grpc.RpcError):
            new_stub(channel).Export(make_request(1), timeout=BOUND)
        assert received(rx, "http") == 1 and received(rx, "grpc") == 2


def test_grpc_requires_a_verified_client_certificate_when_asked(pki: dict[str, Path]) -> None:
    tls = TLSSettings(
        cert_file=str(pki["server_cert"]),
        key_file=str(pki["server_key"]),
        client_ca_file=str(pki["client_cert"]),
        client_auth_type="RequireAndVerifyClientCert",
    )
    root = pki["server_cert"].read_bytes()
    with running(Sink(), tls=tls, http_address=None) as rx:
        anonymous = grpc.ssl_channel_credentials(root_certificates=root)
        with grpc.secure_channel(f"127.0.0.1:{rx.grpc_port}", anonymous) as channel, pytest.raises(grpc.RpcError):
            new_stub(channel).Export(make_request(1), timeout=BOUND)
        known = grpc.ssl_channel_credentials(root, pki["client_key"].read_bytes(), pki["client_cert"].read_bytes())
        with grpc.secure_channel(f"127.0.0.1:{rx.grpc_port}", known) as channel:
            new_stub(channel).Export(make_request(1), timeout=BOUND)
        assert received(rx, "grpc") == 1


@pytest.mark.parametrize(
    ("settings", "needle"),
    [
        ({"min_version": "TLS13"}, "tls_server_config.min_version"),
        ({"max_version": "TLS12"}, "tls_server_config.max_version"),
        ({"cipher_suites": ("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",)}, "tls_server_config.cipher_suites"),
    ],
)
def test_tls_settings_grpc_cannot_honour_are_refused(pki: dict[str, Path], settings: dict[str, Any], needle: str) -> None:
    tls = TLSSettings(cert_file=str(pki["server_cert"]), key_file=str(pki["server_key"]), **settings)
    with pytest.raises(ValueError, match=needle):
        TraceReceiver(Sink(), ReceiverLimits(), grpc_address="127.0.0.1:0", tls=tls)
    TraceReceiver(Sink(), ReceiverLimits(), http_address="127.0.0.1:0", tls=tls)  # HTTP honours them


def test_basic_auth_on_http_and_grpc() -> None:
    verifier = BasicAuthVerifier({"otel": bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4))})
    good = "Basic " + base64.b64encode(b"otel:s3cret").decode()
    bad = "Basic " + base64.b64encode(b"otel:wrong").decode()
    body = make_request(1).SerializeToString()
    try:
        with running(Sink(), basic_auth=verifier) as rx:
            r = post(rx, body)
            assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Basic")
            assert post(rx, body, {**PROTOBUF, "Authorization": bad}).status_code == 401
            assert post(rx, body, {**PROTOBUF, "Authorization": good}).status_code == 200
            channel, client = stub(rx)
            with channel:
                with pytest.raises(grpc.RpcError) as err:
                    client.Export(make_request(1), timeout=BOUND)
                assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
                client.Export(make_request(1), metadata=(("authorization", good),), timeout=BOUND)
            assert rejected(rx, "http", "unauthorized") == 2 and rejected(rx, "grpc", "unauthorized") == 1
            assert received(rx, "http") == 1 and received(rx, "grpc") == 1
    finally:
        verifier.close()


# --------------------------------------------------------------------------- life


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_stop_is_bounded_with_a_request_stuck_in_the_sink_and_frees_the_ports() -> None:
    entered, release = threading.Event(), threading.Event()

    def stuck(request: ExportTraceServiceRequest) -> None:
        entered.set()
        release.wait(30)

    rx = TraceReceiver(stuck, ReceiverLimits(), grpc_address="127.0.0.1:0", http_address="127.0.0.1:0")
    rx.start()
    ports = (rx.grpc_port, rx.http_port)
    assert all(ports)
    pool = ThreadPoolExecutor(2)
    try:
        pool.submit(post, rx, make_request(1).SerializeToString())
        assert entered.wait(BOUND)
        started = time.monotonic()
        rx.stop(0.5)
        # the documented bound is grace + 3 s; the margin covers a loaded machine
        assert time.monotonic() - started < 0.5 + 3 + 2
        assert all(_port_is_free(p) for p in ports if p)
    finally:
        release.set()
        pool.shutdown(wait=True, cancel_futures=True)


def test_a_used_port_is_an_oserror_naming_the_address() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        for grpc_address, http_address in ((address, None), (None, address)):
            rx = TraceReceiver(Sink(), ReceiverLimits(), grpc_address=grpc_address, http_address=http_address)
            with pytest.raises(OSError, match=f"cannot listen on {address}.*address already in use"):
                rx.start()


def test_a_flood_from_a_few_threads_keeps_the_receiver_answering_and_the_counters_whole() -> None:
    """200 requests of 3 spans from 4 threads over both protocols; the span budget (300) runs out
    midway on a frozen clock, so some are refused whole and some dropped after decoding."""
    clock = FakeClock()
    limits = ReceiverLimits(spans_per_second=1, burst_spans=300, max_spans_per_request=3, max_concurrent_requests=8, clock=clock)
    sink = Sink()
    per_request, requests_sent = 3, 200
    body = make_request(per_request).SerializeToString()
    outcomes: list[str] = []
    lock = threading.Lock()
    with running(sink, limits) as rx:

        def client(index: int) -> None:
            channel, grpc_client = stub(rx)
            with channel, http_session() as s:
                for i in range(requests_sent // 4):
                    if (index + i) % 2:
                        r = s.post(url(rx), data=body, headers=PROTOBUF, timeout=BOUND)
                        outcome = str(r.status_code)
                    else:
                        try:
                            grpc_client.Export(make_request(per_request), timeout=BOUND)
                            outcome = "200"
                        except grpc.RpcError as err:
                            outcome = err.code().name
                    with lock:
                        outcomes.append(outcome)

        with ThreadPoolExecutor(4) as pool:
            for f in [pool.submit(client, i) for i in range(4)]:
                f.result(60)
        assert len(outcomes) == requests_sent
        assert set(outcomes) <= {"200", "429", "RESOURCE_EXHAUSTED"}
        accepted = total(rx, "llm_trace_spans_received_total")
        assert accepted == 300 == outcomes.count("200") * per_request == len(sink.names())
        spans_refused_whole = total(rx, "llm_trace_requests_rejected_total") * per_request
        assert accepted + total(rx, "llm_trace_spans_dropped_total") + spans_refused_whole == requests_sent * per_request
        clock.now += 10  # budget back: both protocols still answer
        assert post(rx, body).status_code == 200
        channel, grpc_client = stub(rx)
        with channel:
            grpc_client.Export(make_request(per_request), timeout=BOUND)


# --------------------------------------------------------------------------- pieces


def test_token_bucket_takes_all_or_nothing() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=100, burst=10, clock=clock)
    assert bucket.take(10) == 0.0
    assert bucket.take(1) == pytest.approx(0.01)
    clock.now += 0.05
    assert bucket.take(6) == pytest.approx(0.01)  # 5 there, nothing taken
    assert bucket.take(5) == 0.0
    clock.now += 100
    assert bucket.available() == 10  # never above the burst
    clock.now -= 50  # a clock that steps back refills nothing
    assert bucket.available() == 10
    assert retry_after_seconds(0.01) == 1 and retry_after_seconds(2.2) == 3


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_body_bytes": 0},
        {"spans_per_second": 0},
        {"spans_per_second": float("inf")},
        {"burst_spans": 10, "max_spans_per_request": 20},
        {"workers": 3, "max_concurrent_requests": 2},
        {"read_timeout": -1},
        {"max_attributes_per_span": True},
    ],
)
def test_limits_refuse_values_that_cannot_work(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="receiver limits"):
        ReceiverLimits(**kwargs)


def test_addresses() -> None:
    assert parse_address("127.0.0.1:0", "x") == ("127.0.0.1", 0)
    assert parse_address(":4318", "x") == ("0.0.0.0", 4318)
    assert parse_address("[::1]:4317", "x") == ("::1", 4317)
    for bad in ("4317", "host:port", "h:70000", "bad host:1"):
        with pytest.raises(ValueError, match="OTLP"):
            parse_address(bad, "OTLP/gRPC address")
    with pytest.raises(ValueError, match="gRPC address, an HTTP address or both"):
        TraceReceiver(Sink(), ReceiverLimits())
