"""/readyz turns 200 only once a GPU or engine source has sampled successfully.

Why (issue 32): the derive stage's steps (``parallel``, ``capacity``, ``diagnosis``)
succeed with nothing measured, so /readyz read 200 one diagnosis interval after start
with no GPU and no engine ever sampled. Here the real derive stage runs passes beside a
GPU and an engine that only fail and the exporter's own sources that succeed: 503,
until one real source samples.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from exporter.derive import DeriveStage
from exporter.diagnosis import DiagnosisSettings, build_diagnosis
from exporter.profile.state import SOURCE_NAME as PROFILE_SOURCE
from exporter.runner import SourceRunner
from exporter.samples import Sample, SampleResult, SourceError
from exporter.server import create_app
from exporter.store import SnapshotStore, readiness_source
from tests.support.asgi import UvicornThread


class Scripted:
    """A source named ``name`` whose attempts play back ``outcomes`` (the last one repeats)."""

    interval = 1.0
    timeout = 0.5

    def __init__(self, name: str, *outcomes: SampleResult | SourceError) -> None:
        self.name = name
        self.outcomes = list(outcomes)

    def sample(self) -> SampleResult:
        outcome = self.outcomes.pop(0) if len(self.outcomes) > 1 else self.outcomes[0]
        if isinstance(outcome, SourceError):
            raise outcome
        return outcome

    def close(self) -> None:
        pass


REFUSED = SourceError("connection", "refused")
NO_GPU = SourceError("library_not_found", "libnvidia-ml.so.1")
WAITING = SampleResult([Sample("llm_scheduler_requests_waiting", {"server": "a"}, 2.0)])
BUSY_THREAD = SampleResult([Sample("llm_process_busiest_thread_cpu_ratio", {"server": "a"}, 0.5)])


def _stage(store: SnapshotStore) -> DeriveStage:
    """The derive stage ``serve`` builds (parallel, capacity, diagnosis), registered in ``store``."""
    bundle = build_diagnosis(DiagnosisSettings(interval=1.0, gpu_interval=1.0), [], store)
    stage = bundle.sources[0]
    assert isinstance(stage, DeriveStage)
    stage.register(store)
    return stage


@pytest.fixture
def exporter() -> Iterator[tuple[SnapshotStore, str]]:
    """A store and the app serving it on 127.0.0.1 (in a thread)."""
    store = SnapshotStore()
    with UvicornThread(create_app(store)) as srv:
        yield store, f"http://127.0.0.1:{srv.port}"


def _readyz(base: str) -> tuple[int, str]:
    r = requests.get(base + "/readyz", timeout=5)
    return r.status_code, r.text


def test_only_the_gpu_and_engines_count() -> None:
    assert readiness_source("gpu") and readiness_source("engine:vllm-0")
    for name in ("diagnosis", "parallel", "capacity", "capacity_profile", PROFILE_SOURCE, "process:a", "probe:a"):
        assert not readiness_source(name), name
    assert not readiness_source("kubernetes:gpu") and not readiness_source("engine")


def test_derived_and_internal_successes_leave_it_not_ready_until_an_engine_samples(
    exporter: tuple[SnapshotStore, str],
) -> None:
    store, base = exporter
    stage = _stage(store)
    gpu = SourceRunner(Scripted("gpu", NO_GPU), store)
    engine = SourceRunner(Scripted("engine:a", REFUSED, REFUSED, WAITING), store)
    others = [SourceRunner(Scripted(name, BUSY_THREAD), store) for name in ("process:a", PROFILE_SOURCE)]
    for _ in range(2):
        assert not gpu.sample_once() and not engine.sample_once()
        assert all(o.sample_once() for o in others)
        stage.run_pass(store)
    states = store.states()
    assert all(states[n].last_success is not None for n in stage.names), "the derive steps must have succeeded"
    assert not store.ready()
    status, body = _readyz(base)
    assert (status, body) == (503, "not ready: no GPU or engine source has sampled successfully yet\n")
    assert engine.sample_once()
    assert _readyz(base) == (200, "ready\n")


def test_a_gpu_success_alone_makes_it_ready(exporter: tuple[SnapshotStore, str]) -> None:
    store, base = exporter
    gpu = SourceRunner(Scripted("gpu", SampleResult([])), store)
    assert _readyz(base)[0] == 503
    assert gpu.sample_once()
    assert _readyz(base)[0] == 200


def test_a_real_source_down_now_keeps_it_ready(exporter: tuple[SnapshotStore, str]) -> None:
    """Ready is "has sampled", not "is up": an engine that went down must still be scraped (source_up 0)."""
    store, base = exporter
    engine = SourceRunner(Scripted("engine:a", WAITING, REFUSED), store)
    assert engine.sample_once() and not engine.sample_once()
    assert not store.snapshot().source_up("engine:a")
    assert _readyz(base)[0] == 200
