"""Pace a load on the simulator's model time (``GET /sim/clock``); why: exporter/loadgen/pacing.py."""

from __future__ import annotations

import httpx

from exporter.loadgen.pacing import ModelClock

#: one read of the clock may take this long (wall seconds) before it counts as failed
READ_TIMEOUT_S = 2.0


def model_clock(sim_url: str) -> ModelClock:
    """A ``ModelClock`` reading the simulator at ``sim_url``.

    Each read opens its own short-lived client: a read happens at most ten times a
    second, and the clock then needs no closing by whoever runs the load."""
    url = sim_url.rstrip("/") + "/sim/clock"

    async def read() -> tuple[float, float]:
        async with httpx.AsyncClient(timeout=READ_TIMEOUT_S) as client:
            r = await client.get(url)
            r.raise_for_status()
            body = r.json()
            return float(body["model_time_s"]), float(body["time_scale"])

    return ModelClock(read)
