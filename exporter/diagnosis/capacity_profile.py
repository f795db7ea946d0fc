"""The capacity profile's signals (exporter/capacity): the load against what the engine was measured to carry.

Why a module of its own: the ``capacity_profile`` source publishes per-engine
gauges (``llm_capacity_*``, labelled ``engine``); the scope cut
(exporter/diagnosis/scope.py) hands each engine its own, and this module turns
them into the few service-wide figures the ``application/capacity_nearly_used``
rule judges and the verdict's ``capacity`` object shows. Kept out of
``signals.py`` as the probe's are (exporter/diagnosis/probe.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from exporter.diagnosis.window import Window

USED = "llm_capacity_used_ratio"
CONCURRENCY = "llm_capacity_concurrency_at_slo"
RPS = "llm_capacity_requests_per_second_at_slo"
AGE = "llm_capacity_profile_age_seconds"
STALE = "llm_capacity_profile_stale"
RECOMMENDED = "llm_capacity_recommended_max_concurrency"
DRIFT_PROMPT = 'llm_capacity_workload_drift_ratio{dimension="prompt_tokens"}'
DRIFT_OUTPUT = 'llm_capacity_workload_drift_ratio{dimension="output_tokens"}'
#: the families these signals read (the diagnosis window keeps them)
PREFIX = "llm_capacity_"
_PLAIN = (USED, CONCURRENCY, RPS, AGE, STALE, RECOMMENDED)


def capacity_signals(window: Window, v: dict[str, float]) -> None:
    """Add the profile's signals the window supports to the service view ``v`` (none without a profile)."""
    snap = window.latest
    if snap is None:
        return
    for name in _PLAIN:
        values = snap.values(name)
        if values:
            v[name] = max(values)
    for key, dim in ((DRIFT_PROMPT, "prompt_tokens"), (DRIFT_OUTPUT, "output_tokens")):
        values = snap.values("llm_capacity_workload_drift_ratio", dimension=dim)
        if values:
            v[key] = max(values)


def age_text(seconds: float) -> str:
    """ "3 days", "5 h", "12 min", "40 s": how old the profile is, in the unit a reader wants."""
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.0f} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.0f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def headline(v: Mapping[str, float]) -> str:
    """ "72 % of measured capacity at SLO; profile 3 days old" (with "stale" when the configuration changed)."""
    parts = []
    if USED in v:
        parts.append(f"{100 * v[USED]:.0f} % of measured capacity at SLO")
    else:
        parts.append("load against the measured capacity unknown")
    if AGE in v:
        parts.append(f"profile {age_text(v[AGE])} old")
    if v.get(STALE) == 1.0:
        parts.append("profile stale: the engine's configuration changed since it was measured")
    return "; ".join(parts)


def capacity_body(v: Mapping[str, float]) -> dict[str, Any] | None:
    """The verdict's ``capacity`` object, or None when the engine has no profile."""
    if CONCURRENCY not in v:
        return None
    stale = v.get(STALE)
    drift = {dim: v[key] for key, dim in ((DRIFT_PROMPT, "prompt_tokens"), (DRIFT_OUTPUT, "output_tokens")) if key in v}
    return {
        "used_ratio": v.get(USED),
        "concurrency_at_slo": v[CONCURRENCY],
        "requests_per_second_at_slo": v.get(RPS),
        "recommended_max_concurrency": v.get(RECOMMENDED),
        "profile_age_seconds": v.get(AGE),
        "stale": None if stale is None else stale == 1.0,
        "drift": drift,
        "text": headline(v),
    }


__all__ = ["PREFIX", "capacity_body", "capacity_signals", "headline"]
