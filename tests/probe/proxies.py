"""Two tiny proxies of our own, on 127.0.0.1, for the front-end and hung-engine proofs.

* ``SlowProxy`` — a TCP proxy that holds the first byte of every answer for ``delay``
  seconds, then streams everything else as it comes: a front end that adds a fixed time
  to the first byte (what a buffering gateway or a slow API server does).
* ``FrozenMetricsProxy`` — serves ``GET /metrics`` from the engine while it answers
  within ``upstream_timeout``, and its *last* answer once it does not: an engine core
  that hangs while its HTTP front end keeps answering with counters that no longer move.

Every loop is bounded by a stop event and short socket timeouts; ``stop()`` closes every
socket and joins every thread it started.
"""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support.ports import free_port


class SlowProxy:
    """127.0.0.1:``port`` -> 127.0.0.1:``upstream_port``, the first answer byte held ``delay`` s."""

    def __init__(self, upstream_port: int, delay: float) -> None:
        self.upstream_port = upstream_port
        self.delay = delay
        self.port = free_port()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._listener.settimeout(0.2)
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _spawn(self, target: Callable[..., object], *args: object) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        with self._lock:
            self._threads.append(t)
        t.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._spawn(self._handle, client)

    def _handle(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
        except OSError:
            client.close()
            return
        with self._lock:
            self._sockets += [client, upstream]
        self._spawn(self._pump, client, upstream, 0.0)
        try:
            self._pump(upstream, client, self.delay)
        finally:  # the answer is over: close both ends (the other pump then ends too)
            for s in (client, upstream):
                try:
                    s.close()
                except OSError:
                    pass

    def _pump(self, src: socket.socket, dst: socket.socket, first_delay: float) -> None:
        src.settimeout(0.2)
        held = first_delay > 0
        try:
            while not self._stop.is_set():
                try:
                    data = src.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    break
                if held:
                    held = False
                    if self._stop.wait(first_delay):
                        return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (dst,):
                try:
                    s.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

    def __enter__(self) -> SlowProxy:
        self._spawn(self._accept)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._listener.close()
        with self._lock:
            sockets, threads = list(self._sockets), list(self._threads)
        for s in sockets:
            try:
                s.close()
            except OSError:
                pass
        for t in threads:
            t.join(2)


class FrozenMetricsProxy:
    """``GET /metrics`` of 127.0.0.1:``upstream_port``, or its last answer while the engine does not answer."""

    def __init__(self, upstream_port: int, upstream_timeout: float = 0.5) -> None:
        self.upstream_port = upstream_port
        self.upstream_timeout = upstream_timeout
        self.last: bytes | None = None
        self.stale_answers = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                body = proxy._fetch()
                if body is None:
                    self.send_error(503)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/metrics"

    def _fetch(self) -> bytes | None:
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=self.upstream_timeout)
        try:
            conn.request("GET", "/metrics")
            resp = conn.getresponse()
            if resp.status == 200:
                self.last = resp.read()
                return self.last
        except (OSError, http.client.HTTPException):
            pass
        finally:
            conn.close()
        self.stale_answers += 1
        return self.last

    def __enter__(self) -> FrozenMetricsProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
