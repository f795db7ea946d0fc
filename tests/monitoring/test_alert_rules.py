"""Rule files load in promtool 2.42, every alert is unit-tested both ways, and the tests bite.

Why promtool and not a Python re-implementation: the shipped files must load and
behave in the real Prometheus rule engine; promtool runs exactly that engine.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from alerts.causes import CAUSES  # noqa: E402

ALERTS = ROOT / "alerts"
PAGE = "LLMServiceDegraded"
RULE_FILES = [ALERTS / "recording_rules.yml", ALERTS / "alerting_rules.yml"]
TEST_FILE = ALERTS / "tests" / "alerts_test.yml"

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="Debian package prometheus (promtool) not installed")
needs_amtool = pytest.mark.skipif(
    shutil.which("amtool") is None, reason="Debian package prometheus-alertmanager (amtool) not installed"
)


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
        ann = rule["annotations"]
        assert ann["summary"] and ann["description"], rule["alert"]
        assert f"\n### {rule['alert']}\n" in runbooks
        if rule["alert"] == PAGE:
            # layer and cause come from the primary series; the runbook section from its cause
            assert "layer" not in rule["labels"] and "cause" not in rule["labels"]
            assert "by (job, instance, engine, layer, cause)" in rule["expr"]
            assert ann["runbook_url"].endswith("alerts/runbooks.md#{{ $labels.cause }}")
        else:
            assert rule["labels"]["layer"], rule["alert"]
            assert ann["runbook_url"].endswith("alerts/runbooks.md#" + rule["alert"].lower())


def runbook_sections() -> dict[str, str]:
    parts = re.split(r"^### +(\S+) *$", (ALERTS / "runbooks.md").read_text(), flags=re.MULTILINE)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def test_one_page_per_incident_on_the_primary_and_tickets_per_cause() -> None:
    settings = yaml.safe_load((ALERTS / "config.yaml").read_text())["severity"]
    rules = [r for g in yaml.safe_load((ALERTS / "alerting_rules.yml").read_text())["groups"] for r in g["rules"]]
    incident = [r for r in rules if r["labels"].get("kind") == "incident"]
    assert [r["alert"] for r in incident] == [PAGE]
    (page,) = incident
    assert page["labels"]["severity"] == settings["page"]
    assert "llm_bottleneck_primary" in page["expr"] and "llm_bottleneck_active" not in page["expr"]
    diagnosis = [r for r in rules if r["labels"].get("kind") == "diagnosis"]
    assert diagnosis and {r["labels"]["severity"] for r in diagnosis} == {settings["ticket"]}
    # the fixtures: the page fires with the primary's labels and the runbook section of its cause
    tests = yaml.safe_load(TEST_FILE.read_text())["tests"]
    (fires,) = [c for t in tests if t["name"] == f"{PAGE} fires" for c in t["alert_rule_test"]]
    (quiet,) = [c for t in tests if t["name"] == f"{PAGE} stays quiet" for c in t["alert_rule_test"]]
    assert quiet["exp_alerts"] == []
    sections = runbook_sections()
    by_cause = {c.cause: c.alert for c in CAUSES}
    assert len(fires["exp_alerts"]) == 2
    for exp in fires["exp_alerts"]:
        labels, url = exp["exp_labels"], exp["exp_annotations"]["runbook_url"]
        assert labels["severity"] == settings["page"] and labels["layer"] and labels["cause"]
        assert url.endswith("alerts/runbooks.md#" + labels["cause"])
        assert f'<a id="{labels["cause"]}"></a>' in sections[by_cause[labels["cause"]]]
    assert {e["exp_labels"]["cause"] for e in fires["exp_alerts"]} == {"kv_cache_pressure", "queue_backlog"}
    # every cause's section holds the anchor the page links to
    for c in CAUSES:
        assert f'<a id="{c.cause}"></a>' in sections[c.alert], c.alert


def test_config_refuses_a_second_page_per_incident() -> None:
    from alerts.settings import ConfigError, from_dict

    base = yaml.safe_load((ALERTS / "config.yaml").read_text())
    from_dict(base)
    late_page = {**base, "for": {**base["for"], "service_degraded": "5m", "bottleneck_cause": "2m"}}
    with pytest.raises(ConfigError, match="service_degraded"):
        from_dict(late_page)
    with pytest.raises(ConfigError, match="cause_severity"):
        from_dict({**base, "cause_severity": {"kv_cache_pressure": "critical"}})
    with pytest.raises(ConfigError, match="must differ"):
        from_dict({**base, "severity": {"page": "critical", "ticket": "critical"}})


def test_the_page_mutes_per_cause_tickets_and_burn_alerts_of_the_same_exporter() -> None:
    doc = yaml.safe_load((ALERTS / "alertmanager.yml").read_text())
    from_page = {
        tuple(r["target_matchers"]): r["equal"] for r in doc["inhibit_rules"] if r["source_matchers"] == [f'alertname="{PAGE}"']
    }
    # per engine (issue 20): the page of engine A mutes A's tickets and burn alerts, not engine B's
    assert from_page == {
        ('kind="diagnosis"',): ["job", "instance", "engine"],
        ('alertname=~"LLM(TTFT|ITL)BudgetBurn.*"',): ["job", "instance", "engine"],
        # issue 22: "plan replicas before the SLO breaks" is moot under the page of the same engine
        ('alertname="LLMCapacityHeadroomLow"',): ["job", "instance", "engine"],
    }
    # a ticket alone must not mute a burn alert: with no primary, the burn alert is the page
    assert not [r for r in doc["inhibit_rules"] if r["source_matchers"] == ['kind="diagnosis"']]
    (route,) = [r for r in doc["route"]["routes"] if r["matchers"] == [f'alertname="{PAGE}"']]
    assert route["receiver"] == "oncall-pager" and "layer" not in route["group_by"] and "engine" in route["group_by"]
    # the muted alerts carry the engine the page names: the burn and KV-near-full symptoms copy it from server
    rules = {r["alert"]: r for g in yaml.safe_load((ALERTS / "alerting_rules.yml").read_text())["groups"] for r in g["rules"]}
    for name in ("LLMTTFTBudgetBurnFast", "LLMITLBudgetBurnSlow", "LLMKVCacheNearFull"):
        assert rules[name]["expr"].startswith("label_replace(") and '"engine", "$1", "server", "(.*)"' in rules[name]["expr"]


def test_one_alert_per_diagnosis_cause() -> None:
    groups = yaml.safe_load((ALERTS / "alerting_rules.yml").read_text())["groups"]
    causes = {
        ("hardware", "compute_bound"),
        ("hardware", "memory_bandwidth_bound"),
        ("hardware", "pcie_transfer_bound"),
        ("hardware", "power_or_thermal_throttling"),
        ("hardware", "memory_capacity_exhausted"),
        ("operator", "launch_bound_small_kernels"),
        ("operator", "tensor_cores_unused"),
        ("operator", "cuda_graphs_not_covering_batches"),
        ("operator", "prefill_chunk_too_small"),
        ("memory", "kv_cache_pressure"),
        ("memory", "kv_fragmentation_or_capacity_misjudged"),
        ("memory", "context_reserved_not_used"),
        ("memory", "prefix_cache_hit_drop"),  # issue 36: the prefix cache's hit ratio fell
        ("scheduler", "serial_host_ceiling"),
        ("scheduler", "queue_backlog"),
        ("parallel", "gpu_imbalance"),
        ("parallel", "communication_bound"),  # issue 33: the group's links near their capacity
        ("speculative_decoding", "low_acceptance"),
        ("application", "batching_window_too_large"),
        ("application", "retries_and_timeouts"),
        ("application", "slo_breach"),
        ("application", "front_end_overhead"),  # the canary probe; engine_unresponsive is kind="outage"
        ("application", "capacity_nearly_used"),  # issue 22: the measured capacity at SLO
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
        (
            "LLMKVCacheNearFull",
            "server_model:llm_kv_cache_preemptions:rate5m > 0",
            "server_model:llm_kv_cache_preemptions:rate5m >= 0",
        ),
        # the short window of a multiwindow pair dropped: the "recovered" quiet case must catch it
        ("LLMTTFTBudgetBurnFast", "slo_error_ratio_rate5m > 0.144", "slo_error_ratio_rate5m > -1"),
        # the classic dead alert: a counter without _total never fires
        ("LLMExporterSourceErrors", "rate(llm_exporter_source_errors_total[", "rate(llm_exporter_source_errors["),
        # an alert watching the wrong cause
        ("LLMKVCachePressure", 'cause="kv_cache_pressure"', 'cause="queue_backlog"'),
        # a stale-source limit that any recent hiccup crosses: the "stuck only lately" quiet case must catch it
        ("LLMExporterSourceStale", "timestamp_seconds > 300", "timestamp_seconds > 0"),
        # paging on every reported cause instead of the primary: contributing and warning causes would page too
        (PAGE, "(llm_bottleneck_primary) == 1", "(llm_bottleneck_active) == 1"),
        # paging on any primary sample: the one-cycle primary and the primary changing every minute must stay quiet
        (PAGE, "(llm_bottleneck_primary) == 1", "(max_over_time(llm_bottleneck_primary[3m])) == 1"),
        # the cause dropped from the page's labels: no runbook section, no per-cause page
        (
            PAGE,
            "by (job, instance, engine, layer, cause) (llm_bottleneck_primary)",
            "by (job, instance, engine, layer) (llm_bottleneck_primary)",
        ),
        # one page per exporter instead of per engine: the page no longer names engine A
        (
            PAGE,
            "by (job, instance, engine, layer, cause) (llm_bottleneck_primary)",
            "by (job, instance, layer, cause) (llm_bottleneck_primary)",
        ),
        # a ticket per exporter: engine B's healthy 0 and engine A's 1 fold into one ticket without an engine
        (
            "LLMKVCachePressure",
            'by (job, instance, engine, layer, cause) (llm_bottleneck_active{layer="memory", cause="kv_cache_pressure"})',
            'by (job, instance, layer, cause) (llm_bottleneck_active{layer="memory", cause="kv_cache_pressure"})',
        ),
        # the burn alert without the engine's name: the page of that engine could not mute it
        ("LLMTTFTBudgetBurnFast", '"engine", "$1", "server", "(.*)"', '"engine", "", "server", "(.*)"'),
        # issue 22: at the threshold is not above it ("exactly at the threshold" quiet case)
        ("LLMCapacityHeadroomLow", "(llm_capacity_used_ratio) > 0.8", "(llm_capacity_used_ratio) >= 0.8"),
        # one ticket per exporter: the busy engine and its idle neighbour fold into one alert without an engine
        (
            "LLMCapacityHeadroomLow",
            "max by (job, instance, engine) (llm_capacity_used_ratio)",
            "max by (job, instance) (llm_capacity_used_ratio)",
        ),
        # the short busy spell fires without for: (the "shorter than for:" quiet case)
        (
            "LLMCapacityHeadroomLow",
            "(llm_capacity_used_ratio) > 0.8\n    for: 15m",
            "(llm_capacity_used_ratio) > 0.8\n    for: 1m",
        ),
        ("LLMCapacityProfileStale", "(llm_capacity_profile_stale) == 1", "(llm_capacity_profile_stale) >= 0"),
        # a mismatch shorter than for: is not stale yet (the "recent" quiet case)
        (
            "LLMCapacityProfileStale",
            "(llm_capacity_profile_stale) == 1\n    for: 10m",
            "(llm_capacity_profile_stale) == 1\n    for: 0m",
        ),
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
        assert parts[0] in ("server_model", "instance_gpu", "instance_cause")


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
        # the page goes to the pager whatever the primary's layer; per-cause tickets to the layer's team
        (["alertname=LLMServiceDegraded", "severity=critical", "layer=hardware", "cause=compute_bound"], "oncall-pager"),
        (["alertname=LLMServiceDegraded", "severity=critical", "layer=memory", "cause=kv_cache_pressure"], "oncall-pager"),
        (["alertname=LLMKVCachePressure", "severity=warning", "layer=memory"], "team-serving"),
        (["alertname=LLMTTFTBudgetBurnFast", "severity=critical", "layer=application"], "oncall-pager"),
        (["alertname=LLMGPUThrottling", "severity=warning", "layer=hardware"], "team-gpu-platform"),
        (["alertname=LLMSpecDecodeLowAcceptance", "severity=warning", "layer=speculative_decoding"], "team-serving"),
        (["alertname=LLMExporterDown", "severity=critical", "layer=exporter"], "team-observability"),
        # issue 22: capacity tickets go to the serving team, never the pager
        (["alertname=LLMCapacityHeadroomLow", "severity=warning", "layer=application", "kind=capacity"], "team-serving"),
        (["alertname=LLMCapacityProfileStale", "severity=warning", "layer=application", "kind=capacity"], "team-serving"),
    ],
)
def test_routing_by_severity_and_layer(labels: list[str], receiver: str) -> None:
    result = run("amtool", "config", "routes", "test", "--config.file", str(ALERTS / "alertmanager.yml"), *labels)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == receiver


# --------------------------------------------------------------------------- one verdict per engine (issue 20)

#: two engines scraped by one exporter; the verdict's ``engine`` is the engine's name (its ``server``)
TWO_ENGINE_INSTANCE = "10.1.0.1:9750"
DEGRADED, HEALTHY = "vllm-a", "vllm-b"


def _two_engines_test() -> dict[str, object]:
    """A hand-written promtool test on the shipped rules: A degraded with kv_cache_pressure, B healthy."""
    from alerts.alerting import alerts
    from alerts.settings import load
    from alerts.unittests import _expected

    s = load()
    job = s.exporter_job

    def sel(name: str, engine: str, **labels: str) -> str:
        pairs = {"job": job, "instance": TWO_ENGINE_INSTANCE, "engine": engine, **labels}
        return name + "{" + ", ".join(f'{k}="{v}"' for k, v in pairs.items()) + "}"

    kv = {"layer": "memory", "cause": "kv_cache_pressure"}
    queue = {"layer": "scheduler", "cause": "queue_backlog"}
    series: list[tuple[str, str]] = []
    for engine, degraded in ((DEGRADED, True), (HEALTHY, False)):
        on = "1x15" if degraded else "0x15"
        for state, value in (("degraded", on), ("healthy", "0x15" if degraded else "1x15"), ("unknown", "0x15")):
            series.append((sel("llm_service_state", engine, state=state), value))
        series += [
            (sel("llm_bottleneck_primary", engine, **kv), on),
            (sel("llm_bottleneck_primary", engine, **queue), "0x15"),
            (sel("llm_bottleneck_confidence", engine, **kv), "0.9x15" if degraded else "0x15"),
            (sel("llm_bottleneck_active", engine, **kv), on),
            (sel("llm_bottleneck_active", engine, **queue), "0x15"),
        ]
    by_name = {a.name: a for a in alerts(s)}
    expect = {"job": job, "instance": TWO_ENGINE_INSTANCE, "engine": DEGRADED, **kv}
    record = "instance_cause:llm_bottleneck_confidence:primary"
    healthy_none = sel(record, HEALTHY, layer="none", cause="none").removeprefix(record)
    return {
        "rule_files": [str(f) for f in RULE_FILES],
        "evaluation_interval": "1m",
        "tests": [
            {
                "name": "two engines on one exporter: one page, one ticket, for the degraded engine only",
                "interval": "1m",
                "input_series": [{"series": name, "values": values} for name, values in series],
                "alert_rule_test": [
                    {"eval_time": "10m", "alertname": PAGE, "exp_alerts": [_expected(by_name[PAGE], s, expect)]},
                    {
                        "eval_time": "10m",
                        "alertname": "LLMKVCachePressure",
                        "exp_alerts": [_expected(by_name["LLMKVCachePressure"], s, expect)],
                    },
                ],
                "promql_expr_test": [
                    {
                        "eval_time": "10m",
                        "expr": record,
                        "exp_samples": [
                            {"labels": sel(record, DEGRADED, **kv), "value": 0.9},
                            {"labels": record + healthy_none, "value": 0},
                        ],
                    }
                ],
            }
        ],
    }


@needs_promtool
def test_two_engines_on_one_exporter_page_once_for_the_degraded_engine(tmp_path: Path) -> None:
    doc = _two_engines_test()
    test_file = tmp_path / "two_engines_test.yml"
    test_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = run("promtool", "test", "rules", str(test_file))
    assert result.returncode == 0, result.stdout + result.stderr
    # the same test bites on the rules of one verdict per exporter
    for f in RULE_FILES:
        shutil.copy(f, tmp_path / f.name)
    rules = tmp_path / "alerting_rules.yml"
    rules.write_text(rules.read_text().replace("by (job, instance, engine, layer, cause)", "by (job, instance, layer, cause)"))
    doc["rule_files"] = [str(tmp_path / f.name) for f in RULE_FILES]
    test_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    broken = run("promtool", "test", "rules", str(test_file))
    assert broken.returncode != 0 and "FAILED" in broken.stdout + broken.stderr


def test_the_generated_page_case_holds_two_engines_on_one_exporter() -> None:
    """The shipped unit tests (alerts/unittests.py) prove the same on their own fixtures."""
    tests = yaml.safe_load(TEST_FILE.read_text())["tests"]
    (fires,) = [t for t in tests if t["name"] == f"{PAGE} fires"]
    engines_on_first = {
        m.group(1)
        for item in fires["input_series"]
        if item["series"].startswith("llm_bottleneck_primary{") and 'instance="10.0.0.7:9750"' in item["series"]
        for m in [re.search(r'engine="([^"]+)"', item["series"])]
        if m
    }
    assert engines_on_first == {"s1", "s2"}
    paged = [e["exp_labels"] for e in fires["alert_rule_test"][0]["exp_alerts"] if e["exp_labels"]["instance"] == "10.0.0.7:9750"]
    assert [(p["engine"], p["cause"]) for p in paged] == [("s1", "kv_cache_pressure")]


def test_lint_refuses_a_verdict_rule_that_drops_the_engine() -> None:
    from alerts import generate
    from alerts.promql import engine_problems
    from alerts.settings import load

    s = load()
    verdict = generate.verdict_series(s)
    assert {"llm_bottleneck_primary", "instance_cause:llm_bottleneck_confidence:primary"} <= verdict
    assert "model_cause:llm_bottleneck_primary:replicas" not in verdict  # a fleet count: no engine left to keep
    assert engine_problems("max by (job, instance, layer, cause) (llm_bottleneck_primary) == 1", verdict, "engine") == [
        "by (job, instance, layer, cause) of the per-engine verdict drops label 'engine'"
    ]
    assert engine_problems(
        "max by (job, instance, engine) (llm_service_state) * on (job, instance) group_left () up", verdict, "engine"
    )
    # engine series are not the verdict: their engine label is the family
    assert engine_problems("max by (job, instance, server, model) (llm_engine_info)", verdict, "engine") == []
    # every diagnosis family carries engine in exporter/schema.py, and the shipped rules keep it
    assert generate.schema_engine_problems() == []
    assert [e for e in generate.lint(s) if "engine" in e] == []
