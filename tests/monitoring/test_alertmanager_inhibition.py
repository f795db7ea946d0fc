"""The shipped Alertmanager config, run for real: the page mutes the tickets and symptoms of its incident.

Why a running Alertmanager: amtool checks syntax and routing, but only the
running program evaluates inhibitions; alerts are posted straight to its API,
so this needs no Prometheus and runs in seconds.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pytest

from tests.support.monitoring import ALERTMANAGER, Alertmanager, Webhook, alertmanager_config
from tests.support.ports import free_port
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.skipif(ALERTMANAGER is None, reason="Debian package prometheus-alertmanager not installed"),
]


def alert(name: str, instance: str, engine: str = "s", **labels: str) -> dict[str, object]:
    """An alert as the rules send it: every one here carries the engine's name (the verdict's ``engine``,
    the symptom alerts' copy of ``server``, alerts/recording.py with_engine)."""
    now = dt.datetime.now(dt.timezone.utc)
    return {
        "labels": {"alertname": name, "job": "llm-layer-exporter", "instance": instance, "engine": engine, **labels},
        "annotations": {"summary": name},
        "startsAt": now.isoformat(),
        "endsAt": (now + dt.timedelta(minutes=5)).isoformat(),
    }


def test_diagnosis_alerts_inhibit_matching_symptoms(tmp_path: Path) -> None:

    with (
        Webhook() as hook,
        Alertmanager(tmp_path, alertmanager_config(ROOT / "alerts/alertmanager.yml", hook.url), free_port()) as am,
    ):
        am.post(
            [
                # a: the page on the primary, its ticket, a contributing cause's ticket and the symptoms
                alert(
                    "LLMServiceDegraded",
                    "a:9750",
                    severity="critical",
                    kind="incident",
                    layer="memory",
                    cause="kv_cache_pressure",
                ),
                alert(
                    "LLMKVCachePressure",
                    "a:9750",
                    severity="warning",
                    layer="memory",
                    kind="diagnosis",
                    cause="kv_cache_pressure",
                ),
                alert(
                    "LLMQueueBacklog", "a:9750", severity="warning", layer="scheduler", kind="diagnosis", cause="queue_backlog"
                ),
                alert("LLMKVCacheNearFull", "a:9750", severity="warning", layer="memory", kind="symptom", server="s", model="m"),
                alert(
                    "LLMTTFTBudgetBurnFast",
                    "a:9750",
                    severity="critical",
                    layer="application",
                    kind="symptom",
                    server="s",
                    model="m",
                ),
                # b: a ticket but no primary (no page): KV-near-full muted by it, the burn alert stays loud (it is the page)
                alert(
                    "LLMKVCachePressure",
                    "b:9750",
                    severity="warning",
                    layer="memory",
                    kind="diagnosis",
                    cause="kv_cache_pressure",
                ),
                alert("LLMKVCacheNearFull", "b:9750", severity="warning", layer="memory", kind="symptom", server="s", model="m"),
                alert(
                    "LLMTTFTBudgetBurnFast",
                    "b:9750",
                    severity="critical",
                    layer="application",
                    kind="symptom",
                    server="s",
                    model="m",
                ),
                # c: another exporter, nothing diagnosed there, so its symptoms stay loud
                alert("LLMKVCacheNearFull", "c:9750", severity="warning", layer="memory", kind="symptom", server="s", model="m"),
                alert(
                    "LLMTTFTBudgetBurnFast",
                    "c:9750",
                    severity="critical",
                    layer="application",
                    kind="symptom",
                    server="s",
                    model="m",
                ),
                # d: two engines on one exporter (issue 20); the page of engine a mutes a's ticket only,
                # engine b's ticket and its burn alert (no primary for b: that burn is b's page) stay loud
                alert(
                    "LLMServiceDegraded",
                    "d:9750",
                    engine="a",
                    severity="critical",
                    kind="incident",
                    layer="memory",
                    cause="kv_cache_pressure",
                ),
                alert(
                    "LLMKVCachePressure",
                    "d:9750",
                    engine="a",
                    severity="warning",
                    layer="memory",
                    kind="diagnosis",
                    cause="kv_cache_pressure",
                ),
                alert(
                    "LLMGPUThrottling",
                    "d:9750",
                    engine="b",
                    severity="warning",
                    layer="hardware",
                    kind="diagnosis",
                    cause="power_or_thermal_throttling",
                ),
                alert(
                    "LLMTTFTBudgetBurnFast",
                    "d:9750",
                    engine="b",
                    severity="critical",
                    layer="application",
                    kind="symptom",
                    server="b",
                    model="m",
                ),
            ]
        )

        def states() -> dict[tuple[str, str], list[str]]:
            got = {
                (a["labels"]["alertname"], a["labels"]["instance"] + "/" + a["labels"]["engine"]): a["status"]["inhibitedBy"]
                for a in am.alerts()
            }
            return got if len(got) == 14 else {}

        # Alertmanager lists a posted alert before its inhibitor has marked it (the marks follow
        # within moments, asynchronously): wait for the first mark, then read the settled state
        wait_until(lambda: any(states().values()), 20, "alertmanager to mute any of the posted alerts", interval=0.5)
        time.sleep(1.0)
        got = states()
        assert got, "alertmanager did not list the fourteen posted alerts"
        assert got[("LLMServiceDegraded", "a:9750/s")] == [], "the page is never muted"
        for name in ("LLMKVCachePressure", "LLMQueueBacklog", "LLMKVCacheNearFull", "LLMTTFTBudgetBurnFast"):
            assert got[(name, "a:9750/s")], (
                f"{name} must be muted by LLMServiceDegraded of the same exporter: one incident, one page"
            )
        assert got[("LLMKVCachePressure", "b:9750/s")] == []
        assert got[("LLMKVCacheNearFull", "b:9750/s")], "KV-near-full must be muted by the kv_cache_pressure diagnosis"
        assert got[("LLMTTFTBudgetBurnFast", "b:9750/s")] == [], (
            "a ticket alone must not mute a burn alert: with no primary it is the page"
        )
        assert got[("LLMKVCacheNearFull", "c:9750/s")] == []
        assert got[("LLMTTFTBudgetBurnFast", "c:9750/s")] == []
        assert got[("LLMServiceDegraded", "d:9750/a")] == []
        assert got[("LLMKVCachePressure", "d:9750/a")], "engine a's ticket is muted by engine a's page"
        assert got[("LLMGPUThrottling", "d:9750/b")] == [], "engine a's page must not mute engine b's ticket"
        assert got[("LLMTTFTBudgetBurnFast", "d:9750/b")] == [], "engine a's page must not mute engine b's burn alert"


def test_capacity_tickets_are_muted_by_the_page_and_the_diagnosis_of_the_same_engine(tmp_path: Path) -> None:
    """Issue 22: the headroom ticket is moot under the engine's page and repeats LLMCapacityNearlyUsed; a stale profile is news."""
    capacity = {"severity": "warning", "layer": "application", "kind": "capacity"}
    with (
        Webhook() as hook,
        Alertmanager(tmp_path, alertmanager_config(ROOT / "alerts/alertmanager.yml", hook.url), free_port()) as am,
    ):
        am.post(
            [
                # e: engine a paged (the SLO broke); engine b of the same exporter only near its capacity
                alert(
                    "LLMServiceDegraded",
                    "e:9750",
                    engine="a",
                    severity="critical",
                    kind="incident",
                    layer="application",
                    cause="capacity_nearly_used",
                ),
                alert("LLMCapacityHeadroomLow", "e:9750", engine="a", **capacity),
                alert("LLMCapacityProfileStale", "e:9750", engine="a", **capacity),
                alert("LLMCapacityHeadroomLow", "e:9750", engine="b", **capacity),
                # f: the diagnosis's warning and the headroom ticket of one engine: one ticket
                alert(
                    "LLMCapacityNearlyUsed",
                    "f:9750",
                    severity="warning",
                    layer="application",
                    kind="diagnosis",
                    cause="capacity_nearly_used",
                ),
                alert("LLMCapacityHeadroomLow", "f:9750", **capacity),
                # g: the headroom ticket alone
                alert("LLMCapacityHeadroomLow", "g:9750", **capacity),
            ]
        )

        def states() -> dict[tuple[str, str], list[str]]:
            got = {
                (a["labels"]["alertname"], a["labels"]["instance"] + "/" + a["labels"]["engine"]): a["status"]["inhibitedBy"]
                for a in am.alerts()
            }
            return got if len(got) == 7 else {}

        wait_until(lambda: any(states().values()), 20, "alertmanager to mute any of the posted alerts", interval=0.5)
        time.sleep(1.0)
        got = states()
        assert got, "alertmanager did not list the seven posted alerts"
        assert got[("LLMCapacityHeadroomLow", "e:9750/a")], "the page of engine a mutes its headroom ticket"
        assert got[("LLMCapacityProfileStale", "e:9750/a")] == [], "a stale profile is no part of the incident"
        assert got[("LLMCapacityHeadroomLow", "e:9750/b")] == [], "engine a's page must not mute engine b's ticket"
        assert got[("LLMCapacityNearlyUsed", "f:9750/s")] == []
        assert got[("LLMCapacityHeadroomLow", "f:9750/s")], "LLMCapacityNearlyUsed says the same, with evidence"
        assert got[("LLMCapacityHeadroomLow", "g:9750/s")] == []
