"""The live page in a real browser: headless Chromium loads / from a running
`llm-layer-exporter serve` replaying the recorded H200 PCIe copy, and the DOM
its JavaScript rendered names the active cause."""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from exporter.gpu.replay import bundled_trace
from exporter.store import SnapshotStore
from tests.support.browser import run_chromium
from tests.support.ports import free_port
from tests.support.processes import Child, exporter_argv

#: let the page's JavaScript fetch /diagnosis and render before the DOM is read
RENDER = "--virtual-time-budget=5000"


def h2d_trace(tmp_path: Path) -> Path:
    """The settled rows of the recorded host-to-device PCIe copy."""
    with bundled_trace("kernels").open(newline="") as f:
        rows = list(csv.DictReader(f))
    phase = [r for r in rows if r["phase"] == "h2d_copy_pcie"][2:]
    out = tmp_path / "h2d.csv"
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(phase)
    return out


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    argv = exporter_argv(
        "serve", "--gpu-source", f"replay:{h2d_trace(tmp_path)}", "--listen-address", f"127.0.0.1:{port}", "--gpu-interval", "0.5"
    )
    base = f"http://127.0.0.1:{port}"
    with Child(argv, "serve-h2d").start() as proc:
        proc.wait_ready(lambda: requests.get(base + "/diagnosis", timeout=2).json()["bottlenecks"], 30, "a verdict with a cause")
        yield base


def test_page_dom_shows_the_active_cause(served: str, tmp_path: Path) -> None:
    result = run_chromium([RENDER, "--dump-dom", served + "/"], tmp_path / "profile")
    dom = result.stdout
    assert result.returncode == 0, result.stderr[-2000:]
    # elements the page's JavaScript built from /diagnosis (absent from the served HTML): a replayed
    # GPU alone cannot say whether users suffer, so the copy is a candidate and the state unknown,
    # with the reason shown instead of a reassurance
    assert re.search(r'<article class="cause warning" data-layer="hardware" data-cause="pcie_transfer_bound"', dom), dom[-3000:]
    assert "candidate: hardware / " in dom
    assert re.search(r'<section id="verdict" data-state="unknown"', dom)
    assert "no engine metrics" in dom
    assert re.search(r'data-layer="hardware" data-status="warning"', dom)
    assert re.search(r'data-layer="memory" data-status="unknown"', dom)
    assert "% headroom" in dom or "headroom" in dom
    assert "verdict of" in dom
    served_html = requests.get(served + "/", timeout=5).text
    assert 'data-cause="pcie_transfer_bound"' not in served_html


def test_page_leads_with_the_state_primary_and_chain(live_exporter: tuple[str, SnapshotStore], tmp_path: Path) -> None:
    """A degraded service (the live fixture: PCIe copy beside an engine over its TTFT SLO): the page
    shows the state, the primary and the chain before the layer map."""
    base, _ = live_exporter
    result = run_chromium([RENDER, "--dump-dom", base + "/"], tmp_path / "profile")
    dom = result.stdout
    assert result.returncode == 0, result.stderr[-2000:]
    assert re.search(r'<section id="verdict" data-state="degraded"', dom), dom[-3000:]
    assert re.search(
        r'<div class="primary" id="primary">Primary: hardware / pcie_transfer_bound \(confidence 0\.\d+\)</div>', dom
    )
    assert re.search(r'<div class="chain" id="chain">TTFT p95 [\d.]+ s &gt; SLO 2 s ← PCIe 58\.0 GB/s', dom)
    assert "symptom: TTFT p95" in dom
    assert dom.index('id="verdict"') < dom.index('id="layers"')
    assert re.search(r'data-layer="hardware" data-status="bottleneck"', dom)
    # every value the JSON has is shown: no evidence cell, score or headroom reads "-" or "?"
    assert "<td>-</td>" not in dom and '<div class="score">?</div>' not in dom.split('data-layer="memory"')[0]
    shot = tmp_path / "page.png"
    taken = run_chromium([RENDER, f"--screenshot={shot}", "--window-size=1200,1400", base + "/"], tmp_path / "profile2")
    assert taken.returncode == 0 and shot.is_file() and shot.stat().st_size > 10_000, taken.stderr[-2000:]
