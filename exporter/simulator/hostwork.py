"""Real CPU work standing in for an engine's per-step host overhead.

Why burn real CPU: the host-bound diagnosis rests on a per-thread CPU sampler
seeing one thread of the serving process near 100 % of a core. A sleep would
show 0 %. The work is SHA-1 over slices of a preallocated buffer: hashlib
releases the GIL for the whole call, so the scheduler thread keeps its core
busy without waiting on the HTTP thread for the GIL (and the HTTP thread keeps
answering), as a real engine's separate scheduler process would.

Each slice is sized for about a millisecond of CPU (``CHUNK_CPU_S``) at the
measured hashing rate, and the wall-clock deadline is checked between slices.
Sizing one slice for all the remaining time would be exact on an idle machine,
but on a starved CPU (a loaded node, a CPU limit) that slice takes several times
its CPU time in wall time, and the step would overrun its deadline by as much.
"""

from __future__ import annotations

import hashlib
import threading
import time

#: The buffer hashed (its length bounds one call whatever the measured rate).
_BUFFER = memoryview(bytearray(32 * 1024 * 1024))
_MIN_CHUNK = 16 * 1024
#: CPU seconds one hashing call is sized for. Short, so the deadline is checked often: on a
#: starved CPU a call sized for all the remaining time would run on long past it.
CHUNK_CPU_S = 0.001
_rate_lock = threading.Lock()
#: measured hashing speed, bytes per CPU second (refined on every call)
_rate = 0.0


def _measure() -> float:
    start = time.thread_time()
    n = 0
    while time.thread_time() - start < 0.005:
        hashlib.sha1(_BUFFER[: 256 * 1024]).digest()
        n += 256 * 1024
    return n / max(time.thread_time() - start, 1e-6)


def burn_cpu(seconds: float) -> float:
    """Keep this thread on a CPU for ``seconds`` of wall time; returns the CPU time it used."""
    global _rate
    if seconds <= 0:
        return 0.0
    with _rate_lock:
        if _rate <= 0:
            _rate = _measure()
        rate = _rate
    start_cpu = time.thread_time()
    deadline = time.perf_counter() + seconds
    while True:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            break
        size = int(min(len(_BUFFER), max(_MIN_CHUNK, min(remaining, CHUNK_CPU_S) * rate)))
        t0 = time.thread_time()
        hashlib.sha1(_BUFFER[:size]).digest()
        used = time.thread_time() - t0
        if used > 0.0005:
            rate = 0.8 * rate + 0.2 * (size / used)
    with _rate_lock:
        _rate = rate
    return time.thread_time() - start_cpu
