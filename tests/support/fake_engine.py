"""Fake engines on 127.0.0.1: real sockets that answer /metrics the way a test switches them to.

``FakeEngine`` is an HTTP server (``http.server``) whose next answer follows its
fields: ``body``, ``status``, ``delay`` (seconds before the status line; a test
that wants a hang sets a long one), ``framing`` (how the body is delimited) and
``trickle_gap`` (the body in ten pieces, this far apart); ``down`` closes the
listening socket and re-opens the same port when cleared. ``set()`` changes
fields at once and wakes every handler waiting out a delay, which then answers
the new behaviour, as an engine that recovers would.

``RawServer`` writes its answers by hand (any framing, any pace, any redirect),
for the fetch path's hostile-server tests; ``closing_server()`` answers nothing.

Every wait is bounded (``MAX_HANDLER_WAIT_S``, the server's stop event), every
thread is a daemon, and each server stops itself on leaving its ``with`` block.
"""

from __future__ import annotations

import socket
import ssl
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # typing.Self is Python 3.11+; the project supports 3.10
    from typing_extensions import Self

#: longest any handler waits out a delay, whatever the test does
MAX_HANDLER_WAIT_S = 30.0
#: ``length``: Content-Length; ``close``: no length, the body ends when the connection does;
#: ``short``: declares the whole body's length, sends half of it and closes
Framing = Literal["length", "close", "short"]
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        engine = self.server.engine
        engine.seen_headers.append(dict(self.headers.items()))
        b = engine.behaviour()
        if b["delay"]:
            woken = b["release"].wait(min(b["delay"], MAX_HANDLER_WAIT_S))
            if engine.stopping.is_set():
                return
            if woken:  # set() changed the behaviour mid-wait: answer the new one
                b = engine.behaviour()
        body: bytes = b["body"]
        framing: Framing = b["framing"]
        self.send_response(b["status"])
        self.send_header("Content-Type", CONTENT_TYPE)
        if framing != "close":
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if framing == "short":
            body = body[: len(body) // 2]
        gap = b["trickle_gap"]
        step = max(1, len(body) // 10) if gap else 256 * 1024
        for i in range(0, len(body), step):
            self.wfile.write(body[i : i + step])
            if gap:
                self.wfile.flush()
                if engine.stopping.wait(gap):
                    return
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:  # keep test output clean
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    engine: FakeEngine

    def handle_error(self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any) -> None:
        """A client that hangs up early (a cap hit, a timeout) is expected here; say nothing."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeEngine:
    """``with FakeEngine(text) as engine: engine.url`` - an engine /metrics endpoint tests switch at run time."""

    def __init__(
        self,
        body: bytes | str = b"",
        status: int = 200,
        *,
        delay: float = 0.0,
        framing: Framing = "length",
        trickle_gap: float = 0.0,
        tls: ssl.SSLContext | None = None,
        port: int = 0,
    ) -> None:
        self._initial: dict[str, Any] = {
            "body": _bytes(body),
            "status": status,
            "delay": delay,
            "framing": framing,
            "trickle_gap": trickle_gap,
            "down": False,
        }
        self.body: bytes = b""
        self.status = status
        self.delay = delay
        self.framing: Framing = framing
        self.trickle_gap = trickle_gap
        self.down = False
        self.__dict__.update(self._initial)
        #: request headers of every GET, oldest first
        self.seen_headers: list[dict[str, str]] = []
        self.stopping = threading.Event()
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._tls = tls
        self.scheme = "https" if tls is not None else "http"
        #: 0: any free port (the default); a documented port where a test needs one (OSError if taken)
        self.port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._listen()

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}/metrics"

    def behaviour(self) -> dict[str, Any]:
        """What a request arriving now gets (read under the lock, so never half of a ``set()``)."""
        with self._lock:
            return {
                "body": self.body,
                "status": self.status,
                "delay": self.delay,
                "framing": self.framing,
                "trickle_gap": self.trickle_gap,
                "release": self._release,
            }

    def set(self, **changes: Any) -> None:
        """Change fields (``body`` may be str), wake the handlers waiting out a delay, go down or up."""
        unknown = set(changes) - set(self._initial)
        assert not unknown, f"FakeEngine has no field {sorted(unknown)}"
        if "body" in changes:
            changes["body"] = _bytes(changes["body"])
        with self._lock:
            old, self._release = self._release, threading.Event()
            self.__dict__.update(changes)
            old.set()
            if self.down:
                self._unlisten()
            elif self._server is None:
                self._listen()

    def reset(self) -> None:
        """Back to the behaviour it was built with (and listening)."""
        self.set(**self._initial)

    def _listen(self) -> None:
        srv = _Server(("127.0.0.1", self.port), _Handler)
        srv.engine = self
        if self._tls is not None:
            srv.socket = self._tls.wrap_socket(srv.socket, server_side=True)
        self.port = srv.server_address[1]
        self._server = srv
        self._thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def _unlisten(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            assert self._thread is not None
            self._thread.join(5)
            self._server = None

    def close(self) -> None:
        self.stopping.set()
        with self._lock:
            self._release.set()
            self._unlisten()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _bytes(body: bytes | str) -> bytes:
    return body.encode() if isinstance(body, str) else body


# --------------------------------------------------------------------------- hand-written answers

Handler = Callable[[socket.socket, "RawServer"], None]


class RawServer:
    """Accepts connections on 127.0.0.1, reads each request head, then lets ``handler`` answer."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[bytes] = []
        self.sent = 0  # body bytes the handlers wrote, all connections together
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.05)
        self.port = int(self._sock.getsockname()[1])
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._loop, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def _loop(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        head = b""
        try:
            while b"\r\n\r\n" not in head and len(head) < 65536:
                data = conn.recv(4096)
                if not data:
                    return
                head += data
            with self._lock:
                self.requests.append(head)
            self.handler(conn, self)
        except OSError:  # the client gave up (a cap hit, a timeout): expected here
            pass
        finally:
            conn.close()

    def send(self, conn: socket.socket, data: bytes) -> None:
        conn.sendall(data)
        with self._lock:
            self.sent += len(data)

    def __enter__(self) -> Self:
        self._accept.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self._accept.join(5)
        self._sock.close()
        for t in self._threads:
            t.join(5)


def head_for(framing: str, length: int, status: str = "200 OK", extra: str = "") -> bytes:
    """A response head for ``framing``: ``content-length``, ``chunked`` or ``close``."""
    lines = [f"HTTP/1.1 {status}", "Content-Type: text/plain; version=0.0.4"]
    if framing == "content-length":
        lines.append(f"Content-Length: {length}")
    elif framing == "chunked":
        lines.append("Transfer-Encoding: chunked")
    else:
        lines.append("Connection: close")
    if extra:
        lines.append(extra)
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def trickle(framing: str, body: bytes, gap: float) -> Handler:
    """Headers at once, then the body one byte per ``gap`` seconds in the given framing."""

    def handle(conn: socket.socket, srv: RawServer) -> None:
        srv.send(conn, head_for(framing, len(body)))
        for i in range(len(body)):
            piece = body[i : i + 1]
            srv.send(conn, b"1\r\n" + piece + b"\r\n" if framing == "chunked" else piece)
            if srv.stopping.wait(gap):
                return

    return handle


def whole(framing: str, body: bytes, step: int = 4096, extra: str = "") -> Handler:
    """The whole body at once, in ``step``-byte writes (chunks, for chunked)."""

    def handle(conn: socket.socket, srv: RawServer) -> None:
        srv.send(conn, head_for(framing, len(body), extra=extra))
        for i in range(0, len(body), step):
            piece = body[i : i + step]
            srv.send(conn, b"%x;ext=1\r\n%s\r\n" % (len(piece), piece) if framing == "chunked" else piece)
        if framing == "chunked":
            srv.send(conn, b"0\r\nX-Trailer: yes\r\n\r\n")

    return handle


def redirect(location: Callable[[RawServer], str], status: int = 302) -> Handler:
    """A redirect to ``location(server)`` (so a test can point it back at the same server)."""

    def handle(conn: socket.socket, srv: RawServer) -> None:
        srv.send(conn, f"HTTP/1.1 {status} Found\r\nLocation: {location(srv)}\r\nContent-Length: 0\r\n\r\n".encode())

    return handle


def closing_server() -> RawServer:
    """Reads each request, then closes the connection without a word: a server refusing to answer."""
    return RawServer(lambda conn, srv: None)
