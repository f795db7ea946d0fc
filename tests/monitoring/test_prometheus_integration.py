"""The shipped dashboards, rules and Alertmanager config against a real Prometheus and Alertmanager.

Setup (all on 127.0.0.1, every process stopped at the end, every wait bounded):
  * one simulator per scenario (vLLM dialect), driven by its scenario's load, and one
    exporter per simulator (engine, GPU telemetry from /sim/gpu, process sampler on the
    simulator's PID, diagnosis);
  * Prometheus 2.42 scraping the exporters every 1 s, evaluating every 1 s, with the
    shipped recording rules and a copy of the shipped alerting rules rendered with
    `for: 15s` (alerts.settings.load(for_override=...)): the only difference from the
    shipped file, so alerts fire within the test's time, while start-up transients of the
    diagnosis (a cycle or two) still cannot fire anything;
  * Alertmanager 0.25 with the shipped config, its webhook URL pointed at a receiver here.

Asserted: (a) every panel query of every dashboard, variables and macros substituted,
returns at least one series (but those reading the measured capacity at SLO, issue 22: these
exporters run without a capacity profile, and tests/monitoring/test_capacity_prometheus.py
requires data for exactly those queries); (b) every recording rule produces data and every rule
evaluates without error; (c) kv_pressure, host_bound and power_throttled each get their
cause to the webhook through Alertmanager: as the page (LLMServiceDegraded with that
cause label) when it is the primary, else as its own ticket, which the page mutes only
under another primary; (d) healthy fires nothing.

The healthy simulator runs with speculative decoding on at a good acceptance (0.8), so the
speculative-decoding panels have data; it must still fire nothing.
"""

from __future__ import annotations

import re
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import pytest
import yaml

from alerts import generate as alerts_generate
from alerts.alerting import PAGE
from alerts.causes import by_alert
from alerts.settings import load
from tests.support.monitoring import (
    ALERTMANAGER,
    PROMETHEUS,
    Alertmanager,
    Prometheus,
    Webhook,
    alertmanager_config,
    dashboard_uids,
    panel_queries,
)
from tests.support.ports import free_port
from tests.support.processes import ROOT, Child, exporter_argv
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        PROMETHEUS is None or ALERTMANAGER is None, reason="Debian packages prometheus / prometheus-alertmanager not installed"
    ),
]

#: scenario -> (extra simulator flags, the alert that must reach the webhook)
SCENARIOS: dict[str, tuple[list[str], str | None]] = {
    # a host KV tier too, so the Memory board's host-tier panel has data (vLLM's offload usage)
    # (and two tensor-parallel ranks over NVLink, so the Parallel board's link panels have data: the
    # simulator reports its links for a modelled layout only)
    "healthy": (
        ["--spec-tokens", "4", "--spec-acceptance", "0.8", "--kv-offload-blocks", "256", "--tensor-parallel-size", "2"],
        None,
    ),
    "kv_pressure": ([], "LLMKVCachePressure"),
    "host_bound": ([], "LLMSerialHostCeiling"),
    "power_throttled": ([], "LLMGPUThrottling"),
}
JOB = load().exporter_job
SHORT_FOR = "15s"
LOAD_SECONDS = 240
#: every wait below is bounded by these
DATA_DEADLINE_S = 120
ALERT_DEADLINE_S = 190


#: families only trtllm-serve publishes (exporter/engines/mappings/trtllm.py, its ``trtllm_*`` series): the
#: simulator speaks TensorRT-LLM behind Triton (``nv_trt_llm_*``), not trtllm-serve, so no exporter here
#: can serve them; a panel that reads nothing else is left out of (a). Checked below against the mapping
#: and the simulator's dialects, so the list cannot hide a family a simulated engine does serve.
TRTLLM_SERVE_ONLY = frozenset({"llm_kv_cache_tier_transfer_bytes_total", "llm_spec_decode_draft_time_ratio"})
#: published only after an on-demand profile (POST /profile with --enable-profile, on an engine with a
#: profiler: tests/profile/); these exporters take none
ON_DEMAND = frozenset({"llm_operator_time_share"})


def dashboard_queries() -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable of every dashboard."""
    # llm-fleet reads alerts/fleet_rules.yml: tests/monitoring/test_fleet_prometheus.py; the measured
    # capacity needs --capacity-profile, which these exporters run without: test_capacity_prometheus.py
    uids = [uid for uid in dashboard_uids() if uid != "llm-fleet"]
    out = []
    for where, expr in panel_queries(uids, capacity=False, variables=True):
        read = set(re.findall(r"\bllm_[a-z0-9_]+", expr))
        if read and (read <= TRTLLM_SERVE_ONLY or read <= ON_DEMAND):
            continue
        out.append((where, expr))
    return out


def test_the_trtllm_serve_only_families_are_served_by_no_simulated_engine() -> None:
    from exporter.engines.mappings import trtllm
    from exporter.engines.table import Series

    dialects = "".join(p.read_text() for p in (ROOT / "exporter" / "simulator" / "dialects").glob("*.py"))
    for family in TRTLLM_SERVE_ONLY:
        sources = [src for row in trtllm.MAPPING.rows if row.neutral == family for src in row.sources]
        assert all(isinstance(src, Series) for src in sources), (family, sources)
        raw = [src.name for src in sources if isinstance(src, Series)]
        assert raw and all(name.startswith("trtllm_") for name in raw), (family, raw)
        assert not any(name in dialects for name in raw), (family, raw)


def recording_rules() -> list[str]:
    groups = yaml.safe_load((ROOT / "alerts" / "recording_rules.yml").read_text())["groups"]
    return [r["record"] for g in groups for r in g["rules"]]


def start_scenarios(stack: ExitStack, tmp: Path, exporter_ports: dict[str, int]) -> list[tuple[Child, str]]:
    """Simulators first (all at once), then an exporter and the load for each; all stopped by ``stack``.

    Returns each exporter with its address (to wait for its readiness)."""
    sims: dict[str, tuple[Child, str]] = {}
    for scenario, (extra, _) in SCENARIOS.items():
        port = free_port()
        argv = exporter_argv("simulate", "--scenario", scenario, "--dialect", "vllm", "--listen-address", f"127.0.0.1:{port}")
        sim = stack.enter_context(Child([*argv, *extra], f"{scenario}-sim", log_dir=tmp))
        sims[scenario] = (sim, f"http://127.0.0.1:{port}")
    for sim, base in sims.values():
        sim.wait_http(base + "/health", 45)
    exporters: list[tuple[Child, str]] = []
    for scenario, (sim, base) in sims.items():
        address = f"127.0.0.1:{exporter_ports[scenario]}"
        argv = exporter_argv(
            "serve",
            "--engine",
            base + "/metrics",
            "--gpu-source",
            f"sim:{base}",
            "--engine-pid",
            str(sim.pid),
            "--engine-interval",
            "1",
            "--probe",  # the canary's panels and rules need its series (the simulator speaks OpenAI)
            "--listen-address",
            address,
        )
        exporters.append((stack.enter_context(Child(argv, f"{scenario}-exporter", log_dir=tmp)), address))
        load_argv = [sys.executable, str(ROOT / "tests/monitoring/drive_load.py"), scenario, base, str(LOAD_SECONDS)]
        stack.enter_context(Child(load_argv, f"{scenario}-load", log_dir=tmp))
    return exporters


def explain(prom: Prometheus, am: Alertmanager, exporters: dict[str, str]) -> str:
    """What the diagnosis and Alertmanager saw, for a failure message."""
    by_instance = {v: k for k, v in exporters.items()}
    lines = [
        "alertmanager holds: "
        + ", ".join(sorted(f"{a['labels']['alertname']}@{by_instance.get(a['labels']['instance'], '?')}" for a in am.alerts()))
    ]
    for expr in (
        "max_over_time(llm_bottleneck_active[10m]) == 1",
        "max_over_time(llm_bottleneck_primary[10m]) == 1",
        "max_over_time(llm_process_busiest_thread_cpu_ratio[10m])",
        "min_over_time(llm_gpu_sm_active_ratio[10m])",
        "min_over_time(instance_gpu:llm_gpu_sm_clock:ratio_max[10m])",
        "max_over_time(instance_gpu:llm_gpu_throttled:max[10m])",
    ):
        got = [
            f"{by_instance.get(r['metric'].get('instance'), '?')}:{r['metric'].get('cause', '')}={float(r['value'][1]):.2f}"
            for r in prom.query(expr)
        ]
        lines.append(f"{expr}: {', '.join(sorted(got))}")
    return "\n".join(lines)


def test_dashboards_rules_and_alerts_on_real_prometheus_and_alertmanager(tmp_path: Path) -> None:
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    texts = alerts_generate.render(load(for_override=SHORT_FOR))
    (rules_dir / "recording_rules.yml").write_text(texts["recording"])
    (rules_dir / "alerting_rules.yml").write_text(texts["alerting"])
    # the recording rules must be exactly the shipped ones; only for: differs in the alerts
    assert texts["recording"] == (ROOT / "alerts" / "recording_rules.yml").read_text()

    with ExitStack() as stack:
        exporter_ports = {scenario: free_port() for scenario in SCENARIOS}
        exporters = {scenario: f"127.0.0.1:{port}" for scenario, port in exporter_ports.items()}
        hook = stack.enter_context(Webhook())
        am = stack.enter_context(
            Alertmanager(tmp_path, alertmanager_config(ROOT / "alerts" / "alertmanager.yml", hook.url), free_port())
        )
        for exporter, address in start_scenarios(stack, tmp_path, exporter_ports):
            exporter.wait_http(f"http://{address}/readyz", 45)
        # Prometheus last, so no alert sees an exporter that has not started yet
        prom = stack.enter_context(
            Prometheus(
                tmp_path,
                free_port(),
                list(exporters.values()),
                [rules_dir / "recording_rules.yml", rules_dir / "alerting_rules.yml"],
                am.url,
                JOB,
            )
        )
        started = time.monotonic()
        wait_until(lambda: prom.targets_up() == len(exporters), 45, "every exporter to be scraped", interval=0.5)

        # (a) + (b): poll until every query and recording rule has data, or the deadline
        queries = dashboard_queries()
        records = recording_rules()

        def missing() -> list[str]:
            out = [f"panel {where}: {expr}" for where, expr in queries if not prom.query(expr)]
            out += [f"recording rule {name}" for name in records if not prom.query(name)]
            return out

        still_missing = missing()
        while still_missing and time.monotonic() - started < DATA_DEADLINE_S:
            time.sleep(3)
            still_missing = missing()
        assert still_missing == [], "no data for:\n" + "\n".join(still_missing)
        unhealthy = [
            f"{r['name']}: {r.get('lastError')}" for g in prom.rule_groups() for r in g["rules"] if r.get("health") != "ok"
        ]
        assert unhealthy == []

        # (c): each scenario's cause reaches the webhook through Alertmanager, as the page or its ticket
        expected = {(alert, exporters[s]) for s, (_, alert) in SCENARIOS.items() if alert}

        def delivered() -> set[tuple[str, str]]:
            """(per-cause alert, instance) for every firing ticket, and for every page (by its cause label)."""
            causes = {c.cause: name for name, c in by_alert().items()}
            out = set()
            for a in hook.alerts():
                if a["status"] != "firing":
                    continue
                labels = a["labels"]
                name = causes.get(labels.get("cause", ""), "?") if labels["alertname"] == PAGE else labels["alertname"]
                out.add((name, labels.get("instance", "")))
            return out

        print(f"data for every panel and rule after {time.monotonic() - started:.0f} s")
        wait_until(
            lambda: expected <= delivered(),
            ALERT_DEADLINE_S - (time.monotonic() - started),
            "each scenario's cause at the webhook",
            interval=2,
            detail=lambda: f"missing at the webhook: {sorted(expected - delivered())}\n" + explain(prom, am, exporters),
        )
        print(f"alerts delivered after {time.monotonic() - started:.0f} s: {sorted(delivered())}")
        wall0 = time.time() - (time.monotonic() - started)
        for r in prom.query("ALERTS_FOR_STATE"):
            print(
                f"  {r['metric']['alertname']} @ {r['metric'].get('instance')}: pending from {float(r['value'][1]) - wall0:.0f} s"
            )

        # (d): the healthy exporter fired nothing during the whole run
        healthy = exporters["healthy"]
        window = int(time.monotonic() - started) + 5
        ever = prom.query(f'max_over_time(ALERTS{{alertstate="firing", instance="{healthy}"}}[{window}s])')
        assert [r["metric"]["alertname"] for r in ever] == []
        assert [a for a in hook.alerts() if a["labels"].get("instance") == healthy] == []
