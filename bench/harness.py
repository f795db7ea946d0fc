"""Shared benchmark plumbing: the busy node (replayed GPUs, fake engines), an exporter on it, CPU, percentiles.

The parts are the tests' kit (tests/support): the fake engine, the synthetic vLLM
exposition, the child-process runner (its output in a file, never a pipe).
Everything binds 127.0.0.1 and every process started here is stopped by the
context managers, even when a benchmark fails half-way.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import requests

from tests.support.exposition import vllm_exposition
from tests.support.fake_engine import FakeEngine
from tests.support.ports import free_port
from tests.support.processes import ROOT, Child, exporter_argv

TRACE = ROOT / "exporter" / "data" / "traces" / "kernels.csv"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


@contextlib.contextmanager
def replay_copies(gpus: int) -> Iterator[str]:
    """`gpus` copies of the recorded H200 trace; yields a --gpu-source value."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    try:
        paths = []
        for i in range(gpus):
            p = tmp / f"gpu{i}.csv"
            shutil.copy(TRACE, p)
            paths.append(str(p))
        yield "replay:" + ",".join(paths)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def busy_node(gpus: int = 8) -> Iterator[tuple[str, list[str]]]:
    """The benchmarks' node: `gpus` replayed GPUs and two engines serving a 55 KB vLLM exposition.

    Yields (the --gpu-source value, the two engines' /metrics URLs).
    """
    text = vllm_exposition(1)
    with replay_copies(gpus) as gpu_source, FakeEngine(text) as e1, FakeEngine(text) as e2:
        yield gpu_source, [e1.url, e2.url]


def engine_flags(urls: list[str]) -> list[str]:
    """``--engine URL`` for each URL."""
    return [arg for url in urls for arg in ("--engine", url)]


@contextlib.contextmanager
def exporter(args: list[str], ready_sources: int = 1, timeout: float = 60.0) -> Iterator[tuple[Child, str]]:
    """`llm-layer-exporter serve ARGS` as a subprocess, once `ready_sources` sources are up; yields (child, base URL)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        up = [
            line
            for line in requests.get(base + "/metrics", timeout=2).text.splitlines()
            if line.startswith("llm_exporter_source_up{")
        ]
        return len(up) >= ready_sources and not any(line.endswith(" 0.0") for line in up)

    with Child(exporter_argv("serve", "--listen-address", f"127.0.0.1:{port}", *args), "bench-exporter") as child:
        child.wait_ready(ready, timeout, f"{ready_sources} sources up")
        yield child, base


@contextlib.contextmanager
def measured_exporter(args: list[str], gpus: int, warmup: float) -> Iterator[tuple[psutil.Process, requests.Session, str]]:
    """`serve ARGS` on the busy node, warmed up for `warmup` s, with a keep-alive scrape session open.

    Yields (its process, the session, its base URL), ready for a CPU baseline.
    """
    with busy_node(gpus) as (gpu_source, engines):
        with exporter(["--gpu-source", gpu_source, *engine_flags(engines), *args], ready_sources=3) as (child, base):
            session = requests.Session()
            time.sleep(warmup)
            session.get(base + "/metrics", timeout=5)  # open the keep-alive connection before the baseline
            yield psutil.Process(child.pid), session, base


def tree_cpu_seconds(proc: psutil.Process) -> float:
    """User + system CPU seconds of ``proc`` and its children (gone children count 0)."""
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def time_scrapes(url: str, n: int) -> list[float]:
    """Sequential scrapes over one keep-alive connection, as Prometheus does."""
    session = requests.Session()
    session.get(url, timeout=5)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = session.get(url, timeout=5)
        r.content  # noqa: B018 - read the body fully
        times.append(time.perf_counter() - t0)
        if r.status_code != 200:
            raise RuntimeError(f"scrape answered {r.status_code}")
    return times
