"""The process sampler against real processes (no mocks of psutil).

CPU figures are made deterministic without timing: the worker burns an exact
amount of *thread CPU time* between two samples, and the sampler's wall clock
is injected, so the expected ratio is known (CPU seconds burnt / wall seconds
the fake clock advanced) up to the small overhead of the worker's own loop.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import cast

import psutil
import pytest

from exporter.config import Config
from exporter.engines.config import EngineConfig
from exporter.process import build_process_sources
from exporter.process.sampler import (
    ProcessSource,
    find_by_substring,
    own_family,
    read_schedstat,
)
from exporter.samples import Sample, SampleResult, SourceError
from tests.support.waiting import wait_until

WORKER = Path(__file__).with_name("proc_worker.py")
SPIN = 0.3  # CPU seconds burnt per test: light on a shared machine


class Worker:
    def __init__(self, marker: str, with_child: bool = False) -> None:
        args = [sys.executable, str(WORKER), marker] + (["--with-child"] if with_child else [])
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def spin(self, seconds: float) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"spin {seconds}\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "done"

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def marker() -> str:
    return f"llm-exporter-test-{uuid.uuid4().hex}"


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def values(result: SampleResult) -> dict[str, float]:
    return {p.name: p.value for p in result.points if isinstance(p, Sample)}


def test_busiest_thread_of_a_child_process_is_found(marker: str) -> None:
    w = Worker(marker, with_child=True)
    try:
        clock = FakeClock()
        src = ProcessSource("sim", pid=w.pid, interval=1.0, clock=clock)
        first = values(src.sample())
        assert set(first) == {"llm_process_resident_memory_bytes", "llm_process_threads"}  # no CPU before a delta
        assert first["llm_process_threads"] >= 4  # main + spinner in each of two processes
        assert first["llm_process_resident_memory_bytes"] > 1e6
        w.spin(SPIN)
        clock.now += 1.0
        second = values(src.sample())
        # the spinner thread of the child burnt SPIN CPU seconds during one (fake) wall second
        # /proc counts CPU in clock ticks (10 ms): allow two ticks below
        assert SPIN - 0.02 <= second["llm_process_busiest_thread_cpu_ratio"] < SPIN + 0.15
        assert second["llm_process_cpu_ratio"] >= second["llm_process_busiest_thread_cpu_ratio"]
        # demand (on-CPU + run-queue wait) is at least what the thread got
        assert second["llm_process_busiest_thread_cpu_demand_ratio"] >= second["llm_process_busiest_thread_cpu_ratio"]
        assert {p.labels["server"] for p in src.sample().points} == {"sim"}
        assert src.name == "process:sim"
    finally:
        w.stop()


def test_an_idle_process_reads_near_zero(marker: str) -> None:
    w = Worker(marker)
    try:
        clock = FakeClock()
        src = ProcessSource("sim", pid=w.pid, clock=clock)
        src.sample()
        clock.now += 10.0
        v = values(src.sample())
        assert 0.0 <= v["llm_process_busiest_thread_cpu_ratio"] < 0.05
    finally:
        w.stop()


def test_vanished_pid_is_a_source_fault_every_time(marker: str) -> None:
    w = Worker(marker)
    src = ProcessSource("sim", pid=w.pid)
    src.sample()
    w.proc.kill()  # not reaped yet: a zombie counts as gone too
    wait_until(lambda: psutil.Process(w.pid).status() == psutil.STATUS_ZOMBIE, 10, "the killed worker to become a zombie")
    for _ in range(2):
        with pytest.raises(SourceError) as err:
            src.sample()
        assert err.value.reason == "process_gone"
    w.proc.wait(10)
    with pytest.raises(SourceError):
        src.sample()


def test_substring_finds_the_process_again_after_a_restart(marker: str) -> None:
    first = Worker(marker)
    second = None
    try:
        src = ProcessSource("sim", substring=marker)
        src.sample()
        assert src.resolved_pid == first.pid
        first.proc.kill()
        first.proc.wait(10)
        with pytest.raises(SourceError) as err:
            src.sample()
        assert err.value.reason == "process_gone" and marker in err.value.message
        second = Worker(marker)
        src.sample()
        assert src.resolved_pid == second.pid
    finally:
        first.stop()
        if second:
            second.stop()


def test_pid_with_substring_falls_back_to_the_substring(marker: str) -> None:
    w = Worker(marker)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(10)
    try:
        src = ProcessSource("sim", pid=gone.pid, substring=marker)
        src.sample()
        assert src.resolved_pid == w.pid
    finally:
        w.stop()


def test_substring_picks_the_root_of_a_matching_tree(marker: str) -> None:
    w = Worker(marker, with_child=True)
    try:
        found = find_by_substring(marker, own_family())
        assert found is not None and found.pid == w.pid
        assert find_by_substring(f"{marker}-nobody", own_family()) is None
    finally:
        w.stop()


def test_own_process_and_ancestors_are_never_the_target() -> None:
    family = own_family()
    assert os.getpid() in family and os.getppid() in family


def test_needs_a_pid_or_a_substring() -> None:
    with pytest.raises(ValueError):
        ProcessSource("sim")


def test_build_process_sources_one_per_engine_that_names_a_process() -> None:
    cfg = Config(process_interval=2.5)
    cfg.engines = [
        EngineConfig(url="http://a/metrics", name="a", pid=123),
        EngineConfig(url="http://b/metrics", name="b"),
        EngineConfig(url="http://c/metrics", name="c", process="vllm serve"),
    ]
    sources = build_process_sources(cfg.engines, cfg.process_interval)
    assert [(s.name, s.interval) for s in sources] == [("process:a", 2.5), ("process:c", 2.5)]
    assert cast(ProcessSource, sources[0]).pid == 123 and cast(ProcessSource, sources[1]).substring == "vllm serve"


def test_schedstat_counts_this_threads_cpu() -> None:
    import threading

    before = read_schedstat(os.getpid(), threading.get_native_id())
    start = time.thread_time()
    while time.thread_time() - start < 0.05:  # several scheduler ticks of CPU
        pass
    after = read_schedstat(os.getpid(), threading.get_native_id())
    assert before is not None and after is not None and after > before
    assert read_schedstat(os.getpid(), 0) is None
