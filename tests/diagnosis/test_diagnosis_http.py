"""/diagnosis and / served by a real uvicorn on 127.0.0.1, fed by the real runner loop,
and the `diagnose` command against it."""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

import pytest
import requests
from fastapi import FastAPI

from exporter.commands import diagnose as diagnose_cli
from exporter.schema import LAYERS
from exporter.store import SnapshotStore
from tests.support.asgi import UvicornThread
from tests.support.ports import free_port


def test_diagnosis_json_names_the_cause(live_exporter: tuple[str, SnapshotStore]) -> None:
    base, _ = live_exporter
    r = requests.get(base + "/diagnosis", timeout=5)
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert body["schema_version"] == 2 and body["state"] == "degraded"
    assert [x["id"] for x in body["symptoms"]] == ["ttft_high"]
    primary = body["primary"]
    assert (primary["layer"], primary["cause"]) == ("hardware", "pcie_transfer_bound")
    assert re.match(r"TTFT p95 \d(\.\d)? s > SLO 2 s ← PCIe 58\.0 GB/s", primary["chain"]), primary["chain"]
    assert primary["explains"] == ["ttft_high"] and 0.5 <= primary["confidence"] <= 1.0
    hw = body["layers"]["hardware"]
    assert (hw["score"], hw["status"], hw["headroom"]) == (primary["score"], "bottleneck", 0.0)
    assert body["layers"]["scheduler"]["status"] == "ok" and body["layers"]["scheduler"]["headroom"] is not None
    assert body["bottlenecks"][0]["cause"] == "pcie_transfer_bound"


def test_diagnosis_metrics_reach_the_store(live_exporter: tuple[str, SnapshotStore]) -> None:
    _, store = live_exporter
    snap = store.snapshot()
    active = {(p.labels["layer"], p.labels["cause"]): p.value for p in snap.samples("llm_bottleneck_active")}
    assert active[("hardware", "pcie_transfer_bound")] == 1.0
    assert active[("memory", "kv_cache_pressure")] == 0.0
    assert {p.labels["layer"] for p in snap.samples("llm_bottleneck_score")} == set(LAYERS)
    assert snap.values("llm_parallel_group_gpus") == [1.0]


def test_page_is_self_contained(live_exporter: tuple[str, SnapshotStore]) -> None:
    base, _ = live_exporter
    r = requests.get(base + "/", timeout=5)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    html = r.text
    assert 'fetch("diagnosis"' in html and "setTimeout(refresh" in html
    # no external assets: no src/href to another host, no @import
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "@import" not in html
    for layer in LAYERS:
        assert layer in html


def _args(url: str, fmt: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    diagnose_cli.add_arguments(parser)
    return parser.parse_args(["--exporter", url, "--format", fmt])


def test_diagnose_json(live_exporter: tuple[str, SnapshotStore], capsys: pytest.CaptureFixture[str]) -> None:
    base, _ = live_exporter
    assert diagnose_cli.run(_args(base, "json")) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["bottlenecks"][0]["cause"] == "pcie_transfer_bound"


def test_diagnose_text_report(live_exporter: tuple[str, SnapshotStore], capsys: pytest.CaptureFixture[str]) -> None:
    base, _ = live_exporter
    assert diagnose_cli.run(_args(base + "/", "text")) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("Service DEGRADED")
    assert "primary: hardware / pcie_transfer_bound" in out
    assert re.search(r"TTFT p95 \d(\.\d)? s > SLO 2 s ← PCIe", out)
    assert "bottleneck" in out and "headroom" in out
    assert 'llm_gpu_utilization_ratio{gpu="0"}' in out
    assert "PCIe" in out  # the advice


def test_diagnose_against_an_exporter_that_measured_nothing_says_what_is_missing(capsys: pytest.CaptureFixture[str]) -> None:
    from exporter.diagnosis.verdict import unknown_verdict

    app = FastAPI()
    body = unknown_verdict().as_dict()
    body["notices"] = [
        "source engine:x is down (connection): its layers cannot be judged",
        "no GPU source: hardware, operator and parallel layers cannot be judged",
    ]

    @app.get("/diagnosis")
    def nothing() -> dict[str, Any]:
        return body

    with UvicornThread(app) as server:
        code = diagnose_cli.run(_args(f"http://127.0.0.1:{server.port}", "text"))
    out = capsys.readouterr().out
    assert code == diagnose_cli.EXIT_NOTHING_MEASURED
    assert "Service UNKNOWN" in out and "Nothing can be concluded" in out
    assert "no GPU source" in out and "engine:x is down" in out
    assert "no layer is a bottleneck" not in out


def test_diagnose_unreachable_exporter_is_one_line_and_status_1(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert diagnose_cli.run(_args(url, "text")) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot reach the exporter" in err and url in err


def test_diagnose_rejects_a_server_that_is_not_an_exporter(capsys: pytest.CaptureFixture[str]) -> None:
    app = FastAPI()

    @app.get("/diagnosis")
    def nope() -> dict[str, Any]:
        return {"hello": "world"}

    with UvicornThread(app) as server:
        assert diagnose_cli.run(_args(f"http://127.0.0.1:{server.port}", "json")) == 1
    assert "without layers/bottlenecks" in capsys.readouterr().err
