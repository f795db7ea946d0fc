"""Real local HTTP servers that misbehave on purpose, for EngineSource fault tests.

Each binds 127.0.0.1 on a free port, runs in a daemon thread, bounds every wait
with an Event that ``stop()`` sets, and is a context manager that stops itself.
"""

from __future__ import annotations

import socket
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Behaviour:
    """What the next GET /metrics gets; tests change it between scrapes."""

    body: bytes = b""
    status: int = 200
    delay: float = 0.0  # seconds before the status line
    trickle_gap: float = 0.0  # > 0: send the body in 10 pieces with this gap
    send_length: bool = True  # False: close-delimited body (HTTP/1.0 style)
    seen_headers: list[dict[str, str]] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        b = self.server.behaviour
        b.seen_headers.append(dict(self.headers.items()))
        if b.delay and self.server.stopping.wait(b.delay):
            return
        self.send_response(b.status)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        if b.send_length:
            self.send_header("Content-Length", str(len(b.body)))
        self.end_headers()
        if b.trickle_gap:
            step = max(1, len(b.body) // 10)
            for i in range(0, len(b.body), step):
                self.wfile.write(b.body[i : i + step])
                self.wfile.flush()
                if self.server.stopping.wait(b.trickle_gap):
                    return
        else:
            self.wfile.write(b.body)

    def log_message(self, format: str, *args: object) -> None:  # keep test output clean
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    behaviour: Behaviour
    stopping: threading.Event


class EngineHTTPServer:
    """A /metrics endpoint whose answers follow ``self.behaviour``."""

    def __init__(self, behaviour: Behaviour | None = None, tls: ssl.SSLContext | None = None) -> None:
        self.behaviour = behaviour or Behaviour()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.behaviour = self.behaviour
        self._server.stopping = threading.Event()
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self.scheme = "https" if tls is not None else "http"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{self.scheme}://{host}:{port}/metrics"

    def __enter__(self) -> "EngineHTTPServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


class ClosingServer:
    """Accepts TCP connections and closes them at once: a server refusing to answer."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        self._sock.settimeout(0.05)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._sock.getsockname()[:2]
        return f"http://{host}:{port}/metrics"

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            conn.close()

    def __enter__(self) -> "ClosingServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()


def closed_port_url() -> str:
    """A URL on a port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"
