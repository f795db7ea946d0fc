"""The shipped fleet rules on a real Prometheus over three exporters of three simulated replicas.

Setup (127.0.0.1 only; every process stopped at the end, every wait bounded):
  * three vLLM-dialect simulators of one model, the same size (``--max-num-seqs 8``), each
    driven by the healthy scenario's even open-loop load (tests/monitoring/fleet_load.py);
  * one ``serve`` exporter per simulator (engine, GPU telemetry from /sim/gpu, the diagnosis);
    the first two started with ``--parallel-group pp0`` (one multi-node group);
  * Debian's Prometheus 2.42 scraping them every second and evaluating every second the
    shipped ``recording_rules.yml`` and ``fleet_rules.yml`` rendered with ``for: 10s``
    (``alerts.fleet.groups(s, for_override=...)``: the only difference from the shipped file).

Asserted through the HTTP API: (1) with even load, while every input of the imbalance rule
has data (three replicas, a median, headroom), no fleet alert is even pending; (2) once a
closed loop of extra clients hits the third replica alone, LLMFleetReplicaImbalance fires
naming that replica (its instance and server) and no other, while LLMFleetCapacityShort
stays quiet (the others keep headroom); (3) every rule of the fleet file evaluates without
error and every panel of the Fleet dashboard returns data (but the measured-capacity ones, issue 22:
these exporters run without a capacity profile; tests/monitoring/test_capacity_prometheus.py).
"""

from __future__ import annotations

import sys
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from alerts import fleet
from alerts import generate as alerts_generate
from alerts.settings import load
from tests.support.monitoring import PROMETHEUS, Prometheus, panel_queries
from tests.support.ports import free_port
from tests.support.processes import ROOT, Child, exporter_argv
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(PROMETHEUS is None, reason="Debian package prometheus not installed"),
]

SETTINGS = load()
JOB = SETTINGS.exporter_job
SHORT_FOR = "10s"
REPLICAS = ("a", "b", "c")
SKEWED = "c"
#: even load for this long with every input present: over twice the short for:
EVEN_S = 25
#: every wait is bounded by one of these
START_DEADLINE_S = 60
DATA_DEADLINE_S = 60
FIRE_DEADLINE_S = 70
LOAD_S = START_DEADLINE_S + DATA_DEADLINE_S + EVEN_S + FIRE_DEADLINE_S + 30


def fleet_panel_queries() -> list[tuple[str, str]]:
    # the measured capacity at SLO (issue 22) needs a capacity profile: tests/monitoring/test_capacity_prometheus.py
    return panel_queries(["llm-fleet"], capacity=False)


def fleet_alerts(prom: Prometheus) -> list[dict[str, str]]:
    """Labels of every replica-fleet alert Prometheus holds now, pending or firing.

    LLMFleetGroupSkew is left out: pp0's two nodes under a Poisson load of one request a
    second differ by chance, and its promtool tests prove it both ways.
    """
    return [r["metric"] for r in prom.query(f'ALERTS{{alertname=~"{fleet.IMBALANCE}|{fleet.CAPACITY_SHORT}"}}')]


def test_imbalance_names_the_skewed_replica_and_stays_quiet_under_even_load(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    shipped = (ROOT / "alerts" / "fleet_rules.yml").read_text()
    assert alerts_generate.dump({"groups": fleet.groups(SETTINGS)}) == shipped, "alerts/fleet_rules.yml is stale"
    (rules / "recording_rules.yml").write_text((ROOT / "alerts" / "recording_rules.yml").read_text())
    (rules / "fleet_rules.yml").write_text(alerts_generate.dump({"groups": fleet.groups(SETTINGS, for_override=SHORT_FOR)}))

    with ExitStack() as stack:
        sims: dict[str, tuple[Child, str]] = {}
        for name in REPLICAS:
            port = free_port()
            argv = exporter_argv("simulate", "--scenario", "healthy", "--dialect", "vllm", "--max-num-seqs", "8")
            sim = stack.enter_context(Child([*argv, "--listen-address", f"127.0.0.1:{port}"], f"{name}-sim", log_dir=tmp_path))
            sims[name] = (sim, f"http://127.0.0.1:{port}")
        for sim, base in sims.values():
            sim.wait_http(base + "/health", START_DEADLINE_S)

        exporters: dict[str, str] = {}
        serving: list[tuple[Child, str]] = []
        for name, (_sim, base) in sims.items():
            address = f"127.0.0.1:{free_port()}"
            group = ["--parallel-group", "pp0"] if name != SKEWED else []
            argv = exporter_argv("serve", "--engine", base + "/metrics", "--gpu-source", f"sim:{base}", "--engine-interval", "1")
            exporter = Child([*argv, "--listen-address", address, *group], f"{name}-exporter", log_dir=tmp_path)
            serving.append((stack.enter_context(exporter), address))
            exporters[name] = address
            load_argv = [sys.executable, str(ROOT / "tests/monitoring/fleet_load.py"), "even", base, str(LOAD_S)]
            stack.enter_context(Child(load_argv, f"{name}-even", log_dir=tmp_path))
        for exporter, address in serving:
            exporter.wait_http(f"http://{address}/readyz", START_DEADLINE_S)
        instance = {address: name for name, address in exporters.items()}

        prom = stack.enter_context(
            Prometheus(
                tmp_path,
                free_port(),
                list(exporters.values()),
                [rules / "recording_rules.yml", rules / "fleet_rules.yml"],
                None,
                JOB,
            )
        )
        wait_until(lambda: prom.targets_up() == len(exporters), 30, "every exporter to be scraped", interval=0.5)

        # every input of the imbalance rule has data: its silence below means "even", not "blind"
        def inputs_ready() -> bool:
            replicas = prom.query("model:llm_serving_replicas:count == 3")
            return bool(
                replicas
                and len(prom.query("server_model:llm_scheduler_requests_waiting:sum")) == 3
                and prom.query("model:llm_scheduler_requests_waiting:median")
                and prom.query(f"model:llm_layer_headroom:median > {fleet.fleet_settings(SETTINGS).min_headroom}")
            )

        wait_until(inputs_ready, DATA_DEADLINE_S, "data for every input of the imbalance rule", interval=1)

        # (1) even load: nothing fleet-wide, not even pending
        even_until = time.monotonic() + EVEN_S
        while time.monotonic() < even_until:
            held = fleet_alerts(prom)
            assert held == [], f"fleet alert under even load: {held}"
            time.sleep(1)
        print(f"quiet under even load for {EVEN_S} s (for: {SHORT_FOR})")

        # (2) a sticky client piles onto one replica
        skew_argv = [
            sys.executable,
            str(ROOT / "tests/monitoring/fleet_load.py"),
            "skew",
            sims[SKEWED][1],
            str(FIRE_DEADLINE_S + 20),
        ]
        skew = stack.enter_context(Child(skew_argv, "skew", log_dir=tmp_path))
        started = time.monotonic()

        def firing() -> list[dict[str, str]]:
            return [a for a in fleet_alerts(prom) if a["alertstate"] == "firing" and a["alertname"] == fleet.IMBALANCE]

        def waiting() -> dict[str, str]:
            return {
                instance.get(r["metric"]["instance"], "?"): r["value"][1]
                for r in prom.query("server_model:llm_scheduler_requests_waiting:sum")
            }

        fired = wait_until(
            firing,
            FIRE_DEADLINE_S,
            f"{fleet.IMBALANCE} to fire",
            interval=1,
            detail=lambda: f"waiting per replica {waiting()}\n{skew.describe()}",
        )
        print(f"{fleet.IMBALANCE} firing {time.monotonic() - started:.0f} s after the skew: {fired}; waiting {waiting()}")
        named = {(a["instance"], a["server"]) for a in fired}
        assert named == {(exporters[SKEWED], sims[SKEWED][1].removeprefix("http://"))}
        assert {a["signal"] for a in fired} >= {"queue"} and {a["cause"] for a in fired} == {"replica_imbalance"}
        others = [a for a in fleet_alerts(prom) if a.get("instance") != exporters[SKEWED]]
        assert others == [], f"fleet alerts naming another replica: {others}"

        # (3) every fleet rule evaluates cleanly; every Fleet panel has data (the group panels via pp0)
        unhealthy = [
            f"{r['name']}: {r.get('lastError')}" for g in prom.rule_groups() for r in g["rules"] if r.get("health") != "ok"
        ]
        assert unhealthy == []
        missing = [f"{where}: {expr}" for where, expr in fleet_panel_queries() if not prom.query(expr)]
        assert missing == [], "Fleet panels without data:\n" + "\n".join(missing)
        assert [r["metric"]["group"] for r in prom.query("group:llm_parallel_node_group_info:nodes == 2")] == ["pp0"]
