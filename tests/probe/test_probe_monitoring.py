"""The probe's rules, alerts and panels as generated (alerts/*.py, dashboards/boards/*.py).

Proven here:
* ``LLMEngineUnresponsive`` pages on its own (severity page, ``kind="outage"``): no
  inhibition mutes it, and it mutes ``LLMServiceDegraded`` only when that names the same
  cause; it routes to the pager. ``LLMFrontEndOverhead`` is a ticket like every other cause;
* promtool runs both alerts' cases both ways (fires, stays quiet) and the unit tests bite:
  an alert watching the wrong cause fails them;
* the recording rules the panels read exist and have value tests (success ratio, time outside);
* the Application board shows client-seen TTFT next to engine-seen TTFT, the Overview the
  probe's success ratio.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "alerts"
PAGE = "LLMServiceDegraded"


def _rules() -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load((ALERTS / "alerting_rules.yml").read_text())["groups"]
    return {r["alert"]: {**r, "group": g["name"]} for g in groups for r in g["rules"]}


def test_engine_unresponsive_pages_on_its_own_and_front_end_overhead_is_a_ticket() -> None:
    severity = yaml.safe_load((ALERTS / "config.yaml").read_text())["severity"]
    rules = _rules()
    hung, front = rules["LLMEngineUnresponsive"], rules["LLMFrontEndOverhead"]
    assert hung["labels"] == {"severity": severity["page"], "layer": "application", "kind": "outage"}
    assert 'cause="engine_unresponsive"' in hung["expr"] and "llm_bottleneck_active" in hung["expr"]
    assert hung["group"] == "llm-layer-exporter.bottleneck"
    assert front["labels"] == {"severity": severity["ticket"], "layer": "application", "kind": "diagnosis"}
    assert 'cause="front_end_overhead"' in front["expr"]
    assert hung["annotations"]["runbook_url"].endswith("#llmengineunresponsive")


def test_nothing_mutes_the_hung_engine_page_and_it_mutes_the_page_naming_it() -> None:
    doc = yaml.safe_load((ALERTS / "alertmanager.yml").read_text())
    rules = doc["inhibit_rules"]
    mine = [r for r in rules if r["source_matchers"] == ['alertname="LLMEngineUnresponsive"']]
    assert mine == [
        {
            "source_matchers": ['alertname="LLMEngineUnresponsive"'],
            "target_matchers": [f'alertname="{PAGE}"', 'cause="engine_unresponsive"'],
            "equal": ["job", "instance"],
        }
    ]
    targets = [m for r in rules for m in r["target_matchers"]]
    assert not [m for m in targets if "outage" in m or "LLMEngineUnresponsive" in m]
    # the page's inhibition targets kind="diagnosis" only, which the outage alert does not carry
    assert [r["target_matchers"] for r in rules if r["source_matchers"] == [f'alertname="{PAGE}"']][0] == ['kind="diagnosis"']


def _run(*cmd: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, check=False, timeout=120)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian package prometheus) not installed")
@pytest.mark.parametrize("alert", ["LLMEngineUnresponsive", "LLMFrontEndOverhead"])
def test_promtool_cases_both_ways_and_they_bite(tmp_path: Path, alert: str) -> None:
    doc = yaml.safe_load((ALERTS / "tests" / "alerts_test.yml").read_text())
    mine = [t for t in doc["tests"] if any(c["alertname"] == alert for c in t.get("alert_rule_test", []))]
    assert sorted(t["name"] for t in mine) == [f"{alert} fires", f"{alert} stays quiet"]
    fires = next(t for t in mine if t["name"].endswith("fires"))["alert_rule_test"][0]["exp_alerts"]
    assert len(fires) == 1
    (tmp_path / "tests").mkdir()
    for f in ("recording_rules.yml", "alerting_rules.yml"):
        shutil.copy(ALERTS / f, tmp_path / f)
    test_file = tmp_path / "tests" / "t.yml"
    test_file.write_text(yaml.safe_dump({**doc, "tests": mine}))
    ok = _run("promtool", "test", "rules", str(test_file))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # an alert watching the wrong cause must fail its own cases
    cause = "engine_unresponsive" if alert == "LLMEngineUnresponsive" else "front_end_overhead"
    rules = tmp_path / "alerting_rules.yml"
    text = rules.read_text()
    rules.write_text(text.replace(f'cause="{cause}"', 'cause="slo_breach"', 1))
    broken = _run("promtool", "test", "rules", str(test_file))
    assert broken.returncode != 0 and "FAILED" in broken.stdout + broken.stderr


@pytest.mark.skipif(shutil.which("amtool") is None, reason="amtool (Debian package prometheus-alertmanager) not installed")
def test_the_hung_engine_page_goes_to_the_pager() -> None:
    result = _run(
        "amtool",
        "config",
        "routes",
        "test",
        "--config.file",
        str(ALERTS / "alertmanager.yml"),
        "alertname=LLMEngineUnresponsive",
        "severity=critical",
        "layer=application",
        "kind=outage",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "oncall-pager"


def test_recording_rules_and_their_value_tests() -> None:
    groups = yaml.safe_load((ALERTS / "recording_rules.yml").read_text())["groups"]
    (probe,) = [g for g in groups if g["name"] == "llm-layer-exporter.probe"]
    records = {r["record"] for r in probe["rules"]}
    assert {
        "server_model:llm_probe_ttft_seconds:p95_rate5m",
        "server_model:llm_probe_success:ratio_rate5m",
        "server_model:llm_probe_outside_engine_seconds:avg_over_time5m",
    } <= records
    tests = yaml.safe_load((ALERTS / "tests" / "alerts_test.yml").read_text())["tests"]
    assert any(t["name"].startswith("canary probe") for t in tests)


def _panels(uid: str) -> dict[str, dict[str, Any]]:
    board = json.loads((ROOT / "dashboards" / "json" / f"{uid}.json").read_text())
    return {p["title"]: p for p in board["panels"] if p.get("type") != "row"}


def test_application_shows_client_next_to_engine_ttft_and_overview_the_success_ratio() -> None:
    app = _panels("llm-application")
    exprs = [t["expr"] for t in app["TTFT: client-seen (probe) vs engine-seen"]["targets"]]
    assert any("llm_probe_ttft_seconds:p95" in e for e in exprs) and any("llm_request_ttft_seconds:p95" in e for e in exprs)
    assert "llm_probe_outside_engine_seconds" in app["Time outside the engine"]["targets"][0]["expr"]
    overview = _panels("llm-overview")
    assert "llm_probe_success:ratio_rate5m" in overview["Canary probe success ratio"]["targets"][0]["expr"]
