"""Helpers for the simulator tests: a real server on 127.0.0.1:0, load in the background, polling.

Every helper bounds its waiting and stops what it starts.
"""

from __future__ import annotations

import asyncio
import csv
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from exporter.loadgen import LoadResult, LoadSpec, run_load
from exporter.simulator import scenarios
from exporter.simulator.instance import Simulator
from exporter.simulator.server import SimulatorServer

ROOT = Path(__file__).resolve().parents[2]
KERNELS_CSV = ROOT / "exporter" / "data" / "traces" / "kernels.csv"


@contextmanager
def sim_server(scenario: str = "healthy", dialect: str = "vllm", **settings: Any) -> Iterator[SimulatorServer]:
    """A simulator with uvicorn on a thread, port 0; stopped on exit."""
    server = SimulatorServer(Simulator(scenario, dialect, settings)).start()
    try:
        yield server
    finally:
        server.stop()


class BackgroundLoad:
    """``run_load`` on its own thread and event loop, so the test thread can poll meanwhile."""

    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec
        self.result: LoadResult | None = None
        self.error: BaseException | None = None
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="test-load", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def main() -> LoadResult:
            self._stop = asyncio.Event()
            return await run_load(self.spec, stop=self._stop)

        try:
            self.result = self._loop.run_until_complete(main())
        except BaseException as err:  # surfaced by stop()
            self.error = err
        finally:
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    def __enter__(self) -> BackgroundLoad:
        self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> LoadResult:
        if self._stop is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:
                pass
        self._thread.join(timeout)
        if self.error is not None:
            raise self.error
        assert self.result is not None, "load did not finish"
        return self.result

    def __exit__(self, *exc: object) -> None:
        if self._thread.is_alive():
            self.stop()


def scenario_load(server_url: str, scenario: str, time_scale: float, duration_s: float = 60.0, **changes: Any) -> LoadSpec:
    spec = scenarios.get(scenario).load_spec(server_url, time_scale=time_scale, duration_s=duration_s)
    for k, v in changes.items():
        setattr(spec, k, v)
    return spec


def get_json(url: str) -> Any:
    resp = httpx.get(url, timeout=10)
    resp.raise_for_status()
    return resp.json()


def samples(base_url: str, count: int, every: float, warmup: float = 0.0) -> list[dict[str, Any]]:
    """``count`` snapshots of /sim/state and /sim/gpu, ``every`` seconds apart, after ``warmup``."""
    time.sleep(warmup)
    out = []
    for i in range(count):
        if i:
            time.sleep(every)
        out.append({"state": get_json(base_url + "/sim/state"), "gpus": get_json(base_url + "/sim/gpu")["gpus"]})
    return out


def trace_phase_means(path: Path = KERNELS_CSV) -> dict[str, dict[str, float]]:
    """Per-phase means of the numeric columns of the H200 kernels trace, first sample of each phase dropped."""
    rows: dict[str, list[dict[str, str]]] = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            rows.setdefault(row["phase"], []).append(row)
    means: dict[str, dict[str, float]] = {}
    for phase, items in rows.items():
        kept = items[1:] if len(items) > 1 else items
        cols = (
            "nvml_gpu_util",
            "nvml_mem_util",
            "sm_util",
            "sm_occupancy",
            "tensor_util",
            "dram_bw_util",
            "power_w",
            "sm_clock_mhz",
            "pcie_rx_mib_s",
        )
        means[phase] = {c: sum(float(r[c]) for r in kept) / len(kept) for c in cols}
    return means
