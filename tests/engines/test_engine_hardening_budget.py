"""What an engine may publish: the series budget, cut label values, non-monotone histograms.

The budget counts *published* series (a histogram costs its buckets plus
``_sum`` and ``_count``) and keeps the families the diagnosis needs first;
what it leaves out is counted in ``llm_exporter_series_dropped_total``
instead of the whole engine going dark.
"""

from __future__ import annotations

import logging

import pytest

from exporter.engines import _line_order, _wanted, normalize_exposition
from exporter.engines.budget import MAX_LABEL_LENGTH, PRIORITY, cut_value, family_share, line_quotas, published_series
from exporter.engines.config import EngineConfig
from exporter.engines.source import EngineSource
from exporter.engines.textparse import lines_by_name, parse
from exporter.samples import HistogramSample, Point, Sample, SampleResult
from tests.engines.engine_helpers import fixture
from tests.support.fake_engine import FakeEngine

VLLM = fixture("vllm-0.33-v1-2dp.prom")
CORE = PRIORITY[: PRIORITY.index("llm_generation_tokens_total") + 1]
BOUNDS = ("0.1", "0.5", "1.0", "5.0", "+Inf")


def e2e_histograms(models: int, bump: int = 0) -> str:
    """``models`` e2e-latency histograms of 5 buckets, one per model_name: 7 series each."""
    lines = []
    for m in range(models):
        labels = f'engine="0",model_name="adapter-{m + bump}"'
        lines += [f'vllm:e2e_request_latency_seconds_bucket{{{labels},le="{le}"}} {i}' for i, le in enumerate(BOUNDS)]
        lines += [
            f"vllm:e2e_request_latency_seconds_sum{{{labels}}} 1.5",
            f"vllm:e2e_request_latency_seconds_count{{{labels}}} 4",
        ]
    return "\n".join(lines) + "\n"


def by_name(points: list[Point]) -> dict[str, list[Point]]:
    out: dict[str, list[Point]] = {}
    for p in points:
        out.setdefault(p.name, []).append(p)
    return out


# --------------------------------------------------------------------------- budget


def test_over_budget_the_core_families_are_kept_and_the_rest_counted() -> None:
    # 9 100 series of a non-core family: under its share of input lines (10 000), over the published budget
    text = VLLM + e2e_histograms(1_300)
    free = normalize_exposition(text, "srv")
    budgeted = normalize_exposition(text, "srv", max_series=5_000)
    total = published_series(free.points)
    kept = published_series(budgeted.points)
    assert total > 9_100 and kept <= 5_000
    assert budgeted.dropped == {"budget": total - kept}
    full, cut = by_name(free.points), by_name(budgeted.points)
    for name in CORE:
        if name in full:
            assert cut.get(name) == full[name], f"core family {name} was cut"
    assert cut["llm_engine_info"]  # the engine is still identified
    assert 0 < len(cut["llm_request_e2e_seconds"]) < len(full["llm_request_e2e_seconds"])


def gauge_floods(n: int, names: tuple[str, ...]) -> str:
    """``n`` series of each gauge in ``names`` (each family under its share, together over the budget)."""
    return "".join(f'{name}{{engine="o{i}",model_name="m"}} 1\n' for name in names for i in range(n))


def test_a_body_over_budget_is_not_materialised_past_what_can_be_published() -> None:
    # three mapped gauges of 3 000 series each against a 4 000-series budget: before the quotas the
    # parser built all 9 000 label dicts and the budget then threw 5 000 away (issue 25's memory peak)
    flood = gauge_floods(3_000, ("vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:num_requests_running"))
    text = VLLM + flood
    budget = 4_000
    quotas = line_quotas(lines_by_name(text), _line_order("vllm"), budget, family_share(budget))
    assert quotas is not None
    exp = parse(text, _wanted("vllm"), family_share=family_share(budget), quota=quotas.quotas)
    materialised = sum(len(v) for v in exp.samples.values())
    assert materialised <= budget
    result = normalize_exposition(text, "srv", max_series=budget)
    free = normalize_exposition(text, "srv")
    kept, full = by_name(result.points), by_name(free.points)
    # the first family of the priority order is kept whole, the next one cut, the last one unread
    assert len(kept["llm_kv_cache_usage_ratio"]) == len(full["llm_kv_cache_usage_ratio"])
    assert 0 < len(kept["llm_scheduler_requests_running"]) < len(full["llm_scheduler_requests_running"])
    assert "llm_scheduler_requests_waiting" not in kept or len(kept["llm_scheduler_requests_waiting"]) < 100
    assert published_series(result.points) <= budget
    # every series left out is counted, once per unread line: only a series an unread line of the
    # engine's own would also have fed (its waiting gauge feeds two) can go uncounted
    left_out = published_series(free.points) - published_series(result.points)
    own_waiting_lines = lines_by_name(VLLM)["vllm:num_requests_waiting"]
    assert left_out - own_waiting_lines <= result.dropped["budget"] <= left_out


def test_an_older_name_a_row_will_not_read_is_not_counted_as_dropped() -> None:
    # the legacy KV gauge beside the current one: the row reads the current one only
    flood = gauge_floods(3_000, ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:num_requests_running"))
    quotas = line_quotas(lines_by_name(VLLM + flood), _line_order("vllm"), 4_000, family_share(4_000))
    assert quotas is not None and "vllm:gpu_cache_usage_perc" in quotas.unused
    assert quotas.quotas["vllm:gpu_cache_usage_perc"] == 0


def test_under_the_budget_no_quota_is_set() -> None:
    assert line_quotas(lines_by_name(VLLM), _line_order("auto"), 20_000, family_share(20_000)) is None


def test_the_budget_keeps_the_same_points_every_scrape() -> None:
    text = VLLM + e2e_histograms(500)
    first = normalize_exposition(text, "srv", max_series=2_000)
    again = normalize_exposition(text, "srv", max_series=2_000)
    assert first.points == again.points


def test_under_budget_nothing_is_dropped() -> None:
    result = normalize_exposition(VLLM, "srv", max_series=20_000)
    assert result.dropped == {} and result.points == normalize_exposition(VLLM, "srv").points


def test_a_budget_smaller_than_the_core_keeps_core_points_first() -> None:
    result = normalize_exposition(VLLM + e2e_histograms(100), "srv", max_series=4)
    names = {p.name for p in result.points}
    assert names == {"llm_kv_cache_usage_ratio", "llm_scheduler_requests_running"}
    assert published_series(result.points) == 4


def test_the_input_safety_limit_still_bounds_parsing() -> None:
    from exporter.engines import SeriesLimitError

    with pytest.raises(SeriesLimitError):
        # 50 001 lines over 1 000 families, each far under its share: too many series in all
        junk = "".join(f"junk_{i % 1_000} 1\n" for i in range(50_001))
        normalize_exposition(VLLM + junk, "srv", max_series=100)


def test_engine_source_stays_up_over_budget_and_counts_what_it_dropped(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="exporter.engines.source")
    with FakeEngine((VLLM + e2e_histograms(300)).encode()) as srv:
        source = EngineSource(EngineConfig(url=srv.url, name="eng1", timeout=2.0, interval=5.0, max_series=1_000))
        first = source.sample()
        second = source.sample()
        srv.body = VLLM.encode()
        third = source.sample()

    def dropped(result: SampleResult) -> dict[str, float]:
        return {
            p.labels["reason"]: p.value
            for p in result.points
            if p.name == "llm_exporter_series_dropped_total" and isinstance(p, Sample)
        }

    assert published_series(first.points) <= 1_000  # the counter's own series included
    assert dropped(first)["budget"] > 0 and dropped(second)["budget"] == 2 * dropped(first)["budget"]
    assert dropped(third)["budget"] == dropped(second)["budget"]  # a counter: it never goes back
    assert {p.labels["source"] for p in first.points if p.name.startswith("llm_exporter_")} == {"engine:eng1"}
    assert any(p.name == "llm_kv_cache_usage_ratio" for p in first.points)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "over the series budget" in r.getMessage()]
    assert len(warnings) == 1 and "max_series is 1000" in warnings[0].getMessage()  # once, not every scrape
    assert any("no more series dropped" in r.getMessage() for r in caplog.records)


# --------------------------------------------------------------------------- label values


def test_long_label_values_are_cut_and_counted() -> None:
    huge = "m" * 1_000_000
    text = VLLM.replace('engine="0",model_name="Qwen/Qwen2.5-1.5B-Instruct"', f'engine="0",model_name="{huge}"', 1)
    result = normalize_exposition(text, "srv")
    longest = max(len(v) for p in result.points for v in p.labels.values())
    assert longest == MAX_LABEL_LENGTH
    assert result.dropped == {"label_too_long": 2}  # llm_scheduler_requests_running{rank="0"} and its engine_info
    assert cut_value(huge) in {p.labels.get("model") for p in result.points}


def test_two_long_values_with_one_prefix_stay_two_series() -> None:
    a, b = "p" * 400 + "a", "p" * 400 + "b"
    assert cut_value(a) != cut_value(b) and len(cut_value(a)) == MAX_LABEL_LENGTH
    assert cut_value("short") == "short"


# --------------------------------------------------------------------------- histograms


def test_a_histogram_whose_counts_decrease_is_not_republished() -> None:
    bad = 'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.25",model_name="Qwen/Qwen2.5-1.5B-Instruct"} 20.0'
    assert bad in VLLM
    result = normalize_exposition(VLLM.replace(bad, bad.replace("} 20.0", "} 3.0")), "srv")
    ttft = [p for p in result.points if p.name == "llm_request_ttft_seconds"]
    assert [p.labels["rank"] for p in ttft] == ["1"]  # rank 0's histogram is dropped, rank 1's kept
    assert isinstance(ttft[0], HistogramSample)
    n_buckets = VLLM.count('vllm:time_to_first_token_seconds_bucket{engine="0"')
    assert result.dropped == {"bad_histogram": n_buckets + 2}
    assert any("cumulative bucket counts decrease" in p for p in result.problems)


def test_every_published_histogram_is_monotone() -> None:
    for p in normalize_exposition(VLLM, "srv").points:
        if isinstance(p, HistogramSample):
            counts = [c for _, c in p.buckets]
            assert counts == sorted(counts), p.name
