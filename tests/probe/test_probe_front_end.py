"""Time outside the engine through a slow proxy of our own, without a real engine.

The fake engine (tests/probe/probe_http.py) reports its own prefill time for each request,
as llama.cpp does; ``SlowProxy`` (tests/probe/proxies.py) holds the first byte of every
answer for a fixed delay. Proven here:
* in-process: the probe's time outside the engine holds the whole added delay (at least
  ``DELAY_S``, less than the probe's timeout), and without the proxy it is never below 0 nor
  more than the TTFT the probe saw (how near 0 depends on how busy the host is: not a bound);
* end to end: a real ``python -m exporter serve`` subprocess, its engine scraped directly and
  its probe pointed at the proxy (``probe.url``), publishes ``llm_probe_outside_engine_seconds``
  (the whole delay, below the probe's timeout) and its diagnosis names ``application/front_end_overhead`` as the primary.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from exporter.engines.config import EngineConfig
from exporter.probe.config import ProbeConfig
from exporter.probe.source import ProbeSource
from exporter.store import SnapshotStore
from tests.probe.probe_http import Behaviour, ProbeHTTPServer, outside_engine
from tests.probe.proxies import SlowProxy
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
DELAY_S = 0.6
#: the probe's timeout: an answered probe's figures are below it
PROBE_TIMEOUT_S = 1.8
#: the prefill the fake engine reports (it spends none): outside = client TTFT - this, so never below -this
FAKE_PREFILL_S = 0.002


def _outside(base: str, probe_url: str | None, n: int = 4) -> list[tuple[float, float]]:
    """(time outside the engine, client-seen TTFT) of ``n`` probes."""
    return outside_engine(base, probe_url, n, PROBE_TIMEOUT_S)


def test_outside_engine_time_equals_the_delay_a_slow_front_end_adds() -> None:
    with ProbeHTTPServer(Behaviour(prompt_ms=FAKE_PREFILL_S * 1000)) as server:
        direct = _outside(server.url, None)
        port = int(server.url.rsplit(":", 1)[1])
        with SlowProxy(port, DELAY_S) as proxy:
            through = _outside(server.url, proxy.url)
    assert all(-FAKE_PREFILL_S <= x <= ttft for x, ttft in direct), direct
    assert all(DELAY_S - FAKE_PREFILL_S <= x < PROBE_TIMEOUT_S for x, _ in through), through


def _metric(text: str, name: str, **labels: str) -> list[float]:
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            out.append(float(line.rsplit(" ", 1)[1]))
    return out


def test_serve_through_a_slow_front_end_names_front_end_overhead(tmp_path: Path) -> None:
    port = free_port()
    with (
        ProbeHTTPServer(Behaviour(prompt_ms=FAKE_PREFILL_S * 1000)) as server,
        SlowProxy(int(server.url.rsplit(":", 1)[1]), DELAY_S) as proxy,
    ):
        cfg = tmp_path / "exporter.yaml"
        cfg.write_text(
            "gpu_source: none\n"
            f"listen_address: 127.0.0.1:{port}\n"
            "engines:\n"
            f"  - url: {server.url}/metrics\n"
            "    name: fake\n"
            "    interval: 1\n"
            f"    probe: {{interval: 2s, timeout: {PROBE_TIMEOUT_S}s, url: '{proxy.url}'}}\n"
            "diagnosis:\n"
            "  slo_ttft_p95_seconds: 0.4\n"
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        log = tmp_path / "serve.log"
        with open(log, "w") as fh:
            proc = subprocess.Popen(
                [sys.executable, "-m", "exporter", "serve", "--config", str(cfg)],
                cwd=ROOT,
                env=env,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            outside: list[float] = []
            verdict: dict[str, Any] = {}
            while time.monotonic() < deadline:
                assert proc.poll() is None, log.read_text()[-3000:]
                try:
                    text = requests.get(base + "/metrics", timeout=5).text
                    verdict = requests.get(base + "/diagnosis", timeout=5).json()
                except requests.RequestException:
                    time.sleep(0.5)
                    continue
                outside = _metric(text, "llm_probe_outside_engine_seconds", server="fake")
                primary = (verdict.get("primary") or {}).get("cause")
                if outside and primary == "front_end_overhead":
                    break
                time.sleep(0.5)
            assert outside and DELAY_S - FAKE_PREFILL_S <= outside[0] < PROBE_TIMEOUT_S, (outside, log.read_text()[-3000:])
            assert verdict["state"] == "degraded" and verdict["primary"]["cause"] == "front_end_overhead", verdict
            assert "outside the engine" in verdict["primary"]["chain"]
            assert _metric(text, "llm_exporter_source_up", source="probe:fake") == [1.0]
            assert _metric(text, "llm_probe_requests_total", result="ok")[0] >= 1
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


@pytest.mark.parametrize("delay", [0.0])
def test_slow_proxy_passes_the_stream_through_unchanged(delay: float) -> None:
    with ProbeHTTPServer(Behaviour(tokens=6)) as server, SlowProxy(int(server.url.rsplit(":", 1)[1]), delay) as proxy:
        cfg = EngineConfig(url=server.url + "/metrics", name="fake", probe=ProbeConfig(interval=2.0, timeout=1.8, url=proxy.url))
        src = ProbeSource(cfg, SnapshotStore())
        src.sample()
    assert src.last is not None
    assert src.last.result == "ok" and src.last.chunks == 6
