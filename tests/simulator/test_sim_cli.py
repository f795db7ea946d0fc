"""``simulate`` and ``demo`` as a user runs them: real child processes, bounded, stopped cleanly."""

from __future__ import annotations

import argparse
import dataclasses
import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import psutil

from exporter.commands import simulate as sim_cli
from exporter.simulator.process import SimulatorProcess
from exporter.simulator.scenarios import NAMES
from exporter.simulator.settings import SimConfig
from tests.simulator.sim_helpers import ROOT
from tests.support.ports import free_port

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def test_every_knob_is_a_flag_and_overrides_the_scenario() -> None:
    parser = argparse.ArgumentParser()
    sim_cli.add_arguments(parser)
    flags = {a for action in parser._actions for a in action.option_strings}
    for f in dataclasses.fields(SimConfig):
        assert "--" + f.name.replace("_", "-") in flags
    args = parser.parse_args(["--scenario", "kv_pressure", "--num-gpu-blocks", "100", "--kv-offload", "true"])
    assert sim_cli.overrides_from_args(args) == {"num_gpu_blocks": 100, "kv_offload": True}
    assert set(parser.parse_args([]).__dict__) >= {"scenario", "dialect", "listen_address"}


def test_list_scenarios_names_every_contract_scenario() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "exporter.simulator", "--list-scenarios"], env=ENV, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0
    for name in NAMES:
        assert name in out.stdout
    # the ten bottlenecks, two healthy loads, three launch-setting ones (issue 23), the shared-prefix load (issue 36)
    assert len(NAMES) == 16


def test_bad_values_exit_2_with_one_line() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "exporter.simulator", "--max-num-seqs", "0"], env=ENV, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and "max_num_seqs" in out.stderr
    out = subprocess.run(
        [sys.executable, "-m", "exporter.simulator", "--listen-address", "nowhere"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "listen-address" in out.stderr


def test_simulate_serves_and_stops_on_sigterm() -> None:
    sim = SimulatorProcess("tp_imbalance", "sglang").start()
    try:
        assert httpx.get(sim.base_url + "/health", timeout=10).status_code == 200
        assert "sglang:num_running_reqs" in httpx.get(sim.base_url + "/metrics", timeout=10).text
        assert len(httpx.get(sim.base_url + "/sim/gpu", timeout=10).json()["gpus"]) == 4  # the scenario's group
        state = httpx.get(sim.base_url + "/sim/state", timeout=10).json()
        assert state["pid"] == sim.pid and state["dialect"] == "sglang"
    finally:
        code = sim.stop()
    assert code == 0


def test_demo_runs_bounded_without_a_gpu_and_leaves_no_children() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "exporter",
            "demo",
            "--scenario",
            "healthy",
            "--no-tui",
            "--duration",
            "6",
            "--time-scale",
            "2",
            "--listen-address",
            f"127.0.0.1:{port}",
        ],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    children: set[int] = set()
    try:
        ps = psutil.Process(proc.pid)
        lines = []
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            children |= {c.pid for c in ps.children(recursive=True)} if proc.poll() is None else set()
        code = proc.wait(90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = "".join(lines)
    assert code == 0, text
    assert "simulator (healthy, vllm)" in text
    ticks = [line for line in lines if line.startswith("t=")]
    assert len(ticks) >= 3, text
    assert all("verdict:" in line and "running=" in line for line in ticks)
    assert any("tok/s=" in line and "tok/s=-" not in line for line in ticks[1:]), text
    assert children, "the demo started no child processes"
    assert not [pid for pid in children if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


def test_demo_view_groups_exporter_metrics_by_layer() -> None:
    from rich.console import Console

    from exporter.demo.live import render
    from exporter.demo.readings import reading_of
    from exporter.demo.rows import layer_rows
    from exporter.demo.verdicts import verdict_text

    text = (
        "\n".join(
            [
                "# TYPE llm_gpu_sm_active_ratio gauge",
                'llm_gpu_sm_active_ratio{gpu="0",uuid="a"} 0.5',
                'llm_gpu_sm_active_ratio{gpu="1",uuid="b"} 0.25',
                "# TYPE llm_kv_cache_preemptions_total counter",
                'llm_kv_cache_preemptions_total{server="s",engine="vllm",model="m",rank=""} 10',
                "# TYPE llm_request_ttft_seconds histogram",
                'llm_request_ttft_seconds_bucket{server="s",engine="vllm",model="m",rank="",le="+Inf"} 4',
                'llm_request_ttft_seconds_sum{server="s",engine="vllm",model="m",rank=""} 2',
                'llm_request_ttft_seconds_count{server="s",engine="vllm",model="m",rank=""} 4',
                "# TYPE llm_gpu_throttle_reason_active gauge",
                'llm_gpu_throttle_reason_active{gpu="0",uuid="a",reason="sw_power_cap"} 1',
                'llm_gpu_throttle_reason_active{gpu="0",uuid="a",reason="gpu_idle"} 0',
            ]
        )
        + "\n"
    )
    before = reading_of(text.replace("} 10", "} 4"))
    now = reading_of(text)
    now.at = before.at + 2.0
    rows = layer_rows(now, before)
    assert ("gpu_sm_active_ratio", "50% 25%") in rows["hardware"]
    assert ("gpu_throttle_reason_active", "sw_power_cap") in rows["hardware"]
    assert ("kv_cache_preemptions_total", "3/s") in rows["memory"]
    # no request finished between the two reads: the mean since start, not "-"
    assert ("request_ttft_seconds", "500 ms avg since start") in rows["application"]
    assert ("request_ttft_seconds", "500 ms avg") in layer_rows(now, None)["application"]
    advice = "Lower max_num_seqs or give the KV cache more memory. " * 6  # long: must wrap, never be cut
    primary = {
        "layer": "memory",
        "cause": "kv_cache_pressure",
        "score": 0.8,
        "confidence": 0.91,
        "role": "primary",
        "chain": "TTFT p95 3.3 s > SLO 2 s ← KV cache 100 % full",
        "evidence": {},
        "advice": advice,
    }
    verdict = {
        "state": "degraded",
        "primary": primary,
        "layers": {"memory": {"score": 0.8, "status": "bottleneck", "headroom": 0.0}},
        "bottlenecks": [primary],
    }
    line = verdict_text(verdict)
    assert line == "degraded: memory/kv_cache_pressure (confidence 0.91): TTFT p95 3.3 s > SLO 2 s ← KV cache 100 % full"
    assert verdict_text(None).startswith("n/a")
    assert verdict_text({"state": "healthy", "primary": None, "bottlenecks": []}) == "healthy: no symptom"
    assert verdict_text({"state": "unknown", "primary": None, "notices": ["no GPU source"]}) == "unknown: no GPU source"
    console = Console(record=True, width=160)
    args = argparse.Namespace(scenario="kv_pressure", dialect="vllm")
    console.print(render(args, 12.0, now, before, verdict, "3 req/s", ""))
    out = console.export_text()
    assert "kv_pressure" in out and "memory/kv_cache_pressure (confidence 0.91)" in out and "bottleneck 0.80" in out
    assert "…" not in out and out.count("Lower max_num_seqs") == 6


def test_demo_sigterm_stops_every_child() -> None:
    import signal

    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "exporter",
            "demo",
            "--scenario",
            "healthy",
            "--no-tui",
            "--time-scale",
            "2",
            "--listen-address",
            f"127.0.0.1:{port}",
        ],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ticks = 0
        for line in proc.stdout:  # no --duration: it runs until told to stop
            ticks += line.startswith("t=")
            if ticks == 2:
                break
        children = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        assert len(children) >= 2  # simulator and exporter
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert ticks == 2
    assert not [pid for pid in children if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


def test_demo_stops_with_one_line_when_its_port_is_taken() -> None:
    """Checked before anything starts: one line, exit 4 (as `serve`), no child left behind."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "exporter",
                "demo",
                "--scenario",
                "healthy",
                "--no-tui",
                "--duration",
                "5",
                "--listen-address",
                f"127.0.0.1:{port}",
            ],
            env=ENV,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 4, out
    assert out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        f"llm-layer-exporter demo: error: cannot listen on 127.0.0.1:{port}: address already in use "
        "(pick another with --listen-address)"
    ], out.stderr


def test_demo_stops_with_one_line_when_its_exporter_cannot_start(tmp_path: Path) -> None:
    """The exporter exits at start-up (here: a config file it cannot read): one line, exit 1, no '-' view."""
    port = free_port()
    env = {**ENV, "LLM_EXPORTER_CONFIG": str(tmp_path / "missing.yaml")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "exporter",
            "demo",
            "--scenario",
            "healthy",
            "--no-tui",
            "--duration",
            "20",
            "--listen-address",
            f"127.0.0.1:{port}",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 1, (stdout, stderr)
    errors = stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith(
        "llm-layer-exporter demo: error: the exporter did not start (exit status 2): "
    ), stderr
    assert "missing.yaml" in errors[0]
    assert not [line for line in stdout.splitlines() if line.startswith("t=")], stdout  # no view of '-' fields
    sim_pid = int(stdout.split(", pid ")[1].split(",")[0])  # the simulator had started: it is stopped
    assert not psutil.pid_exists(sim_pid) or psutil.Process(sim_pid).status() == psutil.STATUS_ZOMBIE
