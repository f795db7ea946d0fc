"""Give freed heap memory back to the OS after an unusually large scrape.

Why: a hostile or oversized exposition (a 9 MB body parsed up to the input limit,
60 000 series cut to the budget) briefly needs tens of MiB of small objects. Once
they are freed, glibc keeps the pages of its heap for reuse, so the exporter's RSS
stays at its peak long after the engine is normal again. ``malloc_trim(0)`` returns
the free top and free pages of the heap. It costs about a millisecond, so it runs
only after scrapes that were large (``LARGE_BYTES``) or failed for being too large,
and then on every scrape (at most once a second) for ``HOLD_S`` seconds after the
last one: what a large scrape left is freed late, when the diagnosis windows (up to
60 s) drop their snapshots of it and a later scrape replaces it in the store, and
memory freed after the last trim would otherwise stay with the process.
Where the C library has no ``malloc_trim`` (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time
from collections.abc import Callable
from functools import lru_cache

#: a scrape body at least this large is followed by a trim
LARGE_BYTES = 1 << 20
#: seconds after the last large scrape during which scrapes keep trimming (the longest window, 60 s, plus margin)
HOLD_S = 90.0
#: fewest seconds between two trims that no large scrape asked for
MIN_GAP_S = 1.0


@lru_cache(maxsize=1)
def _trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        fn = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


def release_free_memory() -> bool:
    """Ask the C heap to return its free pages; False where that is not possible."""
    fn = _trim()
    if fn is None:
        return False
    fn(0)
    return True


class TrimPolicy:
    """When to trim: after a large scrape, then on scrapes for ``hold_s`` seconds, at most every ``min_gap_s``.

    One per process (the heap is the process's), shared by every engine source's thread.
    """

    def __init__(
        self,
        hold_s: float = HOLD_S,
        min_gap_s: float = MIN_GAP_S,
        clock: Callable[[], float] = time.monotonic,
        trim: Callable[[], bool] = release_free_memory,
    ) -> None:
        self.hold_s = hold_s
        self.min_gap_s = min_gap_s
        self._clock = clock
        self._trim = trim
        self._lock = threading.Lock()
        self._last_large: float | None = None
        self._last_trim: float | None = None

    def after_scrape(self, large: bool) -> bool:
        """Trim now if this scrape was large or one was within ``hold_s``; True when a trim ran."""
        with self._lock:
            now = self._clock()
            if large:
                self._last_large = now
            elif self._last_large is None or now - self._last_large > self.hold_s:
                return False
            elif self._last_trim is not None and now - self._last_trim < self.min_gap_s:
                return False
            self._last_trim = now
        return self._trim()


#: the process's policy (exporter/engines/source.py reports each scrape to it)
TRIMS = TrimPolicy()
