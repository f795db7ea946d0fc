"""The load against the simulator: each scenario's own, and what its clients saw since the last refresh.

Why a scenario's load drains instead of being cancelled: stopping a load cancels its
requests, which the server counts as aborts, and those would show up in the verdict on the
way back to healthy.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from exporter.loadgen import run_load
from exporter.simulator import scenarios
from exporter.simulator.pacing import model_clock


@dataclasses.dataclass
class LoadStats:
    """Client-side view of the load since the last refresh."""

    ok: int = 0
    failed: int = 0

    def add(self, rec: Any) -> None:
        if rec.status == "ok":
            self.ok += 1
        elif rec.status != "cancelled":
            self.failed += 1

    def take(self, dt: float) -> str:
        text = f"{self.ok / dt if dt else 0:.1f} req/s, {self.failed} failed"
        self.ok, self.failed = 0, 0
        return text


class Loads:
    """The loads: the first runs until the end; the tour adds each scenario's load for its time,
    then lets it drain (stopping a load cancels its requests, which the server counts as aborts)."""

    def __init__(self, sim_url: str, time_scale: float, stats: LoadStats) -> None:
        self.sim_url, self.time_scale, self.stats = sim_url, time_scale, stats
        self.runs: list[tuple[str, asyncio.Event, asyncio.Task[Any]]] = []

    def start(self, name: str, duration_s: float | None = None) -> None:
        """Add the scenario's load; with ``duration_s`` it stops issuing then and lets what is in flight finish."""
        spec = scenarios.get(name).load_spec(
            self.sim_url, time_scale=self.time_scale, duration_s=duration_s, seed=len(self.runs), model_time_rate=True
        )
        spec = dataclasses.replace(spec, drain=duration_s is not None)
        stop = asyncio.Event()
        # arrivals paced on the simulator's model time: on a busy machine the demo shows the scenario, not a backlog
        run = run_load(spec, stop=stop, on_record=self.stats.add, clock=model_clock(self.sim_url))
        self.runs.append((name, stop, asyncio.create_task(run)))

    def check(self) -> bool:
        """Raise a load's failure; False once the first (never-ending) load ended by itself."""
        for _, _, task in self.runs:
            if task.done() and not task.cancelled() and task.exception() is not None:
                task.result()
        return not (self.runs and self.runs[0][2].done())

    async def close(self) -> None:
        for _, stop, _ in self.runs:
            stop.set()
        tasks = [t for _, _, t in self.runs]
        if not tasks:
            return
        try:
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            for task in tasks:
                task.cancel()
