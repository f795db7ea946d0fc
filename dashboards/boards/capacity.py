"""The capacity-at-SLO panels (issue 22) of LLM / Overview (per engine) and LLM / Fleet (per model).

Why one module for both boards: the engine's and the fleet's panels answer the same questions
(how much of the measured capacity is used, how much headroom is left, when it runs out at the
current trend, can the profile be trusted) with the same thresholds as their alerts
(LLMCapacityHeadroomLow, LLMFleetCapacityShort capacity=measured), so they are built side by
side. The gauges (``llm_capacity_*``) carry ``engine``, the engine's name, like the verdict:
they are filtered by ``engine=~"$engine"``, never the engine's own series (whose ``engine`` is
the family). No data: the exporter runs without ``--capacity-profile``.
"""

from __future__ import annotations

from alerts.fleet import MEASURED_USED, fleet_settings
from alerts.settings import Settings
from dashboards.grafana import ENGINE, VERDICT, Panel, Row, Target, column, dashed_lines

#: the trend window of "time to capacity" and the projection; a subquery, so it needs no recorded range
TREND = "[1h:]"
#: "time to capacity" is capped here: a flat or falling trend never gets there
WEEK_S = 7 * 86400
_NEVER = [
    {
        "type": "range",
        "options": {"from": WEEK_S, "to": 1e12, "result": {"text": "not at this trend", "color": "green", "index": 0}},
    },
    {"type": "special", "options": {"match": "nan", "result": {"text": "at the knee", "color": "red", "index": 1}}},
]
_STALE = [
    {
        "type": "value",
        "options": {
            "0": {"text": "matches", "color": "green", "index": 0},
            "1": {"text": "stale", "color": "red", "index": 1},
        },
    }
]


def time_to(used: str, limit: float) -> str:
    """Seconds until ``used`` reaches ``limit`` at its linear trend over the last hour (0: there now; capped at a week).

    The slope is deriv(), the regression predict_linear() extrapolates with: (limit - now) / slope.
    A flat or falling trend divides by 0 (+Inf below the limit, capped; -Inf past it, clamped to 0).
    """
    return f"clamp_max(\nclamp_min(\n({limit:g} - {used})\n/ clamp_min(deriv({used}{TREND}), 0),\n0),\n{WEEK_S})"


def _gauge(name: str) -> str:
    return f"max by (instance, engine) ({name}{{{VERDICT}}})"


def overview_panels(s: Settings) -> list[Panel | Row]:
    """LLM / Overview: each engine against the capacity its profile measured within the SLO."""
    limit = s.capacity_used_ratio
    used = _gauge("llm_capacity_used_ratio")
    per_engine = "{{instance}} {{engine}}"
    in_flight = (
        f"sum by (instance, server) (llm_scheduler_requests_running{{{ENGINE}}})\n"
        f"+ sum by (instance, server) (llm_scheduler_requests_waiting{{{ENGINE}}})"
    )
    return [
        Row("Capacity at SLO: measured against load"),
        Panel(
            "Capacity used (measured at SLO)",
            "Each engine's live load over the capacity its profile (tune or ramp, serve --capacity-profile) measured "
            "within the SLO: the offered requests/s (finished plus queue growth) over the requests/s at SLO (without a "
            f"finished-request counter, in-flight requests over the concurrency at SLO). 1 = at the measured knee, where latency starts to climb. Above {limit:g} (dashed) for "
            f"{s.for_['capacity_headroom_low']} is LLMCapacityHeadroomLow: plan replicas now. No data: no profile configured.",
            [Target(used, per_engine)],
            unit="percentunit",
            min=0,
            thresholds=[(limit, "orange"), (1, "red")],
            threshold_lines=True,
        ),
        Panel(
            "Capacity headroom",
            "The share of the measured capacity at SLO each engine has left now (1 - used ratio). Orange below "
            f"{1 - limit:.0%} (the LLMCapacityHeadroomLow threshold), red below 0: past the knee, the load itself explains "
            "any latency (the diagnosis then names capacity_nearly_used). Read 'Capacity profile: age and staleness' first.",
            [Target(f"1 - {used}", per_engine, instant=True)],
            kind="stat",
            unit="percentunit",
            width=6,
            base_color="red",
            thresholds=[(0, "orange"), (round(1 - limit, 6), "green")],
        ),
        Panel(
            "Time to measured capacity at the current trend",
            "How long until each engine reaches its measured capacity at SLO (used ratio 1) if the load keeps the linear "
            "trend of the last hour (the slope predict_linear extrapolates with). 0: there already; 'not at this trend': "
            "flat or falling load (capped at a week). Shorter than it takes to add a replica: add it now.",
            [Target(time_to(used, 1), per_engine, instant=True)],
            kind="stat",
            unit="s",
            width=6,
            base_color="red",
            thresholds=[(3600, "orange"), (86400, "green")],
            value_mappings=_NEVER,
        ),
        Panel(
            "Finished requests/s vs capacity at SLO",
            "Finished requests per second of each engine with the requests/s its profile carried within the SLO dashed. "
            "The load line at the capacity line: the request rate is the binding side of the used ratio; add replicas or "
            "spread the load (LLM / Fleet).",
            [
                Target(
                    f"sum by (instance, server) (rate(llm_requests_finished_total{{{ENGINE}}}[$__rate_interval]))",
                    "finished/s {{instance}} {{server}}",
                ),
                Target(_gauge("llm_capacity_requests_per_second_at_slo"), "capacity {{instance}} {{engine}}"),
            ],
            unit="reqps",
            field_overrides=[dashed_lines("^capacity .*")],
        ),
        Panel(
            "In flight vs concurrency at SLO",
            "Requests in flight (running + waiting) of each engine with the concurrency its profile carried within the SLO "
            "(dashed) and the recommended gateway ceiling per replica (llm_capacity_recommended_max_concurrency: the knee "
            "less --capacity-headroom). In flight above the ceiling: cap it at the gateway or add a replica.",
            [
                Target(in_flight, "in flight {{instance}} {{server}}"),
                Target(_gauge("llm_capacity_concurrency_at_slo"), "capacity {{instance}} {{engine}}"),
                Target(_gauge("llm_capacity_recommended_max_concurrency"), "ceiling {{instance}} {{engine}}"),
            ],
            field_overrides=[dashed_lines("^(capacity|ceiling) .*")],
        ),
        Panel(
            "Capacity used: now and projected",
            "The used ratio of each engine and where it will be in an hour at the trend of the last hour "
            "(predict_linear, dashed). A projection crossing 1 is the SLO breaking within the hour if nothing changes; "
            f"crossing {limit:g} is the headroom alert to come.",
            [
                Target(used, "now {{instance}} {{engine}}"),
                Target(f"predict_linear({used}{TREND}, 3600)", "in 1 h {{instance}} {{engine}}"),
            ],
            unit="percentunit",
            min=0,
            thresholds=[(limit, "orange"), (1, "red")],
            threshold_lines=True,
            field_overrides=[dashed_lines("^in 1 h .*")],
        ),
        Panel(
            "Capacity profile: age and staleness",
            "Per engine: how old its capacity profile is, whether the engine still runs the configuration the profile "
            "measured ('stale': other flags, slots or version: LLMCapacityProfileStale, re-measure), the measured capacity "
            "at SLO and the recommended gateway ceiling. An old profile under a changed workload is a guess: re-measure.",
            [
                Target(_gauge("llm_capacity_profile_age_seconds"), instant=True),
                Target(_gauge("llm_capacity_profile_stale"), instant=True),
                Target(_gauge("llm_capacity_concurrency_at_slo"), instant=True),
                Target(_gauge("llm_capacity_requests_per_second_at_slo"), instant=True),
                Target(_gauge("llm_capacity_recommended_max_concurrency"), instant=True),
            ],
            kind="table",
            width=12,
            transformations=[
                {"id": "merge", "options": {}},
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True},
                        "indexByName": {"instance": 0, "engine": 1},
                        "renameByName": {
                            "Value #A": "profile age",
                            "Value #B": "profile",
                            "Value #C": "concurrency at SLO",
                            "Value #D": "req/s at SLO",
                            "Value #E": "gateway ceiling",
                        },
                    },
                },
            ],
            field_overrides=[
                column("profile age", ("unit", "s")),
                column("profile", ("mappings", _STALE), ("custom.cellOptions", {"type": "color-text"})),
                column("req/s at SLO", ("unit", "reqps")),
            ],
        ),
        Panel(
            "Workload drift from the profile",
            "The live mean prompt and output tokens per request of each engine over the profile's (1 = the workload the "
            "profile measured; 4 = prompts four times longer). Far from 1 (below 0.5 or above 2) the measured capacity no "
            "longer holds, whatever the staleness says: re-measure with today's request shape.",
            [
                Target(
                    f"max by (instance, engine, dimension) (llm_capacity_workload_drift_ratio{{{VERDICT}}})",
                    per_engine + " {{dimension}}",
                )
            ],
            width=24,
            min=0,
            thresholds=[(2, "orange")],
            threshold_lines=True,
        ),
    ]


def fleet_panels(s: Settings, replica: str, model: str) -> list[Panel | Row]:
    """LLM / Fleet: each model's demand against the summed capacity of its profiled replicas.

    ``replica``: the filter of a replica record (its labels and ``engine``); ``model``: of a model record.
    """
    w = s.rate_window
    f = fleet_settings(s)
    limit = f.capacity_measured_ratio
    used = f"{MEASURED_USED}{{{model}}}"

    def rec(name: str) -> str:
        return f"server_model:{name}:max{{{replica}}}"

    return [
        Row("Measured capacity at SLO"),
        Panel(
            "Fleet capacity used (measured)",
            "Demand of each model's profiled replicas over their summed capacity at SLO: the larger of finished requests/s "
            "over the summed requests/s at SLO and requests in flight over the summed concurrency at SLO; projected an hour "
            f"ahead at the last hour's trend (predict_linear, dashed). Above {limit:g} for {f.capacity_for} (with at least "
            f"{f.capacity_min_replicas} replicas) is LLMFleetCapacityShort capacity=measured: scale out. No data: no replica has a profile.",
            [
                Target(used, "{{model}}"),
                Target(f"predict_linear({used}{TREND}, 3600)", "in 1 h {{model}}"),
            ],
            unit="percentunit",
            min=0,
            thresholds=[(s.capacity_used_ratio, "orange"), (limit, "red")],
            threshold_lines=True,
            field_overrides=[dashed_lines("^in 1 h .*")],
        ),
        Panel(
            "Fleet time to measured capacity",
            f"How long until each model's fleet reaches {limit:g} of its measured capacity at SLO (where "
            "LLMFleetCapacityShort capacity=measured fires) at the linear trend of the last hour (the slope predict_linear "
            "uses). 0: there already; 'not at this trend': flat or falling demand. Shorter than a scale-out takes: scale now.",
            [Target(time_to(used, limit), "{{model}}", instant=True)],
            kind="stat",
            unit="s",
            width=6,
            base_color="red",
            thresholds=[(3600, "orange"), (86400, "green")],
            value_mappings=_NEVER,
        ),
        Panel(
            "Profiled replicas per model",
            "Replicas of each model publishing a measured capacity at SLO against all its replicas. The fleet ratio counts "
            "only profiled replicas on both sides (demand and capacity), so a partly profiled fleet is judged by the replicas "
            "it can judge; unprofiled ones need a tune or ramp run and --capacity-profile.",
            [
                Target(f"model:llm_capacity_profiled_replicas:count{{{model}}}", "profiled {{model}}", instant=True),
                Target(f"model:llm_serving_replicas:count{{{model}}}", "all {{model}}", instant=True),
            ],
            kind="stat",
            width=6,
        ),
        Panel(
            "Fleet requests/s vs measured capacity",
            "Finished requests per second of each model's profiled replicas (and of all its replicas) with their summed "
            "requests/s at SLO dashed. Demand at the capacity line: the request rate binds; the gap to 'all replicas' is "
            "load served by replicas without a profile.",
            [
                Target(f"model:llm_capacity_requests_finished:rate{w}{{{model}}}", "profiled {{model}}"),
                Target(f"model:llm_requests_finished:rate{w}{{{model}}}", "all replicas {{model}}"),
                Target(f"model:llm_capacity_requests_per_second_at_slo:sum{{{model}}}", "capacity {{model}}"),
            ],
            unit="reqps",
            field_overrides=[dashed_lines("^capacity .*")],
        ),
        Panel(
            "Fleet in flight vs measured concurrency",
            "Requests in flight (running + waiting) on each model's profiled replicas with their summed concurrency at SLO "
            "dashed. In flight above it while requests/s is not: long requests (check 'Workload drift from the profile' on "
            "LLM / Overview) or a gateway letting too many in (cap each replica at its recommended ceiling).",
            [
                Target(f"model:llm_capacity_requests_in_flight:sum{{{model}}}", "in flight {{model}}"),
                Target(f"model:llm_capacity_concurrency_at_slo:sum{{{model}}}", "capacity {{model}}"),
            ],
            field_overrides=[dashed_lines("^capacity .*")],
        ),
        Panel(
            "Replicas: capacity, profile, ceiling",
            "One row per profiled replica: its used ratio of the measured capacity at SLO, the capacity itself, the "
            "recommended gateway ceiling, the profile's age and whether it still matches the engine ('stale': re-measure "
            "before trusting the fleet ratio). One replica far above the others in used ratio is an imbalance, not a shortage.",
            [
                Target(rec("llm_capacity_used_ratio"), instant=True),
                Target(rec("llm_capacity_concurrency_at_slo"), instant=True),
                Target(rec("llm_capacity_requests_per_second_at_slo"), instant=True),
                Target(rec("llm_capacity_recommended_max_concurrency"), instant=True),
                Target(rec("llm_capacity_profile_age_seconds"), instant=True),
                Target(rec("llm_capacity_profile_stale"), instant=True),
            ],
            kind="table",
            width=24,
            height=8,
            transformations=[
                {"id": "merge", "options": {}},
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True, "__name__": True, "job": True, "server": True},
                        "indexByName": {"model": 0, "instance": 1, "engine": 2},
                        "renameByName": {
                            "Value #A": "used",
                            "Value #B": "concurrency at SLO",
                            "Value #C": "req/s at SLO",
                            "Value #D": "gateway ceiling",
                            "Value #E": "profile age",
                            "Value #F": "profile",
                        },
                    },
                },
            ],
            field_overrides=[
                column("used", ("unit", "percentunit")),
                column("req/s at SLO", ("unit", "reqps")),
                column("profile age", ("unit", "s")),
                column("profile", ("mappings", _STALE), ("custom.cellOptions", {"type": "color-text"})),
            ],
        ),
    ]
