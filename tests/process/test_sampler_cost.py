"""The process sampler's cost for a process with ~300 threads is bounded.

The checks are structural (one small read per thread, two where schedstat shows no
run time yet, a cap on threads read, the tree re-listed every TREE_REFRESH_S, not
every sample): they hold on a loaded machine. The CPU a sample costs is a figure,
not a test — it is measured by `python3 -m bench.process_sampler_cost` (docs/measurements.md,
runtime benchmarks), since a CPU-time bound fails whenever CI's two cores are busy.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import psutil
import pytest

from exporter.process import sampler
from exporter.process.sampler import ProcessSource, read_thread_times
from exporter.samples import Sample

THREADS = 300


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


#: a child with N threads parked on an Event; prints their native ids in creation order, exits when stdin closes
_CHILD = """
import sys, threading
park = threading.Event()
started = []
for _ in range(int(sys.argv[1])):
    t = threading.Thread(target=park.wait, daemon=True)
    t.start()
    started.append(t.native_id)
print(" ".join(map(str, started)), flush=True)
sys.stdin.read()
"""


@pytest.fixture(scope="module")
def threaded_child() -> Iterator[tuple[int, list[int]]]:
    """(pid, the native ids of the threads it started, oldest first) of a real process with THREADS parked threads."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(THREADS)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        started = [int(tid) for tid in proc.stdout.readline().split()]
        assert len(started) == THREADS
        yield proc.pid, started
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture(scope="module")
def busy_pid(threaded_child: tuple[int, list[int]]) -> int:
    return threaded_child[0]


def test_one_sample_reads_one_small_file_per_thread(busy_pid: int, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[tuple[str, bytes]] = []
    real = sampler._read_small

    def recording(path: str) -> bytes:
        data = real(path)
        reads.append((path, data))
        return data

    monkeypatch.setattr(sampler, "_read_small", recording)
    src = ProcessSource("busy", pid=busy_pid, clock=FakeClock())
    points = {p.name: p.value for p in src.sample().points if isinstance(p, Sample)}
    assert points["llm_process_threads"] == THREADS + 1
    schedstat = [(path, data) for path, data in reads if path.endswith("/schedstat")]
    assert len(schedstat) == THREADS + 1 and len({path for path, _ in schedstat}) == THREADS + 1
    # the designed fallback, and only it: a thread whose schedstat shows no run time yet (seen once
    # on a loaded 2-core machine for 2 of 301 parked threads) is also read from its stat
    unaccounted = {path.rsplit("/", 1)[0] for path, data in schedstat if data.split()[:1] == [b"0"]}
    others = [path for path, _ in reads if not path.endswith("/schedstat")]
    assert all(path.endswith("/stat") and path.rsplit("/", 1)[0] in unaccounted for path in others), others


def test_threads_read_per_sample_are_capped_but_all_are_counted(threaded_child: tuple[int, list[int]]) -> None:
    pid, started = threaded_child
    count, times = read_thread_times(pid, limit=50)
    assert count == THREADS + 1 and len(times) == 50
    # by identity, wherever the TIDs wrapped: the main thread (TID = PID) and the 49 it started first
    assert set(times) == {pid, *started[:49]}


def test_threads_kept_follow_allocation_order_across_a_tid_wrap() -> None:
    # pid 32000 created threads 32001..32767, then the TIDs wrapped to 300..
    created = [32000, *range(32001, 32768), *range(300, 400)]
    order = sorted(reversed(created), key=lambda tid: sampler._allocation_order(32000, tid))
    assert order == created


def test_the_process_tree_is_listed_again_only_every_refresh_period(busy_pid: int, monkeypatch: pytest.MonkeyPatch) -> None:
    listings: list[int] = []
    real = psutil.Process.children

    def counting(self: psutil.Process, recursive: bool = False) -> list[psutil.Process]:
        listings.append(1)
        return real(self, recursive)

    monkeypatch.setattr(psutil.Process, "children", counting)
    clock = FakeClock()
    src = ProcessSource("busy", pid=busy_pid, clock=clock)
    for _ in range(5):
        src.sample()
        clock.now += 1.0
    assert len(listings) == 1
    clock.now += sampler.TREE_REFRESH_S
    src.sample()
    assert len(listings) == 2


def test_a_thread_without_schedstat_falls_back_to_stat(monkeypatch: pytest.MonkeyPatch) -> None:
    real = sampler._read_small

    def no_schedstat(path: str) -> bytes:
        if path.endswith("/schedstat"):
            return b"0 0 0\n"  # what a kernel without sched_info reports
        return real(path)

    monkeypatch.setattr(sampler, "_read_small", no_schedstat)
    tid = threading.get_native_id()
    before, _ = read_thread_times(os.getpid())[1][tid]
    start = time.thread_time()
    while time.thread_time() - start < 0.1:  # ten 10 ms ticks of CPU
        pass
    after, demand = read_thread_times(os.getpid())[1][tid]
    assert 0.07 <= after - before <= 0.3 and demand is None
