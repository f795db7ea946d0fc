"""The clock open-loop arrivals are paced on.

Why a clock of its own: an open loop offers a rate, and a rate is per second of
*some* clock. Against a real server that is the wall clock (``WallClock``).
Against the simulator it must be the simulator's model time (``ModelClock``):
when the host is starved the simulated engine falls behind the wall clock
(``exporter/simulator/clock.py``), and arrivals paced on the wall clock would
then offer it more load per model second than the scenario describes, building
a queue the scenario does not have (a throttled GPU read as a capacity problem).
Paced on model time, a scenario offers the same load on a busy 2-core runner as
on an idle workstation: only how long it takes in wall seconds changes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

log = logging.getLogger(__name__)

#: a model clock is read at most this often (wall seconds); between reads it is interpolated
MODEL_READ_INTERVAL_S = 0.1


class ArrivalClock(Protocol):
    """What ``run_load``'s open loop needs of a clock."""

    async def now(self) -> float:
        """The clock's current time (seconds, any origin)."""
        ...

    async def wait_until(self, at: float, wall_deadline: float | None) -> None:
        """Return once the clock reads ``at``, or the event loop's time reaches ``wall_deadline``."""
        ...


class WallClock:
    """The event loop's own monotonic clock: a rate per wall second."""

    async def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def wait_until(self, at: float, wall_deadline: float | None) -> None:
        loop = asyncio.get_running_loop()
        until = at if wall_deadline is None else min(at, wall_deadline)
        await asyncio.sleep(max(0.0, until - loop.time()))


#: reads (model seconds, model seconds per wall second) from wherever the model clock lives
ModelReader = Callable[[], Awaitable[tuple[float, float]]]


class ModelClock:
    """A model clock read over the network, interpolated between reads.

    Between two reads the model is assumed to run at its nominal scale, but never
    more than one read interval ahead of the last reading: a starved model that
    stops advancing holds arrivals back within ``MODEL_READ_INTERVAL_S``. A read
    that fails is logged once and skipped; the last reading then keeps being
    extrapolated at the nominal scale (the load goes on as if paced on the wall
    clock, which is what it would do without this clock), so an unreachable
    model clock never stops the load.
    """

    def __init__(self, read: ModelReader) -> None:
        self._read = read
        self._model = 0.0
        self._scale = 1.0
        self._read_at: float | None = None
        self._failing = False

    async def _refresh(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            self._model, self._scale = await self._read()
            self._failing = False
        except Exception as err:  # noqa: BLE001 - any failure of the read: keep extrapolating
            if not self._failing:
                log.warning("model clock unreadable (%s); pacing on the wall clock until it answers", err)
            self._failing = True
            if self._read_at is not None:
                self._model += (loop.time() - self._read_at) * self._scale
        self._read_at = loop.time()

    async def now(self) -> float:
        loop = asyncio.get_running_loop()
        if self._read_at is None or loop.time() - self._read_at >= MODEL_READ_INTERVAL_S:
            await self._refresh()
        assert self._read_at is not None
        ahead = min(loop.time() - self._read_at, MODEL_READ_INTERVAL_S)
        return self._model + ahead * self._scale

    async def wait_until(self, at: float, wall_deadline: float | None) -> None:
        loop = asyncio.get_running_loop()
        while wall_deadline is None or loop.time() < wall_deadline:
            left = at - await self.now()
            if left <= 0:
                return
            nap = min(left / max(self._scale, 1e-9), MODEL_READ_INTERVAL_S)
            if wall_deadline is not None:
                nap = min(nap, max(0.0, wall_deadline - loop.time()))
            await asyncio.sleep(nap)
