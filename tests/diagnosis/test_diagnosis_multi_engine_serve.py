"""Two engines on one node, a real ``serve`` (issue 20's proof): each gets its own right primary.

Two fake vLLM engines on 127.0.0.1 (tests/support/fake_engine.py, their counters moving
every 0.25 s) and two GPUs replayed from the recorded H200 traces (exporter/data/traces):

- engine A on GPU 0, the decode GEMV (HBM at ~72 %), its inter-token p95 0.4 s over the
  0.2 s SLO: A is degraded, primary ``hardware/memory_bandwidth_bound`` on GPU 0;
- engine B on GPU 1, the power-capped prefill GEMM (SM clock ~77 % of its maximum), its
  users fine: B is healthy, the throttling a warning of B's.

Judged as one service, B's throttled GPU became A's primary (issue 20; reproduced on
synthetic points in tests/diagnosis/test_diagnosis_scope.py). Engine A's GPU is given by
index, B's by UUID (``engines[].gpus``).
"""

from __future__ import annotations

import csv
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from exporter.gpu.replay import bundled_trace
from tests.support.fake_engine import FakeEngine
from tests.support.ports import free_port
from tests.support.processes import Child, exporter_argv

pytestmark = [pytest.mark.timeout(300)]

UUID_B = "GPU-00000000-0000-0000-0000-00000000000b"
BOUNDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
#: requests each fake engine finishes per tick, and the tick
PER_TICK, TICK_S = 20, 0.25
#: readings (0.5 s diagnosis cycles apart) that must all hold once the verdicts are settled
READINGS = 8


def phase_trace(tmp_path: Path, phase: str, uuid: str | None = None, trace: str = "kernels") -> Path:
    """The settled rows of one recorded phase as a replay file (optionally with its own UUID)."""
    with bundled_trace(trace).open(newline="") as f:
        rows = list(csv.DictReader(f))
    picked = [r for r in rows if r["phase"] == phase][2:]
    assert picked, phase
    if uuid is not None:
        picked = [{**r, "uuid": uuid} for r in picked]
    out = tmp_path / f"{phase}.csv"
    with out.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(picked)
    return out


def vllm_text(n: int, ttft: float, itl: float, running: int = 4) -> str:
    """vLLM's exposition after ``n`` requests, each with these latencies; ``running`` running, none waiting."""
    lab = 'model_name="m",engine="0"'
    lines = [
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{lab}}} {running}",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{{{lab}}} 0",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f"vllm:kv_cache_usage_perc{{{lab}}} 0.3",
        "# TYPE vllm:request_success_total counter",
        f'vllm:request_success_total{{{lab},finished_reason="stop"}} {n}',
    ]
    for name, value in (("vllm:time_to_first_token_seconds", ttft), ("vllm:inter_token_latency_seconds", itl)):
        lines.append(f"# TYPE {name} histogram")
        for le in BOUNDS:
            lines.append(f'{name}_bucket{{{lab},le="{le}"}} {n if value <= le else 0}')
        lines += [f'{name}_bucket{{{lab},le="+Inf"}} {n}', f"{name}_sum{{{lab}}} {n * value}", f"{name}_count{{{lab}}} {n}"]
    return "\n".join(lines) + "\n"


class Ticking:
    """Moves both fake engines' counters every TICK_S until stopped (bounded by the stop event)."""

    def __init__(self, engines: dict[FakeEngine, tuple[float, float, int]]) -> None:
        self.engines = engines
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += PER_TICK
            for eng, (ttft, itl, running) in self.engines.items():
                eng.set(body=vllm_text(n, ttft, itl, running))
            self.stop.wait(TICK_S)

    def __enter__(self) -> Ticking:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


def serve(tmp_path: Path, config: dict[str, Any], gpus: list[Path], name: str) -> tuple[Child, str]:
    """``serve`` with ``config`` on the replayed ``gpus``, every interval at 0.5 s (not started), and its base URL."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    argv = exporter_argv(
        "serve", "--config", str(path), "--gpu-source", "replay:" + ",".join(map(str, gpus)),
        "--listen-address", f"127.0.0.1:{port}", "--gpu-interval", "0.5", "--diagnosis-interval", "0.5",
        "--process-interval", "0.5",
    )  # fmt: skip
    return Child(argv, name), f"http://127.0.0.1:{port}"


def engine_verdict(base: str, name: str) -> dict[str, Any]:
    verdict: dict[str, Any] = requests.get(base + "/diagnosis", params={"engine": name}, timeout=3).json()
    return verdict


@pytest.fixture
def two_engine_serve(tmp_path: Path) -> Iterator[tuple[str, Child]]:
    gpu0 = phase_trace(tmp_path, "decode_gemv_bf16")
    gpu1 = phase_trace(tmp_path, "prefill_gemm_bf16", uuid=UUID_B)
    with FakeEngine() as a, FakeEngine() as b, Ticking({a: (0.3, 0.4, 4), b: (0.2, 0.03, 4)}):
        config = {
            "engines": [
                {"url": a.url, "name": "A", "gpus": [0], "interval": 0.5},
                {"url": b.url, "name": "B", "gpus": [UUID_B], "interval": 0.5},
            ]
        }
        child, base = serve(tmp_path, config, [gpu0, gpu1], "serve-two-engines")
        with child.start() as proc:

            def a_named() -> bool:
                p = engine_verdict(base, "A")["primary"]
                return bool(p) and p["cause"] == "memory_bandwidth_bound"

            proc.wait_ready(a_named, 90, "engine A's primary")
            yield base, proc


def series_at_one(text: str, name: str) -> set[str]:
    """The label sets of ``name``'s series whose value is 1 (label names sorted, as /metrics writes them)."""
    return {
        line.split(" ")[0][len(name) :]
        for line in text.splitlines()
        if line.startswith(name + "{") and float(line.rsplit(" ", 1)[1]) == 1
    }


def test_each_engine_gets_its_own_primary(two_engine_serve: tuple[str, Child]) -> None:
    base, proc = two_engine_serve
    for _ in range(READINGS):  # bounded: one reading per diagnosis cycle
        a = requests.get(base + "/diagnosis", params={"engine": "A"}, timeout=3).json()
        b = requests.get(base + "/diagnosis", params={"engine": "B"}, timeout=3).json()
        node = requests.get(base + "/diagnosis", timeout=3).json()
        metrics = requests.get(base + "/metrics", timeout=3).text
        assert a["state"] == "degraded" and a["primary"]["cause"] == "memory_bandwidth_bound", a
        assert a["primary"]["summary"].endswith("on GPU 0")
        assert "power_or_thermal_throttling" not in a["holding"]
        assert all('gpu="1"' not in k for c in a["bottlenecks"] for k in c["evidence"])
        assert "engines" not in a and a["age_seconds"] is not None and a["age_seconds"] < 1.5
        assert b["state"] == "healthy" and b["primary"] is None, b
        assert {(c["cause"], c["role"]) for c in b["bottlenecks"]} >= {("power_or_thermal_throttling", "warning")}
        assert all("GPU 0" not in c["summary"] for c in b["bottlenecks"])
        # the node: the worst engine's verdict, with every engine's under `engines`
        assert (node["state"], node["engine"], node["primary"]["cause"]) == ("degraded", "A", "memory_bandwidth_bound")
        assert sorted(node["engines"]) == ["A", "B"] and node["engines"]["B"]["state"] == "healthy"
        assert series_at_one(metrics, "llm_bottleneck_primary") == {
            '{cause="memory_bandwidth_bound",engine="A",layer="hardware"}'
        }
        assert series_at_one(metrics, "llm_service_state") == {'{engine="A",state="degraded"}', '{engine="B",state="healthy"}'}
        assert series_at_one(metrics, "llm_symptom_active") == {'{engine="A",symptom="itl_high"}'}
        seen = node["timestamp"]

        def a_cycle_later(seen: float = seen) -> bool:
            return bool(requests.get(base + "/diagnosis", timeout=3).json()["timestamp"] > seen)

        proc.wait_ready(a_cycle_later, 10, "a cycle")
    unknown = requests.get(base + "/diagnosis", params={"engine": "C"}, timeout=3)
    assert unknown.status_code == 404
    assert unknown.json() == {"error": "unknown engine 'C'", "engines": ["A", "B"]}


def test_diagnose_names_every_engine_and_shows_one_on_request(
    two_engine_serve: tuple[str, Child], capsys: pytest.CaptureFixture[str]
) -> None:
    """`diagnose` on a two-engine node: a row per engine above the worst one's verdict;
    `--engine B` prints B's; an engine the exporter does not judge is one line, exit 1."""
    from exporter.cli import main

    base, _ = two_engine_serve
    assert main(["diagnose", "--exporter", base]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip().startswith(("A ", "B "))}
    assert rows["A"][:4] == ["degraded", "hardware", "/", "memory_bandwidth_bound"], out
    assert rows["B"] == ["healthy", "-"], out
    assert "primary: hardware / memory_bandwidth_bound" in out
    assert main(["diagnose", "--exporter", base, "--engine", "B"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Service HEALTHY") and "primary:" not in out and "engine  state" not in out
    assert main(["diagnose", "--exporter", base, "--engine", "C", "--format", "json"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "llm-layer-exporter diagnose: the exporter judges no engine named 'C', it judges: A, B"


def test_the_page_shows_every_engine_and_opens_one(two_engine_serve: tuple[str, Child], tmp_path: Path) -> None:
    """Headless Chromium on / and /?engine=B: the engine bar names both engines with their state;
    the node page shows A's verdict, B's page shows B's, marked as the one shown."""
    from tests.support.browser import run_chromium

    base, _ = two_engine_serve
    for query, state, current in (("", "degraded", None), ("?engine=B", "healthy", "B")):
        result = run_chromium(["--virtual-time-budget=5000", "--dump-dom", base + "/" + query], tmp_path / f"profile{current}")
        dom = result.stdout
        assert result.returncode == 0, result.stderr[-2000:]
        assert '<a href="?engine=A" data-engine="A" data-state="degraded"' in dom, dom[-3000:]
        assert 'data-engine="B" data-state="healthy"' in dom and ">B: healthy</a>" in dom
        assert f'<section id="verdict" data-state="{state}"' in dom
        if current is not None:
            assert f'data-engine="{current}" data-state="healthy" aria-current="page"' in dom


@pytest.fixture
def busy_thread() -> Iterator[int]:
    """A real process with one thread at a full core, its CUDA_VISIBLE_DEVICES=0: engine A's
    serving process (bounded: it ends by itself after 120 s, and is killed at teardown)."""
    code = "import time\nend = time.monotonic() + 120\nwhile time.monotonic() < end:\n    pass\n"
    proc = subprocess.Popen([sys.executable, "-c", code], env={"CUDA_VISIBLE_DEVICES": "0", "PATH": "/usr/bin:/bin"})
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_host_bound_engine_beside_a_busy_one_keeps_its_host_ceiling(tmp_path: Path, busy_thread: int) -> None:
    """Engine A: batch-1 decode on GPU 0 (the recorded HF generate, SMs ~2 % busy), its serving
    thread at a full core, TTFT 3 s; its GPU is found from its process (CUDA_VISIBLE_DEVICES).
    Engine B: the power-capped GEMM on GPU 1, users fine. Judged as one node, B's busy GPU hid
    A's idle SMs and the two pods read as one imbalanced TP group."""
    gpu0 = phase_trace(tmp_path, "decode_b1_hf_generate", trace="serving")
    gpu1 = phase_trace(tmp_path, "prefill_gemm_bf16", uuid=UUID_B)
    with FakeEngine() as a, FakeEngine() as b, Ticking({a: (3.0, 0.03, 1), b: (0.2, 0.03, 4)}):
        config = {
            "engines": [
                {"url": a.url, "name": "A", "pid": busy_thread, "interval": 0.5},
                {"url": b.url, "name": "B", "gpus": [1], "interval": 0.5},
            ]
        }
        child, base = serve(tmp_path, config, [gpu0, gpu1], "serve-host-bound")
        with child.start() as proc:

            def a_named() -> bool:
                p = engine_verdict(base, "A")["primary"]
                return bool(p) and p["cause"] == "serial_host_ceiling"

            proc.wait_ready(a_named, 90, "engine A's serial host ceiling")
            for _ in range(READINGS):
                va, vb = engine_verdict(base, "A"), engine_verdict(base, "B")
                assert va["primary"]["cause"] == "serial_host_ceiling", va
                assert not any("every GPU of the node" in n for n in va["notices"]), va["notices"]  # found: GPU 0
                for v in (va, vb):
                    assert "gpu_imbalance" not in v["holding"], v
                assert vb["state"] == "healthy", vb
                seen = va["timestamp"]

                def a_cycle_later(seen: float = seen) -> bool:
                    return bool(engine_verdict(base, "A")["timestamp"] > seen)

                proc.wait_ready(a_cycle_later, 10, "a cycle")
