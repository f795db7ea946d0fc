"""Alerts on the measured capacity at SLO of each engine (issue 22; serve --capacity-profile).

Why their own alerts, beside the diagnosis: ``llm_capacity_used_ratio`` says how much of what
the engine was *measured* to carry within its SLO (a ``tune`` or ``ramp`` profile) the live
load takes. Above a settable share for a quarter hour, replicas must be planned now, before
the SLO breaks (LLMCapacityHeadroomLow); a profile measured on other engine flags or another
version says nothing about today's engine (LLMCapacityProfileStale: re-measure). Both are
tickets (``kind="capacity"``) for the serving team, never pages: nobody is affected yet.
The page of the same engine (LLMServiceDegraded) mutes the headroom ticket: once the SLO broke
the page is the incident (alerts/alertmanager_config.py). The gauges carry ``engine``, the
engine's name (the ``server`` of its own series), like the verdict.
"""

from __future__ import annotations

from alerts.alerting import INSTANCE, Alert, Case, _labels, _minutes_after, _samples
from alerts.recording import ENGINE, INSTANCE_ENGINE
from alerts.settings import Settings, duration_seconds

KIND = "capacity"
HEADROOM_LOW, PROFILE_STALE = "LLMCapacityHeadroomLow", "LLMCapacityProfileStale"
#: the board where both are confirmed (dashboards/boards/overview.py, row "Capacity at SLO")
BOARD = "LLM / Overview"


def _headroom_low(s: Settings) -> Alert:
    job, for_, limit = s.exporter_job, s.for_["capacity_headroom_low"], s.capacity_used_ratio
    n = _samples(for_)
    high = round(limit + (1 - limit) / 2 if limit < 1 else limit * 1.1, 4)
    low = round(limit * 0.6, 4)

    def used(engine: str, values: str) -> tuple[str, str]:
        return ("llm_capacity_used_ratio" + _labels(job, **{ENGINE: engine}), values)

    # busy since half of for: only, and still busy at the evaluation: pending, not firing
    for_min = int(duration_seconds(for_) // 60)
    late = for_min + 4 - max(1, for_min // 2)
    return Alert(
        name=HEADROOM_LOW,
        expr=f"max by ({INSTANCE_ENGINE}) (llm_capacity_used_ratio) > {limit:g}",
        for_=for_,
        labels={"severity": s.severity_ticket, "layer": "application", "kind": KIND},
        summary="Engine {{ $labels.engine }} runs near its measured capacity at SLO ({{ $labels.instance }})",
        description=(
            f"The live load of engine {{{{ $labels.engine }}}} on exporter {{{{ $labels.instance }}}} has taken more than "
            f"{limit:.0%} of the capacity its profile measured within the SLO (llm_capacity_used_ratio: the offered "
            f"requests per second, finished plus queue growth, over the requests/s at SLO) for {for_}. "
            "The SLO still holds, but little more load breaks it: add replicas or move load now, and set the gateway's "
            "ceiling per replica to llm_capacity_recommended_max_concurrency. Confirm on 'LLM / Overview' (row Capacity at SLO)."
        ),
        fire=Case(
            (used("s1", f"{high}x{n}"), used("s2", f"{low}x{n}")),
            ({"job": job, "instance": INSTANCE, ENGINE: "s1"},),
        ),
        quiet=Case(
            (
                used("s1", f"{low}x{n}"),  # well within the capacity
                used("s2", f"{limit:g}x{n}"),  # exactly at the threshold is not above it
                used("s3", f"{low}x{late - 1} {high}x{n - late}"),  # a busy spell shorter than for:
            )
        ),
        eval_time=_minutes_after(for_, 4),
    )


def _profile_stale(s: Settings) -> Alert:
    job, for_ = s.exporter_job, s.for_["capacity_profile_stale"]
    n = _samples(for_)

    def stale(engine: str, values: str) -> tuple[str, str]:
        return ("llm_capacity_profile_stale" + _labels(job, **{ENGINE: engine}), values)

    # mismatched since half of for: only (an engine restarted lately) and still at the evaluation: pending
    for_min = int(duration_seconds(for_) // 60)
    late = for_min + 4 - max(1, for_min // 2)
    recent = f"0x{late - 1} 1x{n - late}"
    return Alert(
        name=PROFILE_STALE,
        expr=f"max by ({INSTANCE_ENGINE}) (llm_capacity_profile_stale) == 1",
        for_=for_,
        labels={"severity": s.severity_ticket, "layer": "application", "kind": KIND},
        summary="The capacity profile of engine {{ $labels.engine }} no longer matches the engine ({{ $labels.instance }})",
        description=(
            "Engine {{ $labels.engine }} on exporter {{ $labels.instance }} runs with a configuration (the settings it "
            "publishes, or its command line) other than the one its capacity profile measured: its capacity at SLO, used "
            "ratio and recommended ceiling are no longer trustworthy, and LLMCapacityHeadroomLow may fire too late or too "
            "early. Re-measure (llm-layer-exporter tune or ramp against this engine) and point --capacity-profile at the new "
            "file. Confirm on 'LLM / Overview' (panel Capacity profile: age and staleness)."
        ),
        fire=Case(
            (stale("s1", f"1x{n}"), stale("s2", f"0x{n}")),
            ({"job": job, "instance": INSTANCE, ENGINE: "s1"},),
        ),
        # the profile matches; a mismatch shorter than for: (an engine restart read mid-way) is not stale yet
        quiet=Case((stale("s1", f"0x{n}"), stale("s2", recent))),
        eval_time=_minutes_after(for_, 4),
    )


def alerts(s: Settings) -> list[Alert]:
    """LLMCapacityHeadroomLow and LLMCapacityProfileStale."""
    return [_headroom_low(s), _profile_stale(s)]
