"""Rule files load in promtool 2.42, every alert is unit-tested both ways, and the tests bite.

Why promtool and not a Python re-implementation: the shipped files must load and
behave in the real Prometheus rule engine; promtool runs exactly that engine.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "alerts"
RULE_FILES = [ALERTS / "recording_rules.yml", ALERTS / "alerting_rules.yml"]
TEST_FILE = ALERTS / "tests" / "alerts_test.yml"

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="Debian package prometheus (promtool) not installed")
needs_amtool = pytest.mark.skipif(shutil.which("amtool") is None, reason="Debian package prometheus-alertmanager (amtool) not installed")


def run(*cmd: str, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, check=False, timeout=timeout)


def test_generated_files_are_current_and_rules_read_known_metrics() -> None:
    result = run(sys.executable, "alerts/generate.py", "--check")
    assert result.returncode == 0, result.stderr


@needs_promtool
def test_promtool_check_rules() -> None:
    result = run("promtool", "check", "rules", *map(str, RULE_FILES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == 2


@needs_promtool
def test_promtool_unit_tests_pass() -> None:
    result = run("promtool", "test", "rules", str(TEST_FILE))
    assert result.returncode == 0, result.stdout + result.stderr


def alert_names() -> list[str]:
    groups = yaml.safe_load((ALERTS / "alerting_rules.yml").read_text())["groups"]
    return [r["alert"] for g in groups for r in g["rules"]]


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    tests = yaml.safe_load(TEST_FILE.read_text())["tests"]
    fires: set[str] = set()
    quiet: set[str] = set()
    for t in tests:
        for case in t.get("alert_rule_test", []):
            (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
    names = alert_names()
    assert names, "no alerts parsed"
    assert [n for n in names if n not in fires] == []
    assert [n for n in names if n not in quiet] == []


def test_every_alert_has_severity_summary_description_and_runbook_anchor() -> None:
    groups = yaml.safe_load((ALERTS / "alerting_rules.yml").read_text())["groups"]
    runbooks = (ALERTS / "runbooks.md").read_text()
    for rule in (r for g in groups for r in g["rules"]):
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["alert"]
        assert rule["labels"]["layer"], rule["alert"]
        ann = rule["annotations"]
        assert ann["summary"] and ann["description"], rule["alert"]
        assert ann["runbook_url"].endswith("alerts/runbooks.md#" + rule["alert"].lower())
        assert f"\n### {rule['alert']}\n" in runbooks


def test_one_alert_per_diagnosis_cause() -> None:
    groups = yaml.safe_load((ALERTS / "alerting_rules.yml").read_text())["groups"]
    causes = {
        ("hardware", "compute_bound"), ("hardware", "memory_bandwidth_bound"), ("hardware", "pcie_transfer_bound"),
        ("hardware", "power_or_thermal_throttling"), ("hardware", "memory_capacity_exhausted"),
        ("operator", "launch_bound_small_kernels"), ("operator", "tensor_cores_unused"),
        ("memory", "kv_cache_pressure"), ("memory", "kv_fragmentation_or_capacity_misjudged"),
        ("scheduler", "serial_host_ceiling"), ("scheduler", "queue_backlog"), ("parallel", "gpu_imbalance"),
        ("speculative_decoding", "low_acceptance"), ("application", "batching_window_too_large"),
        ("application", "retries_and_timeouts"), ("application", "slo_breach"),
    }
    found = set()
    for rule in (r for g in groups for r in g["rules"] if r["labels"].get("kind") == "diagnosis"):
        expr = rule["expr"]
        layer = expr.split('layer="')[1].split('"')[0]
        cause = expr.split('cause="')[1].split('"')[0]
        assert rule["labels"]["layer"] == layer
        found.add((layer, cause))
    assert found == causes


@needs_promtool
@pytest.mark.parametrize(
    "alert, old, new",
    [
        # preemptions no longer required: the "full but not preempting" quiet case must catch it
        ("LLMKVCacheNearFull", "server_model:llm_kv_cache_preemptions:rate5m > 0", "server_model:llm_kv_cache_preemptions:rate5m >= 0"),
        # the short window of a multiwindow pair dropped: the "recovered" quiet case must catch it
        ("LLMTTFTBudgetBurnFast", "slo_error_ratio_rate5m > 0.144", "slo_error_ratio_rate5m > -1"),
        # the classic dead alert: a counter without _total never fires
        ("LLMExporterSourceErrors", "rate(llm_exporter_source_errors_total[", "rate(llm_exporter_source_errors["),
        # an alert watching the wrong cause
        ("LLMKVCachePressure", 'cause="kv_cache_pressure"', 'cause="queue_backlog"'),
    ],
)
def test_unit_tests_fail_when_a_rule_is_broken(tmp_path: Path, alert: str, old: str, new: str) -> None:
    (tmp_path / "tests").mkdir()
    for f in RULE_FILES:
        shutil.copy(f, tmp_path / f.name)
    rules = tmp_path / "alerting_rules.yml"
    text = rules.read_text()
    assert old in text
    rules.write_text(text.replace(old, new, 1))
    # only this alert's cases, to keep the run short
    doc = yaml.safe_load(TEST_FILE.read_text())
    doc["tests"] = [t for t in doc["tests"] if any(c["alertname"] == alert for c in t.get("alert_rule_test", []))]
    assert len(doc["tests"]) == 2
    test_file = tmp_path / "tests" / TEST_FILE.name
    test_file.write_text(yaml.safe_dump(doc))
    result = run("promtool", "test", "rules", str(test_file))
    assert result.returncode != 0
    assert "FAILED" in result.stdout + result.stderr


@needs_promtool
def test_recording_rule_names_follow_level_metric_operation() -> None:
    groups = yaml.safe_load((ALERTS / "recording_rules.yml").read_text())["groups"]
    for rule in (r for g in groups for r in g["rules"]):
        parts = rule["record"].split(":")
        assert len(parts) == 3 and all(parts), rule["record"]
        assert parts[0] in ("server_model", "instance_gpu")


def test_generator_refuses_unknown_metrics_and_bitwise_tricks() -> None:
    sys.path.insert(0, str(ROOT))
    from alerts.promql import problems

    known = {"llm_kv_cache_preemptions_total", "llm_gpu_throttle_reason_active"}
    assert problems("rate(vllm:num_preemptions[5m]) > 1", known) == ["unknown metric 'vllm:num_preemptions'"]
    assert problems("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS and 128 != bool 0", known | {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"})
    assert problems("limitk(2, llm_gpu_throttle_reason_active)", known)
    assert problems('sum by (le) (rate(llm_kv_cache_preemptions_total{reason=~"a|b"}[5m]))', known) == []


@needs_amtool
def test_amtool_check_config() -> None:
    result = run("amtool", "check-config", str(ALERTS / "alertmanager.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_amtool
@pytest.mark.parametrize(
    "labels, receiver",
    [
        (["alertname=LLMKVCachePressure", "severity=critical", "layer=memory"], "oncall-pager"),
        (["alertname=LLMGPUThrottling", "severity=warning", "layer=hardware"], "team-gpu-platform"),
        (["alertname=LLMSpecDecodeLowAcceptance", "severity=warning", "layer=speculative_decoding"], "team-serving"),
        (["alertname=LLMExporterDown", "severity=critical", "layer=exporter"], "team-observability"),
    ],
)
def test_routing_by_severity_and_layer(labels: list[str], receiver: str) -> None:
    result = run("amtool", "config", "routes", "test", "--config.file", str(ALERTS / "alertmanager.yml"), *labels)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == receiver
