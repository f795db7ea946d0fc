"""The shipped Alertmanager config, run for real: diagnosis alerts mute their symptoms.

Why a running Alertmanager: amtool checks syntax and routing, but only the
running program evaluates inhibitions; alerts are posted straight to its API,
so this needs no Prometheus and runs in seconds.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from helpers import free_port
from monitoring_stack import (
    ALERTMANAGER,
    Alertmanager,
    Webhook,
    alertmanager_config,
    wait_until,
)

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(ALERTMANAGER is None, reason="Debian package prometheus-alertmanager not installed"),
]


def alert(name: str, instance: str, **labels: str) -> dict[str, object]:
    now = dt.datetime.now(dt.timezone.utc)
    return {
        "labels": {"alertname": name, "job": "llm-layer-exporter", "instance": instance, **labels},
        "annotations": {"summary": name},
        "startsAt": now.isoformat(),
        "endsAt": (now + dt.timedelta(minutes=5)).isoformat(),
    }


def test_diagnosis_alerts_inhibit_matching_symptoms(tmp_path: Path) -> None:

    with Webhook() as hook, Alertmanager(tmp_path, alertmanager_config(ROOT / "alerts/alertmanager.yml", hook.url), free_port()) as am:
        am.post(
            [
                alert("LLMKVCachePressure", "a:9750", severity="critical", layer="memory", kind="diagnosis", cause="kv_cache_pressure"),
                alert("LLMKVCacheNearFull", "a:9750", severity="warning", layer="memory", kind="symptom", server="s", model="m"),
                alert("LLMTTFTBudgetBurnFast", "a:9750", severity="critical", layer="application", kind="symptom", server="s", model="m"),
                # another exporter: nothing diagnosed there, so its symptoms stay loud
                alert("LLMKVCacheNearFull", "b:9750", severity="warning", layer="memory", kind="symptom", server="s", model="m"),
                alert("LLMTTFTBudgetBurnFast", "b:9750", severity="critical", layer="application", kind="symptom", server="s", model="m"),
            ]
        )

        def states() -> dict[tuple[str, str], list[str]]:
            got = {(a["labels"]["alertname"], a["labels"]["instance"]): a["status"]["inhibitedBy"] for a in am.alerts()}
            return got if len(got) == 5 else {}

        got = wait_until(states, timeout=20)
        assert got, "alertmanager did not list the five posted alerts"
        assert got[("LLMKVCacheNearFull", "a:9750")], "KV-near-full must be muted by the kv_cache_pressure diagnosis"
        assert got[("LLMTTFTBudgetBurnFast", "a:9750")], "TTFT burn must be muted by any diagnosis alert of the same exporter"
        assert got[("LLMKVCacheNearFull", "b:9750")] == []
        assert got[("LLMTTFTBudgetBurnFast", "b:9750")] == []
        assert got[("LLMKVCachePressure", "a:9750")] == []
