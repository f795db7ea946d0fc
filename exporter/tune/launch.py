"""Start, health-wait and stop the engine process the tuner started, and its own exporter.

Why its own session (process group): engines fork workers (vLLM's engine core,
TGI's shards); stopping the group stops them all, and only a group this module
created is ever signalled — the tuner never touches a process it did not start.
Engine output goes to ``DIR/engine-<trial>.log``. ``detach()`` leaves the engine
running after the tuner exits (the baseline, or the best with ``--keep-best``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from exporter.tune import redact
from exporter.tune.argv import EngineCommand

#: log lines that mean the engine ran out of memory (CUDA, the CPU allocator, llama.cpp, the kernel's OOM killer)
OOM_MARKERS = ("out of memory", "outofmemoryerror", "cuda error: out of memory", "failed to allocate")
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log_says_oom(path: Path) -> bool:
    try:
        text = path.read_text(errors="replace")[-20000:].lower()
    except OSError:
        return False
    return any(m in text for m in OOM_MARKERS)


def _healthy(url: str, client: httpx.Client) -> bool:
    try:
        if client.get(url + "/health").status_code != 200:
            return False
        return client.get(url + "/v1/models").status_code == 200
    except httpx.HTTPError:
        return False


def wait_healthy(url: str, timeout_s: float, alive: object = None) -> str | None:
    """None once /health and /v1/models answer 200; else why not (``alive()`` False: the process exited)."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0) as client:
        while time.monotonic() < deadline:
            if callable(alive) and not alive():
                return "exited before it became healthy"
            if _healthy(url, client):
                return None
            time.sleep(0.3)
    return f"not healthy on {url}/health within {timeout_s:g} s"


class EngineProcess:
    """One start of an engine command; ``stop()`` signals only its own process group."""

    def __init__(self, cmd: EngineCommand, url: str, log_path: Path) -> None:
        self.cmd, self.url, self.log_path = cmd, url, log_path
        self.proc: subprocess.Popen[bytes] | None = None
        #: the command's credentials, masked in the engine's log once it is up, stopped or left running
        self._secrets = redact.values(cmd.full())

    def _mask_log(self) -> None:
        redact.scrub_file(self.log_path, self._secrets)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout_s: float) -> str | None:
        """Start and wait for health; None when healthy, else the reason (the process is stopped then)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.cmd.env}
        # the tuner's user alone reads it until its credentials are masked (_mask_log)
        with open(self.log_path, "wb", opener=lambda path, flags: os.open(path, flags, 0o600)) as log:
            try:
                self.proc = subprocess.Popen(
                    self.cmd.argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
                )
            except OSError as err:
                return f"failed to start: {err.strerror or err}"
        why = wait_healthy(self.url, timeout_s, self.alive)
        self._mask_log()  # an engine logs its arguments as it starts
        if why is not None:
            why = self.exit_reason() or f"failed to start: {why}"
            self.stop()
        return why

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_reason(self) -> str | None:
        """Why the engine is gone (None while it runs)."""
        if self.proc is None or self.proc.poll() is None:
            return None
        oom = " after running out of memory" if log_says_oom(self.log_path) else ""
        return f"the engine exited (status {self.proc.returncode}){oom}; see {self.log_path.name}"

    def stop(self, grace_s: float = 15.0) -> None:
        try:
            self._signal_group(grace_s)
        finally:
            self._mask_log()

    def _signal_group(self, grace_s: float) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(proc.pid, sig)  # the group start_new_session created: ours alone
            except ProcessLookupError:
                return
            try:
                proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def detach(self) -> int:
        """Leave it running when the tuner exits; its PID."""
        pid = self.pid
        self.proc = None
        self._mask_log()
        return pid


class Watcher:
    """The tuner's own ``exporter serve``: engine scrape, process sampler on the engine PID, GPU source."""

    def __init__(
        self,
        engine_url: str,
        pid: int | None,
        gpu_source: str,
        log_path: Path,
        window_s: float,
        interval: float,
        slo: tuple[float | None, float | None] = (None, None),
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = log_path.with_suffix(".yaml")
        # the diagnosis judges its symptoms at the user's SLO: where --slo-ttft is missed, a primary is named
        lines = [f"  window_seconds: {window_s:g}"]
        for key, value in zip(("slo_ttft_p95_seconds", "slo_itl_p95_seconds"), slo, strict=True):
            if value is not None:
                lines.append(f"  {key}: {value:g}")
        config.write_text("diagnosis:\n" + "\n".join(lines) + "\n")
        iv = f"{interval:g}"
        argv = [sys.executable, "-m", "exporter", "serve", "--listen-address", f"127.0.0.1:{self.port}"]
        argv += ["--engine", engine_url + "/metrics", "--engine-interval", iv, "--gpu-source", gpu_source]
        argv += ["--gpu-interval", iv, "--process-interval", iv, "--config", str(config), "--log-level", "warning"]
        if pid is not None:
            argv += ["--engine-pid", str(pid)]
        self.argv, self.log_path = argv, log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 60.0) -> str | None:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    return f"the tuner's exporter exited (status {self.proc.returncode}); see {self.log_path.name}"
                try:
                    if client.get(self.url + "/readyz").status_code == 200:
                        return None
                except httpx.HTTPError:
                    pass
                time.sleep(0.3)
        self.stop()
        return f"the tuner's exporter did not become ready within {timeout_s:g} s"

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


__all__ = ["EngineProcess", "Watcher", "free_port", "log_says_oom", "wait_healthy"]
