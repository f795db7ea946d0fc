"""Handing a step's token events to the clients' event loops: one wake-up per loop, not per request.

Why batch: each request's HTTP handler waits on an asyncio queue owned by the
server's event-loop thread, so an event crosses threads with
``loop.call_soon_threadsafe``, which writes to the loop's self-pipe and wakes
it. Per request, a step of 64 sequences made 64 such writes, each a syscall
that hands the GIL to the loop thread it just woke; the scheduler thread of
the ``host_bound`` scenario spent 17-20 % of its wall time delivering on a
loaded 2-core machine. One call per loop per step hands over the whole batch:
6-7 % measured the same way. A real engine's scheduler does not pay this (it
runs in its own process), so the simulator should not either.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from exporter.simulator.requests import SimRequest, TokenEvent


@dataclass(frozen=True, eq=False)
class LoopSink:
    """A request's events go into ``queue``, which belongs to ``loop`` (another thread's)."""

    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[TokenEvent]

    def __call__(self, event: TokenEvent) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, event)


def _put_all(items: list[tuple[asyncio.Queue[TokenEvent], TokenEvent]]) -> None:
    for queue, event in items:
        queue.put_nowait(event)


def deliver(events: Iterable[tuple[SimRequest, TokenEvent]], abort: Callable[[SimRequest], None]) -> None:
    """Send each event to its request's sink, in order; a request whose sink fails is aborted.

    Events for :class:`LoopSink` sinks go to their loop in one ``call_soon_threadsafe`` per loop; any
    other sink (a plain callable) is called directly.
    """
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[SimRequest, asyncio.Queue[TokenEvent], TokenEvent]]] = {}
    for req, event in events:
        if event.finish_reason:
            event = TokenEvent(event.text, event.tokens, event.finish_reason, req.prompt_len, len(req.output_ids))
        sink = req.sink
        if isinstance(sink, LoopSink):
            by_loop.setdefault(sink.loop, []).append((req, sink.queue, event))
            continue
        try:
            sink(event)
        except Exception:
            abort(req)
    for loop, batch in by_loop.items():
        try:
            loop.call_soon_threadsafe(_put_all, [(queue, event) for _, queue, event in batch])
        except RuntimeError:  # the loop is closed: no client will read these
            for req, _, _ in batch:
                abort(req)
