"""The demo's view and tour bookkeeping, without processes: one consistent view, the tour's conclusions."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from exporter.commands import demo as demo_command
from exporter.demo.live import render
from exporter.demo.plan import EXPECTED_PRIMARY, TOUR, TOUR_SECONDS, tour_names
from exporter.demo.readings import Reading, reading_of
from exporter.demo.rows import layer_rows
from exporter.demo.summary import conclude, summary_lines
from exporter.demo.transcript import injected_text, plain_line
from exporter.demo.units import evidence_text, fmt_signal
from exporter.demo.verdicts import conclusion_line
from exporter.errors import UsageError
from exporter.simulator.scenarios import NAMES, SCENARIOS
from tests.diagnosis.test_diagnosis_scenarios import EXPECTED

METRICS = (
    "\n".join(
        [
            "# TYPE llm_gpu_sm_active_ratio gauge",
            'llm_gpu_sm_active_ratio{gpu="0",uuid="a"} 0.42',
            "# TYPE llm_parallel_sm_active_skew_ratio gauge",
            'llm_parallel_sm_active_skew_ratio{group="all"} 1.0',
            "# TYPE llm_process_cpu_ratio gauge",
            'llm_process_cpu_ratio{server="s"} 1.3',
            "# TYPE llm_process_busiest_thread_cpu_ratio gauge",
            'llm_process_busiest_thread_cpu_ratio{server="s"} 0.25',
            "# TYPE llm_scheduler_requests_waiting gauge",
            'llm_scheduler_requests_waiting{server="s",engine="vllm",model="m",rank=""} 12',
            "# TYPE llm_generation_tokens_total counter",
            'llm_generation_tokens_total{server="s",engine="vllm",model="m",rank=""} 1000',
            "# TYPE llm_request_ttft_seconds histogram",
            'llm_request_ttft_seconds_bucket{server="s",engine="vllm",model="m",rank="",le="+Inf"} 4',
            'llm_request_ttft_seconds_sum{server="s",engine="vllm",model="m",rank=""} 2',
            'llm_request_ttft_seconds_count{server="s",engine="vllm",model="m",rank=""} 4',
            "# TYPE llm_scheduler_queue_seconds histogram",
            'llm_scheduler_queue_seconds_bucket{server="s",engine="vllm",model="m",rank="",le="+Inf"} 4',
            'llm_scheduler_queue_seconds_sum{server="s",engine="vllm",model="m",rank=""} 1',
            'llm_scheduler_queue_seconds_count{server="s",engine="vllm",model="m",rank=""} 4',
        ]
    )
    + "\n"
)
#: what /diagnosis?signals=1 says about the same moment
SIGNALS = {
    "p95_over_recent(llm_request_ttft_seconds)": 7.647,
    "p95(llm_request_ttft_seconds)": 5.0,
    "p95(llm_scheduler_queue_seconds)": 9.67,
    "sum(llm_scheduler_requests_waiting)": 14.0,
    "rate(llm_generation_tokens_total)": 321.5,
    "max(llm_process_cpu_ratio)": 1.3,
    "max(llm_kv_cache_usage_ratio)": 0.97,
    "increase(llm_spec_decode_accepted_tokens_total) / increase(llm_spec_decode_draft_tokens_total)": 0.2,
}


def _readings() -> tuple[Reading, Reading]:
    before = reading_of(METRICS)
    now = reading_of(METRICS)  # nothing finished between the two reads
    now.at = before.at + 1.0
    return now, before


def test_rows_show_what_the_diagnosis_judged_in_its_units() -> None:
    now, before = _readings()
    rows = layer_rows(now, before, SIGNALS)
    app = dict(rows["application"])
    assert app["request_ttft_seconds"] == "7.6 s p95"  # the recent p95 the diagnosis judged, not "-"
    assert app["generation_tokens_total"] == "321.5/s"
    sched = dict(rows["scheduler"])
    assert sched["scheduler_queue_seconds"] == "9.7 s p95"  # no recent p95: the window's
    assert sched["scheduler_requests_waiting"] == "14"
    assert sched["process_cpu_ratio"] == "1.30 cores"
    assert sched["process_busiest_thread_cpu_ratio"] == "25%"  # a 0-1 share of one core
    assert dict(rows["parallel"])["parallel_sm_active_skew_ratio"] == "×1.00"  # balanced, not "100%"
    assert dict(rows["hardware"])["gpu_sm_active_ratio"] == "42%"
    assert dict(rows["speculative_decoding"])["spec_decode_acceptance"] == "20%"
    assert all(value != "-" for layer in rows.values() for _, value in layer)


def test_rows_without_signals_never_read_dash_when_a_value_exists() -> None:
    now, before = _readings()
    rows = layer_rows(now, before, None)
    assert dict(rows["application"])["request_ttft_seconds"] == "500 ms avg since start"
    assert dict(rows["application"])["generation_tokens_total"] == "0/s"
    assert all(value != "-" for layer in rows.values() for _, value in layer)


def test_identical_per_gpu_values_collapse() -> None:
    text = (
        "\n".join(
            ["# TYPE llm_gpu_power_watts gauge"]
            + [f'llm_gpu_power_watts{{gpu="{i}",uuid="u{i}"}} 551' for i in range(4)]
            + ["# TYPE llm_gpu_sm_active_ratio gauge"]
            + [f'llm_gpu_sm_active_ratio{{gpu="{i}",uuid="u{i}"}} {0.2 + i / 10}' for i in range(4)]
        )
        + "\n"
    )
    rows = dict(layer_rows(reading_of(text), None)["hardware"])
    assert rows["gpu_power_watts"] == "551 W (all 4)"
    assert rows["gpu_sm_active_ratio"] == "20% 30% 40% 50%"


def test_plain_line_reads_the_diagnosis_signals() -> None:
    now, before = _readings()
    line = plain_line(3.0, "kv_pressure", now, before, "degraded: x", "1 req/s", SIGNALS)
    assert "waiting=14 " in line and "kv=97%" in line and "tok/s=321.5" in line
    assert "ttft_p95=7.6 s" in line and "queue_p95=9.7 s" in line and "cpu_thread=25%" in line
    first = plain_line(0.0, "healthy", now, None, "healthy: no symptom", "0 req/s", SIGNALS)
    assert "tok/s=321.5" in first  # the diagnosis' rate: no "-" on the first line


def test_signal_and_evidence_values_carry_their_units() -> None:
    assert fmt_signal("llm_parallel_sm_active_skew_ratio", 1.69) == "×1.69"
    assert fmt_signal("p95_over_recent(llm_scheduler_queue_seconds)", 9.67) == "9.7 s"
    assert fmt_signal("p95(llm_request_inter_token_seconds)", 0.25) == "250 ms"
    assert fmt_signal("rate(llm_kv_cache_preemptions_total)", 4.1) == "4.1/s"
    assert fmt_signal("max(llm_kv_cache_usage_ratio)", 0.97) == "97%"
    assert fmt_signal("llm_gpu_power_watts / llm_gpu_power_limit_watts", 0.99) == "99%"
    assert fmt_signal("max(llm_process_busiest_thread_cpu_demand_ratio)", 1.4) == "1.40 cores"
    assert fmt_signal("sum(llm_scheduler_requests_waiting)", 12.0) == "12"
    assert (
        evidence_text({"llm_parallel_sm_active_skew_ratio": 1.69, "p95(llm_scheduler_queue_seconds)": 9.67})
        == "llm_parallel_sm_active_skew_ratio=×1.69, p95(llm_scheduler_queue_seconds)=9.7 s"
    )


def test_a_narrow_terminal_wraps_and_cuts_nothing() -> None:
    from rich.console import Console

    now, before = _readings()
    advice = "Lower max_num_seqs or give the KV cache more memory. " * 5
    primary = {
        "layer": "memory",
        "cause": "kv_cache_pressure",
        "score": 0.8,
        "confidence": 0.91,
        "role": "primary",
        "chain": "TTFT p95 7.6 s > SLO 2 s ← KV cache 97 % full",
        "evidence": {},
        "advice": advice,
    }
    diagnosis = {
        "state": "degraded",
        "primary": primary,
        "signals": SIGNALS,
        "layers": {
            "memory": {"score": 0.8, "status": "bottleneck", "headroom": 0.0},
            "parallel": {"score": 0.0, "status": "ok", "headroom": 1.0},
        },
        "bottlenecks": [
            primary,
            {
                "layer": "parallel",
                "cause": "gpu_imbalance",
                "role": "warning",
                "evidence": {"llm_parallel_sm_active_skew_ratio": 1.69},
            },
        ],
    }
    results = [conclude("healthy", [{"state": "healthy", "primary": None, "timestamp": 1}])]
    console = Console(record=True, width=80)
    args = argparse.Namespace(scenario=None, dialect="vllm")
    console.print(
        render(
            args,
            5.0,
            now,
            before,
            diagnosis,
            "1 req/s, 0 failed",
            "",
            scenario="kv_pressure",
            tour="tour 2/3: kv_pressure",
            results=results,
        )
    )
    out = console.export_text()
    assert "…" not in out
    flat = " ".join(out.replace("│", " ").split())
    assert flat.count("Lower max_num_seqs or give the KV cache more memory.") == 5
    assert "×1.69" in flat and "×1.00" in flat and "7.6 s p95" in flat
    assert "tour so far: healthy -> healthy (as expected)" in flat
    wide = Console(record=True, width=200)
    wide.print(render(args, 5.0, now, before, diagnosis, "1 req/s, 0 failed", "", scenario="kv_pressure"))
    wide_text = wide.export_text()
    assert "bottleneck 0.80 · 0% headroom" in wide_text and "ok 0.00 · 100% headroom" in wide_text


def test_expected_primaries_are_the_scenario_contract() -> None:
    assert {s: f"{layer}/{cause}" for s, layer, cause in EXPECTED} == {s: p for s, p in EXPECTED_PRIMARY.items() if p}
    # scenarios with launch flags are left out: the exporter reads those from the command line, so a
    # live switch (POST /sim/scenario) cannot reach them (tests/simulator/test_sim_setting_causes.py)
    assert set(EXPECTED_PRIMARY) == {n for n in NAMES if not SCENARIOS[n].launch}
    assert TOUR[0] == "healthy" and set(TOUR[1:]) == {s for s, _, _ in EXPECTED}


def _verdict(ts: float, primary: str | None, confidence: float = 0.9) -> dict[str, Any]:
    if primary is None:
        return {"timestamp": ts, "state": "healthy", "primary": None, "bottlenecks": []}
    layer, cause = primary.split("/")
    return {
        "timestamp": ts,
        "state": "degraded",
        "primary": {"layer": layer, "cause": cause, "confidence": confidence, "chain": "a ← b", "advice": "do x"},
    }


def test_the_conclusion_is_the_primary_named_most_over_the_second_half() -> None:
    kv = "memory/kv_cache_pressure"
    verdicts = [
        _verdict(1, None),
        _verdict(2, None),
        _verdict(3, None),
        _verdict(4, kv, 0.8),
        _verdict(5, kv, 0.93),
        _verdict(6, "scheduler/queue_backlog"),
        _verdict(7, kv, 0.95),
    ]
    c = conclude("kv_pressure", verdicts)
    assert c.verdict is not None
    assert c.named == kv and c.matched and c.share == (3, 4) and c.verdict["timestamp"] == 7
    assert conclusion_line(c.verdict) == "verdict: degraded primary memory/kv_cache_pressure (confidence 0.95): a ← b"
    healthy = conclude("healthy", [_verdict(1, None), _verdict(2, None)])
    assert healthy.matched and conclusion_line(healthy.verdict) == "verdict: healthy primary none: no symptom"
    wrong = conclude("tp_imbalance", [_verdict(1, None), _verdict(2, None)])
    assert not wrong.matched and wrong.named is None
    assert not conclude("kv_pressure", []).matched
    lines = summary_lines([c, healthy, wrong])
    assert lines[0] == "tour summary: 2 of 3 scenarios read as expected"
    assert lines[2].split() == ["kv_pressure", kv, kv, "yes"]
    assert lines[4].split() == ["tp_imbalance", "parallel/gpu_imbalance", "none", "(healthy)", "NO"]


def test_tour_names_start_healthy_and_refuse_unknown_scenarios() -> None:
    ns = argparse.Namespace
    assert tour_names(ns(tour=None)) == list(TOUR)
    assert tour_names(ns(tour="kv_pressure, healthy,tp_imbalance,kv_pressure")) == [
        "healthy",
        "kv_pressure",
        "tp_imbalance",
    ]
    with pytest.raises(UsageError, match="--tour: unknown scenario nope"):
        tour_names(ns(tour="kv_pressure,nope"))


def test_injected_text_names_the_knobs_and_the_load() -> None:
    from exporter.simulator import scenarios

    text = injected_text(scenarios.get("kv_pressure"))
    assert text.startswith("injected: num_gpu_blocks=768 max_num_seqs=64; load: 48 clients back to back")
    assert "nothing (defaults)" in injected_text(scenarios.get("healthy"))


def test_tour_flags_are_checked_before_anything_starts() -> None:
    parser = argparse.ArgumentParser()
    demo_command.add_arguments(parser)
    with pytest.raises(UsageError, match="--tour: only without --scenario"):
        demo_command.run(parser.parse_args(["--scenario", "healthy", "--tour", "kv_pressure"]))
    with pytest.raises(UsageError, match="--tour-seconds"):
        demo_command.run(parser.parse_args(["--tour-seconds", "0"]))
    args = parser.parse_args([])
    assert args.scenario is None and args.tour_seconds == TOUR_SECONDS and args.time_scale is None
