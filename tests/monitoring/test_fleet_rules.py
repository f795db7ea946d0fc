"""The fleet rules (alerts/fleet_rules.yml) load in promtool 2.42, are unit-tested both ways, and the tests bite.

Why promtool: the rules must behave in the real rule engine (the one Thanos Ruler and the
Mimir ruler embed); its unit tests evaluate the shipped expressions on fixture series, so a
wrong join, threshold or quantile fails here, not in a fleet at 3 a.m.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from alerts import fleet  # noqa: E402
from alerts import generate as alerts_generate  # noqa: E402
from alerts.promql import problems  # noqa: E402
from alerts.settings import load  # noqa: E402

ALERTS = ROOT / "alerts"
FLEET_RULES = ALERTS / "fleet_rules.yml"
TEST_FILE = ALERTS / "tests" / "fleet_test.yml"
#: promtool test files name their rule files relative to alerts/tests/
RULE_FILES = [ALERTS / "recording_rules.yml", FLEET_RULES]
LEVELS = {"server_model", "server_model_cause", "model", "model_cause", "group", "group_instance"}

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="Debian package prometheus (promtool) not installed")
needs_amtool = pytest.mark.skipif(
    shutil.which("amtool") is None, reason="Debian package prometheus-alertmanager (amtool) not installed"
)


def run(*cmd: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), cwd=ROOT, capture_output=True, text=True, check=False, timeout=timeout)


def rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(FLEET_RULES.read_text())["groups"] for r in g["rules"]]


def test_the_fleet_files_are_what_the_generator_writes() -> None:
    s = load()
    texts = alerts_generate.render(s)
    assert FLEET_RULES.read_text() == texts["fleet"], "run python3 alerts/generate.py"
    assert TEST_FILE.read_text() == texts["fleet_tests"], "run python3 alerts/generate.py"
    known = alerts_generate.known_series(s)
    assert [f"{r.get('record') or r.get('alert')}: {p}" for r in rules() for p in problems(str(r["expr"]), known)] == []


def test_recording_rule_names_follow_level_metric_operation() -> None:
    for rule in (r for r in rules() if "record" in r):
        parts = str(rule["record"]).split(":")
        assert len(parts) == 3 and all(parts), rule["record"]
        assert parts[0] in LEVELS, rule["record"]
        assert parts[1].startswith("llm_"), rule["record"]


def test_the_fleet_quantiles_sum_buckets_and_never_average_quantiles() -> None:
    by_name = {r["record"]: str(r["expr"]) for r in rules() if "record" in r}
    for hist in ("llm_request_ttft_seconds", "llm_request_inter_token_seconds"):
        expr = by_name[f"model:{hist}:p95_rate5m"]
        assert expr == f"histogram_quantile(0.95, sum by (le, model) (rate({hist}_bucket[5m])))"


@needs_promtool
def test_promtool_check_rules() -> None:
    result = run("promtool", "check", "rules", *map(str, RULE_FILES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Checking {FLEET_RULES}" in result.stdout or "fleet_rules.yml" in result.stdout


@needs_promtool
def test_promtool_unit_tests_pass() -> None:
    result = run("promtool", "test", "rules", str(TEST_FILE))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_fleet_rule_is_tested_both_ways() -> None:
    tests = yaml.safe_load(TEST_FILE.read_text())["tests"]
    fires: set[str] = set()
    quiet: set[str] = set()
    fired_labels: list[dict[str, str]] = []
    exprs: set[str] = set()
    for t in tests:
        for case in t.get("alert_rule_test", []):
            (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
            fired_labels += [e["exp_labels"] for e in case.get("exp_alerts", [])]
        exprs |= {c["expr"] for c in t.get("promql_expr_test", [])}
    alerts = [r for r in rules() if "alert" in r]
    assert {r["alert"] for r in alerts} == set(fleet.CONCEPTS.values())
    assert fires == quiet == set(fleet.CONCEPTS.values())
    # every rule (not only every name) fires in a case: its own static labels appear in an expected alert
    for r in alerts:
        own = dict(r["labels"])
        assert any(own.items() <= e.items() for e in fired_labels), f"{r['alert']} {own}: no case fires it"
    # every recording rule has a value test (wrapped in round())
    for r in (r for r in rules() if "record" in r):
        assert any(r["record"] in e for e in exprs), f"{r['record']}: no value test"


def test_alerts_are_fleet_tickets_with_their_concept_as_cause() -> None:
    s = load()
    for r in (r for r in rules() if "alert" in r):
        labels = r["labels"]
        assert labels["kind"] == "fleet" and labels["severity"] == s.severity_ticket, r["alert"]
        assert fleet.CONCEPTS[labels["cause"]] == r["alert"]
        assert r["annotations"]["runbook_url"].endswith("alerts/runbooks.md#" + str(r["alert"]).lower())
    runbooks = (ALERTS / "runbooks.md").read_text()
    for concept, name in fleet.CONCEPTS.items():
        assert f"\n### {name}\n" in runbooks and f'<a id="{concept}"></a>' in runbooks


@needs_promtool
@pytest.mark.parametrize(
    "old, new",
    [
        # no headroom guard: a saturated fleet ("full") would be called imbalanced
        ("model:llm_layer_headroom:median > 0.2", "model:llm_layer_headroom:median > -1"),
        # no floor on the queue: three requests over a median of 0 ("small") would fire
        ("server_model:llm_scheduler_requests_waiting:sum >= 4", "server_model:llm_scheduler_requests_waiting:sum >= 0"),
        # no TTFT floor: 0.98 s over a fleet at 0.24 s ("fast") would fire
        ("server_model:llm_request_ttft_seconds:p95_rate5m > 1\n", "server_model:llm_request_ttft_seconds:p95_rate5m > 0\n"),
        # half is not most ("half")
        ("> 0.5\n", ">= 0.5\n"),
        # a single replica pages on its own ("one")
        ("model:llm_serving_replicas:count >= 2,", "model:llm_serving_replicas:count >= 1,"),
        # a single-node group is the node's own LLMGPUImbalance ("single")
        ("group:llm_parallel_node_group_info:nodes >= 2", "group:llm_parallel_node_group_info:nodes >= 1"),
        # an idle group is not skewed ("idle")
        ("(group:llm_gpu_sm_active:avg_over_time5m >= 0.1)", "(group:llm_gpu_sm_active:avg_over_time5m >= 0)"),
        # the fleet p95 as a mean of the replicas' quantiles: the value test wants the summed buckets' 2.275 s
        (
            "histogram_quantile(0.95, sum by (le, model) (rate(llm_request_ttft_seconds_bucket[5m])))",
            "avg by (model) (server_model:llm_request_ttft_seconds:p95_rate5m)",
        ),
        # the median without dropping NaN: the replica with no requests turns the median into NaN
        ("server_model:llm_layer_headroom:min >= 0)", "server_model:llm_layer_headroom:min)"),
        # the replica's verdict without its cause: every replica would count as one unnamed cause
        ("* on (job, instance, engine) group_left (layer, cause)", "* on (job, instance, engine) group_left ()"),
        # one verdict per exporter (before issue 20): two engines of one node get one primary between them
        (
            "* on (job, instance, engine) group_left (layer, cause)\n      topk by (job, instance, engine)",
            "* on (job, instance) group_left (layer, cause)\n      topk by (job, instance)",
        ),
        # the engine's headroom of the whole exporter: the duo's two engines would read the same tightest layer
        (
            "min by (job, instance, engine) (llm_layer_headroom_ratio)",
            "(min by (job, instance) (llm_layer_headroom_ratio) + on (job, instance) group_right () "
            "(0 * min by (job, instance, engine) (llm_layer_headroom_ratio)))",
        ),
        # issue 22, capacity=measured: a fleet well within its measured capacity ("under") would fire
        ("model:llm_capacity_used_ratio:max > 1\n", "model:llm_capacity_used_ratio:max > 0.5\n"),
        # a single profiled replica past its capacity ("one") is its own LLMCapacityHeadroomLow
        (
            "model:llm_capacity_used_ratio:max > 1\n      and on (model)\n      model:llm_serving_replicas:count >= 2",
            "model:llm_capacity_used_ratio:max > 1\n      and on (model)\n      model:llm_serving_replicas:count >= 1",
        ),
        # no for: a fleet over its capacity only lately ("brief") would fire
        (
            "model:llm_capacity_used_ratio:max > 1\n      and on (model)\n      model:llm_serving_replicas:count >= 2\n    for: 5m",
            "model:llm_capacity_used_ratio:max > 1\n      and on (model)\n      model:llm_serving_replicas:count >= 2\n    for: 0m",
        ),
        # the demand of every replica against the capacity of the profiled ones: "partial" would fire
        (
            "server_model:llm_requests_finished:rate5m\n      and on (job, instance, server, model)\n"
            "      server_model:llm_capacity_requests_per_second_at_slo:max",
            "server_model:llm_requests_finished:rate5m",
        ),
        # in flight without the queue: the value test wants running + waiting
        (
            "+ on (job, instance, server, model)\n      server_model:llm_scheduler_requests_waiting:sum",
            "+ on (job, instance, server, model)\n      0 * server_model:llm_scheduler_requests_waiting:sum",
        ),
        # the capacity of the exporter, not of the engine: the duo's two engines would read each other's
        (
            "max by (job, instance, engine) (llm_capacity_concurrency_at_slo)",
            "max by (job, instance) (llm_capacity_concurrency_at_slo) + on (job, instance) group_right () "
            "(0 * max by (job, instance, engine) (llm_capacity_concurrency_at_slo))",
        ),
    ],
)
def test_unit_tests_fail_when_a_fleet_rule_is_broken(tmp_path: Path, old: str, new: str) -> None:
    (tmp_path / "tests").mkdir()
    for f in RULE_FILES:
        shutil.copy(f, tmp_path / f.name)
    target = tmp_path / FLEET_RULES.name
    text = target.read_text()
    assert old in text
    target.write_text(text.replace(old, new, 1))
    shutil.copy(TEST_FILE, tmp_path / "tests" / TEST_FILE.name)
    result = run("promtool", "test", "rules", str(tmp_path / "tests" / TEST_FILE.name))
    assert result.returncode != 0, f"the fleet unit tests did not notice: {old!r} -> {new!r}"
    assert "FAILED" in result.stdout + result.stderr


@needs_amtool
@pytest.mark.parametrize(
    "labels, receiver",
    [
        # tickets to the layer's team; never the pager (each degraded replica pages on its own)
        (
            [
                "alertname=LLMFleetReplicaImbalance",
                "severity=warning",
                "layer=application",
                "kind=fleet",
                "cause=replica_imbalance",
            ],
            "team-serving",
        ),
        (
            ["alertname=LLMFleetCapacityShort", "severity=warning", "layer=memory", "kind=fleet", "capacity=kv_memory"],
            "team-serving",
        ),
        (
            ["alertname=LLMFleetCapacityShort", "severity=warning", "layer=hardware", "kind=fleet", "capacity=gpu_compute"],
            "team-gpu-platform",
        ),
        (
            ["alertname=LLMFleetGroupSkew", "severity=warning", "layer=parallel", "kind=fleet", "cause=group_skew"],
            "team-gpu-platform",
        ),
        # issue 22: the fleet past its measured capacity at SLO
        (
            ["alertname=LLMFleetCapacityShort", "severity=warning", "layer=application", "kind=fleet", "capacity=measured"],
            "team-serving",
        ),
    ],
)
def test_fleet_alerts_route_as_tickets(labels: list[str], receiver: str) -> None:
    result = run("amtool", "config", "routes", "test", "--config.file", str(ALERTS / "alertmanager.yml"), *labels)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == receiver


def test_the_page_does_not_mute_fleet_alerts() -> None:
    doc = yaml.safe_load((ALERTS / "alertmanager.yml").read_text())
    for rule in doc["inhibit_rules"]:
        assert not any("fleet" in m or "LLMFleet" in m for m in rule["target_matchers"]), rule


def test_config_refuses_bad_fleet_thresholds() -> None:
    from alerts.settings import ConfigError, from_dict

    base = yaml.safe_load((ALERTS / "config.yaml").read_text())
    fleet.fleet_settings(from_dict(base))
    bad = yaml.safe_load((ALERTS / "config.yaml").read_text())
    bad["fleet"]["replica_imbalance"]["min_replicas"] = 2.5
    with pytest.raises(ConfigError, match="min_replicas"):
        fleet.fleet_settings(from_dict(bad))
    bad = yaml.safe_load((ALERTS / "config.yaml").read_text())
    del bad["fleet"]["group_skew"]["for"]
    with pytest.raises(ConfigError, match="group_skew.for"):
        fleet.fleet_settings(from_dict(bad))
    assert fleet.fleet_settings(from_dict(base), for_override="10s").imbalance_for == "10s"


def test_two_engines_of_one_exporter_are_two_replicas_with_their_own_verdicts() -> None:
    """Issue 20: a replica is (job, instance, engine); the value tests hold two engines of one exporter."""
    by_name = {r["record"]: str(r["expr"]) for r in rules() if "record" in r}
    for record in (
        "server_model:llm_layer_headroom:min",
        "server_model:llm_service_state:code",
        "server_model_cause:llm_bottleneck_confidence:primary",
    ):
        assert "* on (job, instance, engine) group_left" in by_name[record], record
        assert '"engine", "$1", "server", "(.*)"' in by_name[record], record
    tests = yaml.safe_load(TEST_FILE.read_text())["tests"]
    values = {c["expr"]: c["exp_samples"] for t in tests for c in t.get("promql_expr_test", [])}
    duo = [
        {**dict(re.findall(r'(\w+)="([^"]*)"', s["labels"])), "value": s["value"]}
        for s in values["round(server_model_cause:llm_bottleneck_confidence:primary, 0.001)"]
        if 'model="duo"' in s["labels"]
    ]
    assert {(d["instance"], d["engine"], d["cause"], d["value"]) for d in duo} == {
        ("10.0.1.5:9750", "a", "kv_cache_pressure", 0.9),
        ("10.0.1.5:9750", "b", "none", 0),
    }
    counts = values["round(model:llm_serving_replicas:count, 0.001)"]
    assert {"labels": '{model="duo"}', "value": 2} in counts
    # LLMFleetCapacityShort: three engines of one exporter, two short of KV memory, fire; one of two is quiet
    (fires,) = [t for t in tests if t["name"] == f"{fleet.CAPACITY_SHORT} gpu_compute, host_cpu, kv_memory, replicas fires"]
    fired = {e["exp_labels"]["model"] for e in fires["alert_rule_test"][0]["exp_alerts"]}
    assert "node" in fired and "shared" not in fired
