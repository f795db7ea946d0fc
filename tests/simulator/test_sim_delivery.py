"""A step's token events reach their clients' event loops in one hand-over per loop, in order.

A real event loop on its own thread stands in for the simulator's HTTP thread; the engine side is
this test's thread, as in the simulator.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from exporter.simulator.delivery import LoopSink, deliver
from exporter.simulator.requests import SimRequest, TokenEvent


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    lp = asyncio.new_event_loop()
    thread = threading.Thread(target=lp.run_forever, daemon=True)
    thread.start()
    try:
        yield lp
    finally:
        lp.call_soon_threadsafe(lp.stop)
        thread.join(10)
        lp.close()


def request(rid: str, sink: object) -> SimRequest:
    return SimRequest(rid, [1, 2, 3], 8, True, sink, 0.0)  # type: ignore[arg-type]


def drain(lp: asyncio.AbstractEventLoop, queue: asyncio.Queue[TokenEvent], n: int) -> list[TokenEvent]:
    async def take() -> list[TokenEvent]:
        return [await asyncio.wait_for(queue.get(), 10) for _ in range(n)]

    return asyncio.run_coroutine_threadsafe(take(), lp).result(20)


def test_one_hand_over_per_loop_per_step_in_order(loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = loop.call_soon_threadsafe

    def counting(callback, *args):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(callback, *args)

    monkeypatch.setattr(loop, "call_soon_threadsafe", counting)
    queues = [asyncio.Queue[TokenEvent]() for _ in range(64)]
    reqs = [request(f"r{i}", LoopSink(loop, q)) for i, q in enumerate(queues)]
    for step in range(3):
        deliver([(r, TokenEvent(f"t{step}", 1)) for r in reqs], lambda r: pytest.fail(f"aborted {r.id}"))
    assert len(calls) == 3
    monkeypatch.setattr(loop, "call_soon_threadsafe", real)
    for q in queues:
        assert [e.text for e in drain(loop, q, 3)] == ["t0", "t1", "t2"]


def test_the_last_event_carries_the_token_counts(loop: asyncio.AbstractEventLoop) -> None:
    q: asyncio.Queue[TokenEvent] = asyncio.Queue()
    req = request("r", LoopSink(loop, q))
    req.output_ids.extend([7, 8])
    deliver([(req, TokenEvent("x", 1, "length"))], lambda r: pytest.fail("aborted"))
    (event,) = drain(loop, q, 1)
    assert (event.finish_reason, event.prompt_tokens, event.completion_tokens) == ("length", 3, 2)


def test_a_closed_loop_or_a_failing_sink_aborts_only_its_requests() -> None:
    closed = asyncio.new_event_loop()
    closed.close()
    aborted: list[str] = []
    got: list[TokenEvent] = []

    def broken(event: TokenEvent) -> None:
        raise ConnectionError("client gone")

    events = [
        (request("gone", LoopSink(closed, asyncio.Queue())), TokenEvent("a", 1)),
        (request("broken", broken), TokenEvent("b", 1)),
        (request("plain", got.append), TokenEvent("c", 1)),
    ]
    deliver(events, lambda r: aborted.append(r.id))
    assert sorted(aborted) == ["broken", "gone"] and [e.text for e in got] == ["c"]
