"""Shared fixture: a live diagnosis served on 127.0.0.1 with the real runner loop."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests
from fastapi import FastAPI

from exporter.diagnosis import DiagnosisSettings, build_diagnosis
from exporter.runner import BringsItsLoop, RunnerGroup
from exporter.samples import SampleResult
from exporter.sources import Source
from exporter.store import SnapshotStore
from tests.diagnosis.diag_points import engine, gpu, histogram
from tests.support.asgi import UvicornThread
from tests.support.waiting import wait_until

PCIE_COPY = gpu(util=0.99, sm=0.0, tensor=0.0, dram=0.01, pcie=58e9)


class FixedSource:
    """A GPU reporting the PCIe-copy signature beside an engine whose TTFT is over the SLO
    (every request 3 s to its first token), so the copy is the primary of a degraded service."""

    name = "gpu"
    interval = 0.2
    timeout = 1.0

    def __init__(self) -> None:
        self.requests = 0

    def sample(self) -> SampleResult:
        self.requests += 10
        slow = histogram("llm_request_ttft_seconds", [3.0] * self.requests)
        return SampleResult([*PCIE_COPY, *engine(waiting=0, running=4, kv=0.1), slow])

    def close(self) -> None:
        pass


@pytest.fixture
def live_exporter() -> Iterator[tuple[str, SnapshotStore]]:
    """A store, the GPU source and the derive stage on a runner group, and the router served."""
    store = SnapshotStore()
    bundle = build_diagnosis(DiagnosisSettings(interval=0.2, gpu_interval=0.2), [], store)
    group = RunnerGroup(store)
    runnables: list[Source | BringsItsLoop] = [FixedSource(), *bundle.sources]
    for s in runnables:
        group.add(s)
    group.start()
    app = FastAPI()
    app.include_router(bundle.router)
    try:
        with UvicornThread(app) as server:
            base = f"http://127.0.0.1:{server.port}"
            wait_until(lambda: requests.get(base + "/diagnosis", timeout=2).json()["primary"], 10, "a verdict with a primary")
            yield base, store
    finally:
        group.stop()
