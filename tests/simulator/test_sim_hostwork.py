"""Host work (burn_cpu): never shorter than asked, in slices of about a millisecond (overshoot: bench/hostwork_deadline.py)."""

from __future__ import annotations

import time

from exporter.simulator import hostwork


def test_burn_cpu_uses_the_cpu_for_the_time_asked() -> None:
    hostwork.burn_cpu(0.01)  # measure the rate first
    start = time.perf_counter()
    cpu = hostwork.burn_cpu(0.05)
    wall = time.perf_counter() - start
    assert wall >= 0.05  # never before the time asked; how little past it is bench/hostwork_deadline.py's figure
    assert cpu > 0.0
    assert hostwork.burn_cpu(0) == 0.0


def test_a_slice_is_about_a_millisecond_of_cpu() -> None:
    assert hostwork.CHUNK_CPU_S <= 0.002
