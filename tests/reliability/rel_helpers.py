"""Real parts for the reliability tests: a switchable engine, a `serve` subprocess, a watchdog.

Everything binds 127.0.0.1, every wait is bounded, and every server, thread and
process started here is stopped by its context manager.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Iterable

import requests
from prometheus_client.parser import text_string_to_metric_families

from exporter.schema import all_series_names

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "exporter" / "data" / "traces" / "kernels.csv"
SHIM_DIR = Path(__file__).resolve().parent / "nvml_shim"
SCHEMA_SERIES = all_series_names()

#: Longest any handler thread of the switchable engine waits, whatever happens.
MAX_HANDLER_WAIT_S = 30.0


# --------------------------------------------------------------------------- engine


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        owner = self.server.owner
        mode, body, release = owner.mode, owner.body, owner.release
        if mode == "hang":  # accept, read the request, never answer until released
            release.wait(MAX_HANDLER_WAIT_S)
            mode, body = owner.mode, owner.body
        elif mode == "slow":  # answer, but only after the client's timeout
            release.wait(owner.slow_delay)
            body = owner.healthy_body
            mode = "healthy"
        if mode == "status_503":
            self._answer(503, b"<html><body>503 Service Unavailable</body></html>\n")
        elif mode == "truncated_length":  # declare the full length, send half, close
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
        elif mode in ("huge_chunked", "truncated", "many_series_chunked"):  # close-delimited body
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            for i in range(0, len(body), 256 * 1024):
                self.wfile.write(body[i : i + 256 * 1024])
            self.close_connection = True
        else:
            self._answer(200, body)

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # keep test output clean
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: "SwitchableEngine"

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hangs up early (a cap hit, a timeout) is expected here; say nothing."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class SwitchableEngine:
    """An engine /metrics endpoint whose behaviour tests switch at run time.

    Modes: ``healthy`` (the healthy body), ``down`` (listening socket closed; the
    port is re-bound on the next mode), ``hang`` (accepts, never answers until the
    mode changes), ``slow`` (healthy body after ``slow_delay`` s), ``status_503``,
    ``body`` (any bytes with a Content-Length: garbage, 10 MB, 100 000 series,
    fuzz), ``truncated`` / ``huge_chunked`` / ``many_series_chunked`` (close-delimited
    bodies), ``truncated_length`` (declares the length, sends half, closes).
    """

    def __init__(self, healthy_body: bytes, slow_delay: float = 2.0) -> None:
        self.healthy_body = healthy_body
        self.slow_delay = slow_delay
        self.mode = "healthy"
        self.body = healthy_body
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self._start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def _start(self) -> None:
        srv = _Server(("127.0.0.1", self.port), _Handler)
        srv.owner = self
        self.port = srv.server_address[1]
        self._server = srv
        self._thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def _stop_listening(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            assert self._thread is not None
            self._thread.join(5)
            self._server = None

    def set(self, mode: str, body: bytes | None = None) -> None:
        with self._lock:
            old_release = self.release
            self.release = threading.Event()
            self.mode = mode
            self.body = self.healthy_body if body is None else body
            old_release.set()  # wake hanging / slow handlers
            if mode == "down":
                self._stop_listening()
            elif self._server is None:
                self._start()

    def close(self) -> None:
        with self._lock:
            self.release.set()
            self._stop_listening()

    def __enter__(self) -> "SwitchableEngine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------- metrics


class Metrics:
    """One parsed /metrics body: value lookups by sample name and label subset."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: list[tuple[str, dict[str, str], float]] = []
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                self.samples.append((s.name, dict(s.labels), s.value))

    def find(self, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
        return [(lab, v) for n, lab, v in self.samples if n == name and all(lab.get(k) == x for k, x in labels.items())]

    def get(self, name: str, default: float | None = None, **labels: str) -> float | None:
        found = self.find(name, **labels)
        return found[0][1] if found else default

    def up(self, source: str) -> float | None:
        return self.get("llm_exporter_source_up", source=source)

    def errors(self, source: str, reason: str) -> float:
        return self.get("llm_exporter_source_errors_total", 0.0, source=source, reason=reason) or 0.0

    def last_success(self, source: str) -> float:
        return self.get("llm_exporter_source_last_success_timestamp_seconds", 0.0, source=source) or 0.0


def foreign_names(text: str) -> set[str]:
    """Sample names in an exposition that exporter.schema does not declare."""
    names = set()
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        end = min((i for i in (line.find("{"), line.find(" ")) if i >= 0), default=len(line))
        names.add(line[:end])
    return names - SCHEMA_SERIES


# --------------------------------------------------------------------------- serve subprocess


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Callable[[], object], timeout: float, interval: float = 0.1, what: str = "condition") -> object:
    """Poll until predicate() is truthy (exceptions count as false); AssertionError past the deadline."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - a poll that failed is a poll that said no
            last_exc = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}" + (f" (last error: {last_exc!r})" if last_exc else ""))
        time.sleep(interval)


class Serve:
    """`python3 -m exporter serve ARGS` on a free 127.0.0.1 port; stderr goes to a file."""

    def __init__(self, args: Iterable[str], env: dict[str, str] | None = None, start_timeout: float = 60.0) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self._logdir = Path(tempfile.mkdtemp(prefix="rel-serve-"))
        self.log_path = self._logdir / "stderr.log"
        self._log = open(self.log_path, "wb")
        cmd = [sys.executable, "-m", "exporter", "serve", "--listen-address", f"127.0.0.1:{self.port}", *args]
        full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=self._log, stderr=subprocess.STDOUT)
        self.session = requests.Session()
        self.session.trust_env = False
        try:
            wait_until(self._started, start_timeout, 0.2, "the exporter to serve /metrics")
        except BaseException:
            self.stop()
            raise

    def _started(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"exporter exited with {self.proc.returncode}: {self.log_tail()}")
        return self.session.get(self.base + "/metrics", timeout=2).status_code == 200

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def check_clean(self) -> None:
        """No source failed for an unexpected reason and nothing logged a traceback."""
        m = self.metrics(timeout=2.0)
        internal = [lab["source"] for lab, v in m.find("llm_exporter_source_errors_total", reason="internal") if v]
        assert not internal, f"sources failed with reason internal (an exception escaped): {internal}\n{self.log_tail()}"
        log = self.log_path.read_text(errors="replace")
        assert "Traceback" not in log, f"the exporter logged a traceback:\n{log[-3000:]}"

    def metrics(self, timeout: float = 1.0) -> Metrics:
        r = self.session.get(self.base + "/metrics", timeout=timeout)
        r.raise_for_status()
        return Metrics(r.text)

    def wait_metrics(self, predicate: Callable[[Metrics], object], timeout: float, what: str) -> Metrics:
        """Scrape until predicate(metrics) holds; returns those metrics."""
        found: list[Metrics] = []

        def check() -> bool:
            m = self.metrics(timeout=2.0)
            if predicate(m):
                found.append(m)
                return True
            return False

        try:
            wait_until(check, timeout, 0.15, what)
        except AssertionError as err:
            raise AssertionError(f"{err}\n--- exporter log tail ---\n{self.log_tail()}") from None
        return found[0]

    def stop(self) -> None:
        self.session.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()
        shutil.rmtree(self._logdir, ignore_errors=True)

    def __enter__(self) -> "Serve":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Watchdog:
    """Scrapes /metrics every `period` s with a 1 s timeout; records every miss and foreign name.

    A miss is anything but a 200 answered within the timeout. This is the
    issue's liveness bound ("/metrics keeps answering 200 within 1 s"), checked
    continuously rather than only at the moments a test polls.
    """

    def __init__(self, base: str, period: float = 0.25, timeout: float = 1.0) -> None:
        self.url = base + "/metrics"
        self.period = period
        self.timeout = timeout
        self.failures: list[str] = []
        self.foreign: set[str] = set()
        self.scrapes = 0
        self.slowest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="watchdog", daemon=True)

    def _loop(self) -> None:
        session = requests.Session()
        session.trust_env = False
        while not self._stop.is_set():
            t0 = time.perf_counter()
            try:
                r = session.get(self.url, timeout=self.timeout)
                body = r.text
                if r.status_code != 200:
                    self.failures.append(f"HTTP {r.status_code}")
                else:
                    self.foreign |= foreign_names(body)
            except requests.RequestException as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")
            self.slowest = max(self.slowest, time.perf_counter() - t0)
            self.scrapes += 1
            self._stop.wait(self.period)
        session.close()

    def check(self) -> None:
        assert not self.failures, f"/metrics missed the 1 s liveness bound: {self.failures[:5]}"
        assert not self.foreign, f"/metrics served names outside exporter.schema: {sorted(self.foreign)[:10]}"

    def __enter__(self) -> "Watchdog":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def replay_copies(directory: Path, gpus: int) -> list[Path]:
    """`gpus` copies of the recorded H200 trace in `directory`."""
    paths = []
    for i in range(gpus):
        p = directory / f"gpu{i}.csv"
        shutil.copy(TRACE, p)
        paths.append(p)
    return paths
