"""A held serial host ceiling has a release line below its entry line (``Rule.sustain``).

Why: a host-bound scheduler thread on a contended node reads 0.91-0.99 CPU demand in one-second
samples around the 0.95 entry line (its one-second samples scatter); three low samples in a row used
to clear the ceiling and hand the verdict to the queue it causes. Entering still takes the full
line; staying takes being within ``host_release_margin`` of it; falling clearly below releases it.
"""

from __future__ import annotations

from exporter.diagnosis.engine import Verdict
from exporter.diagnosis.thresholds import Thresholds
from exporter.samples import Point
from tests.diagnosis.diag_points import engine, gpu, primary, process, run


def cycle(demand: float) -> list[Point]:
    """SMs idle, requests queued, the busiest thread at 0.55 of a core wanting ``demand`` of one."""
    return gpu(util=0.08, sm=0.05, tensor=0.0, dram=0.05) + process(0.55, demand=demand) + engine(waiting=30, running=64)


def holds(verdicts: list[Verdict]) -> list[bool]:
    return ["serial_host_ceiling" in v.holding for v in verdicts]


def test_a_held_ceiling_stays_while_demand_hovers_between_the_lines() -> None:
    hovering = [0.92, 0.93, 0.91, 0.92, 0.94, 0.91]
    verdicts = run([cycle(0.98) for _ in range(4)] + [cycle(d) for d in hovering])
    assert all(holds(verdicts))
    assert [primary(v) for v in verdicts[-len(hovering) :]] == ["serial_host_ceiling"] * len(hovering)


def test_entering_still_takes_the_full_line() -> None:
    assert not any(holds(run([cycle(0.92) for _ in range(8)])))


def test_falling_clearly_below_releases_it_after_the_clear_cycles() -> None:
    t = Thresholds()
    verdicts = run([cycle(0.98) for _ in range(4)] + [cycle(0.6) for _ in range(t.clear_cycles + 1)], t)
    assert holds(verdicts)[-1] is False
    # without the release line, hovering just under the entry line clears it the same way
    strict = Thresholds.from_mapping({"host_release_margin": 0.0})
    verdicts = run([cycle(0.98) for _ in range(4)] + [cycle(0.92) for _ in range(strict.clear_cycles + 1)], strict)
    assert holds(verdicts)[-1] is False
