"""Source ``diagnosis``: one engine cycle per interval, published as metrics.

Why a source like any other: it gets its own loop, interval, timeout and
health series from the runner, and its verdict lands in the store, so
``llm_bottleneck_score`` is scraped exactly like a GPU metric.

Why a cycle may wait a moment before it judges: every source runs on its own
thread and interval, and they all start together, so in every round the
diagnosis (which only reads) tends to finish *before* the GPU, engine and
process sources land their new sample, and would judge each round on the
previous round's data: one whole interval of latency for nothing. A cycle
therefore waits, briefly and boundedly, for an input whose next sample is due
within ``align_share`` of its interval (and of ours), then takes the snapshot.
A source that is down, overdue or not due soon is not waited for, so a dead
source never slows the verdict, and the wait locks the diagnosis onto the
moment just after its inputs land.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from exporter.diagnosis.engine import DiagnosisEngine
from exporter.diagnosis.fanout import NodeDiagnosis
from exporter.samples import SampleResult
from exporter.store import SnapshotStore

#: sources that themselves read the store (never worth waiting for)
DERIVED_SOURCES: frozenset[str] = frozenset({"diagnosis", "parallel", "capacity", "capacity_profile"})
#: wait for an input whose next sample is due within this share of its interval and of ours
ALIGN_SHARE = 0.5
#: how late a due sample may land (share of its interval, at least ALIGN_MIN_SLACK_S)
ALIGN_SLACK_SHARE = 0.25
ALIGN_MIN_SLACK_S = 0.05
_POLL_S = 0.005


class DiagnosisSource:
    """Reads ``store.snapshot()``, runs the rules (per engine scope, with a NodeDiagnosis), returns
    the verdict's points."""

    name = "diagnosis"

    def __init__(
        self,
        store: SnapshotStore,
        engine: DiagnosisEngine | NodeDiagnosis,
        interval: float,
        timeout: float,
        derived: Iterable[str] = DERIVED_SOURCES,
        align_share: float = ALIGN_SHARE,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.store = store
        self.engine = engine
        self.interval = interval
        self.timeout = timeout
        self.derived = frozenset(derived) | {self.name}
        self.align_share = align_share
        self._clock = clock
        self._sleep = sleep

    def sample(self) -> SampleResult:
        self.await_inputs()
        verdict = self.engine.observe(self.store.snapshot())
        return SampleResult(verdict.points(self.engine.rules))

    def due_inputs(self, now: float) -> dict[str, tuple[float | None, float]]:
        """Inputs worth waiting for: name -> (their last success, latest time the next one may land), monotonic seconds.

        An input is due when it is up and its next sample (last success plus its
        interval) is expected within ``align_share`` of its interval and of ours.
        """
        out: dict[str, tuple[float | None, float]] = {}
        for st in self.store.states().values():
            if st.name in self.derived or not st.up or st.last_success_mono is None or st.interval <= 0:
                continue
            expected = st.last_success_mono + st.interval
            horizon = self.align_share * min(st.interval, self.interval)
            slack = max(ALIGN_MIN_SLACK_S, ALIGN_SLACK_SHARE * st.interval)
            if now < expected - horizon or now > expected + slack:
                continue  # not due soon (fresh enough), or overdue (maybe stuck: do not wait)
            out[st.name] = (st.last_success_mono, expected + slack)
        return out

    def await_inputs(self) -> float:
        """Wait until every due input has landed (bounded); returns the seconds waited."""
        start = self._clock()
        due = self.due_inputs(start)
        if not due:
            return 0.0
        # never past our own share of the interval, so a cycle stays well inside its timeout
        cap = start + self.align_share * self.interval + ALIGN_MIN_SLACK_S
        version = None
        while True:
            now = self._clock()
            if self.store.version != version:
                version = self.store.version
                states = self.store.states()
                due = {n: d for n, d in due.items() if n in states and states[n].last_success_mono == d[0]}
            due = {n: d for n, d in due.items() if now <= d[1]}
            if not due or now >= cap:
                return now - start
            self._sleep(min(_POLL_S, cap - now))

    def close(self) -> None:
        """Holds nothing of its own; a NodeDiagnosis may hold an NVML session (scope lookups)."""
        if isinstance(self.engine, NodeDiagnosis):
            self.engine.close()
