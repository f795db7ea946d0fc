"""report.html in a real browser: headless Chromium screenshots it and dumps its DOM; the primary and
the chain are visible, and no value cell reads '-' where the verdict has the value."""

from __future__ import annotations

import html
import json
import re
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from exporter.report import Context, write_report
from exporter.report.charts import draw_all
from exporter.report.collect import Collected
from exporter.report.render import ChartRef, evidence_value, percent, ratio
from exporter.report.series import charts
from exporter.schema import LAYERS
from tests.report.fake_exporter import rich_verdict
from tests.support.browser import run_chromium


@pytest.fixture
def report(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    verdict = rich_verdict()
    out = tmp_path / "snap"
    specs = charts()
    collected = Collected(verdict, "exporter", "http://127.0.0.1:9750", verdict["timestamp"] - 30, verdict["timestamp"])
    files = draw_all(out, specs, collected)  # every chart 'no data': the figures still draw
    write_report(
        out,
        verdict,
        Context(
            "http://127.0.0.1:9750",
            "exporter",
            "http://127.0.0.1:9750",
            collected.start,
            collected.end,
            charts=[ChartRef(f.file, f.title, f.layer, f.empty) for f in files],
        ),
    )
    return out, verdict


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return run_chromium(args, tmp_path / "profile")


def test_screenshot_and_dom_show_the_primary_and_every_value(report: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    out, verdict = report
    page = (out / "report.html").resolve()
    shot = tmp_path / "shot.png"
    result = _run([f"--screenshot={shot}", "--window-size=1200,1600", f"file://{page}"], tmp_path)
    assert result.returncode == 0 and shot.is_file(), result.stderr[-2000:]
    head = shot.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", head[16:24]) == (1200, 1600)
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one

    result = _run(["--dump-dom", f"file://{page}"], tmp_path)
    dom = result.stdout
    assert result.returncode == 0, result.stderr[-2000:]
    primary = verdict["primary"]
    assert re.search(
        r'<div class="primary" id="primary"[^>]*>Primary: hardware / pcie_transfer_bound '
        r"\(confidence 0\.997, score 0\.998\)</div>",
        dom,
    ), dom[:3000]
    assert f'<div class="chain" id="chain">{html.escape(primary["chain"], quote=False)}</div>' in dom
    assert html.escape(primary["advice"], quote=False) in dom
    assert dom.index('id="primary"') < dom.index('id="layers"')  # the verdict leads
    assert re.search(r'<section id="verdict" data-state="degraded">', dom)
    for name in LAYERS:
        info = verdict["layers"][name]
        row = re.search(
            rf'<tr data-layer="{name}" data-status="(\w+)"[^>]*>.*?<td class="value score">([^<]*)</td>'
            rf'<td class="value headroom">([^<]*)</td>',
            dom,
        )
        assert row, name
        status, score, room = row.groups()
        assert status == info["status"]
        if info["score"] is not None:
            assert score not in ("-", "") and score == ratio(info["score"]), (name, score)
        if info["headroom"] is not None:
            assert room not in ("-", "") and room == percent(info["headroom"]), (name, room)
    cells = dict(re.findall(r'<td class="value" data-key="([^"]*)">([^<]*)</td>', dom))
    for cause in verdict["bottlenecks"]:
        for key, value in cause["evidence"].items():
            shown = cells[html.escape(key)]
            assert shown not in ("-", "") and shown == html.escape(evidence_value(key, value), quote=False)
    assert json.loads((out / "diagnosis.json").read_text()) == verdict
    assert dom.count("data:image/png;base64,") == 1 + len(LAYERS)
