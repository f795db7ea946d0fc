"""The simulator + exporter stack: real subprocesses on free 127.0.0.1 ports, and its scenario driver.

Why subprocesses: the parts talk HTTP exactly as a user runs them, and the
simulator in its own process gives the exporter's process sampler a real
scheduler thread to watch (``--engine-pid``). Every part is a ``Child``
(tests/support/processes.py): its output in a log file, every start bounded (a
part that exits fails it at once, with its log), ``close()`` stops every part
``start()`` spawned, newest first.

``ProcessStack`` is the two processes (tests/ramp/ramp_stack.py adds a diagnosis
config); ``ScenarioStack`` adds each scenario's own load from the load generator
on a thread here and reads verdicts, for the scenario tests and
bench/time_to_verdict.py.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests

from exporter.loadgen import run_load
from exporter.simulator import scenarios
from exporter.simulator.pacing import model_clock
from tests.support.ports import free_port
from tests.support.processes import ROOT, Child, exporter_argv

if TYPE_CHECKING:  # typing.Self is Python 3.11+; the project supports 3.10
    from typing_extensions import Self

__all__ = ["ROOT", "START_TIMEOUT_S", "LoadThread", "ProcessStack", "ScenarioStack", "causes"]

log = logging.getLogger(__name__)
#: seconds a part has to answer its health endpoint
START_TIMEOUT_S = 60.0


class ProcessStack:
    """``with ProcessStack("healthy") as s: s.sim_url, s.exp_url`` - simulator, then an exporter watching it."""

    def __init__(
        self,
        scenario: str = "healthy",
        sim_args: Sequence[str] = (),
        exp_args: Sequence[str] = (),
        time_scale: float = 1.0,
        interval: float = 1.0,
        dialect: str = "vllm",
    ) -> None:
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
        self.procs: list[Child] = []

    def spawn(self, name: str, args: Sequence[str]) -> Child:
        """``python -m exporter ARGS`` from the repository root; stopped by ``close()``."""
        child = Child(exporter_argv(*args), name)
        self.procs.append(child)
        return child.start()

    def start_simulator(self) -> Child:
        sim = self.spawn(
            "simulator",
            [
                "simulate",
                "--scenario",
                self.scenario,
                "--dialect",
                self.dialect,
                "--listen-address",
                f"127.0.0.1:{self.sim_port}",
                "--time-scale",
                str(self.time_scale),
                *self.sim_args,
            ],
        )
        sim.wait_http(self.sim_url + "/health", START_TIMEOUT_S)
        return sim

    def start_exporter(self, sim: Child) -> Child:
        """``serve`` reading the simulator's /sim/gpu, /metrics and PID."""
        iv = str(self.interval)
        exp = self.spawn(
            "exporter",
            [
                "serve",
                "--listen-address",
                f"127.0.0.1:{self.exp_port}",
                "--gpu-source",
                f"sim:{self.sim_url}",
                "--gpu-interval",
                iv,
                "--engine",
                self.sim_url + "/metrics",
                "--engine-interval",
                iv,
                "--engine-pid",
                str(sim.pid),
                "--process-interval",
                iv,
                *self.exp_args,
            ],
        )
        exp.wait_http(self.exp_url + "/readyz", START_TIMEOUT_S)
        return exp

    def start(self) -> Self:
        self.start_exporter(self.start_simulator())
        return self

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.stop(grace_s=15.0)
        self.procs.clear()

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()


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
        spec = scenarios.get(scenario).load_spec(
            base_url, time_scale=time_scale, duration_s=None, seed=seed, model_time_rate=True
        )
        stop = asyncio.Event()  # created here, only touched on the loop thread

        async def go() -> None:
            # arrivals on model time: a starved simulator is offered the scenario's load, not a backlog
            await run_load(spec, stop=stop, clock=model_clock(base_url))

        self._runs.append((stop, asyncio.run_coroutine_threadsafe(go(), self.loop)))

    def retire(self, keep_last: bool = True) -> None:
        """Stop every load but the newest (or all), waiting for each to wind down."""
        victims = self._runs[:-1] if keep_last else self._runs
        self._runs = self._runs[-1:] if keep_last else []
        for stop, _ in victims:
            self.loop.call_soon_threadsafe(stop.set)
        for _, future in victims:
            try:
                future.result(timeout=60)
            except Exception as err:
                log.warning("load run ended with %r", err)

    def close(self) -> None:
        self.retire(keep_last=False)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class ScenarioStack(ProcessStack):
    """simulator + exporter + load, starting in ``healthy``; ``with ScenarioStack() as s: s.switch("kv_pressure")``."""

    def __init__(
        self,
        gpus: int = 4,
        time_scale: float = 4.0,
        interval: float = 1.0,
        dialect: str = "vllm",
        config: Path | None = None,
        exp_args: Sequence[str] = (),
    ) -> None:
        super().__init__(
            "healthy",
            ["--gpus", str(gpus)],
            [*(["--config", str(config)] if config else []), *exp_args],
            time_scale=time_scale,
            interval=interval,
            dialect=dialect,
        )
        self.gpus = gpus
        self.config = config
        self.load = LoadThread()

    def start(self) -> Self:
        super().start()
        self.load.start("healthy", self.sim_url, self.time_scale)
        return self

    def close(self) -> None:
        self.load.close()
        super().close()

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
        verdict: dict[str, Any] = r.json()
        return verdict

    def sim_waiting(self) -> int:
        """The simulated engine's own count of requests waiting (its ground truth, /sim/state)."""
        r = requests.get(self.sim_url + "/sim/state", timeout=5)
        r.raise_for_status()
        return int(r.json()["waiting"])

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

    def switch_and_count(
        self, scenario: str, layer: str, cause: str, max_cycles: int, poll: float = 0.1, primary_only: bool = False
    ) -> tuple[int | None, list[dict[str, Any]]]:
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
                named = (
                    (p is not None and (p["layer"], p["cause"]) == (layer, cause))
                    if primary_only
                    else (layer, cause) in causes(v)
                )
                if named:
                    return len(seen), seen
            time.sleep(poll)
        return None, seen


def causes(verdict: dict[str, Any], min_score: float = 0.0) -> set[tuple[str, str]]:
    return {(b["layer"], b["cause"]) for b in verdict["bottlenecks"] if b["score"] >= min_score}
