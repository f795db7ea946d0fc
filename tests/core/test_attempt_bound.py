"""An engine's deadline is the engine's; our own bounded work after it is not a timeout (issue 37).

Under 50 scrapers of a 2 MB exposition the serving threads hold the GIL, and parsing
the engine's capped body took longer than the engine's 3 s deadline: the engine read
down although it had answered at once. The engine's deadline is enforced on the wire
(exporter/engines/fetch.py); the runner fails an attempt only past ``attempt_bound``.
"""

from __future__ import annotations

from exporter.engines.config import EngineConfig
from exporter.engines.source import EngineSource
from exporter.runner import SourceRunner
from exporter.samples import Sample, SampleResult
from exporter.sources import attempt_bound
from exporter.store import SnapshotStore


class Ticking:
    """A clock the sample itself moves: ``sample()`` takes ``took`` seconds of it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class SlowToProcess:
    """A source whose answer came in time and whose own processing then took ``took`` seconds."""

    name = "engine:slow"
    interval = 5.0
    timeout = 3.0

    def __init__(self, clock: Ticking, took: float, bound: float | None) -> None:
        self.clock, self.took = clock, took
        if bound is not None:
            self.attempt_bound = bound

    def sample(self) -> SampleResult:
        self.clock.now += self.took
        return SampleResult(points=[Sample("llm_scheduler_requests_running", {"server": "slow"}, 1.0)])

    def close(self) -> None:
        pass


def _up_after(took: float, bound: float | None) -> bool:
    clock = Ticking()
    store = SnapshotStore()
    ok = SourceRunner(SlowToProcess(clock, took, bound), store, clock=clock).sample_once()
    st = store.snapshot().sources["engine:slow"]
    assert st.up is ok
    return ok


def test_processing_past_the_engines_deadline_is_not_a_timeout_within_the_bound() -> None:
    assert _up_after(took=4.5, bound=8.0)  # answered in time, parsed slowly on a starved node: up
    assert not _up_after(took=8.5, bound=8.0)  # past the bound: a hang, failed as a timeout


def test_a_source_without_a_bound_is_held_to_its_timeout() -> None:
    assert not _up_after(took=3.5, bound=None)
    assert attempt_bound(SlowToProcess(Ticking(), 0.0, None)) == 3.0


def test_the_engine_source_bounds_an_attempt_at_its_deadline_plus_one_interval() -> None:
    source = EngineSource(EngineConfig(name="e", url="http://127.0.0.1:9/metrics", timeout=3.0, interval=5.0))
    assert source.timeout == 3.0 and attempt_bound(source) == 8.0
