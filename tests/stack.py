"""Simulator + exporter as real subprocesses on free 127.0.0.1 ports: the base of the end-to-end stacks.

Why subprocesses: the parts talk HTTP exactly as a user runs them, and the
simulator in its own process gives the exporter's process sampler a real
scheduler thread to watch (``--engine-pid``). Every wait has a deadline (a part
that exits fails it at once, with its output), and ``close()`` stops every
process ``start()`` spawned, newest first. Each part's output goes to a
temporary file, never to a pipe nobody reads (a full pipe would block it).

``ProcessStack("kv_pressure", sim_args=[...], exp_args=[...])`` is used as is or
subclassed (tests/ramp/ramp_stack.py adds a diagnosis config).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Self

import requests

from exporter.demo import stop_process
from tests.helpers import free_port, wait_for

ROOT = Path(__file__).resolve().parents[1]
#: seconds a part has to answer its health endpoint
START_TIMEOUT_S = 60.0


class ProcessStack:
    """``with ProcessStack("healthy") as s: s.sim_url, s.exp_url`` - simulator, then an exporter watching it."""

    def __init__(self, scenario: str = "healthy", sim_args: Sequence[str] = (), exp_args: Sequence[str] = (),
                 time_scale: float = 1.0, interval: float = 1.0, dialect: str = "vllm") -> None:
        self.scenario = scenario
        #: extra ``simulate`` / ``serve`` flags
        self.sim_args = list(sim_args)
        self.exp_args = list(exp_args)
        self.time_scale = time_scale
        #: the exporter's GPU, engine and process sampling interval
        self.interval = interval
        self.dialect = dialect
        self.sim_port = free_port()
        self.exp_port = free_port()
        self.sim_url = f"http://127.0.0.1:{self.sim_port}"
        self.exp_url = f"http://127.0.0.1:{self.exp_port}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self._logs: dict[subprocess.Popen[bytes], IO[bytes]] = {}

    def spawn(self, args: Sequence[str]) -> subprocess.Popen[bytes]:
        """``python -m exporter ARGS`` from the repository root; stopped by ``close()``."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        log = tempfile.TemporaryFile()
        proc = subprocess.Popen([sys.executable, "-m", "exporter", *args], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=log)
        self.procs.append(proc)
        self._logs[proc] = log
        return proc

    def output(self, proc: subprocess.Popen[bytes]) -> str:
        """The last 2,000 characters ``proc`` wrote to stderr."""
        log = self._logs[proc]
        log.seek(0)
        return log.read().decode(errors="replace")[-2000:]

    def wait_ready(self, proc: subprocess.Popen[bytes], what: str, url: str) -> None:
        """Until ``url`` answers 2xx; RuntimeError with the part's output if it exits or the deadline passes."""
        answered = wait_for(lambda: proc.poll() is not None or requests.get(url, timeout=2).ok, timeout=START_TIMEOUT_S)
        if proc.poll() is not None or not answered:
            state = "not answering" if proc.poll() is None else f"exited with {proc.returncode}"
            raise RuntimeError(f"{what} did not start ({state}): {self.output(proc)}")

    def start_simulator(self) -> subprocess.Popen[bytes]:
        sim = self.spawn(["simulate", "--scenario", self.scenario, "--dialect", self.dialect,
                          "--listen-address", f"127.0.0.1:{self.sim_port}", "--time-scale", str(self.time_scale),
                          *self.sim_args])
        self.wait_ready(sim, "simulator", self.sim_url + "/health")
        return sim

    def start_exporter(self, sim: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
        """``serve`` reading the simulator's /sim/gpu, /metrics and PID."""
        iv = str(self.interval)
        exp = self.spawn(["serve", "--listen-address", f"127.0.0.1:{self.exp_port}",
                          "--gpu-source", f"sim:{self.sim_url}", "--gpu-interval", iv,
                          "--engine", self.sim_url + "/metrics", "--engine-interval", iv,
                          "--engine-pid", str(sim.pid), "--process-interval", iv, *self.exp_args])
        self.wait_ready(exp, "exporter", self.exp_url + "/readyz")
        return exp

    def start(self) -> Self:
        self.start_exporter(self.start_simulator())
        return self

    def close(self) -> None:
        for proc in reversed(self.procs):
            stop_process(proc, timeout=15.0)
            self._logs.pop(proc).close()
        self.procs.clear()

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()
