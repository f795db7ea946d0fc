"""Closed-loop clients the simulator waits for: a client answered has no think time in model time.

Why (issue 31): a closed-loop scenario (N clients, each sending its next request as
soon as its answer arrives) is only that scenario while every answered client is
back at once. The simulator's model clock advances with each step it runs
(exporter/simulator/clock.py), so on a starved host a load generator that takes
200 ms of wall time to read an answer and send the next request leaves its
client out for up to 200 ms x the time scale of model time: the queue the
scenario builds drains, and the verdict reads a lighter load than the scenario
defines ("healthy with 0 waiting" on a 2-core runner beside two busy loops).

A load generator that names its closed-loop clients (``X-Sim-Client``, sent by
exporter/loadgen when ``LoadSpec.client_header`` is set) tells the simulator who
comes straight back. While one of them has been answered and has not sent its
next request, the engine holds its model clock (``SimClock.hold``) instead of
stepping on without it; the client's next request therefore arrives at the model
time its answer left, as the scenario says, however slow the host is.

Bounds, so a client that never comes back cannot stop the engine: a client out for
``FORGET_AFTER_S`` of wall time is forgotten (a retired load, a client that gave
up), and a client turned away (429) is forgotten at once (it is not in the engine
and its retry is an arrival, not a return). At most ``MAX_CLIENTS`` are tracked.
Without the header nothing changes: open-loop arrivals, real tools and tests.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

#: the request header naming a closed-loop client (its value: an opaque identity, per run and client)
HEADER = "X-Sim-Client"
#: wall seconds after which an answered client that has not returned is no longer waited for
FORGET_AFTER_S = 0.5
#: the most clients remembered (the oldest forgotten first): bounds memory against any load
MAX_CLIENTS = 4096
#: the longest identity kept (a longer header is cut)
MAX_ID = 80
#: the shortest sleep ``wait_s`` gives (a client at its forget deadline is dropped at the next look)
MIN_WAIT_S = 0.001


class ClientLedger:
    """Which named clients have a request in the engine, and which were answered and are due back."""

    def __init__(self, forget_after_s: float = FORGET_AFTER_S, wall: Callable[[], float] = time.monotonic) -> None:
        self.forget_after_s = forget_after_s
        self._wall = wall
        self._lock = threading.Lock()
        #: client -> the id of its request in the engine
        self._inside: dict[str, str] = {}
        #: client -> wall time it was answered (insertion order: oldest first)
        self._out: OrderedDict[str, float] = OrderedDict()

    def arrived(self, client: str, request_id: str) -> None:
        """``client`` sent ``request_id`` into the engine (called before the engine can see it)."""
        with self._lock:
            self._out.pop(client, None)
            self._inside[client] = request_id
            while len(self._inside) > MAX_CLIENTS:
                self._inside.pop(next(iter(self._inside)))

    def answered(self, client: str, request_id: str) -> None:
        """``request_id`` of ``client`` finished (or was aborted): the client is due back, unless it
        already sent another request (a client that timed out moves on before the abort is reaped)."""
        with self._lock:
            if self._inside.get(client) != request_id:
                return
            del self._inside[client]
            self._out[client] = self._wall()
            while len(self._out) > MAX_CLIENTS:
                self._out.popitem(last=False)

    def forget(self, client: str) -> None:
        """``client`` was turned away before the engine saw its request: nothing to wait for."""
        with self._lock:
            self._out.pop(client, None)
            self._inside.pop(client, None)

    def awaited(self) -> int:
        """How many answered clients are due back now (those out past ``forget_after_s`` are forgotten)."""
        with self._lock:
            if not self._out:
                return 0
            limit = self._wall() - self.forget_after_s
            while self._out and next(iter(self._out.values())) < limit:
                self._out.popitem(last=False)
            return len(self._out)

    def wait_s(self) -> float:
        """Wall seconds until the longest-awaited client would be forgotten: how long the engine may sleep
        waiting for the clients (a returning client's submission wakes it sooner). Never a poll: a
        scheduler thread that wakes every few milliseconds on a contended node reads as a thread that
        wants a full core (the process sampler's run-queue demand), a false serial host ceiling."""
        with self._lock:
            if not self._out:
                return 0.0
            oldest = next(iter(self._out.values()))
            return max(MIN_WAIT_S, oldest + self.forget_after_s - self._wall())


def client_id(raw: str | None) -> str | None:
    """The header's value as an identity (None: absent or empty)."""
    if not raw:
        return None
    return raw.strip()[:MAX_ID] or None


__all__ = ["FORGET_AFTER_S", "HEADER", "MAX_CLIENTS", "ClientLedger", "client_id"]
