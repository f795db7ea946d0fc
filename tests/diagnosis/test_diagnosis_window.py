"""Counter rates and histogram quantiles over the diagnosis window."""

from __future__ import annotations

import math
from collections.abc import Sequence

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from exporter.diagnosis.window import Window, bucket_quantile
from exporter.samples import HistogramSample, Point, Sample
from exporter.store import Snapshot

INF = math.inf


def snap(ts: float, *points: Point) -> Snapshot:
    return Snapshot(ts, list(points), {})


def counter(value: float, **labels: str) -> Sample:
    return Sample("llm_kv_cache_preemptions_total", {"server": "a", **labels}, value)


def test_rate_sums_series_and_handles_a_reset() -> None:
    w = Window(60)
    w.add(snap(0, counter(10, rank="0"), counter(100, rank="1")))
    w.add(snap(10, counter(30, rank="0"), counter(5, rank="1")))  # rank 1 restarted
    assert w.counter_delta("llm_kv_cache_preemptions_total") == 20 + 5
    assert w.rate("llm_kv_cache_preemptions_total") == 2.5


def test_rate_unknown_with_one_snapshot_or_no_common_series() -> None:
    w = Window(60)
    w.add(snap(0, counter(1, rank="0")))
    assert w.rate("llm_kv_cache_preemptions_total") is None
    w.add(snap(1, counter(9, rank="1")))
    assert w.rate("llm_kv_cache_preemptions_total") is None


def test_window_drops_old_snapshots_but_keeps_the_span() -> None:
    w = Window(5)
    for t in range(20):
        w.add(snap(float(t), counter(float(t))))
    assert w.span >= 5 and w.span <= 6
    assert w.rate("llm_kv_cache_preemptions_total") == 1.0


def hist(ts: float, buckets: Sequence[tuple[float, float]], labels: dict[str, str] | None = None) -> Snapshot:
    return snap(ts, HistogramSample("llm_request_ttft_seconds", labels or {"server": "a"}, tuple(buckets), 0.0, buckets[-1][1]))


def test_quantile_of_the_window_delta_not_the_lifetime() -> None:
    w = Window(60)
    # lifetime: 1000 fast requests; during the window: 100 slow ones
    w.add(hist(0, [(0.1, 1000), (1.0, 1000), (10.0, 1000), (INF, 1000)]))
    w.add(hist(10, [(0.1, 1000), (1.0, 1000), (10.0, 1100), (INF, 1100)]))
    q = w.quantile("llm_request_ttft_seconds", 0.95)
    assert q is not None and 1.0 < q <= 10.0


def test_quantile_none_when_nothing_observed_in_the_window() -> None:
    w = Window(60)
    w.add(hist(0, [(0.1, 5), (INF, 5)]))
    w.add(hist(1, [(0.1, 5), (INF, 5)]))
    assert w.quantile("llm_request_ttft_seconds", 0.95) is None


def test_quantile_merges_ranks_with_the_same_buckets() -> None:
    w = Window(60)
    w.add(
        snap(0, *(HistogramSample("llm_request_ttft_seconds", {"rank": r}, ((1.0, 0), (2.0, 0), (INF, 0)), 0, 0) for r in "01"))
    )
    w.add(
        snap(
            1,
            HistogramSample("llm_request_ttft_seconds", {"rank": "0"}, ((1.0, 90), (2.0, 90), (INF, 90)), 0, 90),
            HistogramSample("llm_request_ttft_seconds", {"rank": "1"}, ((1.0, 0), (2.0, 10), (INF, 10)), 0, 10),
        )
    )
    # 100 observations: 90 at <=1, 10 in (1,2]; p95 lies halfway into the second bucket
    assert w.quantile("llm_request_ttft_seconds", 0.95) == 1.5


def test_bucket_quantile_matches_prometheus_interpolation() -> None:
    buckets = [(0.1, 10), (0.5, 60), (1.0, 100), (INF, 100)]
    assert bucket_quantile(0.5, buckets) == 0.1 + 0.4 * (50 - 10) / 50
    assert bucket_quantile(0.05, buckets) == 0.05
    assert bucket_quantile(0.99, [(1.0, 1), (INF, 100)]) == 1.0  # in +Inf: highest finite bound
    assert bucket_quantile(0.5, [(1.0, 0), (INF, 0)]) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=20.0), min_size=1, max_size=200), st.floats(min_value=0.01, max_value=0.99))
def test_bucket_quantile_lies_in_the_bucket_holding_the_true_quantile(obs: list[float], q: float) -> None:
    assume(abs(q * len(obs) - round(q * len(obs))) > 1e-6)  # a rank on a count boundary is ambiguous
    bounds = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, INF]
    buckets = [(le, sum(1 for o in obs if o <= le)) for le in bounds]
    got = bucket_quantile(q, buckets)
    true = sorted(obs)[max(0, math.ceil(q * len(obs)) - 1)]
    assert got is not None
    # the estimate and the truth share a bucket (or the truth is beyond the last finite bound)
    upper = next(le for le in bounds if true <= le)
    lower = max([0.0] + [le for le in bounds if le < upper])
    if math.isinf(upper):
        assert got == 10
    else:
        assert lower <= got <= upper


def test_a_series_missing_from_the_oldest_snapshot_still_has_a_rate() -> None:
    """The engine source had not sampled yet (or was stale) when the window began."""
    w = Window(60)
    w.add(snap(0))
    w.add(snap(2, counter(10)))
    w.add(snap(4, counter(20)))
    assert w.rate("llm_kv_cache_preemptions_total") == 5.0
    w2 = Window(60)
    w2.add(snap(0))
    w2.add(hist(1, [(1.0, 10), (INF, 10)]))
    w2.add(hist(2, [(1.0, 10), (INF, 30)]))
    assert w2.quantile("llm_request_ttft_seconds", 0.5) == 1.0  # all 20 new observations above 1 s


def test_gauge_history_of_the_recent_seconds_only() -> None:
    w = Window(60)
    for t in range(10):
        w.add(snap(float(t), Sample("llm_scheduler_requests_waiting", {}, float(t))))

    def reduce(s: Snapshot) -> float | None:
        return s.total("llm_scheduler_requests_waiting")

    assert w.gauge_history(reduce) == [float(t) for t in range(10)]
    assert w.gauge_history(reduce, seconds=3) == [6.0, 7.0, 8.0, 9.0]


def test_quantile_over_the_last_seconds_only() -> None:
    w = Window(20)
    # 100 fast requests in the first 12 s, then 4 slow ones in the last 5 s
    w.add(hist(0, [(0.1, 0), (1.0, 0), (10.0, 0), (INF, 0)]))
    w.add(hist(12, [(0.1, 100), (1.0, 100), (10.0, 100), (INF, 100)]))
    w.add(hist(17, [(0.1, 100), (1.0, 100), (10.0, 104), (INF, 104)]))
    diluted = w.quantile("llm_request_ttft_seconds", 0.95)
    assert diluted is not None and diluted < 1.0  # diluted by the window
    assert w.histogram_delta_count("llm_request_ttft_seconds", 5) == 4
    now = w.quantile("llm_request_ttft_seconds", 0.95, 5)
    assert now is not None and now > 1.0  # what requests see now


def _found(quantile: tuple[float, float] | None) -> tuple[float, float]:
    assert quantile is not None, "nothing observed"
    return quantile


def test_recent_quantile_looks_back_until_it_has_enough_requests() -> None:
    w = Window(20)
    w.add(hist(0, [(0.1, 0), (1.0, 0), (10.0, 0), (INF, 0)]))
    w.add(hist(10, [(0.1, 0), (1.0, 0), (10.0, 30), (INF, 30)]))  # 30 slow, 10 s ago
    w.add(hist(18, [(0.1, 1), (1.0, 1), (10.0, 30), (INF, 31)]))
    w.add(hist(19, [(0.1, 3), (1.0, 3), (10.0, 30), (INF, 33)]))  # then only 3 fast ones
    value, look = _found(w.recent_quantile("llm_request_ttft_seconds", 0.95, 20))
    assert value > 1.0 and 9 < look < 10.1  # 3 requests are not a p95: it reached back to the slow ones
    value, look = _found(w.recent_quantile("llm_request_ttft_seconds", 0.95, 2))
    assert value <= 0.1 and look < 1.1  # enough in the last cycle alone
    value, look = _found(w.recent_quantile("llm_request_ttft_seconds", 0.95, 2, seconds=5))
    assert value <= 0.1 and look == 5
    assert _found(w.recent_quantile("llm_request_ttft_seconds", 0.95, 100))[1] == w.span  # never enough: the window
    assert Window(20).recent_quantile("llm_request_ttft_seconds", 0.95, 20) is None


def test_the_slim_window_judges_exactly_what_the_whole_snapshots_would() -> None:
    """The diagnosis window keeps only the families the signals read: same signals, fewer points."""
    from exporter.diagnosis import signals as sig
    from exporter.diagnosis.window import Window
    from exporter.samples import Sample
    from tests.diagnosis.diag_points import ENG, engine, gpu, histogram, process

    def snap(i: int) -> Snapshot:
        pts = (
            gpu(0, util=0.9, sm=0.6, tensor=0.2, dram=0.7, pcie=1e9)
            + process(0.5)
            + engine(
                waiting=3 + i,
                running=8,
                kv=0.6,
                preemptions=2.0 * i,
                finished={"stop": 5.0 * i, "abort": i},
                drafted=100.0 * i,
                accepted=30.0 * i,
            )
            + [
                histogram("llm_request_ttft_seconds", [0.3] * (20 * i)),
                histogram("llm_scheduler_queue_seconds", [0.6] * (20 * i)),
                Sample("llm_scheduler_requests_waiting_by_reason", {**ENG, "reason": "capacity"}, 3.0 + i),
                Sample("llm_prefix_cache_hit_tokens_total", ENG, 100.0 * i),
            ]  # not read: dropped by the slim window
            + [Sample("llm_engine_info", {**ENG, "generation": str(n)}, 1.0) for n in range(50)]
        )
        return Snapshot(1000.0 + i, pts, {})

    whole, slim = Window(20.0), Window(20.0, keep=sig.reads)
    for i in range(6):
        whole.add(snap(i))
        slim.add(snap(i))
    assert sig.compute(slim).service == sig.compute(whole).service
    assert sig.compute(slim).scopes["gpu"] == sig.compute(whole).scopes["gpu"]
    assert sum(len(s.points) for s in slim.snapshots) < sum(len(s.points) for s in whole.snapshots) / 2


def test_the_window_stays_bounded_whatever_an_engine_publishes() -> None:
    from exporter.diagnosis.window import Window
    from exporter.samples import Sample

    w = Window(60.0, per_name_cap=256, max_points=10_000)
    for i in range(40):
        pts: list[Point] = [Sample("llm_scheduler_requests_running", {"rank": f"{i}-{n}"}, 1.0) for n in range(19_000)]
        w.add(Snapshot(1000.0 + i, pts, {}))
    assert all(len(s.points) <= 256 for s in w.snapshots)
    assert sum(len(s.points) for s in w.snapshots) <= 10_000 and len(w) >= 2
