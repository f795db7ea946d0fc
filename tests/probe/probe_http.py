"""A real local OpenAI-compatible streaming server that misbehaves on purpose, for probe tests.

It binds 127.0.0.1 on a free port, runs in daemon threads, bounds every wait by an
Event that ``stop()`` sets, and stops itself as a context manager. It answers
``/v1/completions`` and ``/v1/chat/completions`` with a chunked SSE stream shaped by
``Behaviour``, ``/v1/models`` with one model, and ``/metrics`` with llama.cpp-style
counters that move with every completion it serves (so the probe's frozen-engine
check and the exporter's engine source have something real to read).
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast


@dataclass
class Behaviour:
    """What the next completion gets; tests change it between probes."""

    tokens: int = 4
    gap: float = 0.005
    #: seconds before the status line
    header_delay: float = 0.0
    #: seconds between the headers and the first token
    first_delay: float = 0.0
    #: ok | stall (hang after the first token) | trickle (keep-alive bytes, never a token)
    #: | bad_json | no_done (close after the tokens) | error_event | json_body | close (no answer)
    #: | no_token (DONE without any text) | deep_json (an event nested 30 000 levels: 60 KB)
    #: | huge_event (one event of five 60 KB data lines)
    mode: str = "ok"
    status: int = 200
    usage: bool = True
    #: llama.cpp-style timings.prompt_ms in the last chunk (None: not sent)
    prompt_ms: float | None = None
    model: str = "tiny-model"
    models_status: int = 200
    #: raw /v1/models body instead of the one-model list (None: the list)
    models_body: bytes | None = None


@dataclass
class Record:
    """What the server saw."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    served: int = 0
    prompt_tokens: int = 0
    generated: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    #: this request is counted in ``Record.in_flight`` and not yet counted out (``_done``)
    _counted = False

    def log_message(self, format: str, *args: object) -> None:
        pass

    # ------------------------------------------------------------------ plumbing

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _json(self, status: int, doc: object) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _wait(self, seconds: float) -> bool:
        """Sleep unless the server stops; True when it stopped."""
        return seconds > 0 and self.server.stopping.wait(seconds)

    # ------------------------------------------------------------------ routes

    def do_GET(self) -> None:
        b, rec = self.server.behaviour, self.server.record
        if self.path == "/v1/models":
            rec.requests.append({"path": self.path, "headers": dict(self.headers.items())})
            if b.models_status != 200:
                self._json(b.models_status, {"error": "no"})
            elif b.models_body is not None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(b.models_body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(b.models_body)
            else:
                self._json(200, {"object": "list", "data": [{"id": b.model, "object": "model"}]})
            return
        if self.path == "/metrics":
            with rec.lock:
                text = (
                    "# TYPE llamacpp:prompt_tokens_total counter\n"
                    f"llamacpp:prompt_tokens_total {rec.prompt_tokens}\n"
                    "# TYPE llamacpp:prompt_tokens_cached_total counter\n"
                    "llamacpp:prompt_tokens_cached_total 0\n"
                    "# TYPE llamacpp:tokens_predicted_total counter\n"
                    f"llamacpp:tokens_predicted_total {rec.generated}\n"
                    "# TYPE llamacpp:requests_processing gauge\n"
                    f"llamacpp:requests_processing {rec.in_flight}\n"
                    "# TYPE llamacpp:requests_deferred gauge\n"
                    "llamacpp:requests_deferred 0\n"
                )
            body = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        b, rec = self.server.behaviour, self.server.record
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        with rec.lock:
            rec.requests.append({"path": self.path, "headers": dict(self.headers.items()), "body": body})
            rec.in_flight += 1
            rec.max_in_flight = max(rec.max_in_flight, rec.in_flight)
        self._counted = True
        try:
            self._complete(b, rec, body)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
        finally:
            self._done(rec)

    def _done(self, rec: Record) -> None:
        """The request leaves ``in_flight`` (once). Called before the last chunk is written: once the
        client has that chunk it may send its next request, possibly before this thread runs again,
        so counting it out afterwards would read a client's strictly sequential requests as overlapping."""
        if self._counted:
            self._counted = False
            with rec.lock:
                rec.in_flight -= 1

    def _complete(self, b: Behaviour, rec: Record, body: dict[str, Any]) -> None:
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            self._json(404, {"error": "not found"})
            return
        chat = self.path.endswith("chat/completions")
        if self._wait(b.header_delay):
            return
        if b.mode == "close":
            self.close_connection = True
            return
        if b.status != 200:
            self._json(b.status, {"error": {"message": "nope"}})
            return
        if b.mode == "json_body":
            self._json(200, {"choices": [{"text": "hi"}]})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.flush()
        if self._wait(b.first_delay):
            return
        if b.mode == "trickle":
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not self._wait(0.2):
                self._chunk(b": keep-alive\n\n")
            return
        if b.mode == "bad_json":
            self._chunk(b"data: {not json\n\n")
            return
        if b.mode == "deep_json":
            self._chunk(b"data: " + b"[" * 30_000 + b"]" * 30_000 + b"\n\n")
            return
        if b.mode == "huge_event":
            line = b'data: {"pad": "' + b"x" * 60_000 + b'"}\n'
            for _ in range(5):
                self._chunk(line)
            self._chunk(b"\n")
            return
        if b.mode == "error_event":
            self._chunk(b'data: {"error": {"message": "engine failed"}}\n\n')
            return
        prompt_tokens = 5
        with rec.lock:
            rec.prompt_tokens += prompt_tokens
        n = 0 if b.mode == "no_token" else b.tokens
        for i in range(n):
            delta = (
                {"choices": [{"index": 0, "delta": {"content": f"t{i}"}, "finish_reason": None}]}
                if chat
                else {"choices": [{"index": 0, "text": f"t{i}", "finish_reason": None}]}
            )
            self._chunk(b"data: " + json.dumps(delta).encode() + b"\n\n")
            with rec.lock:
                rec.generated += 1
            if b.mode == "stall" and i == 0:
                self._wait(60)
                return
            if i + 1 < n and self._wait(b.gap):
                return
        if b.mode == "no_done":
            return
        last: dict[str, Any] = {"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}
        if b.usage:
            last["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
        if b.prompt_ms is not None:
            last["timings"] = {"prompt_n": prompt_tokens, "prompt_ms": b.prompt_ms}
        self._done(rec)
        self._chunk(b"data: " + json.dumps(last).encode() + b"\n\n")
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")
        with rec.lock:
            rec.served += 1


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    behaviour: Behaviour
    record: Record
    stopping: threading.Event


class ProbeHTTPServer:
    """The fake engine; ``url`` is its base URL (``http://127.0.0.1:PORT``, ``https://`` with ``tls``)."""

    def __init__(self, behaviour: Behaviour | None = None, tls: ssl.SSLContext | None = None) -> None:
        self.behaviour = behaviour or Behaviour()
        self.record = Record()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self.scheme = "https" if tls is not None else "http"
        if tls is not None:  # https: each accepted connection gets the context's certificate of that moment
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self._server.behaviour = self.behaviour
        self._server.record = self.record
        self._server.stopping = threading.Event()
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        host, port = cast(tuple[str, int], self._server.server_address[:2])  # an AF_INET server: (host, port)
        return f"{self.scheme}://{host}:{port}"

    def completions(self) -> list[dict[str, Any]]:
        return [r for r in self.record.requests if r["path"].startswith("/v1/") and "completions" in r["path"]]

    def __enter__(self) -> ProbeHTTPServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._server.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def outside_engine(base: str, probe_url: str | None, n: int, timeout: float) -> list[tuple[float, float]]:
    """(time outside the engine, client-seen TTFT) of ``n`` in-process probes of the fake engine at ``base``,
    through ``probe_url`` when given; each must answer and be judged by the engine's own prefill report.
    Shared by tests/probe/test_probe_front_end.py and bench/probe_accuracy.py."""
    from exporter.engines.config import EngineConfig
    from exporter.probe.config import ProbeConfig
    from exporter.probe.source import ProbeSource
    from exporter.store import SnapshotStore

    probe = ProbeConfig(interval=2.0, timeout=timeout, url=probe_url)
    src = ProbeSource(EngineConfig(url=base + "/metrics", name="fake", interval=1.0, timeout=0.5, probe=probe), SnapshotStore())
    out = []
    for _ in range(n):
        src.sample()
        assert src.last is not None and src.last.result == "ok", src.last and src.last.detail
        assert src.last_method == "engine_reported"
        assert src.last_outside is not None and src.last.ttft is not None
        out.append((src.last_outside, src.last.ttft))
    return out
