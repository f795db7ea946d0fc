"""RSS of a live `serve` over rounds of hostile engine bodies: the plateau, per round.

    python3 -m bench.memory_rounds                 # 3 rounds, the exporter as shipped
    python3 -m bench.memory_rounds --compare       # the same with glibc's default mmap threshold, then pinned
    python3 -m bench.memory_rounds --rounds 5 --phase-seconds 20

Why: issue 25's memory contract is a plateau (no growth over repeated attacks)
under a ceiling. bench/memory_attacks.py proves it with the
kubelet attacks too; this bench isolates the engine bodies and prints the figures
(RSS of the serve process, sampled every 0.25 s): per phase its peak, per round its
peak, so a heap that creeps is seen round by round. ``--compare`` runs the serve
once with ``LLM_EXPORTER_PIN_MMAP_THRESHOLD=false`` (glibc's dynamic threshold)
and once as shipped (exporter/memtrim.py ``pin_mmap_threshold``).

The engine (one local HTTP server) answers, phase by phase: the vLLM fixture
(baseline), the fixture plus a 200 000-series family (dropped by its share), 57 000
series over three mapped families (cut by the budget before parsing), 19 000
series whose labels rotate every scrape; then the fixture again. /metrics is
scraped every 0.25 s, as a busy Prometheus set-up would.
"""

from __future__ import annotations

import argparse
import http.server
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psutil

from bench.memory_attacks import VLLM, many_series, over_budget_series, rotating_series

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("200k_series", "over_budget", "rotating_19k", "normal")


class Engine:
    """The engine's answer follows ``mode``; the rotating body is new on every scrape."""

    def __init__(self) -> None:
        self.mode = "normal"
        self.bodies: dict[str, bytes] = {
            "normal": VLLM,
            "200k_series": many_series(200_000, "x"),
            "over_budget": over_budget_series(19_000),
        }
        self._scrape = 0
        engine = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = engine.body()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def body(self) -> bytes:
        if self.mode == "rotating_19k":
            self._scrape += 1
            return rotating_series(self._scrape)
        return self.bodies[self.mode]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/metrics"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _every(seconds: float, fn: Callable[[], None], stop: threading.Event) -> threading.Thread:
    def loop() -> None:
        while not stop.wait(seconds):
            fn()

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    return t


def run_once(engine: Engine, rounds: int, phase_s: float, pinned: bool) -> dict[str, float]:
    """One serve through the rounds; prints a line per phase and returns the figures."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLM_EXPORTER_")}
    env["LLM_EXPORTER_PIN_MMAP_THRESHOLD"] = "true" if pinned else "false"
    cmd = [sys.executable, "-m", "exporter", "serve", "--engine", engine.url, "--gpu-source", "none"]
    cmd += ["--engine-interval", "1", "--listen", f"127.0.0.1:{port}", "--log-level", "error"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stop = threading.Event()
    samples: list[float] = []
    try:
        ps = psutil.Process(proc.pid)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).read()
                break
            except OSError:
                time.sleep(0.2)
        _every(0.25, lambda: samples.append(ps.memory_info().rss / 2**20), stop)

        def scrape() -> None:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
            except OSError:
                pass

        _every(0.25, scrape, stop)
        engine.mode = "normal"
        time.sleep(phase_s)
        baseline = statistics.median(samples[-8:]) if samples else float("nan")
        label = "pinned" if pinned else "glibc default"
        print(f"[{label}] baseline {baseline:.1f} MiB")
        figures = {"baseline": baseline}
        for r in range(1, rounds + 1):
            peaks = []
            for phase in PHASES:
                start = len(samples)
                engine.mode = phase
                time.sleep(phase_s)
                peak = max(samples[start:], default=float("nan"))
                peaks.append(peak)
                print(f"[{label}] round {r} {phase:13s} peak {peak:6.1f} MiB")
            figures[f"round_{r}"] = max(peaks)
            print(f"[{label}] round {r} peak {max(peaks):.1f} MiB")
        figures["peak"] = max(v for k, v in figures.items() if k.startswith("round_"))
        return figures
    finally:
        stop.set()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--phase-seconds", type=float, default=12.0)
    parser.add_argument("--compare", action="store_true", help="also run with glibc's default mmap threshold first")
    args = parser.parse_args(argv)
    engine = Engine()
    engine.thread.start()
    try:
        runs = [False, True] if args.compare else [True]
        results = {pinned: run_once(engine, args.rounds, args.phase_seconds, pinned) for pinned in runs}
    finally:
        engine.server.shutdown()
    for pinned, fig in results.items():
        rounds = ", ".join(f"{fig[f'round_{r}']:.1f}" for r in range(1, args.rounds + 1))
        print(
            f"{'pinned' if pinned else 'glibc default':13s}: baseline {fig['baseline']:.1f} MiB, "
            f"round peaks {rounds} MiB, peak {fig['peak']:.1f} MiB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
