"""Capacity at SLO from a ramp record: the highest measured concurrency whose TTFT/ITL p95 meet the SLO.

Why "measured" and not interpolated: the tuner compares configurations, and a
figure between two steps would be a model of the engine, not a measurement of
it. A step counts only when its p95s are known, within the SLO, and no more than
``max_error_share`` of its requests failed (a server shedding load is not meeting
anything). The figure of merit is that step's requests/s; its tokens/s rides along.
Works on report.json dicts (exporter/ramp/report.py), so ``compare`` reads saved runs too.
The rule itself lives in exporter/capacity/atslo.py (``serve`` reads ramp reports as capacity
profiles, and the runtime never imports the tools); this module re-exports it and parses SLO flags.
"""

from __future__ import annotations

import re

from exporter.capacity.atslo import NONE, SLO, Capacity, capacity_at_slo, slo_holds_everywhere, step_meets

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|us|µs)?\s*$")


class SLOError(ValueError):
    """An SLO that cannot be parsed: one line."""


def parse_duration(text: str, flag: str) -> float:
    """``200ms``, ``0.5s``, ``0.5`` (seconds) -> seconds; SLOError otherwise."""
    m = _DURATION.match(text or "")
    if not m or float(m.group(1)) <= 0:
        raise SLOError(f"{flag}: expected a positive duration such as 500ms or 0.5s, got {text!r}")
    scale = {"ms": 1e-3, "us": 1e-6, "µs": 1e-6}.get(m.group(2) or "s", 1.0)
    return float(m.group(1)) * scale


__all__ = ["NONE", "SLO", "Capacity", "SLOError", "capacity_at_slo", "parse_duration", "slo_holds_everywhere", "step_meets"]
