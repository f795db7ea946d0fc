"""One deadline per profiler call, and the shutdown that brings every such deadline forward.

Why a deadline per call and not a timeout per read: an engine that answers
``/start_profile`` one byte at a time keeps every read short and the call alive
for as long as it likes, holding the one profile lock (one trickled answer held
it 45.8 s against a 30 s limit). Each call gets a :class:`CallDeadline`: the
probe's exchange (exporter/probe/client.py) gives every socket operation what is
left of it and shuts the socket down when it passes, connect to last byte.

Why shutdown moves it: uvicorn waits for the requests in flight before ``serve``
exits, and ``POST /profile`` may be in a call allowed 120 s (a hung
``/stop_profile`` kept the exporter alive more than 45 s after SIGTERM). Once
:meth:`Shutdown.begin` runs (``serve`` calls it at the signal), every call in
flight or started later ends within ``SHUTDOWN_GRACE_S``, or by its own
deadline when that comes first: time for the stop to reach the engine, not for
a hung engine to hold the exit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from exporter.probe.client import Deadline

#: after shutdown begins, the longest any profiler call still runs (the stop gets its chance to reach the engine)
SHUTDOWN_GRACE_S = 5.0


class Shutdown:
    """Set once: ``event`` wakes waits, and every deadline watching is brought forward to ``cutoff``."""

    def __init__(self, grace: float = SHUTDOWN_GRACE_S) -> None:
        self.grace = grace
        self.event = threading.Event()
        self._lock = threading.Lock()
        self._cutoff: float | None = None
        self._hooks: dict[int, Callable[[float], None]] = {}
        self._next = 0

    @property
    def begun(self) -> bool:
        return self.event.is_set()

    @property
    def cutoff(self) -> float | None:
        """The monotonic time every profiler call ends by (None: not shutting down)."""
        with self._lock:
            return self._cutoff

    def begin(self) -> None:
        """Start shutting down (idempotent; safe from a signal handler: takes no lock a caller holds long)."""
        with self._lock:
            if self._cutoff is not None:
                return
            self._cutoff = time.monotonic() + self.grace
            hooks = list(self._hooks.values())
        self.event.set()
        for hook in hooks:
            hook(self._cutoff)

    def watch(self, hook: Callable[[float], None]) -> Callable[[], None]:
        """Call ``hook(cutoff)`` when shutdown begins (at once if it has); returns what unregisters it."""
        with self._lock:
            cutoff = self._cutoff
            key = self._next
            self._next += 1
            if cutoff is None:
                self._hooks[key] = hook
        if cutoff is not None:
            hook(cutoff)

        def unwatch() -> None:
            with self._lock:
                self._hooks.pop(key, None)

        return unwatch


class CallDeadline(Deadline):
    """One profiler call's deadline (connect, request, headers and body together), moved up by shutdown."""

    def __init__(self, seconds: float, shutdown: Shutdown) -> None:
        super().__init__(seconds)
        self._shutdown = shutdown
        self._cond = threading.Condition()
        cutoff = shutdown.cutoff
        if cutoff is not None:  # shutting down already: the connect's own timeout is cut too
            self.at = min(self.at, cutoff)

    def _bring_forward(self, cutoff: float) -> None:
        with self._cond:
            if cutoff < self.at:
                self.at = cutoff
                self._cond.notify_all()

    def when_passed(self, action: Callable[[], None]) -> Callable[[], None]:
        """``action`` once ``at`` passes, ``at`` being brought forward when shutdown begins."""
        ended = False

        def run() -> None:
            with self._cond:
                while not ended:
                    left = self.at - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                else:
                    return
            action()

        unwatch = self._shutdown.watch(self._bring_forward)
        thread = threading.Thread(target=run, name="profile-call-deadline", daemon=True)
        thread.start()

        def cancel() -> None:
            nonlocal ended
            unwatch()
            with self._cond:
                ended = True
                self._cond.notify_all()

        return cancel


__all__ = ["SHUTDOWN_GRACE_S", "CallDeadline", "Shutdown"]
