"""A whole stack on 127.0.0.1 for the scenario tests and the time-to-verdict benchmark.

Three real parts, as a user would run them: the simulator (``simulate``, its own
process, so the process sampler watches a real scheduler thread), the exporter
(``serve`` reading the simulator's /metrics, its /sim/gpu and its PID), and the
load generator driving each scenario's own load profile from a thread here.
Every part is bounded: processes are terminated on exit, load runs stop on an
event, every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import requests

from exporter.loadgen import run_load
from exporter.simulator import scenarios
from tests.helpers import free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger(__name__)


class LoadThread:
    """Runs scenario loads on a private event loop.

    Switching starts the new load *before* retiring the old one, and retired
    loads are only stopped by ``retire()``: stopping a load cancels its requests
    in flight, which the server counts as aborts, and those would show up as a
    false ``retries_and_timeouts`` right when a verdict is being timed.
    """

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="loadgen", daemon=True)
        self.thread.start()
        self._runs: list[tuple[asyncio.Event, Any]] = []

    def start(self, scenario: str, base_url: str, time_scale: float, seed: int = 0) -> None:
        """Add the scenario's load; earlier loads keep running until ``retire()``."""
        spec = scenarios.get(scenario).load_spec(base_url, time_scale=time_scale, duration_s=None, seed=seed)
        stop = asyncio.Event()  # created here, only touched on the loop thread

        async def go() -> None:
            await run_load(spec, stop=stop)

        self._runs.append((stop, asyncio.run_coroutine_threadsafe(go(), self.loop)))

    def retire(self, keep_last: bool = True) -> None:
        """Stop every load but the newest (or all), waiting for each to wind down."""
        victims = self._runs[:-1] if keep_last else self._runs
        self._runs = self._runs[-1:] if keep_last else []
        for stop, future in victims:
            self.loop.call_soon_threadsafe(stop.set)
        for _, future in victims:
            try:
                future.result(timeout=60)
            except Exception as err:  # noqa: BLE001 - a load run ending in error must not stop the stack
                log.warning("load run ended with %r", err)

    def close(self) -> None:
        self.retire(keep_last=False)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class Stack:
    """simulator + exporter + load; ``with Stack(...) as s: s.switch("kv_pressure")``."""

    def __init__(self, gpus: int = 4, time_scale: float = 4.0, interval: float = 1.0, dialect: str = "vllm",
                 config: Path | None = None) -> None:
        self.gpus = gpus
        self.config = config
        self.time_scale = time_scale
        self.interval = interval
        self.dialect = dialect
        self.sim_port = free_port()
        self.exp_port = free_port()
        self.sim_url = f"http://127.0.0.1:{self.sim_port}"
        self.exp_url = f"http://127.0.0.1:{self.exp_port}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.load = LoadThread()
        self.scenario = "healthy"

    # ------------------------------------------------------------------ lifecycle

    def _spawn(self, args: list[str]) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen([sys.executable, "-m", "exporter", *args], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.procs.append(proc)
        return proc

    def start(self) -> Stack:
        sim = self._spawn(["simulate", "--scenario", "healthy", "--dialect", self.dialect,
                           "--listen-address", f"127.0.0.1:{self.sim_port}", "--gpus", str(self.gpus),
                           "--time-scale", str(self.time_scale)])
        if not wait_for(lambda: requests.get(self.sim_url + "/health", timeout=2).ok, timeout=60):
            raise RuntimeError("simulator did not start: " + self._stderr(sim))
        iv = str(self.interval)
        exp = self._spawn(["serve", "--listen-address", f"127.0.0.1:{self.exp_port}",
                           "--gpu-source", f"sim:{self.sim_url}", "--gpu-interval", iv,
                           "--engine", self.sim_url + "/metrics", "--engine-interval", iv,
                           "--engine-pid", str(sim.pid), "--process-interval", iv]
                          + (["--config", str(self.config)] if self.config else []))
        if not wait_for(lambda: requests.get(self.exp_url + "/readyz", timeout=2).ok, timeout=60):
            raise RuntimeError("exporter did not start: " + self._stderr(exp))
        self.load.start("healthy", self.sim_url, self.time_scale)
        return self

    def close(self) -> None:
        self.load.close()
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

    def __enter__(self) -> Stack:
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

    # ------------------------------------------------------------------ driving

    def switch(self, scenario: str, retire: bool = False) -> None:
        """Reconfigure the running simulator and add the scenario's own load.

        The previous load keeps running (see LoadThread) unless ``retire``.
        """
        r = requests.post(self.sim_url + "/sim/scenario", json={"scenario": scenario}, timeout=10)
        r.raise_for_status()
        self.load.start(scenario, self.sim_url, self.time_scale)
        if retire:
            self.load.retire()
        self.scenario = scenario

    def back_to_healthy(self, quiet_cycles: int = 3, timeout: float = 90.0, settle_s: float = 0.0) -> bool:
        """Switch to healthy, retire the other loads, wait until ``quiet_cycles`` verdicts in a row hold
        no cause and, with ``settle_s``, until healthy has run that long (so the diagnosis window holds
        healthy data only, and the next switch starts from the same state whatever ran before)."""
        self.switch("healthy", retire=True)
        settled = time.monotonic() + settle_s
        quiet = 0
        last = None
        deadline = time.monotonic() + timeout + settle_s
        while time.monotonic() < deadline:
            v = self.verdict()
            if v["timestamp"] != last:
                last = v["timestamp"]
                quiet = quiet + 1 if not v["bottlenecks"] else 0
                if quiet >= quiet_cycles and time.monotonic() >= settled:
                    return True
            time.sleep(0.2)
        return False

    def verdict(self) -> dict[str, Any]:
        r = requests.get(self.exp_url + "/diagnosis", timeout=5)
        r.raise_for_status()
        return r.json()

    def verdicts(self, seconds: float, poll: float = 0.2) -> list[dict[str, Any]]:
        """Every distinct verdict (one per diagnosis cycle) during ``seconds``."""
        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            v = self.verdict()
            if not out or v["timestamp"] != out[-1]["timestamp"]:
                out.append(v)
            time.sleep(poll)
        return out

    def next_verdicts(self, count: int, poll: float = 0.1) -> list[dict[str, Any]]:
        """The next ``count`` distinct verdicts (bounded by ``count`` intervals, three times over)."""
        out: list[dict[str, Any]] = []
        last = self.verdict()["timestamp"]
        deadline = time.monotonic() + count * self.interval * 3 + 10
        while len(out) < count and time.monotonic() < deadline:
            v = self.verdict()
            if v["timestamp"] != last:
                last = v["timestamp"]
                out.append(v)
            time.sleep(poll)
        return out

    def switch_and_count(self, scenario: str, layer: str, cause: str, max_cycles: int,
                         poll: float = 0.1, primary_only: bool = False) -> tuple[int | None, list[dict[str, Any]]]:
        """Switch, then count diagnosis cycles until ``layer/cause`` is reported.

        Cycle 1 is the first verdict computed from a snapshot taken after the
        switch (verdict timestamps and ``time.time()`` share the host clock).
        Returns (cycles or None if not within ``max_cycles``, the verdicts seen).
        """
        switched_at = time.time()
        self.switch(scenario)
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + max_cycles * self.interval * 3 + 10
        while len(seen) < max_cycles and time.monotonic() < deadline:
            v = self.verdict()
            if v["timestamp"] > switched_at and (not seen or v["timestamp"] != seen[-1]["timestamp"]):
                seen.append(v)
                p = v.get("primary")
                named = (p is not None and (p["layer"], p["cause"]) == (layer, cause)) if primary_only else (layer, cause) in causes(v)
                if named:
                    return len(seen), seen
            time.sleep(poll)
        return None, seen


def causes(verdict: dict[str, Any], min_score: float = 0.0) -> set[tuple[str, str]]:
    return {(b["layer"], b["cause"]) for b in verdict["bottlenecks"] if b["score"] >= min_score}
