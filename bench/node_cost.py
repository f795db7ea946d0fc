"""CPU of the exporter on a busy node: 8 GPUs sampled every 250 ms plus 2 engines every 5 s.

    python3 -m bench.node_cost                         # 60 s measured after 15 s of warm-up
    python3 -m bench.node_cost --duration 300
    python3 -m bench.node_cost --diagnosis-interval 1  # diagnosis slower than the GPU

Why: next to a CPU-bound engine the exporter gets what the scheduler leaves,
so its own cost must be small enough to be scheduled (issue 13: target <= 3 %
of one core). Set-up: ``serve`` with 8 replayed GPUs (copies of the recorded
H200 trace, ``--gpu-source replay:``) at ``--gpu-interval 0.25``, two local
HTTP engines serving a 55 KB vLLM exposition at ``--engine-interval 5``, the
diagnosis at its default (the GPU interval, at least 1 s) unless told otherwise, and
/metrics scraped every 15 s as Prometheus would. The figure is the CPU time
(user + system) of the exporter's process tree over the measured window,
divided by its wall time.
"""

from __future__ import annotations

import argparse
import os
import time

from bench.harness import measured_exporter, tree_cpu_seconds

GPUS = 8
GPU_INTERVAL = 0.25
ENGINE_INTERVAL = 5.0
SCRAPE_EVERY = 15.0
TARGET = 0.03


def run(duration: float = 60.0, warmup: float = 15.0, diagnosis_interval: float | None = None) -> dict[str, float]:
    args = ["--gpu-interval", str(GPU_INTERVAL), "--gpu-timeout", "0.2", "--engine-interval", str(ENGINE_INTERVAL)]
    if diagnosis_interval:
        args += ["--diagnosis-interval", str(diagnosis_interval)]
    with measured_exporter(args, GPUS, warmup) as (proc, session, base):
        cpu0, t0 = tree_cpu_seconds(proc), time.monotonic()
        next_scrape = t0 + SCRAPE_EVERY
        while time.monotonic() - t0 < duration:
            if time.monotonic() >= next_scrape:
                session.get(base + "/metrics", timeout=5)
                next_scrape += SCRAPE_EVERY
            time.sleep(0.5)
        elapsed = time.monotonic() - t0
        cpu = tree_cpu_seconds(proc) - cpu0
        body = session.get(base + "/metrics", timeout=5).text
        down = [line for line in body.splitlines() if line.startswith("llm_exporter_source_up{") and line.endswith(" 0.0")]
        return {
            "duration_s": elapsed,
            "cpu_seconds": cpu,
            "cpu_share_of_core": cpu / elapsed,
            "rss_mib": proc.memory_info().rss / 2**20,
            "sources_down_at_end": float(len(down)),
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python3 -m bench.node_cost", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--duration", type=float, default=60.0, help="measured seconds (default 60)")
    ap.add_argument("--warmup", type=float, default=15.0, help="seconds before measuring (default 15)")
    ap.add_argument("--diagnosis-interval", type=float, default=None, help="default: the GPU interval, as serve does")
    args = ap.parse_args(argv)
    load = os.getloadavg()
    fig = run(args.duration, args.warmup, args.diagnosis_interval)
    diag = f"{args.diagnosis_interval:g} s" if args.diagnosis_interval else f"{max(1.0, GPU_INTERVAL):g} s (default)"
    ok = fig["cpu_share_of_core"] <= TARGET
    print(f"{GPUS} replayed GPUs every {GPU_INTERVAL:g} s, 2 engines every {ENGINE_INTERVAL:g} s, diagnosis every {diag}")
    print(
        f"  CPU {fig['cpu_share_of_core'] * 100:.2f} % of one core over {fig['duration_s']:.0f} s ({fig['cpu_seconds']:.2f} CPU s); target <= {TARGET * 100:.0f} %: {'pass' if ok else 'MISS'}"
    )
    print(f"  RSS {fig['rss_mib']:.1f} MiB; sources down at the end: {fig['sources_down_at_end']:.0f}")
    print(f"  load average at start {load[0]:.2f} on {os.cpu_count()} cores")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
