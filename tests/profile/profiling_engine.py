"""A fake vLLM on 127.0.0.1 with profiler routes: /metrics, POST /start_profile, POST /stop_profile.

Why a fake here: no GPU profiler runs on a CPU runner, so the trace a stop writes
is one of tests/profile/traces.py's (``mode``: ``gpu``, ``cpu``, ``empty``: annotations
only, ``garbled``, ``deep``: one event nested 100,000 levels, ``huge``, ``none``); the
HTTP exchange and the files are real. ``routes=False`` answers 404 on the profiler
routes, as vLLM does when started without a profiler; ``release`` cleared holds
/stop_profile (bounded), keeping a profile running.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.profile.traces import cpu_trace, gpu_trace, write_trace
from tests.support.exposition import vllm_exposition

if TYPE_CHECKING:
    from typing_extensions import Self

#: longest a held /stop_profile waits, whatever the test does
MAX_HOLD_S = 30.0
KERNEL_US = {"attention": 620.0, "gemm": 250.0, "communication": 60.0, "memory_copy": 40.0, "sampling": 20.0, "other": 10.0}


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        body = self.server.engine.metrics if self.path == "/metrics" else b"not found\n"
        self._answer(200 if self.path == "/metrics" else 404, body)

    def do_POST(self) -> None:
        engine = self.server.engine
        length = int(self.headers.get("Content-Length") or 0)
        engine.bodies.append(self.rfile.read(min(length, 65536)))
        engine.headers.append(dict(self.headers.items()))
        if self.path not in ("/start_profile", "/stop_profile") or not engine.routes:
            self._answer(404, b'{"detail":"Not Found"}')
            return
        engine.calls.append(self.path)
        if self.path == "/start_profile":
            engine.started.set()
        else:
            engine.release.wait(MAX_HOLD_S)  # a test holds the stop to keep a profile running
            engine.write_trace()
        self._answer(200, b"")

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    engine: ProfilingEngine


class ProfilingEngine:
    """``with ProfilingEngine(trace_dir) as e:`` a server answering at ``e.url``."""

    def __init__(self, trace_dir: Path) -> None:
        self.trace_dir = trace_dir
        self.mode = "gpu"
        self.routes = True
        self.calls: list[str] = []
        #: the body and headers of every POST, in order
        self.bodies: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.started = threading.Event()
        #: cleared: /stop_profile waits (at most MAX_HOLD_S) until it is set again
        self.release = threading.Event()
        self.release.set()
        self.written = 0
        self.metrics = vllm_exposition(1).encode()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.engine = self
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/metrics"

    def write_trace(self) -> None:
        """What the torch profiler writes on stop, per ``mode``."""
        self.written += 1
        path = self.trace_dir / f"fake-vllm_rank0.{self.written}.pt.trace.json.gz"
        trace: dict[str, Any]
        if self.mode == "none":
            return
        if self.mode == "garbled":
            path.write_bytes(b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": oops}]}')
            return
        if self.mode == "deep":  # one event nested far past what the C decoder recurses through
            path.write_bytes(b'{"traceEvents": [{"ph": "X", "args": ' + b"[" * 100_000 + b"]" * 100_000 + b"}]}")
            return
        if self.mode == "cpu":
            trace = cpu_trace()
        elif self.mode == "empty":  # a profiler started without its activities: no operator, no kernel
            trace = {k: v for k, v in cpu_trace().items() if k != "traceEvents"}
            trace["traceEvents"] = [{"ph": "X", "cat": "user_annotation", "name": "step", "ts": 1.0, "dur": 5.0}]
        elif self.mode == "huge":
            trace = gpu_trace(KERNEL_US, repeats=1500)  # a few MB once inflated, over the test's 1 MiB cap
        else:
            trace = gpu_trace(KERNEL_US)
        write_trace(path, trace)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
