"""The PromQL of ``plan``: demand per model, replicas per model, the capacity gauges per replica.

Why per replica and not ``sum by (model)`` in PromQL: the plan needs both the
fleet's capacity at each step (the sum over the replicas that existed then) and
one replica's capacity (to divide the demand by), and a replica without a
capacity gauge must count as a replica still (a ``--profile`` then gives its
capacity). The capacity gauges are labelled ``engine`` = the server name; the
model comes from ``llm_engine_info{server, model}`` with ``server`` copied into
``engine``, the same join alerts/fleet_rules.yml makes.
"""

from __future__ import annotations

from exporter.plan.durations import format_duration

#: the gauges of exporter/schema.py's "measured capacity at SLO" the plan reads, by the key plan.json uses
#: (llm_capacity_recommended_max_concurrency is not read: its headroom is serve's, the plan applies --headroom
#: to the knee itself; llm_capacity_used_ratio is the ratio the plan recomputes for the whole fleet)
CAPACITY_GAUGES: dict[str, str] = {
    "requests_per_second": "llm_capacity_requests_per_second_at_slo",
    "concurrency": "llm_capacity_concurrency_at_slo",
    "tokens_per_second": "llm_capacity_tokens_per_second_at_slo",
}

_INFO = 'label_replace(max by (job, instance, server, model) (llm_engine_info), "engine", "$1", "server", "(.*)")'


def rate_window(step: float) -> str:
    """The range of ``rate()``: the step itself (adjacent steps do not overlap), never under 5 minutes.

    Why 5 minutes at least: a rate needs two scrapes inside its window, and 5m
    holds them at any scrape interval up to 2m (the fleet rules' own ``[5m]``).
    """
    return format_duration(max(step, 300.0))


def demand_rate(step: float) -> str:
    """Finished requests per second per model, every reason counted: what arrived, served or not."""
    return f"sum by (model) (rate(llm_requests_finished_total[{rate_window(step)}]))"


def in_flight(step: float) -> str:
    """Requests at the engines per model, running plus waiting, averaged over the step.

    Why waiting too: under backpressure the running count is capped at the
    engine's slots and the finished rate at its throughput; the queue is the
    part of the demand those two cannot show.
    """
    w = rate_window(step)
    return (
        f"sum by (model) (avg_over_time(llm_scheduler_requests_running[{w}]))"
        f" + on (model) (sum by (model) (avg_over_time(llm_scheduler_requests_waiting[{w}])) or"
        f" 0 * sum by (model) (avg_over_time(llm_scheduler_requests_running[{w}])))"
    )


def replicas() -> str:
    """One series per replica (job, instance, engine=server, model) that existed at each step."""
    return _INFO


def capacity(gauge: str) -> str:
    """A capacity gauge per replica, with that replica's model."""
    return f"{_INFO} * on (job, instance, engine) group_left () max by (job, instance, engine) ({gauge})"


__all__ = ["CAPACITY_GAUGES", "capacity", "demand_rate", "in_flight", "rate_window", "replicas"]
