"""The serving fast path: /healthz, /readyz and /metrics answered in one ASGI layer, never behind a render.

Why (issue 25): with 50 scrapers of a 2.5 MB exposition, ``/healthz`` answered
at p99 956 ms, past a kubelet's 1 s probe timeout. Three things made it wait:
the render ran on the event loop whenever the store had moved (every GPU
sample), every scrape walked FastAPI's whole middleware and routing stack, and
every scrape wrote 2.5 MB although Prometheus asks for gzip. Here:

* ``/healthz`` is answered at once: it touches nothing but the socket.
* ``/readyz`` asks the store, whose lock is held only to swap finished results in,
  never while a source samples or the diagnosis computes.
* ``/metrics`` is served from the cache's current bytes (``ExpositionCache.cached``,
  which never waits) and, where the client accepts it, their gzip'ed copy. On a
  miss the render runs in one dedicated thread, off the event loop, and every
  scrape that arrives meanwhile awaits that same render (one render per store
  generation and format, however many scrapers).
* At most ``METRICS_WRITERS`` answers are written at once: the loop's ready queue
  then never holds 50 scrapers' writes ahead of a probe (a probe's p50 went from
  36 ms to 3 ms), and each answer holds its slot for at most ``SLOT_HOLD_S``.
* The GIL switch interval is lowered (``favour_the_event_loop``).

Everything else (``/diagnosis``, ``/``, 404s, other methods) falls through to
the FastAPI app. Basic auth, when on, wraps this layer (exporter/server.py), so
``/metrics`` stays behind it and the probes stay open.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from starlette.types import ASGIApp, Receive, Scope, Send

from exporter.collector import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE, ExpositionCache, wants_openmetrics
from exporter.store import SnapshotStore

#: /metrics answers written at once; the others wait their turn parked, off the loop's ready queue
METRICS_WRITERS = 4
#: the longest one answer holds its writer slot: a client that reads slowly then goes on without it
SLOT_HOLD_S = 0.5
#: the GIL switch interval while serving (Python's default is 5 ms; see ``favour_the_event_loop``)
SWITCH_INTERVAL_S = 0.001
_PLAIN = b"text/plain; charset=utf-8"
#: /readyz's answer before a GPU or engine source has sampled (store.ready); server.py's route says the same
NOT_READY = "not ready: no GPU or engine source has sampled successfully yet\n"
_NOT_READY = NOT_READY.encode()


def favour_the_event_loop() -> None:
    """Lower the GIL switch interval to ``SWITCH_INTERVAL_S`` (never raise it).

    Why: a source thread that computes (a 5 MB engine body parsed in ~150 ms, a
    diagnosis cycle of ~40 ms) holds the GIL, and the event loop gives it up on
    every socket call and then waits up to one switch interval to get it back:
    at Python's 5 ms, one loop pass over 50 scrapers' writes took a quarter of a
    second. At 1 ms a probe's p99 fell from 184 ms to 17 ms under 50 scrapers
    (``python3 -m bench.serving_under_load``); a computing thread pays a few more
    hand-overs a second, nothing measurable.
    """
    sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether ``Accept-Encoding`` allows gzip (``gzip`` or ``*``, with a q-value above 0)."""
    if not accept_encoding:
        return False
    for part in accept_encoding.split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() not in ("gzip", "x-gzip", "*"):
            continue
        q = params.strip().lower()
        if q.startswith("q="):
            try:
                return float(q[2:]) > 0
            except ValueError:
                return False
        return True
    return False


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


async def _answer(send: Send, status: int, body: bytes, content_type: bytes, extra: Sequence[tuple[bytes, bytes]] = ()) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class ServingPaths:
    """ASGI middleware: the probes and /metrics from published state, the rest to ``app``."""

    def __init__(self, app: ASGIApp, store: SnapshotStore, cache: ExpositionCache) -> None:
        self.app = app
        self.store = store
        self.cache = cache
        #: one thread renders: a miss never occupies the event loop nor the pool the sync routes run in
        self._renderer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="metrics-render")
        #: the render in flight per (openmetrics?, gzip?), awaited by every scrape that misses meanwhile
        self._pending: dict[tuple[bool, bool], asyncio.Future[bytes]] = {}
        #: /metrics answers being written at once (see METRICS_WRITERS)
        self._slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "GET":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path == "/healthz":
            await _answer(send, 200, b"ok\n", _PLAIN)
        elif path == "/readyz":
            if self.store.ready():
                await _answer(send, 200, b"ready\n", _PLAIN)
            else:
                await _answer(send, 503, _NOT_READY, _PLAIN)
        elif path == "/metrics":
            await self._metrics(scope, send)
        else:
            await self.app(scope, receive, send)

    async def _metrics(self, scope: Scope, send: Send) -> None:
        om = wants_openmetrics(_header(scope, b"accept"))
        gz = accepts_gzip(_header(scope, b"accept-encoding"))
        body = self.cache.cached(om, gz)
        if body is None:
            body = await self._render(om, gz)
        extra = [(b"vary", b"Accept-Encoding")]
        if gz:
            extra.append((b"content-encoding", b"gzip"))
        await self._write(send, body, (OPENMETRICS_CONTENT_TYPE if om else TEXT_CONTENT_TYPE).encode(), extra)

    async def _write(self, send: Send, body: bytes, content_type: bytes, extra: list[tuple[bytes, bytes]]) -> None:
        """Write one answer holding a writer slot, for at most ``SLOT_HOLD_S`` (a slow reader then goes on without it)."""
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots[0] is not loop:  # one per loop: a test may serve one app from two
            self._slots = (loop, asyncio.Semaphore(METRICS_WRITERS))
        async with self._slots[1]:
            writing = asyncio.ensure_future(_answer(send, 200, body, content_type, extra))
            await asyncio.wait({writing}, timeout=SLOT_HOLD_S)
        await writing

    async def _render(self, om: bool, gz: bool) -> bytes:
        """The render of (``om``, ``gz``) in the render thread; scrapes that miss meanwhile share it."""
        key = (om, gz)
        pending = self._pending.get(key)
        if pending is None:
            loop = asyncio.get_running_loop()
            pending = loop.run_in_executor(self._renderer, self.cache.render, om, gz)
            self._pending[key] = pending
            pending.add_done_callback(lambda _done: self._pending.pop(key, None))
        # shielded: a scraper that hangs up must not cancel the render the others wait for
        return await asyncio.shield(pending)
