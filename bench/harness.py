"""Shared benchmark plumbing: start an exporter and fake engines, scrape, percentiles.

Everything binds 127.0.0.1 and every process started here is stopped by the
context managers, even when a benchmark fails half-way.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

import requests

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "exporter" / "data" / "traces" / "kernels.csv"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


class _StaticHandler(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        return


@contextlib.contextmanager
def static_engine(text: str) -> Iterator[str]:
    """A real HTTP server answering every GET with `text`; yields its /metrics URL."""
    handler = type("Handler", (_StaticHandler,), {"body": text.encode()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def replay_copies(gpus: int) -> Iterator[str]:
    """`gpus` copies of the recorded H200 trace; yields a --gpu-source value."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    try:
        paths = []
        for i in range(gpus):
            p = tmp / f"gpu{i}.csv"
            shutil.copy(TRACE, p)
            paths.append(str(p))
        yield "replay:" + ",".join(paths)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def exporter(args: list[str], ready_sources: int = 1, timeout: float = 60.0) -> Iterator[tuple[subprocess.Popen, str]]:
    """`llm-layer-exporter serve ARGS` as a subprocess; yields (process, base URL).

    Its output goes to a temporary file, never to a pipe nobody reads: a full
    pipe would block the exporter's logging and with it the thread that logs.
    """
    port = free_port()
    cmd = [sys.executable, "-m", "exporter", "serve", "--listen-address", f"127.0.0.1:{port}", *args]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"

    def log_tail() -> str:
        log.seek(0)
        return log.read().decode(errors="replace")[-2000:]

    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"exporter exited with {proc.returncode}: {log_tail()}")
            try:
                text = requests.get(base + "/metrics", timeout=2).text
                if text.count("llm_exporter_source_up{") >= ready_sources and ' 0.0\n' not in _up_lines(text):
                    break
            except requests.RequestException:
                pass
            time.sleep(0.2)
        else:
            raise RuntimeError(f"exporter did not become ready in time: {log_tail()}")
        yield proc, base
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


def _up_lines(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if line.startswith("llm_exporter_source_up{")) + "\n"


def time_scrapes(url: str, n: int) -> list[float]:
    """Sequential scrapes over one keep-alive connection, as Prometheus does."""
    session = requests.Session()
    session.get(url, timeout=5)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = session.get(url, timeout=5)
        r.content  # noqa: B018 - read the body fully
        times.append(time.perf_counter() - t0)
        if r.status_code != 200:
            raise RuntimeError(f"scrape answered {r.status_code}")
    return times
