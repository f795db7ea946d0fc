"""The shared vocabulary is declared once, in exporter/schema.py, and every consumer reads it.

Throttle reasons (one table with its harmful flag), each metric's cross-series
reduction (``MetricSpec.reduce``), and one reader of the exporter's own /metrics.
Finish reasons have their own proofs in tests/engines/test_finish_reasons.py.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from alerts import recording
from alerts.settings import load
from exporter import schema
from exporter.demo.readings import reading_of
from exporter.demo.rows import SIGNAL_OF
from exporter.demo.transcript import PLAIN_FIELDS, plain_line
from exporter.diagnosis import rules
from exporter.diagnosis import signals as sig
from exporter.diagnosis.window import Window
from exporter.exposition import read_metrics
from exporter.gpu.fields import throttle_points
from exporter.ramp.aggregate import COUNTERS, GAUGES, exporter_figures
from exporter.samples import Point, Sample
from exporter.schema import HARMFUL_THROTTLE_REASONS, SPECS, THROTTLE_REASON_BITS, THROTTLE_REASONS, reduce_series
from exporter.store import Snapshot

ROOT = Path(__file__).resolve().parents[2]
THROTTLE = "llm_gpu_throttle_reason_active"


# --------------------------------------------------------------------------- throttle reasons


def test_the_throttle_table_is_nvmls_bits_with_one_harmful_flag_each() -> None:
    bits = [r.bit for r in THROTTLE_REASONS]
    assert len(set(bits)) == len(bits) and all(b > 0 and b & (b - 1) == 0 for b in bits)  # one bit each
    assert THROTTLE_REASON_BITS == {r.bit: r.name for r in THROTTLE_REASONS}
    assert HARMFUL_THROTTLE_REASONS == (
        "sw_power_cap",
        "hw_slowdown",
        "sw_thermal_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
    )
    assert SPECS[THROTTLE].closed_values("reason") == tuple(r.name for r in THROTTLE_REASONS)
    assert all(r.meaning for r in THROTTLE_REASONS)


def test_gpu_sources_decode_the_bitmask_with_the_table() -> None:
    mask = sum(r.bit for r in THROTTLE_REASONS if r.harmful) | 0x8000  # plus an unknown bit: dropped
    got = {p.labels["reason"]: p.value for p in throttle_points(mask, {"gpu": "0", "uuid": "u"})}
    assert got == {r.name: (1.0 if r.harmful else 0.0) for r in THROTTLE_REASONS}


def test_the_diagnosis_and_the_recording_rule_read_the_harmful_flag() -> None:
    selector = 'reason=~"' + "|".join(HARMFUL_THROTTLE_REASONS) + '"'
    assert sig.THROTTLED == f"max({THROTTLE}{{{selector}}})"
    assert recording.HARMFUL_THROTTLE_REASONS is HARMFUL_THROTTLE_REASONS
    exprs = {r["record"]: r["expr"] for g in recording.groups(load()) for r in g["rules"]}
    assert selector in exprs["instance_gpu:llm_gpu_throttled:max"]
    assert rules._THROTTLE_REASONS == tuple(f'{THROTTLE}{{reason="{r}"}}' for r in HARMFUL_THROTTLE_REASONS)


@pytest.mark.parametrize(
    ("active", "throttled"),
    [("sw_power_cap", 1.0), ("hw_thermal_slowdown", 1.0), ("gpu_idle", 0.0), ("applications_clocks_setting", 0.0)],
)
def test_the_diagnosis_judges_a_gpu_throttled_only_for_a_harmful_reason(active: str, throttled: float) -> None:
    labels = {"gpu": "0", "uuid": "u"}
    points: list[Point] = [
        Sample(THROTTLE, {**labels, "reason": r.name}, 1.0 if r.name == active else 0.0) for r in THROTTLE_REASONS
    ]
    v = sig.gpu_signals(Snapshot(0.0, points, {}))["0"]
    assert v[sig.THROTTLED] == throttled


def test_no_consumer_declares_its_own_list_of_throttle_or_failure_reasons() -> None:
    """A second tuple of reason names is how the lists came to disagree. (Engine tables and the
    simulator's dialects name an engine's *raw* words; the consumers name none.)"""
    declared = re.compile(r'"sw_power_cap",\s*"hw_slowdown"|"abort",\s*"error"|"abort\|error')
    consumers = [
        "exporter/diagnosis",
        "exporter/ramp",
        "exporter/report",
        "exporter/gpu",
        "exporter/demo",
        "alerts",
        "dashboards",
    ]
    offenders = []
    for where in consumers:
        path = ROOT / where
        for file in [path] if path.is_file() else sorted(path.rglob("*.py")):
            if declared.search(file.read_text(encoding="utf-8")):
                offenders.append(str(file.relative_to(ROOT)))
    assert offenders == []


# --------------------------------------------------------------------------- the reduction field


def test_every_metric_consumers_reduce_declares_its_reduction() -> None:
    for s in SPECS.values():
        if s.type in ("counter", "histogram"):
            assert s.reduce == "sum", s.name
        elif s.layer in schema.LAYERS and not s.name.endswith("_info"):
            # the demo shows every bottleneck-layer gauge reduced to one figure
            assert s.reduce in ("sum", "max", "min", "mean"), s.name
    read = set(GAUGES.values()) | set(COUNTERS.values()) | {m for _, m, _, _ in PLAIN_FIELDS} | set(SIGNAL_OF)
    assert [m for m in read if SPECS[m].reduce is None] == []


def test_reduce_series_follows_the_spec() -> None:
    assert reduce_series("llm_scheduler_requests_waiting", [1, 2, 3]) == 6
    assert reduce_series("llm_kv_cache_usage_ratio", [0.2, 0.9]) == 0.9
    assert reduce_series("llm_kv_cache_predicted_max_concurrency", [12, 7]) == 7
    assert reduce_series("llm_gpu_sm_clock_hertz", [1.0e9, 2.0e9]) == 1.5e9
    assert reduce_series("llm_scheduler_requests_waiting", [1, math.nan]) == 1  # NaN is unknown, left out
    assert reduce_series("llm_scheduler_requests_waiting", []) is None
    assert reduce_series("llm_engine_info", [1.0]) is None  # not reduced


def test_signal_names_still_say_how_they_were_reduced() -> None:
    """The names are the verdict's evidence keys: generated from the schema, unchanged."""
    assert sig.WAITING == "sum(llm_scheduler_requests_waiting)"
    assert sig.RUNNING_MAX == "max_over_window(sum(llm_scheduler_requests_running))"
    assert sig.KV_USAGE_MAX == "max_over_window(max(llm_kv_cache_usage_ratio))"
    assert sig.PROCESS_CPU == "max(llm_process_cpu_ratio)"
    assert sig.WAITING_CAPACITY == 'sum(llm_scheduler_requests_waiting_by_reason{reason="capacity"})'
    assert (
        sig.SLOT_CONTEXT_USAGE
        == "sum(llm_kv_cache_used_tokens) / (sum(llm_scheduler_slots) * max(llm_kv_cache_slot_context_tokens))"
    )
    assert sig.SLEEPING == 'max(llm_engine_sleep_state{state!="awake"})'
    assert sig.UTIL_MAX_TTFT == "max_over_ttft_span(max(llm_gpu_utilization_ratio))"


EXPOSITION = """\
# TYPE llm_scheduler_requests_waiting gauge
llm_scheduler_requests_waiting{server="a",engine="vllm",model="m",rank="0"} 3
llm_scheduler_requests_waiting{server="a",engine="vllm",model="m",rank="1"} 5
# TYPE llm_scheduler_requests_running gauge
llm_scheduler_requests_running{server="a",engine="vllm",model="m",rank="0"} 8
llm_scheduler_requests_running{server="a",engine="vllm",model="m",rank="1"} 6
# TYPE llm_kv_cache_usage_ratio gauge
llm_kv_cache_usage_ratio{server="a",engine="vllm",model="m",rank="0"} 0.5
llm_kv_cache_usage_ratio{server="a",engine="vllm",model="m",rank="1"} 0.875
# TYPE llm_gpu_sm_active_ratio gauge
llm_gpu_sm_active_ratio{gpu="0",uuid="u0"} 0.25
llm_gpu_sm_active_ratio{gpu="1",uuid="u1"} 0.75
# TYPE llm_gpu_utilization_ratio gauge
llm_gpu_utilization_ratio{gpu="0",uuid="u0"} 0.5
llm_gpu_utilization_ratio{gpu="1",uuid="u1"} 1
# TYPE llm_process_cpu_ratio gauge
llm_process_cpu_ratio{server="a"} 1.25
llm_process_cpu_ratio{server="b"} 0.5
# TYPE llm_gpu_power_watts gauge
llm_gpu_power_watts{gpu="0",uuid="u0"} 300
llm_gpu_power_watts{gpu="1",uuid="u1"} 500
# TYPE llm_request_ttft_seconds histogram
llm_request_ttft_seconds_bucket{server="a",engine="vllm",model="m",rank="0",le="+Inf"} 4
llm_request_ttft_seconds_sum{server="a",engine="vllm",model="m",rank="0"} 2
llm_request_ttft_seconds_count{server="a",engine="vllm",model="m",rank="0"} 4
# TYPE llm_layer_headroom_ratio gauge
llm_layer_headroom_ratio{layer="memory"} NaN
"""


def _points(scrape: dict[str, list[tuple[dict[str, str], float]]]) -> list[Point]:
    return [Sample(name, labels, v) for name, series in scrape.items() for labels, v in series]


def test_the_diagnosis_the_ramp_and_the_demo_reduce_one_scrape_alike() -> None:
    scrape = read_metrics(EXPOSITION).scalars()
    ramp = exporter_figures([scrape], [scrape]).gauges
    view = reading_of(EXPOSITION)
    window = Window(60.0)
    window.add(Snapshot(0.0, _points(scrape), {}))
    v = sig.compute(window).service
    for metric, key in (
        (sig.WAITING_METRIC, sig.WAITING),
        (sig.RUNNING_METRIC, sig.RUNNING),
        (sig.KV_METRIC, sig.KV_USAGE),
        (sig.PROCESS_CPU_METRIC, sig.PROCESS_CPU),
        (sig.SM, sig.SM_MAX),
        (sig.UTIL, sig.UTIL_MAX),
    ):
        short = next(s for s, m in GAUGES.items() if m == metric)
        assert ramp[short].max == view.figure(metric) == v[key], metric
    assert ramp["gpu_power_watts"].max == view.figure("llm_gpu_power_watts") == 800  # power adds up
    line = plain_line(0.0, "x", view, None, "v", "l")
    assert "waiting=8 " in line and "kv=88%" in line and "sm=75%" in line and "power=800 W" in line


# --------------------------------------------------------------------------- one reader of our own /metrics


def test_one_reader_gives_each_caller_its_view() -> None:
    own = read_metrics(EXPOSITION)
    assert "llm_request_ttft_seconds_bucket" in own.samples  # the report's view keeps buckets
    scalars = own.scalars()
    assert not any(n.startswith("llm_request_ttft") for n in scalars)  # the ramp's view: no histograms
    assert "llm_layer_headroom_ratio" not in scalars  # ... and no NaN
    assert "llm_layer_headroom_ratio" in own.scalars(keep_nan=True)
    assert own.histogram_totals() == {"llm_request_ttft_seconds": (2.0, 4.0)}  # the demo's view


def test_no_other_module_parses_the_exporters_own_metrics() -> None:
    users = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "exporter").rglob("*.py")
        if "text_string_to_metric_families" in p.read_text(encoding="utf-8")
    )
    assert users == ["exporter/exposition.py"]
    from exporter.demo import readings
    from exporter.ramp import probe
    from exporter.report import collect

    assert not hasattr(readings, "parse_metrics")
    assert not hasattr(probe, "parse_metrics") and not hasattr(collect, "parse_exposition")
