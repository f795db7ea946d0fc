"""When the exporter gives freed heap back to the OS (exporter/memtrim.py): after a large scrape,
then on scrapes for the hold time, at most once per gap, never on a quiet exporter."""

from __future__ import annotations

import os

import pytest

from exporter.memtrim import HOLD_S, TrimPolicy, pin_mmap_threshold, release_free_memory


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def policy(clock: Clock, trims: list[float]) -> TrimPolicy:
    def trim() -> bool:
        trims.append(clock.now)
        return True

    return TrimPolicy(hold_s=60.0, min_gap_s=1.0, clock=clock, trim=trim)


def test_a_quiet_exporter_never_trims() -> None:
    clock = Clock()
    trims: list[float] = []
    p = policy(clock, trims)
    for _ in range(100):
        assert p.after_scrape(large=False) is False
        clock.now += 0.5
    assert trims == []


def test_a_large_scrape_trims_then_every_scrape_trims_for_the_hold_at_most_once_a_second() -> None:
    clock = Clock()
    trims: list[float] = []
    p = policy(clock, trims)
    assert p.after_scrape(large=True)
    for _ in range(200):  # a scrape every 0.5 s for 100 s
        clock.now += 0.5
        p.after_scrape(large=False)
    # 50.0, then once a second from 51 to 110 (the hold ends 60 s after the large scrape)
    assert trims[0] == 50.0 and trims[-1] == 110.0
    assert all(b - a >= 1.0 for a, b in zip(trims, trims[1:]))
    assert len(trims) == 61


def test_every_large_scrape_trims_and_restarts_the_hold() -> None:
    clock = Clock()
    trims: list[float] = []
    p = policy(clock, trims)
    p.after_scrape(large=True)
    clock.now += 0.1
    assert p.after_scrape(large=True)  # large ones are not held back by the gap
    clock.now += 30.0
    assert p.after_scrape(large=False)  # 30 s after the second large scrape
    clock.now += 0.5
    assert p.after_scrape(large=False) is False  # within the gap
    clock.now += 29.0
    assert p.after_scrape(large=False)  # 59.5 s after the second (89.6 s after the first)
    clock.now += 1.0
    assert p.after_scrape(large=False) is False  # the hold is over


def test_the_process_policy_holds_past_the_longest_diagnosis_window_and_the_trim_runs_here() -> None:
    assert HOLD_S > 60.0  # the derived sources keep up to 60 s of snapshots
    assert isinstance(release_free_memory(), bool)  # glibc here: a real malloc_trim(0), no error


# --- the pinned mmap threshold (exporter/memtrim.py pin_mmap_threshold) -----------------------

_MMAP_PROBE = """
import ctypes, ctypes.util, sys
from exporter.memtrim import pin_mmap_threshold

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(ctypes.util.find_library("c"))
if not hasattr(libc, "mallinfo2"):
    print("no-mallinfo2")
    sys.exit(0)
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "pin":
    assert pin_mmap_threshold(environ={})
libc.free(libc.malloc(10 << 20))  # a 9 MB body came and went: glibc's own threshold rises past it
before = libc.mallinfo2().hblks
block = libc.malloc(1 << 20)  # the next large buffer (a body, the rendered exposition)
print(libc.mallinfo2().hblks - before)
libc.free(block)
"""


def _mapped_after_a_large_free(mode: str) -> str:
    """Whether a 1 MiB block, allocated after a 10 MiB one was freed, got a mapping of its own (a fresh process)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    done = subprocess.run([sys.executable, "-c", _MMAP_PROBE, mode], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_pinned_a_large_buffer_keeps_its_own_mapping_after_a_larger_one_was_freed() -> None:
    # why serve pins it: with glibc's dynamic threshold the freed 10 MiB block lifts the threshold
    # and the 1 MiB buffer lands in the heap (0 new mappings), where its pages fragment
    default, pinned = _mapped_after_a_large_free("default"), _mapped_after_a_large_free("pin")
    if default == "no-mallinfo2":
        pytest.skip("the C library has no mallinfo2 (glibc before 2.33, or not glibc)")
    assert (default, pinned) == ("0", "1")


def test_the_operator_can_keep_glibc_s_threshold() -> None:
    assert pin_mmap_threshold(environ={"LLM_EXPORTER_PIN_MMAP_THRESHOLD": "false"}) is False
    assert pin_mmap_threshold(environ={"MALLOC_MMAP_THRESHOLD_": "65536"}) is False
