"""Derived source ``capacity_profile``: each engine's measured capacity at SLO against its live load.

Why a derived source: everything it needs beside the profile file is already
in the store (the engine's requests, token series and published settings), so
like exporter/diagnosis/capacity.py it is a step of the derive stage
(exporter/derive.py) and never talks to the engine. It runs before the
diagnosis in the same pass, so the verdict reads the used ratio, the profile's
age and staleness computed from the very snapshot it judges.

Per engine with a profile (``--capacity-profile``, ``engines[].capacity_profile``),
labelled ``engine`` (its name, as the diagnosis series are):

* the profile's figures: ``llm_capacity_concurrency_at_slo``,
  ``..._requests_per_second_at_slo``, ``..._tokens_per_second_at_slo``,
  ``llm_capacity_recommended_max_concurrency`` (floor(knee x (1 - headroom)), >= 1)
  and ``llm_capacity_profile_age_seconds``: always, from the last good profile;
* ``llm_capacity_offered_requests_per_second``: finished rate plus in-flight
  growth (exporter/capacity/live.py);
* ``llm_capacity_used_ratio``: offered rate / requests per second at SLO. Why not
  in flight over the concurrency (the figure before issue 32): a throttled clock,
  a hung step or prompts that grew build a queue under the same arrivals, the
  in-flight count rises past the knee's, and the capacity cause then claimed the
  slowdown its own symptom stood for. The offered rate does not move with the
  engine's speed. An engine without a finished-request counter (llama.cpp) has no
  rate: its ratio stays in flight / concurrency, and the ranking
  (exporter/diagnosis/ranking.py) still lets any layer's cause outrank it;
* ``llm_capacity_profile_stale``: 1 / 0 when the profile's fingerprint and the
  live one share a setting, the model or the GPUs to compare, or when the
  workload drifted beyond ``DRIFT_TOLERANCE``; absent while unknown (a profile
  from before fingerprints, an engine not read yet);
* ``llm_capacity_workload_drift_ratio{dimension}``: live mean over the profile's,
  where both are known;
* ``llm_parallel_scaling_efficiency_ratio``: the live output tokens/s per GPU (the
  engine's generation-token rate over the window, divided by the GPUs of the layout it
  publishes now) over the profile's per-GPU output tokens/s at SLO, where the profile
  measured a smaller layout (fewer GPUs) of the same model, both GPU counts from the same
  place (exporter/capacity/layout.py); absent without a profile fingerprint, with the same
  GPU count or fewer, counts that do not compare, or before a rate.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from exporter.capacity import fingerprint as fpr
from exporter.capacity.layout import Scaled, comparable, layout_of_fingerprint
from exporter.capacity.live import WINDOW_SECONDS, LiveLoad, LiveWindow
from exporter.capacity.profile import Profile
from exporter.capacity.watch import ProfileWatcher
from exporter.diagnosis.finite import ratio
from exporter.samples import Point, Sample, SampleResult, SourceError
from exporter.store import Snapshot

log = logging.getLogger(__name__)

NAME = "capacity_profile"
CONCURRENCY = "llm_capacity_concurrency_at_slo"
RPS = "llm_capacity_requests_per_second_at_slo"
TPS = "llm_capacity_tokens_per_second_at_slo"
USED = "llm_capacity_used_ratio"
RECOMMENDED = "llm_capacity_recommended_max_concurrency"
AGE = "llm_capacity_profile_age_seconds"
STALE = "llm_capacity_profile_stale"
DRIFT = "llm_capacity_workload_drift_ratio"
OFFERED = "llm_capacity_offered_requests_per_second"
SCALING = "llm_parallel_scaling_efficiency_ratio"
#: a live mean prompt or output length this far from the profile's (above 1 + it, below 1 / (1 + it))
#: makes the profile stale: the capacity at SLO scales about inversely with the tokens a request
#: costs, so past half as much again the measured knee is off by a third or more, more than the
#: headroom (DEFAULT_HEADROOM) the gateway ceiling keeps
DRIFT_TOLERANCE = 0.5
#: the default share of the knee kept free by the recommended gateway ceiling
DEFAULT_HEADROOM = 0.2


def recommended_max_concurrency(concurrency: int, headroom: float) -> int:
    """The knee less the headroom, rounded down, at least 1."""
    return max(1, math.floor(concurrency * (1.0 - headroom) + 1e-9))


def used_ratio(profile: Profile, live: LiveLoad) -> float | None:
    """The offered rate over the requests/s at SLO; without a rate, in flight over the concurrency
    (None: neither known; an overflowed quotient is no reading, not +Inf)."""
    if live.offered_per_second is not None and profile.requests_per_second > 0:
        return ratio(live.offered_per_second, profile.requests_per_second)
    if live.in_flight is not None and profile.concurrency > 0:
        return ratio(live.in_flight, profile.concurrency)
    return None


def drifted(drifts: dict[str, float]) -> list[str]:
    """The dimensions whose live mean is beyond ``DRIFT_TOLERANCE`` of the profile's ("prompt_tokens x2.4")."""
    high = 1.0 + DRIFT_TOLERANCE
    return [f"{dim} x{r:.2g}" for dim, r in sorted(drifts.items()) if r > high or r < 1.0 / high]


def drift(profile: Profile, live: LiveLoad) -> dict[str, float]:
    """dimension -> live mean tokens per request over the profile's (only where both are known)."""
    out: dict[str, float] = {}
    for dim, measured, now in (
        ("prompt_tokens", profile.prompt_tokens_mean, live.prompt_tokens_mean),
        ("output_tokens", profile.output_tokens_mean, live.output_tokens_mean),
    ):
        if measured and now is not None and (value := ratio(now, measured)) is not None:
            out[dim] = value
    return out


def scaling_efficiency(profile: Profile, live: LiveLoad, now: fpr.Fingerprint | None) -> float | None:
    """The live output tokens/s per GPU over the profile's per GPU at SLO, where the engine runs a larger
    layout of the same model than the profile measured (``comparable`` in exporter/capacity/layout.py:
    more GPUs, both counts from the same place); None otherwise: no efficiency to tell."""
    measured = profile.fingerprint
    if measured is None or now is None or live.output_tokens_per_second is None or profile.tokens_per_second <= 0:
        return None
    smaller = Scaled(
        layout_of_fingerprint(measured), profile.tokens_per_second, profile.requests_per_second, None, measured.model
    )
    running = Scaled(layout_of_fingerprint(now), live.output_tokens_per_second, 0.0, None, now.model)
    if not comparable(running, smaller) or running.layout.gpus < smaller.layout.gpus:
        return None
    return ratio(running.tokens_per_gpu, smaller.tokens_per_gpu)


@dataclass
class _Engine:
    name: str
    watcher: ProfileWatcher
    live: LiveWindow
    #: the differences logged last (a flip to stale is logged once, not per sample)
    logged: tuple[str, ...] = field(default_factory=tuple)


class CapacityProfileStep:
    """Publishes the capacity gauges of every engine that has a profile."""

    name = NAME

    def __init__(
        self,
        profiles: Sequence[tuple[str, Profile]],
        headroom: float = DEFAULT_HEADROOM,
        window_seconds: float = WINDOW_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.headroom = headroom
        self._clock = clock
        self.engines = [_Engine(name, ProfileWatcher(p), LiveWindow(window_seconds)) for name, p in profiles]

    def derive(self, snap: Snapshot) -> SampleResult:
        points: list[Point] = []
        errors: list[SourceError] = []
        for e in self.engines:
            profile, problem = e.watcher.current()
            if problem is not None:
                errors.append(SourceError(problem.reason, f"engine {e.name}: {problem.message}"))
            live = e.live.add(snap, e.name)
            points += self._points(e, profile, live, fpr.from_snapshot(snap, e.name))
        return SampleResult(points, errors)

    def _points(self, e: _Engine, p: Profile, live: LiveLoad, now: fpr.Fingerprint | None) -> list[Point]:
        labels = {"engine": e.name}
        out: list[Point] = [
            Sample(CONCURRENCY, labels, float(p.concurrency)),
            Sample(RPS, labels, p.requests_per_second),
            Sample(TPS, labels, p.tokens_per_second),
            Sample(RECOMMENDED, labels, float(recommended_max_concurrency(p.concurrency, self.headroom))),
            Sample(AGE, labels, max(0.0, self._clock() - p.measured_at)),
        ]
        if live.offered_per_second is not None:
            out.append(Sample(OFFERED, labels, live.offered_per_second))
        used = used_ratio(p, live)
        if used is not None:
            out.append(Sample(USED, labels, used))
        drifts = drift(p, live)
        stale = self._stale(e, p, now, drifted(drifts))
        if stale is not None:
            out.append(Sample(STALE, labels, stale))
        out += [Sample(DRIFT, {**labels, "dimension": dim}, ratio) for dim, ratio in drifts.items()]
        scaling = scaling_efficiency(p, live, now)
        if scaling is not None:
            out.append(Sample(SCALING, labels, scaling))
        return out

    def _stale(self, e: _Engine, p: Profile, now: fpr.Fingerprint | None, drifted: list[str]) -> float | None:
        """1 / 0, or None while it cannot be told; a change to stale is logged once with what differs."""
        measured = p.fingerprint
        comparable = measured is not None and now is not None and fpr.comparable(measured, now)
        if not comparable and not drifted:
            return None
        configured = fpr.differences(measured, now) if measured is not None and now is not None and comparable else []
        diffs = tuple(configured + [f"workload {d}" for d in drifted])
        if diffs != e.logged:
            if diffs:
                log.warning(
                    "engine %s runs another configuration or workload than its capacity profile %s measured (%s): re-measure it",
                    e.name,
                    p.path,
                    "; ".join(diffs),
                )
            else:
                log.info("engine %s runs the configuration its capacity profile %s measured", e.name, p.path)
            e.logged = diffs
        return 1.0 if diffs else 0.0

    def close(self) -> None:
        """Holds nothing open (the file is read and closed each time it changes)."""


__all__ = [
    "DEFAULT_HEADROOM",
    "DRIFT_TOLERANCE",
    "NAME",
    "CapacityProfileStep",
    "drift",
    "drifted",
    "recommended_max_concurrency",
    "scaling_efficiency",
    "used_ratio",
]
