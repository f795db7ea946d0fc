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
from typing import Protocol, TypeVar

T = TypeVar("T")

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

    async def within(self, work: Awaitable[T], seconds: float) -> T:
        """``work``'s result if it ends within ``seconds`` of this clock; otherwise cancel it and raise
        ``asyncio.TimeoutError`` (a request's timeout, counted on the clock its load is paced on)."""
        ...


class WallClock:
    """The event loop's own monotonic clock: a rate per wall second."""

    async def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def wait_until(self, at: float, wall_deadline: float | None) -> None:
        loop = asyncio.get_running_loop()
        until = at if wall_deadline is None else min(at, wall_deadline)
        await asyncio.sleep(max(0.0, until - loop.time()))

    async def within(self, work: Awaitable[T], seconds: float) -> T:
        return await asyncio.wait_for(work, seconds)


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

    Many waiters share one read: a hundred clients timing their requests on this
    clock (``within``) cost one read per interval, not one each.
    """

    def __init__(self, read: ModelReader) -> None:
        self._read = read
        self._model = 0.0
        self._scale = 1.0
        self._read_at: float | None = None
        self._failing = False
        self._reading: asyncio.Future[None] | None = None

    async def _refresh(self) -> None:
        if self._reading is None or self._reading.done():
            self._reading = asyncio.ensure_future(self._read_once())
        # shielded: a waiter cancelled mid-read (its request answered) does not cancel the others' read
        await asyncio.shield(self._reading)

    async def _read_once(self) -> None:
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

    async def within(self, work: Awaitable[T], seconds: float) -> T:
        """Why a timeout in model time: a starved simulator falls behind the wall clock, so a client
        timeout kept in wall seconds fires earlier in model time than the scenario says and turns a
        backlog into a storm of aborts (exporter/simulator/scenarios.py, queue_backlog). The timer
        is this clock's ``wait_until``: it fires within ``MODEL_READ_INTERVAL_S`` wall seconds of the
        model deadline."""
        task = asyncio.ensure_future(work)
        timer: asyncio.Future[None] | None = None
        try:
            timer = asyncio.ensure_future(self.wait_until(await self.now() + seconds, None))
            await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if timer is not None:
                timer.cancel()
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            elif not task.cancelled():
                # read here: an error that ended the request as we were cancelled is ours, not a lost one
                task.exception()
        if task.cancelled() and timer is not None and timer.done() and not timer.cancelled():
            raise asyncio.TimeoutError
        return task.result()
