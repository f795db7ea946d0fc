"""Per-step reduction of exporter scrapes and /diagnosis documents."""

from __future__ import annotations

import pytest

from exporter.ramp.aggregate import diagnosis_figures, exporter_figures, upper_median_status
from exporter.ramp.probe import parse_metrics

EXPOSITION = """\
# HELP llm_kv_cache_usage_ratio Share of KV-cache blocks in use.
# TYPE llm_kv_cache_usage_ratio gauge
llm_kv_cache_usage_ratio{{server="a",engine="vllm",model="m",rank="0"}} {kv0}
llm_kv_cache_usage_ratio{{server="a",engine="vllm",model="m",rank="1"}} {kv1}
# TYPE llm_scheduler_requests_waiting gauge
llm_scheduler_requests_waiting{{server="a",engine="vllm",model="m",rank="0"}} {w}
llm_scheduler_requests_waiting{{server="a",engine="vllm",model="m",rank="1"}} {w}
# TYPE llm_gpu_sm_active_ratio gauge
llm_gpu_sm_active_ratio{{gpu="0",uuid="u0"}} 0.2
llm_gpu_sm_active_ratio{{gpu="1",uuid="u1"}} 0.6
# TYPE llm_kv_cache_preemptions_total counter
llm_kv_cache_preemptions_total{{server="a",engine="vllm",model="m",rank="0"}} {p}
# TYPE llm_request_ttft_seconds histogram
llm_request_ttft_seconds_bucket{{server="a",engine="vllm",model="m",rank="0",le="0.1"}} 1
llm_request_ttft_seconds_bucket{{server="a",engine="vllm",model="m",rank="0",le="+Inf"}} 2
llm_request_ttft_seconds_sum{{server="a",engine="vllm",model="m",rank="0"}} 0.3
llm_request_ttft_seconds_count{{server="a",engine="vllm",model="m",rank="0"}} 2
"""


def scrape(kv0: float, kv1: float, w: int, p: int):  # type: ignore[no-untyped-def]
    return parse_metrics(EXPOSITION.format(kv0=kv0, kv1=kv1, w=w, p=p))


def test_parse_keeps_gauges_and_counters_and_skips_histograms() -> None:
    s = scrape(0.5, 0.7, 3, 4)
    assert sorted(v for _, v in s["llm_kv_cache_usage_ratio"]) == [0.5, 0.7]
    assert s["llm_kv_cache_preemptions_total"][0][1] == 4.0
    assert s["llm_kv_cache_preemptions_total"][0][0]["rank"] == "0"
    assert not any(name.startswith("llm_request_ttft") for name in s)


def test_gauges_reduce_across_series_then_over_settled_samples_counters_over_all() -> None:
    warmup = scrape(0.0, 0.1, 0, 10)
    settled = [scrape(0.5, 0.9, 1, 12), scrape(0.7, 0.3, 3, 20)]
    fig = exporter_figures([warmup, *settled], settled)
    kv = fig.gauges["kv_cache_usage_ratio"]  # worst rank per scrape: 0.9, 0.7
    assert (kv.mean, kv.max) == pytest.approx((0.8, 0.9))
    waiting = fig.gauges["requests_waiting"]  # summed over ranks: 2, 6
    assert (waiting.mean, waiting.max) == pytest.approx((4.0, 6.0))
    assert fig.gauges["sm_active_ratio"].mean == pytest.approx(0.4)  # mean over GPUs
    assert fig.counters["preemptions"] == 10  # 20 - 10, warm-up sample included
    assert "busiest_thread_cpu_ratio" not in fig.gauges  # absent stays absent
    assert "requests_finished" not in fig.counters
    assert fig.samples == 3


def test_counter_reset_counts_the_last_value() -> None:
    fig = exporter_figures([scrape(0, 0, 0, 50), scrape(0, 0, 0, 7)], [])
    assert fig.counters["preemptions"] == 7
    assert fig.gauges == {}


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        (["ok", "ok", "warning"], "ok"),
        (["ok", "warning", "warning"], "warning"),
        (["ok", "ok", "warning", "bottleneck"], "warning"),
        (["ok", "bottleneck", "bottleneck", "bottleneck"], "bottleneck"),
        (["unknown", "unknown", "warning"], "warning"),
        (["unknown"], "unknown"),
        ([], "unknown"),
    ],
)
def test_upper_median_status(statuses: list[str], expected: str) -> None:
    assert upper_median_status(statuses) == expected


def test_diagnosis_reduction() -> None:
    def doc(mem: tuple[float, str], sched_score: float | None, bottlenecks: list[dict]) -> dict:  # type: ignore[type-arg]
        return {
            "timestamp": 1.0,
            "layers": {
                "memory": {"score": mem[0], "status": mem[1]},
                "scheduler": {"score": sched_score, "status": "unknown" if sched_score is None else "ok"},
            },
            "bottlenecks": bottlenecks,
        }

    b = lambda s, kv: {"layer": "memory", "cause": "kv_cache_pressure", "score": s, "evidence": {"kv": kv}, "advice": "more KV"}  # noqa: E731
    docs = [doc((0.3, "ok"), None, []), doc((0.6, "warning"), 0.1, [b(0.6, 0.95)]), doc((0.9, "bottleneck"), 0.2, [b(0.9, 0.99)])]
    fig = diagnosis_figures(docs)
    mem = fig.layers["memory"]
    assert (mem.score_mean, mem.score_max, mem.status, mem.samples) == pytest.approx((0.6, 0.9, "warning", 3))
    assert mem.worst_status == "bottleneck"
    sched = fig.layers["scheduler"]
    assert sched.score_mean == pytest.approx(0.15) and sched.status == "ok"
    [cause] = fig.causes
    assert (cause.layer, cause.cause, cause.score_max, cause.advice) == ("memory", "kv_cache_pressure", 0.9, "more KV")
    assert cause.share == pytest.approx(2 / 3)
    assert cause.evidence == {"kv": 0.99}  # from the strongest sample
