"""The capacity-at-SLO rules and panels (issue 22) on a real Prometheus scraping real exposition text.

Setup (127.0.0.1 only; every server and process stopped at the end, every wait bounded):
  * three /metrics endpoints (tests/support/fake_engine.py FakeEngine), each one engine as
    ``serve --capacity-profile`` publishes it: the ``llm_capacity_*{engine}`` gauges (the
    engine's name), ``llm_engine_info`` and the engine's own running, waiting and finished
    series. Replicas ``a`` and ``b`` serve model ``m`` at 95 % of their measured capacity, ``b``
    with a stale profile; ``c`` serves model ``solo`` at half of its capacity;
  * Debian's Prometheus 2.42 scraping them every second and evaluating every second the shipped
    ``recording_rules.yml`` and the alerting and fleet rules rendered with ``for: 5s``
    (``alerts.settings.load(for_override=...)``, ``alerts.fleet.groups(s, for_override=...)``:
    the only difference from the shipped files).

Asserted through the HTTP API: LLMCapacityHeadroomLow fires for ``a`` and ``b`` (each by its
engine name) and not for ``c``; LLMCapacityProfileStale for ``b`` alone; LLMFleetCapacityShort
``capacity="measured"`` for model ``m`` (in flight 10 per replica over a concurrency at SLO of
8) and not for ``solo``; every rule evaluates without error; and every panel query of LLM /
Overview and LLM / Fleet that reads a capacity series returns data (the other integration
tests run exporters without a profile and leave exactly those queries to this one).
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from alerts import capacity, fleet
from alerts import generate as alerts_generate
from alerts.settings import load
from exporter import schema
from tests.support.fake_engine import FakeEngine
from tests.support.monitoring import PROMETHEUS, Prometheus, panel_queries
from tests.support.ports import free_port
from tests.support.processes import ROOT
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(PROMETHEUS is None, reason="Debian package prometheus not installed"),
]

SETTINGS = load()
JOB = SETTINGS.exporter_job
SHORT_FOR = "5s"
#: every wait is bounded by one of these
SCRAPE_DEADLINE_S = 30
FIRE_DEADLINE_S = 60

#: replica -> (model, used ratio, stale, running, waiting); the concurrency at SLO is 8 for all
REPLICAS: dict[str, tuple[str, float, int, int, int]] = {
    "a": ("m", 0.95, 0, 9, 1),
    "b": ("m", 0.95, 1, 9, 1),
    "c": ("solo", 0.5, 0, 4, 0),
}


def _family(name: str, samples: list[tuple[dict[str, str], float]]) -> str:
    spec = schema.SPECS[name]
    lines = [f"# HELP {name} {spec.help}", f"# TYPE {name} {spec.type}"]
    for labels, value in samples:
        lines.append(name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" + f" {value:g}")
    return "\n".join(lines)


def exposition(engine: str, model: str, used: float, stale: int, running: int, waiting: int) -> str:
    """One engine as the exporter publishes it with a capacity profile (names and help from exporter/schema.py)."""
    own = {"server": engine, "engine": "vllm", "model": model, "rank": "0"}
    named = {"engine": engine}
    families = [
        _family("llm_engine_info", [({"server": engine, "engine": "vllm", "model": model, "generation": "v1"}, 1)]),
        _family("llm_scheduler_requests_running", [(own, running)]),
        _family("llm_scheduler_requests_waiting", [(own, waiting)]),
        _family("llm_requests_finished_total", [({**own, "reason": "stop"}, 1200)]),
        _family("llm_capacity_concurrency_at_slo", [(named, 8)]),
        _family("llm_capacity_requests_per_second_at_slo", [(named, 2)]),
        _family("llm_capacity_tokens_per_second_at_slo", [(named, 240)]),
        _family("llm_capacity_used_ratio", [(named, used)]),
        _family("llm_capacity_recommended_max_concurrency", [(named, 6)]),
        _family("llm_capacity_profile_age_seconds", [(named, 3 * 86400)]),
        _family("llm_capacity_profile_stale", [(named, stale)]),
        _family(
            "llm_capacity_workload_drift_ratio",
            [({**named, "dimension": "prompt_tokens"}, 1.4), ({**named, "dimension": "output_tokens"}, 0.9)],
        ),
    ]
    return "\n".join(families) + "\n"


def capacity_queries() -> list[tuple[str, str]]:
    """(where, PromQL) of every Overview and Fleet panel target that reads a capacity series."""
    return panel_queries(("llm-overview", "llm-fleet"), capacity=True)


def firing(prom: Prometheus, alert: str) -> list[dict[str, str]]:
    return [r["metric"] for r in prom.query(f'ALERTS{{alertname="{alert}", alertstate="firing"}}')]


def test_capacity_alerts_fire_and_capacity_panels_have_data(tmp_path: Path) -> None:
    short = load(for_override=SHORT_FOR)
    texts = alerts_generate.render(short)
    assert texts["recording"] == (ROOT / "alerts" / "recording_rules.yml").read_text()
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "recording_rules.yml").write_text(texts["recording"])
    (rules / "alerting_rules.yml").write_text(texts["alerting"])
    (rules / "fleet_rules.yml").write_text(alerts_generate.dump({"groups": fleet.groups(SETTINGS, for_override=SHORT_FOR)}))
    queries = capacity_queries()
    assert len(queries) >= 20, queries  # both boards' capacity rows

    with ExitStack() as stack:
        engines = {name: stack.enter_context(FakeEngine(exposition(f"eng-{name}", *spec))) for name, spec in REPLICAS.items()}
        instance = {name: e.url.removeprefix("http://").removesuffix("/metrics") for name, e in engines.items()}
        prom = stack.enter_context(
            Prometheus(
                tmp_path,
                free_port(),
                list(instance.values()),
                [rules / "recording_rules.yml", rules / "alerting_rules.yml", rules / "fleet_rules.yml"],
                None,
                JOB,
            )
        )
        wait_until(lambda: prom.targets_up() == len(engines), SCRAPE_DEADLINE_S, "every endpoint to be scraped", interval=0.5)

        def all_fired() -> bool:
            return bool(
                len(firing(prom, capacity.HEADROOM_LOW)) >= 2
                and firing(prom, capacity.PROFILE_STALE)
                and [a for a in firing(prom, fleet.CAPACITY_SHORT) if a.get("capacity") == "measured"]
            )

        started = time.monotonic()
        wait_until(
            all_fired,
            FIRE_DEADLINE_S,
            "every capacity alert to fire",
            interval=1,
            detail=lambda: f"{prom.query('ALERTS')}\nfleet used: {prom.query(fleet.MEASURED_USED)}",
        )
        print(f"capacity alerts firing {time.monotonic() - started:.0f} s after every endpoint was scraped (for: {SHORT_FOR})")
        by_instance = {v: k for k, v in instance.items()}
        headroom = {(by_instance[a["instance"]], a["engine"]) for a in firing(prom, capacity.HEADROOM_LOW)}
        assert headroom == {("a", "eng-a"), ("b", "eng-b")}
        assert {(by_instance[a["instance"]], a["engine"]) for a in firing(prom, capacity.PROFILE_STALE)} == {("b", "eng-b")}
        measured = [a for a in firing(prom, fleet.CAPACITY_SHORT) if a.get("capacity") == "measured"]
        assert [(a["model"], a["cause"], a["layer"]) for a in measured] == [("m", "fleet_capacity_short", "application")]
        # in flight 10 + 10 over 8 + 8: the concurrency side binds (the finished counters do not move)
        (used,) = prom.query(f'{fleet.MEASURED_USED}{{model="m"}}')
        assert float(used["value"][1]) == pytest.approx(1.25)
        assert not [r for r in prom.query('ALERTS{model="solo"}')]

        unhealthy = [
            f"{r['name']}: {r.get('lastError')}" for g in prom.rule_groups() for r in g["rules"] if r.get("health") != "ok"
        ]
        assert unhealthy == []
        # the subqueries of the trend panels need a few evaluations of history: poll, bounded
        wait_until(
            lambda: not [q for q in queries if not prom.query(q[1])],
            20,
            "every capacity panel to have data",
            interval=1,
            detail=lambda: "\n".join(f"{w}: {e}" for w, e in queries if not prom.query(e)),
        )
