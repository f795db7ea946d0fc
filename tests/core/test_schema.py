import json
import re
import subprocess
import sys
from pathlib import Path

from exporter import schema
from exporter.commands.schema import render

ROOT = Path(__file__).resolve().parents[2]
BASE_UNITS = {"", "ratio", "seconds", "bytes", "bytes_per_second", "watts", "hertz", "celsius", "joules", "tokens"}


def test_names_follow_prometheus_conventions() -> None:
    for s in schema.SPECS.values():
        assert re.fullmatch(r"llm_[a-z0-9_]+", s.name), s.name
        assert ":" not in s.name
        assert s.layer in schema.ALL_LAYERS, s.name
        assert s.unit in BASE_UNITS, (s.name, s.unit)
        assert s.help.strip(), s.name
        if s.type == "counter":
            assert s.name.endswith("_total"), s.name
        else:
            assert not s.name.endswith("_total"), s.name
        if s.unit and s.unit != "tokens":
            assert s.name.removesuffix("_total").endswith("_" + s.unit), (s.name, s.unit)
        for forbidden in ("_percent", "_perc", "_milliseconds", "_ms", "_mib"):
            assert forbidden not in s.name, s.name


def test_issue_contract_names_exist() -> None:
    contract = [
        "llm_gpu_info",
        "llm_gpu_utilization_ratio",
        "llm_gpu_sm_active_ratio",
        "llm_gpu_sm_occupancy_ratio",
        "llm_gpu_tensor_active_ratio",
        "llm_gpu_dram_active_ratio",
        "llm_gpu_memory_used_bytes",
        "llm_gpu_memory_total_bytes",
        "llm_gpu_power_watts",
        "llm_gpu_power_limit_watts",
        "llm_gpu_sm_clock_hertz",
        "llm_gpu_sm_clock_max_hertz",
        "llm_gpu_throttle_reason_active",
        "llm_gpu_pcie_transmit_bytes_per_second",
        "llm_gpu_pcie_receive_bytes_per_second",
        "llm_gpu_temperature_celsius",
        "llm_gpu_profiling_available",
        "llm_exporter_source_up",
        "llm_exporter_source_duration_seconds",
        "llm_exporter_source_errors_total",
        "llm_exporter_build_info",
        "llm_engine_info",
        "llm_request_ttft_seconds",
        "llm_request_inter_token_seconds",
        "llm_request_e2e_seconds",
        "llm_prompt_tokens_total",
        "llm_generation_tokens_total",
        "llm_requests_finished_total",
        "llm_kv_cache_usage_ratio",
        "llm_kv_cache_capacity_tokens",
        "llm_kv_cache_block_size_tokens",
        "llm_kv_cache_preemptions_total",
        "llm_prefix_cache_queried_tokens_total",
        "llm_prefix_cache_hit_tokens_total",
        "llm_scheduler_requests_running",
        "llm_scheduler_requests_waiting",
        "llm_scheduler_queue_seconds",
        "llm_engine_config_info",
        "llm_request_prefill_seconds",
        "llm_request_decode_seconds",
        "llm_spec_decode_draft_tokens_total",
        "llm_spec_decode_accepted_tokens_total",
        "llm_spec_decode_drafts_total",
        "llm_process_busiest_thread_cpu_ratio",
        "llm_process_cpu_ratio",
        "llm_process_resident_memory_bytes",
        "llm_parallel_sm_active_skew_ratio",
        "llm_bottleneck_score",
        "llm_bottleneck_active",
    ]
    missing = [n for n in contract if n not in schema.SPECS]
    assert not missing
    assert schema.spec("llm_gpu_throttle_reason_active").labels == ("gpu", "uuid", "reason")
    assert schema.spec("llm_requests_finished_total").labels[-1] == "reason"


def test_throttle_reasons_are_the_contracted_set() -> None:
    assert set(schema.THROTTLE_REASON_BITS.values()) == {
        "gpu_idle",
        "applications_clocks_setting",
        "sw_power_cap",
        "hw_slowdown",
        "sync_boost",
        "sw_thermal_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
        "display_clock_setting",
    }


def test_schema_json_cli_lists_every_metric() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "exporter", "schema", "--format", "json"], capture_output=True, text=True, cwd=ROOT, check=True
    )
    data = json.loads(out.stdout)
    assert {m["name"] for m in data["metrics"]} == set(schema.SPECS)
    assert data["layers"][:7] == list(schema.LAYERS)


def test_docs_metrics_md_is_current() -> None:
    current = (ROOT / "docs" / "metrics.md").read_text()
    assert current == render("markdown"), (
        "docs/metrics.md is stale: run `llm-layer-exporter schema --format markdown > docs/metrics.md`"
    )


def test_lookup_error_names_the_metric() -> None:
    try:
        schema.spec("llm_nope")
    except KeyError as err:
        assert "llm_nope" in str(err)
    else:
        raise AssertionError("expected KeyError")
