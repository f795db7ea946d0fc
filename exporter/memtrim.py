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

Why the mmap threshold is pinned as well (:func:`pin_mmap_threshold`, at ``serve``
start-up): glibc raises its threshold each time a large block is freed (up to
32 MiB), so after the first 9 MB body every later body, decoded text and rendered
exposition comes from the heap instead of a mapping of its own, and the heap's pages
stay fragmented between the small objects that outlive a scrape. Measured with
``python3 -m bench.memory_rounds --compare`` (rounds of the hostile bodies of
bench/memory_attacks.py: a 200 000-series family, 57 000 series
over budget, 19 000 rotating; 2026-12-02, 2 cores shared with other jobs): round peaks
108.9, 119.6, 121.6 MiB with glibc's default, creeping; 96.9, 104.8, 97.4 MiB with the
threshold pinned at 128 KiB (glibc's own starting value), from the same 59.5 MiB
baseline. In-process, the live Python blocks were the same in both (no leak): only
the heap's layout differs.
``LLM_EXPORTER_PIN_MMAP_THRESHOLD=false`` leaves glibc's default.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
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


#: allocations at least this large get a mapping of their own, returned to the OS when freed
MMAP_THRESHOLD_BYTES = 128 << 10
#: mallopt's parameter number for the mmap threshold (malloc.h M_MMAP_THRESHOLD)
_M_MMAP_THRESHOLD = -3
#: the environment variable with which an operator sets the threshold to glibc directly
MMAP_THRESHOLD_ENV = "MALLOC_MMAP_THRESHOLD_"
#: ``false`` leaves glibc's dynamic threshold (a comparison, or a C library that misbehaves with it)
PIN_ENV = "LLM_EXPORTER_PIN_MMAP_THRESHOLD"


@lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


@lru_cache(maxsize=1)
def _trim() -> Callable[[int], int] | None:
    libc = _libc()
    fn = getattr(libc, "malloc_trim", None) if libc is not None else None
    if fn is None:
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]


def pin_mmap_threshold(threshold: int = MMAP_THRESHOLD_BYTES, environ: dict[str, str] | None = None) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes (see the module docstring); True when set.

    Not where the operator set ``MALLOC_MMAP_THRESHOLD_`` (their choice wins) or
    ``LLM_EXPORTER_PIN_MMAP_THRESHOLD=false``, nor where the C library has no
    ``mallopt`` (musl, macOS).
    """
    env = os.environ if environ is None else environ
    if MMAP_THRESHOLD_ENV in env or env.get(PIN_ENV, "").strip().lower() in ("false", "0", "no", "off"):
        return False
    libc = _libc()
    fn = getattr(libc, "mallopt", None) if libc is not None else None
    if fn is None:
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    return bool(fn(_M_MMAP_THRESHOLD, threshold))


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
