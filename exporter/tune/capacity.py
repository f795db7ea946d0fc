"""Capacity at SLO from a ramp record: the highest measured concurrency whose TTFT/ITL p95 meet the SLO.

Why "measured" and not interpolated: the tuner compares configurations, and a
figure between two steps would be a model of the engine, not a measurement of
it. A step counts only when its p95s are known, within the SLO, and no more than
``max_error_share`` of its requests failed (a server shedding load is not meeting
anything). The figure of merit is that step's requests/s; its tokens/s rides along.
Works on report.json dicts (exporter/ramp/report.py), so ``compare`` reads saved runs too.
The rule itself lives in exporter/capacity/atslo.py (``serve`` reads ramp reports as capacity
profiles, and the runtime never imports the tools); this module re-exports it. SLO flags are durations in the one grammar of exporter/values.py.
"""

from __future__ import annotations

from exporter.capacity.atslo import NONE, SLO, Capacity, capacity_at_slo, slo_holds_everywhere, step_meets

__all__ = ["NONE", "SLO", "Capacity", "capacity_at_slo", "slo_holds_everywhere", "step_meets"]
