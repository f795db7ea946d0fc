"""Simulator + exporter as real subprocesses on free 127.0.0.1 ports, for the ramp's end-to-end tests.

Why subprocesses: the ramp is a client of two HTTP services, exactly as a user
runs it; the simulator in its own process also gives the process sampler a
real scheduler thread to watch (host_bound). The processes themselves are
tests/support/stack.py's; this adds the exporter's diagnosis window and the CLI runner.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.stack import ROOT, ProcessStack


class SimStack(ProcessStack):
    """``with SimStack("kv_pressure", ["--num-gpu-blocks", "512"]) as s: s.sim_url, s.exp_url``."""

    def __init__(
        self,
        scenario: str,
        knobs: list[str] | None = None,
        time_scale: float = 1.0,
        interval: float = 0.5,
        window_s: float = 4.0,
        recent_s: float | None = None,
    ) -> None:
        #: the diagnosis window: no longer than a step, so a step's verdict is about that step
        self.window_s = window_s
        #: the diagnosis's "sustained" look-back (``recent_seconds``, default 5 s); None: the default
        self.recent_s = recent_s
        self.knobs = knobs or []
        self._dir = tempfile.TemporaryDirectory(prefix="ramp-stack-")
        config = Path(self._dir.name) / "exporter.yaml"
        recent = "" if recent_s is None else f"  recent_seconds: {recent_s}\n"
        config.write_text(f"diagnosis:\n  window_seconds: {window_s}\n{recent}")
        super().__init__(
            scenario, self.knobs, ["--config", str(config), "--log-level", "warning"], time_scale=time_scale, interval=interval
        )

    def close(self) -> None:
        super().close()
        self._dir.cleanup()


def run_ramp_cli(args: list[str], timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """``python -m exporter ramp ARGS`` as a user runs it; stdout+stderr captured."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "160"}
    return subprocess.run(
        [sys.executable, "-m", "exporter", "ramp", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
