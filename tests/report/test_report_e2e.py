"""`llm-layer-exporter report` end to end against exporter-like (and Prometheus-like) HTTP servers
on 127.0.0.1: every file written, the charts' source said, unreachable servers one line and exit 1."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from exporter.cli import main
from exporter.report.series import charts
from exporter.schema import LAYERS
from tests.report.fake_exporter import FakeExporter, rich_verdict
from tests.support.asgi import UvicornThread
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
PNGS = {"verdict.png", *(f"layer-{layer}.png" for layer in LAYERS)}


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", head[16:24])


@pytest.fixture
def exporter() -> Iterator[tuple[str, FakeExporter]]:
    fake = FakeExporter(rich_verdict())
    with UvicornThread(fake.app()) as server:
        yield f"http://127.0.0.1:{server.port}", fake


def _check_outputs(out: Path) -> tuple[str, str, dict[str, Any]]:
    names = {p.name for p in out.iterdir()}
    assert {"report.html", "report.md", "diagnosis.json"} | PNGS <= names, names
    for png in PNGS:
        w, h = _png_size(out / png)
        assert w >= 800 and h >= 300
    md = (out / "report.md").read_text(encoding="utf-8")
    page = (out / "report.html").read_text(encoding="utf-8")
    verdict: dict[str, Any] = json.loads((out / "diagnosis.json").read_text(encoding="utf-8"))
    for png in PNGS:
        assert f"]({png})" in md
    assert page.count('src="data:image/png;base64,') == len(PNGS)
    return md, page, verdict


def test_report_samples_the_exporter(
    exporter: tuple[str, FakeExporter], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, fake = exporter
    out = tmp_path / "snap"
    started = time.monotonic()
    rc = main(["report", "--exporter", base, "--out", str(out), "--sample-seconds", "2", "--sample-interval", "0.4"])
    assert rc == 0
    assert time.monotonic() - started < 60
    assert "degraded, primary hardware / pcie_transfer_bound" in capsys.readouterr().out
    md, page, verdict = _check_outputs(out)
    assert 2 <= fake.scrapes <= 7  # bounded: at most seconds / interval + 2 polls
    assert verdict["primary"]["cause"] == "pcie_transfer_bound" and "signals" in verdict  # the raw ?signals=1 body
    assert "Charts come from sampling the exporter at " + base in md
    assert "(/metrics and /diagnosis?signals=1) for 2 s" in md
    assert 'data-source="exporter"' in page
    # series the fake serves are charted (no 'no data' for them); the ones it lacks are named
    assert "No data for: interconnect traffic" in md
    for title in ("latency p95", "KV cache usage (ratio)", "GPU activity (ratio)", "requests", "draft acceptance (ratio)"):
        assert f"No data for: {title}" not in md


class FakePrometheus:
    def __init__(self) -> None:
        self.queries: list[dict[str, str]] = []

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/api/v1/query")
        def query() -> JSONResponse:
            return JSONResponse({"status": "success", "data": {"resultType": "vector", "result": []}})

        @app.get("/api/v1/query_range")
        def query_range(request: Request) -> JSONResponse:
            q = dict(request.query_params)
            self.queries.append(q)
            if "skew" in q["query"]:  # a refused query is noted, not fatal
                return JSONResponse({"status": "error", "errorType": "bad_data", "error": "boom"}, status_code=400)
            start, end, step = float(q["start"]), float(q["end"]), float(q["step"])
            values = [[start + i * step, str(0.5)] for i in range(int((end - start) / step) + 1)]
            metric = {"layer": "memory"} if "by (layer)" in q["query"] else {}
            return JSONResponse(
                {"status": "success", "data": {"resultType": "matrix", "result": [{"metric": metric, "values": values}]}}
            )

        return app


def test_report_queries_prometheus(
    exporter: tuple[str, FakeExporter], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, fake = exporter
    prom = FakePrometheus()
    with UvicornThread(prom.app()) as server:
        out = tmp_path / "snap"
        rc = main(["report", "--exporter", base, "--prometheus", f"127.0.0.1:{server.port}", "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    md, page, _ = _check_outputs(out)
    assert fake.scrapes == 0  # the history came from Prometheus
    asked = [q["query"] for q in prom.queries]
    expected = [s.promql() for c in charts() for p in c.panels for s in p.series]
    assert asked == expected
    assert "histogram_quantile(0.95, sum by (le) (rate(llm_request_ttft_seconds_bucket[1m])))" in asked
    spans = {round(float(q["end"]) - float(q["start"])) for q in prom.queries}
    assert spans == {900}
    assert f"Charts come from Prometheus at http://127.0.0.1:{server.port}" in md and "the last 15 minutes" in md
    assert "Prometheus refused 'max by (group) (llm_parallel_sm_active_skew_ratio)': HTTP 400 (boom)" in md


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter", "report", *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_unreachable_exporter_is_one_line_and_exit_1(tmp_path: Path) -> None:
    out = tmp_path / "snap"
    result = _cli("--exporter", f"http://127.0.0.1:{free_port()}", "--out", str(out), "--timeout", "2")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llm-layer-exporter report: cannot reach the exporter at "), lines
    assert not out.exists()


def test_unreachable_prometheus_is_one_line_and_exit_1(exporter: tuple[str, FakeExporter], tmp_path: Path) -> None:
    base, _ = exporter
    out = tmp_path / "snap"
    result = _cli("--exporter", base, "--prometheus", f"http://127.0.0.1:{free_port()}", "--out", str(out), "--timeout", "2")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llm-layer-exporter report: cannot reach Prometheus at "), lines
    assert not out.exists()


def test_not_an_exporter_and_bad_flags(tmp_path: Path) -> None:
    prom = FakePrometheus()  # answers JSON, but no /diagnosis
    with UvicornThread(prom.app()) as server:
        result = _cli("--exporter", f"127.0.0.1:{server.port}", "--out", str(tmp_path / "x"))
    assert result.returncode == 1 and "answered HTTP 404" in result.stderr
    bad = _cli("--out", str(tmp_path / "y"), "--minutes", "0")
    assert bad.returncode == 2 and "--minutes must be > 0" in bad.stderr
    (tmp_path / "file").write_text("x")
    not_dir = _cli("--out", str(tmp_path / "file"))
    assert not_dir.returncode == 2 and "not a directory" in not_dir.stderr
