"""End to end: `serve` on a replay trace, scrape /metrics, compare with a golden file.

The exact comparison runs on a one-row excerpt of the recorded H200 kernels trace
(a power-capped bf16 GEMM row), so every value is deterministic; only build-info
labels, source durations and timestamps are normalised. A second run on the full
bundled trace checks that it exposes the same GPU series (values change per row).

Regenerate after an intended change with ``REGENERATE_GOLDEN=1`` and read the diff.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.support.ports import free_port
from tests.support.processes import Child, exporter_argv

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ONE_ROW = FIXTURES / "kernels_one_row.csv"
GOLDEN = FIXTURES / "replay_kernels.prom"
SAMPLE_LINE = re.compile(r"^(?P<series>[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{.*\})?) (?P<value>\S+)(?: (?P<ts>-?\d+))?$")
VOLATILE = {
    "llm_exporter_source_duration_seconds": "<duration>",
    "llm_exporter_source_last_success_timestamp_seconds": "<timestamp>",
}


def normalise(text: str, mask_values: bool = False) -> str:
    """Exposition with run-dependent parts replaced by placeholders."""
    out = []
    for line in text.splitlines():
        m = SAMPLE_LINE.match(line)
        if line.startswith("#") or not m:
            out.append(line)
            continue
        series, val = m.group("series"), m.group("value")
        name = series.split("{", 1)[0]
        if name == "llm_exporter_build_info":
            series = name + "{<build>}"
        val = VOLATILE.get(name, "<value>" if mask_values else val)
        out.append(f"{series} {val}")  # a sample timestamp, if any, is dropped
    return "\n".join(out) + "\n"


class Exporter:
    """`python3 -m exporter serve` in a subprocess on a free 127.0.0.1 port, no LLM_EXPORTER_* settings."""

    def __init__(self, gpu_source: str) -> None:
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLM_EXPORTER_")}
        argv = exporter_argv(
            "serve", "--gpu-source", gpu_source, "--gpu-interval", "0.2", "--listen-address", f"127.0.0.1:{self.port}"
        )
        self.child = Child(argv, "serve-golden", env=env, inherit_env=False).start()
        self.url = f"http://127.0.0.1:{self.port}"

    def get(self, path: str) -> requests.Response:
        return requests.get(self.url + path, timeout=5)

    def ready(self) -> None:
        self.child.wait_http(self.url + "/readyz", 30)

    def stable_metrics(self, mask_values: bool = False) -> str:
        """A scrape equal (once normalised) to the one before it: every source has settled."""
        previous = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            raw = self.get("/metrics").text
            current = normalise(raw, mask_values)
            if current == previous and 'llm_exporter_source_up{source="gpu"} 1.0' in raw:
                return current
            previous = current
            time.sleep(0.3)
        pytest.fail("/metrics did not settle within 20 s")

    def stop(self) -> None:
        self.child.stop()


@pytest.fixture
def one_row() -> Iterator[Exporter]:
    exp = Exporter(f"replay:{ONE_ROW}")
    try:
        exp.ready()
        yield exp
    finally:
        exp.stop()


def test_exposition_matches_the_golden_file(one_row: Exporter) -> None:
    scraped = one_row.get("/metrics")
    assert scraped.status_code == 200
    got = one_row.stable_metrics()
    if os.environ.get("REGENERATE_GOLDEN") == "1":
        GOLDEN.write_text(got)
    assert got == GOLDEN.read_text(), "run with REGENERATE_GOLDEN=1 and review the diff if the change is intended"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian package prometheus) not installed")
def test_exposition_passes_promtool(one_row: Exporter) -> None:
    text = one_row.get("/metrics").text
    run = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stdout + run.stderr


def gpu_series(text: str) -> set[str]:
    return {line for line in text.splitlines() if line.startswith(("llm_gpu_", 'llm_exporter_source_up{source="gpu"}'))}


def test_full_bundled_trace_exposes_the_same_gpu_series() -> None:
    exp = Exporter("replay:kernels")
    try:
        exp.ready()
        got = gpu_series(exp.stable_metrics(mask_values=True))
    finally:
        exp.stop()
    assert got == gpu_series(normalise(GOLDEN.read_text(), mask_values=True))
    assert len(got) == 32 + 1  # 32 GPU series of one H200 (4 of them per profiling metric), the source's up


def test_a_dcgm_exporter_serving_the_same_row_gives_the_golden_gpu_series() -> None:
    """``serve --gpu-source dcgm-exporter:URL`` beside a fake dcgm-exporter (the collectors CSV
    docs/gpu-sources.md asks for) serving the golden row publishes the golden GPU series, value
    for value; only ``llm_gpu_info{source}`` names the other reader."""
    from exporter.gpu.replay import parse_trace
    from tests.support.dcgm_exporter_text import GpuRow, render
    from tests.support.fake_engine import FakeEngine

    (reading,) = parse_trace(ONE_ROW.read_text(encoding="utf-8"), str(ONE_ROW))
    with FakeEngine(render([GpuRow(reading)], "4.x", "full")) as fake:
        exp = Exporter(f"dcgm-exporter:{fake.url}")
        try:
            exp.ready()
            got = gpu_series(exp.stable_metrics())
        finally:
            exp.stop()
    golden = gpu_series(normalise(GOLDEN.read_text()))
    assert got == {line.replace('source="replay"', 'source="dcgm-exporter"') for line in golden}
