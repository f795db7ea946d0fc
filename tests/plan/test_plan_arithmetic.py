"""The plan's arithmetic and series handling on hand-built series: every figure is worked out in the test."""

from __future__ import annotations

import math

import pytest

from exporter.errors import UsageError
from exporter.plan import demand as d
from exporter.plan.compute import Inputs, concurrency_ceiling, plan_all, plan_model, replicas_needed
from exporter.plan.durations import format_duration
from exporter.plan.profiles import Profile
from exporter.plan.prometheus import Series, Window
from exporter.values import parse_duration

H = 3600.0


@pytest.mark.parametrize(
    ("text", "seconds"), [("7d", 604800), ("1h", 3600), ("5m", 300), ("90s", 90), ("1w", 604800), ("1h30m", 5400), ("0.5h", 1800)]
)
def test_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration(text, "--since") == seconds


@pytest.mark.parametrize("text", ["7x", "", "d", "0s", "-1h", "5ss", "30m1h", "1h-5m"])
def test_bad_durations_are_one_line_naming_the_flag(text: str) -> None:
    with pytest.raises(UsageError, match=r"^--step: expected") as err:
        parse_duration(text, "--step")
    assert "\n" not in str(err.value)


def test_durations_format() -> None:
    assert [format_duration(s) for s in (604800, 5400, 300, 90, 0)] == ["7d", "1h30m", "5m", "1m30s", "0s"]


def test_replicas_needed_is_the_ceiling_of_demand_over_usable_capacity() -> None:
    assert replicas_needed(7.99, 3.0, 0.2) == 4  # 7.99 / 2.4 = 3.33
    assert replicas_needed(4.8, 3.0, 0.2) == 2  # exactly 2 usable replicas' worth
    assert replicas_needed(2.1, 3.0, 0.3) == 1  # 2.1 / 2.0999999999999996 = 1.0000000000000002: noise adds no replica
    assert replicas_needed(4.81, 3.0, 0.2) == 3
    assert replicas_needed(10.0, 3.0, 0.0) == 4
    assert replicas_needed(0.0, 3.0, 0.2) == 1  # the plan never scales to zero
    assert replicas_needed(None, 3.0, 0.2) is None
    assert replicas_needed(5.0, None, 0.2) is None
    assert replicas_needed(5.0, 0.0, 0.2) is None


def test_concurrency_ceiling_is_the_knee_less_the_headroom() -> None:
    assert concurrency_ceiling(8, 0.2) == 6  # 6.4 -> 6: a ceiling is never rounded up
    assert concurrency_ceiling(10, 0.2) == 8
    assert concurrency_ceiling(20, 0.9) == 2  # 20 x (1 - 0.9) = 1.9999999999999996: noise takes none away
    assert concurrency_ceiling(1, 0.5) == 1
    assert concurrency_ceiling(None, 0.2) is None and concurrency_ceiling(0, 0.2) is None


def test_grid_sums_series_and_keeps_gaps_as_none() -> None:
    w = Window(1000.0, 1000.0 + 4 * 60, 60.0)
    a = Series({}, [(1000.0, 1.0), (1060.0, 2.0), (1180.0, 4.0)])
    b = Series({}, [(1060.0, 0.5), (9999.0, 7.0)])  # outside the window: ignored
    assert d.grid([a, b], w) == [1.0, 2.5, None, 4.0, None]


def test_hourly_means_percentile_and_median() -> None:
    ts = [0.0, 1800.0, 3600.0, 5400.0, 7200.0]
    assert d.hourly_means(ts, [1.0, 3.0, None, 5.0, 2.0]) == {0.0: 2.0, 3600.0: 5.0, 7200.0: 2.0}
    assert d.percentile([5.0, 1.0, 3.0, 2.0, 4.0], 95) == 5.0
    assert d.percentile(list(map(float, range(1, 101))), 95) == 95.0
    assert d.percentile([], 95) is None
    assert d.median([3.0, 1.0, 2.0]) == 2.0 and d.median([4.0, 1.0]) == 2.5 and d.median([]) is None


def test_spans_group_consecutive_steps_and_a_gap_ends_one() -> None:
    ts = [0.0, 60.0, 120.0, 180.0, 240.0, 300.0, 360.0]
    ratio = [0.5, 1.2, 1.5, None, 1.1, 0.9, 1.01]
    got = d.spans(ts, ratio, 60.0)
    assert [(s.start, s.end, s.steps, s.worst_ratio) for s in got] == [
        (60.0, 180.0, 2, 1.5),
        (240.0, 300.0, 1, 1.1),
        (360.0, 420.0, 1, 1.01),  # a run that lasts to the end is closed too
    ]
    assert d.spans(ts, [1.0] * 7, 60.0) == []  # at capacity is not above it


def test_day_profile_names_the_typical_peak_hour_and_skips_short_days() -> None:
    hours = {}
    for day in range(3):
        for hour in range(24):
            peak = 20 if day == 1 else 14  # one odd day
            hours[day * 86400.0 + hour * H] = 10.0 if hour == peak else 1.0 + hour / 100
    hours[3 * 86400.0 + 5 * H] = 99.0  # a day with one hour of data: not counted
    p = d.day_profile(hours)
    assert p.typical_peak_hour == 14
    assert [h for _, h in p.daily_peaks] == [14, 20, 14]
    assert p.agreement == pytest.approx(2 / 3)
    assert d.day_profile({}).typical_peak_hour is None


def _fleet_inputs() -> tuple[Inputs, Window]:
    """Model m: replicas a and b for 6 hours at 5 min, c only in hours 2-3; demand 5 req/s, 10 req/s in hour 3."""
    step = 300.0
    w = Window(0.0, 6 * H - step, step)
    ts = d.times(w)
    demand = [(t, 10.0 if 3 * H <= t < 4 * H else 5.0) for t in ts]
    flight = [(t, 4.0) for t in ts]
    rep = {"job": "j", "instance": "i", "model": "m"}
    a, b, c = ({**rep, "engine": e} for e in ("a", "b", "c"))
    in_c = [t for t in ts if 2 * H <= t < 4 * H]
    replicas = [Series(a, [(t, 1.0) for t in ts]), Series(b, [(t, 1.0) for t in ts]), Series(c, [(t, 1.0) for t in in_c])]
    gauges = {
        # a and b publish their capacity; c does not (a --profile may give it)
        "requests_per_second": [Series(a, [(t, 3.0) for t in ts]), Series(b, [(t, 3.0) for t in ts])],
        "concurrency": [Series(a, [(t, 8.0) for t in ts]), Series(b, [(t, 8.0) for t in ts])],
        "tokens_per_second": [],
    }
    inputs = Inputs({"m": Series({"model": "m"}, demand)}, {"m": Series({"model": "m"}, flight)}, replicas, gauges)
    return inputs, w


def test_fleet_capacity_counts_the_replicas_that_existed_then() -> None:
    inputs, w = _fleet_inputs()
    p = plan_model("m", inputs, w, 0.2, [Profile("c.json", None, 4.0, 2.0, 0.0, "tune baseline")])
    assert p.capacity.source == "prometheus" and p.capacity.requests_per_second == 3.0
    by_hour = {int(t // H): (n, c) for t, n, c in zip(p.times, p.replicas, p.fleet_rps)}
    assert by_hour[0] == (2, 6.0) and by_hour[2] == (3, 8.0) and by_hour[5] == (2, 6.0)  # c counts at its profile's 2 req/s
    # hour 3: 10 req/s, c there (8 req/s): above; hours 0-2 and 4-5: 5 req/s under 6 or 8
    assert [(s.start / H, s.end / H) for s in p.above] == [(3.0, 4.0)]
    assert p.above[0].worst_ratio == pytest.approx(10 / 8)
    assert p.hours_above == [3 * H]
    assert p.peak.hour == 3 * H and p.peak.requests_per_second == 10.0
    assert p.peak.replicas == 5  # 10 / (3 x 0.8) = 4.17
    assert p.peak.replicas_by_concurrency == 1  # 4 in flight / 6.4
    assert p.trough.replicas == 3 and p.trough.concurrency_ceiling == 6  # 5 / 2.4 = 2.08
    assert p.peak.in_flight_per_replica == pytest.approx(4 / 5)


def test_a_replica_without_capacity_leaves_its_steps_unjudged() -> None:
    inputs, w = _fleet_inputs()
    p = plan_model("m", inputs, w, 0.2, [])  # no profile for c
    judged = {int(t // H) for t, r in zip(p.times, p.ratio) if r is not None}
    assert judged == {0, 1, 4, 5}  # c's hours: its capacity is unknown, so is the fleet's
    assert p.above == []


def test_a_model_with_neither_gauges_nor_profile_is_not_sized_and_says_why() -> None:
    inputs, w = _fleet_inputs()
    bare = Inputs(inputs.demand, inputs.in_flight, inputs.replicas, {})
    p = plan_model("m", bare, w, 0.2, [])
    assert p.capacity.source == "none" and p.peak.replicas is None
    assert any("--profile" in n for n in p.notes)
    with_profile = plan_model("m", bare, w, 0.2, [Profile("x.json", "m", 8.0, 3.0, 0.0, "ramp knee")])
    assert with_profile.peak.replicas == 5 and with_profile.capacity.source == "profile x.json (ramp knee)"


def test_plan_all_covers_every_model_and_filters() -> None:
    inputs, w = _fleet_inputs()
    extra = Inputs({**inputs.demand, "n": Series({"model": "n"}, [(0.0, 1.0)])}, inputs.in_flight, inputs.replicas, inputs.gauges)
    assert [p.model for p in plan_all(extra, w, 0.2, [])] == ["m", "n"]
    assert [p.model for p in plan_all(extra, w, 0.2, [], only=["n"])] == ["n"]
    n = plan_all(extra, w, 0.2, [], only=["n"])[0]
    assert n.replicas == [0] * w.points and any("llm_engine_info" in note for note in n.notes)
    assert math.isclose(n.peak.requests_per_second or 0.0, 1.0)
