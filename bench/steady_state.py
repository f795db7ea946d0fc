"""Steady-state cost of a running exporter: CPU share of one core and resident memory.

Set-up (issue 9): 8 replayed GPUs at 1 s and two 55 KB vLLM engines at 5 s,
scraped every 15 s as Prometheus would. Targets: <= 2 % of a core, <= 80 MB RSS.
`--soak` mode reuses this loop for 30 minutes and reports RSS drift and open
file descriptors (target drift < 5 MB).
"""

from __future__ import annotations

import time

import psutil
import requests

from bench.exposition import vllm_exposition
from bench.harness import exporter, replay_copies, static_engine

SCRAPE_EVERY = 15.0


def _tree_cpu_seconds(proc: psutil.Process) -> float:
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def run(duration: float = 300.0, warmup: float = 20.0, report_every: float | None = None) -> dict[str, float]:
    text = vllm_exposition(1)
    with replay_copies(8) as gpu_source, static_engine(text) as e1, static_engine(text) as e2:
        args = ["--gpu-source", gpu_source, "--gpu-interval", "1", "--engine", e1, "--engine", e2, "--engine-interval", "5"]
        with exporter(args, ready_sources=3) as (popen, base):
            proc = psutil.Process(popen.pid)
            session = requests.Session()
            time.sleep(warmup)
            session.get(base + "/metrics", timeout=5)  # open the keep-alive connection before the baseline
            cpu0, t0 = _tree_cpu_seconds(proc), time.monotonic()
            rss0 = proc.memory_info().rss
            fds0 = proc.num_fds()
            rss_max = rss0
            next_scrape, next_report = t0 + SCRAPE_EVERY, t0
            while time.monotonic() - t0 < duration:
                now = time.monotonic()
                if now >= next_scrape:
                    session.get(base + "/metrics", timeout=5)
                    next_scrape += SCRAPE_EVERY
                rss_max = max(rss_max, proc.memory_info().rss)
                if report_every and now >= next_report:
                    print(f"  t={now - t0:6.0f}s rss={proc.memory_info().rss / 2**20:6.1f} MiB fds={proc.num_fds()}", flush=True)
                    next_report += report_every
                time.sleep(1.0)
            elapsed = time.monotonic() - t0
            cpu = _tree_cpu_seconds(proc) - cpu0
            rss1 = proc.memory_info().rss
            return {
                "duration_s": elapsed,
                "cpu_share_of_core": cpu / elapsed,
                "rss_mib": rss1 / 2**20,
                "rss_max_mib": rss_max / 2**20,
                "rss_drift_mib": (rss1 - rss0) / 2**20,
                "open_fds_start": float(fds0),
                "open_fds_end": float(proc.num_fds()),
            }
