"""The exporter child: its command line, started and waited for until it answers, stopped; the exit statuses.

Why a real ``python -m exporter serve``: the demo shows what a user would run, reading the
simulator (exporter/simulator/process.py's child) the way it reads a real engine; the port
is checked before anything starts, so "cannot listen" is the same exit status as ``serve``'s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from exporter.commands.serve import CannotListen, bind_listen_socket
from exporter.simulator.process import die_with_parent
from exporter.values import split_listen_address

DEFAULT_LISTEN = "127.0.0.1:9750"
#: demo exit statuses (2 is the CLI's usage error, 4 the same as ``serve``'s "cannot listen")
EXIT_CHILD_FAILED = 1
EXIT_CANNOT_LISTEN = 4
#: the repository root, put on the child's PYTHONPATH so that it runs this checkout's exporter
ROOT = Path(__file__).resolve().parents[2]


class ChildFailed(Exception):
    """A child process the demo needs stopped working; the message is the one line to print."""


@dataclass
class ExporterFailure:
    """Why the exporter did not start: one line to print, and the demo's exit status."""

    message: str
    status: int = EXIT_CHILD_FAILED


def check_listen(listen: str) -> None:
    """Fail before anything starts when the exporter could not listen there."""
    host, port = split_listen_address(listen)
    try:
        bind_listen_socket(host, port, listen).close()
    except CannotListen as err:
        raise ChildFailed(f"{err} (pick another with --listen-address)") from None


def exporter_command(listen: str, sim_url: str, sim_pid: int, interval: float, config: Path | None = None) -> list[str]:
    """``serve`` reading the simulator's /metrics, its GPUs and its process, every ``interval``."""
    return [
        sys.executable,
        "-m",
        "exporter",
        "serve",
        "--listen-address",
        listen,
        "--engine",
        f"{sim_url}/metrics",
        "--gpu-source",
        f"sim:{sim_url}",
        "--engine-pid",
        str(sim_pid),
        "--engine-interval",
        f"{interval:g}",
        "--gpu-interval",
        f"{interval:g}",
        "--process-interval",
        f"{interval:g}",
        "--log-level",
        "warning",
    ] + (["--config", str(config)] if config else [])


def start_exporter(
    listen: str, sim_url: str, sim_pid: int, interval: float, log_path: Path, timeout: float, config: Path | None
) -> tuple[subprocess.Popen[bytes] | None, ExporterFailure | None]:
    """Start ``exporter serve`` and wait until its /metrics answers; (the process, None) or (None, why not)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            exporter_command(listen, sim_url, sim_pid, interval, config),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=die_with_parent,
        )
    url = f"http://{listen}/metrics"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
            last = lines[-1].removeprefix("llm-layer-exporter serve: ") if lines else "no output"
            status = EXIT_CANNOT_LISTEN if proc.returncode == EXIT_CANNOT_LISTEN else EXIT_CHILD_FAILED
            return None, ExporterFailure(f"the exporter did not start (exit status {proc.returncode}): {last}", status)
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return proc, None
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    stop_process(proc)
    return None, ExporterFailure(f"the exporter did not answer on {url} within {timeout:g} s")


def stop_process(proc: subprocess.Popen[Any] | None, timeout: float = 10.0) -> None:
    """TERM, then KILL after ``timeout``; nothing when it is gone already."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
