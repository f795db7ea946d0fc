"""How far the simulator's host work (``burn_cpu``) runs past its wall-clock deadline, quiet and starved.

    python3 -m bench.hostwork_deadline

Why a benchmark (issue 31): the figures are milliseconds of wall time on this host; a
gate test that asserted them (a 50 ms burn within 30 ms, a 15 ms overshoot on a shared
CPU) failed whenever CI's two cores were busy. What the gate keeps is causal: a burn
never ends before the time asked (tests/simulator/test_sim_hostwork.py).

Prints the worst overshoot of 10 burns of 30 ms: on a quiet CPU, and pinned to one CPU
beside a busy-looping process (each step gets about half of it: one slice sized for the
whole 30 ms of CPU would take about 60 ms of wall time). The design's bound: a few ms.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from exporter.simulator.hostwork import burn_cpu

ROOT = Path(__file__).resolve().parent.parent
#: the overshoot the slicing is designed for (one ~1 ms slice, plus a scheduler tick)
DESIGN_BOUND_S = 0.015

_STARVED = textwrap.dedent(
    """
    import os, subprocess, sys, time
    os.sched_setaffinity(0, {CPU})
    spinner = subprocess.Popen([sys.executable, "-c", "import os; os.sched_setaffinity(0, {CPU})\\nwhile True: pass"])
    try:
        time.sleep(0.3)  # the spinner now shares this CPU
        from exporter.simulator.hostwork import burn_cpu
        burn_cpu(0.01)
        worst = 0.0
        for _ in range(10):
            start = time.perf_counter()
            burn_cpu(0.03)
            worst = max(worst, time.perf_counter() - start - 0.03)
        print(worst)
    finally:
        spinner.kill()
        spinner.wait()
    """
)


def quiet_overshoot_s() -> float:
    burn_cpu(0.01)  # measure the rate first
    worst = 0.0
    for _ in range(10):
        start = time.perf_counter()
        burn_cpu(0.03)
        worst = max(worst, time.perf_counter() - start - 0.03)
    return worst


def starved_overshoot_s() -> float:
    cpu = min(os.sched_getaffinity(0))
    code = _STARVED.replace("{CPU}", f"{{{cpu}}}")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    return float(out.stdout.strip())


def main() -> int:
    quiet, starved = quiet_overshoot_s(), starved_overshoot_s()
    print(f"burn_cpu(30 ms) worst overshoot: quiet {quiet * 1000:.2f} ms, one CPU shared with a spinner {starved * 1000:.2f} ms")
    print(f"design bound {DESIGN_BOUND_S * 1000:.0f} ms: {'held' if max(quiet, starved) < DESIGN_BOUND_S else 'MISSED'}")
    return 0 if starved < 2 * DESIGN_BOUND_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
