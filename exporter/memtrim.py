"""Give freed heap memory back to the OS after an unusually large scrape.

Why: a hostile or oversized exposition (a 9 MB body parsed up to the input limit,
60 000 series cut to the budget) briefly needs tens of MiB of small objects. Once
they are freed, glibc keeps the pages of its heap for reuse, so the exporter's RSS
stays at its peak long after the engine is normal again. ``malloc_trim(0)`` returns
the free top and free pages of the heap. It costs about a millisecond, so it runs
only after scrapes that were large (``LARGE_BYTES``) or failed for being too large.
Where the C library has no ``malloc_trim`` (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from functools import lru_cache

#: a scrape body at least this large is followed by a trim
LARGE_BYTES = 1 << 20


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
