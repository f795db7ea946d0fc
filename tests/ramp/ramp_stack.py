"""Simulator + exporter as real subprocesses on free 127.0.0.1 ports, for the ramp's end-to-end tests.

Why subprocesses: the ramp is a client of two HTTP services, exactly as a user
runs it; the simulator in its own process also gives the process sampler a
real scheduler thread to watch (host_bound). Every wait has a deadline and
``close()`` terminates what ``start()`` spawned.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import requests

from tests.helpers import free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]


class SimStack:
    """``with SimStack("kv_pressure", ["--num-gpu-blocks", "512"]) as s: s.sim_url, s.exp_url``."""

    def __init__(self, scenario: str, knobs: list[str] | None = None, time_scale: float = 1.0,
                 interval: float = 0.5, window_s: float = 4.0) -> None:
        self.scenario = scenario
        #: the diagnosis window: no longer than a step, so a step's verdict is about that step
        self.window_s = window_s
        self._dir = tempfile.TemporaryDirectory(prefix="ramp-stack-")
        self.knobs = knobs or []
        self.time_scale = time_scale
        self.interval = interval
        self.sim_port = free_port()
        self.exp_port = free_port()
        self.sim_url = f"http://127.0.0.1:{self.sim_port}"
        self.exp_url = f"http://127.0.0.1:{self.exp_port}"
        self.procs: list[subprocess.Popen[bytes]] = []

    def _spawn(self, args: list[str]) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen([sys.executable, "-m", "exporter", *args], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.procs.append(proc)
        return proc

    def start(self) -> "SimStack":
        sim = self._spawn(["simulate", "--scenario", self.scenario, "--dialect", "vllm",
                           "--listen-address", f"127.0.0.1:{self.sim_port}",
                           "--time-scale", str(self.time_scale), *self.knobs])
        if not wait_for(lambda: requests.get(self.sim_url + "/health", timeout=2).ok, timeout=60):
            raise RuntimeError("simulator did not start: " + self._stderr(sim))
        iv = str(self.interval)
        config = Path(self._dir.name) / "exporter.yaml"
        config.write_text(f"diagnosis:\n  window_seconds: {self.window_s}\n")
        exp = self._spawn(["serve", "--config", str(config), "--listen-address", f"127.0.0.1:{self.exp_port}",
                           "--gpu-source", f"sim:{self.sim_url}", "--gpu-interval", iv,
                           "--engine", self.sim_url + "/metrics", "--engine-interval", iv,
                           "--engine-pid", str(sim.pid), "--process-interval", iv, "--log-level", "warning"])
        if not wait_for(lambda: requests.get(self.exp_url + "/readyz", timeout=2).ok, timeout=60):
            raise RuntimeError("exporter did not start: " + self._stderr(exp))
        return self

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
            if proc.stderr:
                proc.stderr.close()
        self.procs.clear()
        self._dir.cleanup()

    def __enter__(self) -> "SimStack":
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def _stderr(proc: subprocess.Popen[bytes]) -> str:
        if proc.poll() is None:
            return "(still running, not answering)"
        return (proc.stderr.read() if proc.stderr else b"").decode(errors="replace")[-2000:]


def run_ramp_cli(args: list[str], timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """``python -m exporter ramp ARGS`` as a user runs it; stdout+stderr captured."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "160"}
    return subprocess.run([sys.executable, "-m", "exporter", "ramp", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
