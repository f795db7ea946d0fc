"""Open-loop arrivals paced on a model clock (exporter/loadgen/pacing.py): unit tests with fake clocks."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable
from typing import TypeVar

import pytest

from exporter.loadgen import LoadSpec, run_load
from exporter.loadgen.pacing import MODEL_READ_INTERVAL_S, ModelClock, WallClock
from exporter.simulator import scenarios

T = TypeVar("T")


class FakeModel:
    """A model clock the test moves by hand; counts reads and can fail them."""

    def __init__(self, scale: float = 1.0) -> None:
        self.model, self.scale, self.reads, self.fail = 0.0, scale, 0, False

    async def read(self) -> tuple[float, float]:
        self.reads += 1
        if self.fail:
            raise ConnectionError("simulator down")
        return self.model, self.scale


def test_a_model_that_does_not_advance_holds_arrivals_back_until_the_wall_deadline() -> None:
    """The starved simulator: its model time stands still, so no arrival is due however long the wall runs."""
    fake = FakeModel(scale=50.0)
    clock = ModelClock(fake.read)

    async def main() -> tuple[float, float, float]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 0.5
        # well past what one read interval of interpolation reaches (5 model s), 0.2 s of wall at the nominal scale
        await clock.wait_until(10.0, deadline)
        return loop.time(), deadline, await clock.now()

    returned, deadline, now = asyncio.run(main())
    assert returned >= deadline  # it was the wall deadline that ended the wait, not the model
    # between reads the estimate runs ahead of the last reading by less than one read interval
    assert 0.0 <= now < MODEL_READ_INTERVAL_S * fake.scale
    assert fake.reads >= 2  # the clock was re-read while waiting, not extrapolated forever


def test_an_arrival_is_due_once_the_model_reaches_it() -> None:
    fake = FakeModel(scale=1.0)
    clock = ModelClock(fake.read)

    async def main() -> float:
        async def advance() -> None:
            await asyncio.sleep(0.05)
            fake.model = 100.0  # the model jumps (a long step ended)

        mover = asyncio.create_task(advance())
        await clock.wait_until(50.0, None)  # 50 s of wall at the nominal scale; the jump makes it due at once
        await mover
        return await clock.now()

    assert asyncio.run(asyncio.wait_for(main(), 30)) >= 50.0


def test_an_unreadable_model_clock_extrapolates_at_its_scale_and_the_load_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeModel(scale=10.0)
    clock = ModelClock(fake.read)

    async def main() -> float:
        await clock.now()  # one good reading, then the simulator goes away
        fake.fail = True
        await clock.wait_until(2.0, None)  # 0.2 s of wall at the scale
        return await clock.now()

    assert asyncio.run(asyncio.wait_for(main(), 30)) >= 2.0
    warnings = [r for r in caplog.records if "model clock unreadable" in r.getMessage()]
    assert len(warnings) == 1  # said once, not at every read


def test_the_wall_clock_wakes_at_the_earlier_of_the_arrival_and_the_deadline() -> None:
    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        clock = WallClock()
        start = await clock.now()
        await clock.wait_until(start + 3600.0, loop.time() + 0.05)
        return loop.time() - start, await clock.now() - start

    waited, now = asyncio.run(asyncio.wait_for(main(), 30))
    assert waited >= 0.05 and now >= 0.05


class StillClock:
    """An arrival clock that never advances (``due``: every arrival already due)."""

    def __init__(self, due: bool) -> None:
        self.due = due

    async def now(self) -> float:
        return 0.0

    async def wait_until(self, at: float, wall_deadline: float | None) -> None:
        if self.due:
            await asyncio.sleep(0)
            return
        loop = asyncio.get_running_loop()
        await asyncio.sleep(max(0.0, (wall_deadline or loop.time()) - loop.time()))

    async def within(self, work: Awaitable[T], seconds: float) -> T:
        return await asyncio.wait_for(work, seconds)


@pytest.mark.parametrize("due", [False, True])
def test_run_load_paces_its_open_loop_on_the_clock_it_is_given(due: bool) -> None:
    """No request while the clock stands still; requests as soon as arrivals are due (to a closed port:
    each is a connection error, which is still a request issued)."""
    spec = LoadSpec("http://127.0.0.1:9", model="m", rate=5.0, duration_s=0.3, concurrency=2, retries=0, max_requests=20)
    result = asyncio.run(asyncio.wait_for(run_load(spec, clock=StillClock(due)), 30))
    assert (result.summary.requests > 0) is due


def test_a_request_outlasting_its_timeout_in_wall_seconds_is_not_timed_out_while_the_model_stands_still() -> None:
    """The starved simulator again: 2 model seconds are 0.2 wall seconds at its nominal scale, but its
    model time does not move, so a request taking 0.4 wall seconds is answered, not cut off."""
    fake = FakeModel(scale=10.0)
    clock = ModelClock(fake.read)

    async def answer() -> str:
        await asyncio.sleep(0.4)
        return "answered"

    assert asyncio.run(asyncio.wait_for(clock.within(answer(), 2.0), 30)) == "answered"


def test_a_request_times_out_once_the_model_passes_its_deadline_and_is_cancelled() -> None:
    fake = FakeModel(scale=1.0)
    clock = ModelClock(fake.read)
    ended: list[str] = []

    async def never() -> str:
        try:
            await asyncio.Event().wait()
        finally:
            ended.append("cancelled")
        return "unreachable"

    async def main() -> None:
        async def advance() -> None:
            await asyncio.sleep(0.05)
            fake.model = 100.0  # 100 model seconds pass at once (a long step)

        mover = asyncio.create_task(advance())
        try:
            await clock.within(never(), 5.0)  # 5 wall seconds at the nominal scale: only the jump ends it
        finally:
            await mover

    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(asyncio.wait_for(main(), 30))
    assert ended == ["cancelled"]  # the request's connection is closed, as a wall-clock timeout closes it


def test_an_error_of_the_request_is_raised_as_itself_not_as_a_timeout() -> None:
    clock = ModelClock(FakeModel().read)

    async def refused() -> str:
        raise ConnectionRefusedError("engine down")

    with pytest.raises(ConnectionRefusedError):
        asyncio.run(asyncio.wait_for(clock.within(refused(), 5.0), 30))


def test_many_waiters_share_one_read_of_the_model_clock() -> None:
    """A hundred clients timing their requests read the simulator once per interval, not once each."""
    fake = FakeModel()

    async def slow_read() -> tuple[float, float]:
        await asyncio.sleep(0.01)
        return await fake.read()

    clock = ModelClock(slow_read)

    async def main() -> None:
        await asyncio.gather(*(clock.now() for _ in range(100)))

    asyncio.run(asyncio.wait_for(main(), 30))
    assert fake.reads == 1


def test_a_scenario_driven_in_model_time_counts_its_client_timeouts_in_model_seconds() -> None:
    scenario = scenarios.get("queue_backlog")
    modelled = scenario.load_spec("http://127.0.0.1:9", time_scale=4.0, model_time_rate=True)
    walled = scenario.load_spec("http://127.0.0.1:9", time_scale=4.0)
    assert (modelled.timeout_s, modelled.timeout_on_clock) == (scenario.load.timeout_s, True)
    assert (walled.timeout_s, walled.timeout_on_clock) == (scenario.load.timeout_s / 4.0, False)


def test_an_error_that_ends_the_request_as_its_caller_is_cancelled_is_not_left_unretrieved() -> None:
    """The load's end cancels a client in the same moment the server closes its stream: the request's
    error belongs to the cancelled wait, not to asyncio's 'Task exception was never retrieved'."""
    clock = ModelClock(FakeModel().read)
    lost: list[dict[str, object]] = []

    async def closed_by_the_server(started: asyncio.Event) -> str:
        started.set()
        await asyncio.sleep(0)
        raise ConnectionResetError("stream closed")

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: lost.append(context))
        started = asyncio.Event()
        waiter = asyncio.create_task(clock.within(closed_by_the_server(started), 5.0))
        await started.wait()
        waiter.cancel()  # lands while the request ends with its error
        await asyncio.gather(waiter, return_exceptions=True)
        del waiter
        gc.collect()

    asyncio.run(asyncio.wait_for(main(), 30))
    assert lost == []
