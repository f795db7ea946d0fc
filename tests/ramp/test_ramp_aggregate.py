"""Per-step reduction of exporter scrapes and /diagnosis documents."""

from __future__ import annotations

from typing import Any

import pytest

from exporter.exposition import SampleList, read_metrics
from exporter.ramp.aggregate import diagnosis_figures, exporter_figures, upper_median_status
from tests.ramp.ramp_steps import KV_ADVICE, diagnosis_doc, healthy_layers, kv_pressure_docs, kv_pressure_layers, kv_primary

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


def scrape(kv0: float, kv1: float, w: int, p: int) -> dict[str, SampleList]:
    return read_metrics(EXPOSITION.format(kv0=kv0, kv1=kv1, w=w, p=p)).scalars()


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
    assert fig.gauges["sm_active_ratio"].mean == pytest.approx(0.6)  # the busiest GPU (schema reduce "max")
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
    def doc(mem: tuple[float, str], sched_score: float | None, bottlenecks: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "timestamp": 1.0,
            "layers": {
                "memory": {"score": mem[0], "status": mem[1]},
                "scheduler": {"score": sched_score, "status": "unknown" if sched_score is None else "ok"},
            },
            "bottlenecks": bottlenecks,
        }

    def b(s: float, kv: float) -> dict[str, Any]:
        return {"layer": "memory", "cause": "kv_cache_pressure", "score": s, "evidence": {"kv": kv}, "advice": "more KV"}

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


# ------------------------------------------------------------------ schema 2: state, primary, headroom


def test_state_shares_and_upper_median_state() -> None:
    from exporter.ramp.aggregate import upper_median_state

    layers = healthy_layers()
    docs = [
        diagnosis_doc("healthy", layers),
        diagnosis_doc("degraded", layers, kv_primary()),
        diagnosis_doc("unknown", layers),
        diagnosis_doc("degraded", layers, kv_primary()),
    ]
    fig = diagnosis_figures(docs)
    assert fig.states == pytest.approx({"degraded": 0.5, "healthy": 0.25, "unknown": 0.25})
    assert fig.state == "degraded" and fig.degraded_readings == 2  # 2 of 3 judged readings
    assert upper_median_state(["healthy", "healthy", "degraded"]) == "healthy"
    assert upper_median_state(["healthy", "degraded"]) == "degraded"
    assert upper_median_state(["unknown", "unknown"]) == "unknown"
    assert diagnosis_figures([]).state == "unknown" and diagnosis_figures([]).states == {}


def test_a_reading_without_state_is_unknown_and_names_no_primary() -> None:
    # an older exporter (schema 1): no state, no primary; layer figures as before
    fig = diagnosis_figures([diagnosis_doc(None, healthy_layers()), diagnosis_doc(None, healthy_layers())])
    assert fig.state == "unknown" and fig.states == {"degraded": 0.0, "healthy": 0.0, "unknown": 1.0}
    assert fig.primary is None and fig.primaries == [] and fig.layers["memory"].status == "ok"


def test_primary_counts_chain_and_confidence_of_the_knee_step() -> None:
    fig = diagnosis_figures(kv_pressure_docs()[3])
    assert fig.state == "degraded" and fig.degraded_readings == 6
    assert fig.states["degraded"] == pytest.approx(6 / 8) and fig.states["healthy"] == pytest.approx(2 / 8)
    assert [(p.layer, p.cause, p.readings) for p in fig.primaries] == [
        ("memory", "kv_cache_pressure", 5),
        ("scheduler", "queue_backlog", 1),
    ]
    p = fig.primary
    assert p is fig.primaries[0] and p.share == pytest.approx(5 / 6)
    assert p.confidence_mean == pytest.approx((0.9 * 3 + 0.96 + 0.93) / 5)
    # three readings gave the first chain, two the second: the most frequent wins
    assert p.chain == "6 requests waiting, queue p95 780 ms ← KV cache 93 % full, 7.5 preemptions/s"
    assert p.summary == "KV cache 93 % full, 7.5 preemptions/s" and p.explains == ["queueing"]
    # evidence and advice of the reading that gave the chain: the chain and its numbers agree
    assert p.evidence["max_over_window(max(llm_kv_cache_usage_ratio))"] == 0.93 and p.advice == KV_ADVICE
    roles = {(c.layer, c.cause): c.role for c in fig.causes}
    assert roles[("memory", "kv_cache_pressure")] == "primary" and roles[("scheduler", "queue_backlog")] == "symptom"


def test_chain_tie_goes_to_the_latest_reading_and_healthy_readings_name_no_primary() -> None:
    layers = kv_pressure_layers()
    docs = [
        diagnosis_doc("degraded", layers, kv_primary(waiting=3)),
        diagnosis_doc("degraded", layers, kv_primary(waiting=5)),
        diagnosis_doc("healthy", layers, kv_primary(waiting=9)),
    ]  # a primary outside degraded does not count
    p = diagnosis_figures(docs).primary
    assert p is not None and p.readings == 2 and p.chain.startswith("5 requests waiting")


def test_headroom_mean_min_and_the_tightest_limit() -> None:
    docs = [
        diagnosis_doc("healthy", healthy_layers(memory_room=0.6)),
        diagnosis_doc("healthy", healthy_layers(memory_room=0.2)),
        diagnosis_doc("healthy", {"memory": ("ok", 0.2, None)}),
    ]
    mem = diagnosis_figures(docs).layers["memory"]
    assert mem.headroom_mean == pytest.approx(0.4) and mem.headroom_min == pytest.approx(0.2)
    assert mem.limit == "memory limit; 20% headroom"
    spec = diagnosis_figures(docs).layers["speculative_decoding"]
    assert spec.headroom_mean is None and spec.headroom_min is None and spec.limit == ""
