"""The figures docs/measurements.md records, and the regression rule against them.

Why a file of figures: a benchmark that left the test gate (issue 31) still has to catch a
regression, but a figure measured on one host is only comparable to itself within a factor:
``python -m bench`` fails a figure only when it is worse than ``REGRESSION_FACTOR`` times the
recorded one. Each entry says where and when it was measured, so a re-measure can replace it.
"""

from __future__ import annotations

from dataclasses import dataclass

REGRESSION_FACTOR = 2.0


@dataclass(frozen=True)
class Recorded:
    value: float
    unit: str
    #: True where a smaller figure is better (latency, memory)
    lower_is_better: bool
    measured: str  # the date, the host and the command


RECORDED: dict[str, Recorded] = {
    "hostwork_overshoot_starved_ms": Recorded(
        2.3, "ms", True, "2026-12-07, 2-core dev host, python3 -m bench.hostwork_deadline (quiet: 0.0 ms)"
    ),
    "memory_attacks_hostile_peak_mib": Recorded(
        115.0, "MiB", True, "2026-12-02, 2-core dev host shared with other jobs, python3 -m bench.memory_attacks"
    ),
    "probe_outside_engine_excess_ms": Recorded(
        5.8, "ms", True, "2026-12-07, 2-core dev host beside a full test run, python3 -m bench.probe_accuracy"
    ),
}


def verdict(name: str, value: float) -> tuple[str, bool]:
    """(the recorded figure as text, whether ``value`` is within the regression factor of it)."""
    rec = RECORDED[name]
    ok = value <= rec.value * REGRESSION_FACTOR if rec.lower_is_better else value >= rec.value / REGRESSION_FACTOR
    return f"recorded {rec.value:g} {rec.unit} ({rec.measured})", ok
