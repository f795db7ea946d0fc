"""Steady-state cost of a running exporter: CPU share of one core and resident memory.

Set-up (issue 9): 8 replayed GPUs at 1 s and two 55 KB vLLM engines at 5 s,
scraped every 15 s as Prometheus would. Targets: <= 2 % of a core, <= 80 MB RSS.
`--soak` mode reuses this loop for 30 minutes and reports RSS drift and open
file descriptors (target drift < 5 MB).
"""

from __future__ import annotations

import time

from bench.harness import measured_exporter, tree_cpu_seconds

SCRAPE_EVERY = 15.0


def run(duration: float = 300.0, warmup: float = 20.0, report_every: float | None = None) -> dict[str, float]:
    args = ["--gpu-interval", "1", "--engine-interval", "5"]
    with measured_exporter(args, 8, warmup) as (proc, session, base):
        cpu0, t0 = tree_cpu_seconds(proc), time.monotonic()
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
        cpu = tree_cpu_seconds(proc) - cpu0
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
