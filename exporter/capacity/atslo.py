"""Capacity at SLO from a ramp record: the highest measured concurrency whose TTFT/ITL p95 meet the SLO.

Why "measured" and not interpolated: the tuner compares configurations, and a
figure between two steps would be a model of the engine, not a measurement of
it. A step counts only when its p95s are known, within the SLO, and no more than
``max_error_share`` of its requests failed (a server shedding load is not meeting
anything). The figure of merit is that step's requests/s; its tokens/s rides along.
Works on report.json dicts (exporter/ramp/report.py), so ``compare`` reads saved runs
too, and ``serve`` reads a ramp report as a capacity profile (exporter/capacity/profile.py):
that is why the rule lives in the runtime and exporter/tune/capacity.py re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SLO:
    """p95 targets in seconds; None: not part of the SLO."""

    ttft_s: float | None = None
    itl_s: float | None = None
    max_error_share: float = 0.05

    def describe(self) -> str:
        parts = []
        if self.ttft_s is not None:
            parts.append(f"TTFT p95 <= {self.ttft_s * 1000:g} ms")
        if self.itl_s is not None:
            parts.append(f"ITL p95 <= {self.itl_s * 1000:g} ms")
        return " and ".join(parts)


@dataclass(frozen=True)
class Capacity:
    concurrency: int
    requests_per_second: float
    tokens_per_second: float

    def as_dict(self) -> dict[str, float | int]:
        return {
            "concurrency": self.concurrency,
            "requests_per_second": self.requests_per_second,
            "tokens_per_second": self.tokens_per_second,
        }


NONE = Capacity(0, 0.0, 0.0)
#: the diagnosis's own SLO defaults (``diagnosis.slo_ttft_p95_seconds``, ``slo_itl_p95_seconds``): what a ramp
#: report, which has no SLO of its own, is judged at (its ``capacity_at_slo``, a capacity profile made from it)
DIAGNOSIS_SLO = SLO(2.0, 0.2)


def step_meets(step: dict[str, Any], slo: SLO) -> bool:
    client = step.get("client") or {}
    attempted = (client.get("requests") or 0) + (client.get("errors") or 0)
    if not client.get("requests") or (attempted and (client.get("errors") or 0) / attempted > slo.max_error_share):
        return False
    for target, key in ((slo.ttft_s, "ttft_s"), (slo.itl_s, "itl_s")):
        if target is None:
            continue
        p95 = (client.get(key) or {}).get("p95")
        if p95 is None or p95 > target:
            return False
    return True


def capacity_at_slo(report: dict[str, Any], slo: SLO) -> Capacity:
    """The highest concurrency step that meets the SLO (NONE when none does)."""
    best = NONE
    for step in report.get("steps") or []:
        if step_meets(step, slo) and step["concurrency"] >= best.concurrency:
            c = step["client"]
            best = Capacity(int(step["concurrency"]), float(c["requests_per_s"]), float(c["output_tokens_per_s"]))
    return best


def slo_holds_everywhere(report: dict[str, Any], slo: SLO) -> bool:
    """The SLO held at every step, the highest tested concurrency included (nothing left to gain here)."""
    steps = report.get("steps") or []
    return bool(steps) and all(step_meets(s, slo) for s in steps)


__all__ = ["DIAGNOSIS_SLO", "NONE", "SLO", "Capacity", "capacity_at_slo", "slo_holds_everywhere", "step_meets"]
