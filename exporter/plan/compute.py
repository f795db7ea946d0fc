"""The plan's arithmetic: replicas for the peak and the trough, the concurrency ceiling, the steps above capacity.

The definitions (docs/plan.md says why):

- *peak* / *trough*: the busiest / quietest UTC clock hour of the period, by the
  hour's mean demand (a one-scrape spike does not size a fleet; the headroom is
  what absorbs the minutes above the hour's mean);
- *replicas needed* = ceil(load / (capacity per replica x (1 - headroom))), for
  the request rate and for the requests in flight (against the knee
  concurrency), the larger of the two; never under 1;
- *concurrency ceiling per replica* = floor(knee concurrency x (1 - headroom)), at least 1;
- *above capacity*: a step whose demand exceeds the summed capacity of the
  replicas that existed at that step (rate or in flight); a step where one of
  those replicas has no known capacity is not judged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from exporter.plan import demand as d
from exporter.plan.profiles import Profile, profile_for
from exporter.plan.prometheus import Series, Window

#: what rounding noise (0.8 x 2.5 = 2.0000000000000004) must not turn into one more replica
_EPS = 1e-9


def replicas_needed(load: float | None, per_replica: float | None, headroom: float) -> int | None:
    """ceil(load / (per_replica x (1 - headroom))), at least 1; None when either figure is unknown."""
    if load is None or not per_replica or per_replica <= 0:
        return None
    usable = per_replica * (1.0 - headroom)
    return max(1, math.ceil(load / usable - _EPS))


def concurrency_ceiling(knee: float | None, headroom: float) -> int | None:
    """The gateway's per-replica ceiling: the knee concurrency less the headroom, at least 1."""
    if not knee or knee <= 0:
        return None
    return max(1, math.floor(knee * (1.0 - headroom) + _EPS))


@dataclass(frozen=True)
class PerReplica:
    """One replica's measured capacity at SLO and where it came from."""

    source: str  # "prometheus" (the gauges' median over replicas), "profile FILE (kind)", or "none"
    requests_per_second: float | None = None
    concurrency: float | None = None
    tokens_per_second: float | None = None


@dataclass(frozen=True)
class Sizing:
    """The fleet for one load level (the peak or the trough)."""

    hour: float | None
    requests_per_second: float | None
    in_flight: float | None
    replicas_by_rate: int | None
    replicas_by_concurrency: int | None
    concurrency_ceiling: int | None

    @property
    def replicas(self) -> int | None:
        known = [r for r in (self.replicas_by_rate, self.replicas_by_concurrency) if r is not None]
        return max(known) if known else None

    @property
    def in_flight_per_replica(self) -> float | None:
        n = self.replicas
        return None if self.in_flight is None or not n else self.in_flight / n


@dataclass
class ModelPlan:
    model: str
    headroom: float
    capacity: PerReplica
    times: list[float]
    demand: list[float | None]
    in_flight: list[float | None]
    replicas: list[int]
    fleet_rps: list[float | None]
    fleet_concurrency: list[float | None]
    ratio: list[float | None]
    peak: Sizing
    trough: Sizing
    day: d.DayProfile
    above: list[d.Span]
    step: float
    p95_step_rps: float | None = None
    max_step_rps: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def hours_above(self) -> list[float]:
        """The UTC clock hours that hold at least one step above capacity."""
        return sorted({math.floor(t / d.HOUR) * d.HOUR for t, r in zip(self.times, self.ratio) if r is not None and r > 1.0})


@dataclass(frozen=True)
class Inputs:
    """What the queries returned, by model (demand, in flight) or per replica with a model label."""

    demand: Mapping[str, Series]
    in_flight: Mapping[str, Series]
    replicas: Sequence[Series]
    gauges: Mapping[str, Sequence[Series]]  # key of queries.CAPACITY_GAUGES -> per-replica series


def _of(series: Sequence[Series], model: str) -> dict[tuple[str, str, str], Series]:
    return d.per_replica(s for s in series if s.labels.get("model", "") == model)


def _per_replica(gauges: Mapping[str, Sequence[Series]], model: str, profile: Profile | None) -> PerReplica:
    figures: dict[str, float | None] = {}
    for key in ("requests_per_second", "concurrency", "tokens_per_second"):
        last = [v for s in _of(gauges.get(key, ()), model).values() if (v := d.last_value(s)) is not None and v > 0]
        figures[key] = d.median(last)
    if figures["requests_per_second"] and figures["concurrency"]:
        return PerReplica("prometheus", figures["requests_per_second"], figures["concurrency"], figures["tokens_per_second"])
    if profile is not None:
        return PerReplica(
            f"profile {profile.source} ({profile.kind})",
            profile.requests_per_second,
            profile.concurrency,
            profile.tokens_per_second,
        )
    return PerReplica("none")


def _fleet(
    window: Window,
    replicas: dict[tuple[str, str, str], Series],
    gauge: dict[tuple[str, str, str], Series],
    fallback: float | None,
) -> list[float | None]:
    """Per step, the summed capacity of the replicas that existed then (None if one of them has none)."""
    present = {key: {round((t - window.start) / window.step) for t, _ in s.points} for key, s in replicas.items()}
    values = {key: {round((t - window.start) / window.step): v for t, v in s.points} for key, s in gauge.items()}
    out: list[float | None] = []
    for k in range(window.points):
        total: float | None = 0.0
        alive = [key for key, steps in present.items() if k in steps]
        if not alive:
            out.append(None)
            continue
        for key in alive:
            v = values.get(key, {}).get(k, fallback)
            if v is None or total is None:
                total = None
                break
            total += v
        out.append(total)
    return out


def _ratio(load: float | None, capacity: float | None) -> float | None:
    return None if load is None or not capacity or capacity <= 0 else load / capacity


def _sizing(
    hours_rps: dict[float, float], hours_flight: dict[float, float], cap: PerReplica, headroom: float, pick: str
) -> Sizing:
    choose = max if pick == "peak" else min
    hour = choose(hours_rps, key=lambda h: hours_rps[h]) if hours_rps else None
    rps = hours_rps[hour] if hour is not None else None
    flight = choose(hours_flight.values()) if hours_flight else None
    return Sizing(
        hour,
        rps,
        flight,
        replicas_needed(rps, cap.requests_per_second, headroom),
        replicas_needed(flight, cap.concurrency, headroom),
        concurrency_ceiling(cap.concurrency, headroom),
    )


def plan_model(model: str, inputs: Inputs, window: Window, headroom: float, profiles: list[Profile]) -> ModelPlan:
    ts = d.times(window)
    demand = d.grid([inputs.demand[model]] if model in inputs.demand else [], window)
    flight = d.grid([inputs.in_flight[model]] if model in inputs.in_flight else [], window)
    replicas = _of(inputs.replicas, model)
    counts = [0] * window.points
    for s in replicas.values():
        for t, _ in s.points:
            k = round((t - window.start) / window.step)
            if 0 <= k < window.points:
                counts[k] += 1
    profile = profile_for(model, profiles)
    cap = _per_replica(inputs.gauges, model, profile)
    fb_rps = profile.requests_per_second if profile else None
    fb_conc = profile.concurrency if profile else None
    fleet_rps = _fleet(window, replicas, _of(inputs.gauges.get("requests_per_second", ()), model), fb_rps)
    fleet_conc = _fleet(window, replicas, _of(inputs.gauges.get("concurrency", ()), model), fb_conc)
    ratio: list[float | None] = []
    for load, c_rps, inflight, c_conc in zip(demand, fleet_rps, flight, fleet_conc):
        known = [r for r in (_ratio(load, c_rps), _ratio(inflight, c_conc)) if r is not None]
        ratio.append(max(known) if known else None)
    hours_rps = d.hourly_means(ts, demand)
    hours_flight = d.hourly_means(ts, flight)
    steps = [v for v in demand if v is not None]
    notes = []
    if cap.source == "none":
        notes.append("no capacity gauges in Prometheus and no --profile for this model: replicas cannot be sized")
    if not replicas:
        notes.append(
            "no llm_engine_info series for this model: the replicas that existed (and so the hours above capacity) are unknown"
        )
    if not steps:
        notes.append("no llm_requests_finished_total in the range: no demand to plan for")
    return ModelPlan(
        model=model,
        headroom=headroom,
        capacity=cap,
        times=ts,
        demand=demand,
        in_flight=flight,
        replicas=counts,
        fleet_rps=fleet_rps,
        fleet_concurrency=fleet_conc,
        ratio=ratio,
        peak=_sizing(hours_rps, hours_flight, cap, headroom, "peak"),
        trough=_sizing(hours_rps, hours_flight, cap, headroom, "trough"),
        day=d.day_profile(hours_rps),
        above=d.spans(ts, ratio, window.step),
        step=window.step,
        p95_step_rps=d.percentile(steps, 95),
        max_step_rps=max(steps) if steps else None,
        notes=notes,
    )


def plan_all(
    inputs: Inputs, window: Window, headroom: float, profiles: list[Profile], only: Sequence[str] = ()
) -> list[ModelPlan]:
    """One plan per model seen in the demand or the replicas (``only``: those models)."""
    models = set(inputs.demand) | {s.labels.get("model", "") for s in inputs.replicas}
    models.discard("")
    if only:
        models &= set(only)
    return [plan_model(m, inputs, window, headroom, profiles) for m in sorted(models)]


__all__ = ["Inputs", "ModelPlan", "PerReplica", "Sizing", "concurrency_ceiling", "plan_all", "plan_model", "replicas_needed"]
