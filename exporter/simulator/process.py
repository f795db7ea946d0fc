"""Run ``python -m exporter.simulator`` as a child process and find its port.

Why a child process: the demo hands the simulator's PID to the exporter's
process sampler, and tests that measure per-thread CPU need the simulator's
scheduler thread in a process of its own (not sharing a GIL with the load
generator). The child binds port 0 and prints one ready line naming the port.
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from exporter.commands.simulate import READY_PREFIX

_URL = re.compile(r"(https?://\S+)")
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """``preexec_fn``: on Linux, the child gets SIGTERM when its parent dies (even by SIGKILL)."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            import signal

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM))
        except OSError:
            pass


class SimulatorProcess:
    """A simulator child process; ``start()`` waits for it to listen, ``stop()`` ends it."""

    def __init__(
        self,
        scenario: str = "healthy",
        dialect: str = "vllm",
        settings: dict[str, Any] | None = None,
        host: str = "127.0.0.1",
        extra_args: list[str] | None = None,
    ) -> None:
        self.args = [
            sys.executable,
            "-m",
            "exporter.simulator",
            "--scenario",
            scenario,
            "--dialect",
            dialect,
            "--listen-address",
            f"{host}:0",
        ]
        for name, value in (settings or {}).items():
            self.args += ["--" + name.replace("_", "-"), str(value).lower() if isinstance(value, bool) else str(value)]
        self.args += extra_args or []
        self.proc: subprocess.Popen[str] | None = None
        self.base_url = ""
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.output: list[str] = []

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 30.0) -> SimulatorProcess:
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(
            self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, preexec_fn=die_with_parent
        )
        threading.Thread(target=self._pump, name="sim-output", daemon=True).start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._lines.get(timeout=0.2)
            except queue.Empty:
                continue
            if line is None:
                break
            if line.startswith(READY_PREFIX):
                match = _URL.search(line)
                if match:
                    self.base_url = match.group(1)
                    return self
        self.stop()
        tail = "".join(self.output[-20:])
        raise RuntimeError(f"simulator did not start within {timeout:g} s: {tail}")

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            if len(self.output) < 1000:
                self.output.append(line)
            self._lines.put(line)
        self._lines.put(None)

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode

    def __enter__(self) -> SimulatorProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
