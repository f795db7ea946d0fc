"""The derive stage: ``parallel`` -> ``capacity`` -> ``diagnosis`` from one snapshot, in one pass.

Why one stage and not one source each: a derived figure is only as good as
the inputs it was computed from. As separate sources on their own threads the
diagnosis judged the group skew ``parallel`` had published a cycle earlier and
the capacity ratio of another moment again. Here one pass takes ONE snapshot of
the measured sources (``store.snapshot(inputs_only=True)``), runs every step in
order, each seeing the snapshot plus what the steps before it computed, and
publishes every step's points in one store write (``record_batch``). Each step
keeps its own ``source`` label (``llm_exporter_source_up{source="diagnosis"}``
and the rest) and its own health: a step that fails or outlives the timeout
reads down alone, and the steps after it still run.

Why a pass may wait a moment before its snapshot: every source runs on its own
thread and interval, and they start together, so a pass would tend to run just
*before* the GPU, engine and process sources land their new sample and judge
each round on the previous round's data: one interval of latency for nothing.
A pass therefore waits, briefly and boundedly, for an input whose next sample
is due within ``ALIGN_SHARE`` of its interval (and of ours). The store wakes it
when a sample lands (``SnapshotStore.wait_for_write``): no polling. A source
that is down, overdue or not due soon is not waited for, so a dead source never
slows the verdict.

The names of the derived sources are the steps' names: the store marks them
``derived`` when the stage registers them, and that flag is the one list every
reader (the notices, the held-verdict check, the alignment) goes by.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Protocol

from exporter.runner import LOG_EVERY_S, LoopThread, TransitionLog
from exporter.samples import Point, SampleResult, SourceError
from exporter.store import Outcome, Snapshot, SnapshotStore, SourceState

log = logging.getLogger(__name__)

#: wait for an input whose next sample is due within this share of its interval and of ours
ALIGN_SHARE = 0.5
#: how late a due sample may land (share of its interval, at least ALIGN_MIN_SLACK_S)
ALIGN_SLACK_SHARE = 0.25
ALIGN_MIN_SLACK_S = 0.05


#: what tells that an input landed a sample: (its last success, whether it attempted one)
Mark = tuple[float | None, bool]


def _mark(st: SourceState) -> Mark:
    return (st.last_success_mono, st.attempted)


class Step(Protocol):
    """One computation of the stage: reads a snapshot, returns its points (raises SourceError on failure)."""

    #: its ``source`` label
    name: str

    def derive(self, snap: Snapshot) -> SampleResult: ...

    def close(self) -> None: ...


class DeriveStage:
    """The steps, in the order they run, and the interval and timeout they share.

    ``name`` and ``make_runner`` let ``RunnerGroup.add`` take it where it takes a source.
    """

    name = "derive"

    def __init__(self, steps: Sequence[Step], interval: float, timeout: float, align_share: float = ALIGN_SHARE) -> None:
        names = [s.name for s in steps]
        if len(set(names)) != len(names):
            raise ValueError(f"derive stage: step names repeat: {', '.join(names)}")
        self.steps = list(steps)
        self.interval = interval
        self.timeout = timeout
        self.align_share = align_share
        self._crash_logged: set[str] = set()

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.steps]

    def register(self, store: SnapshotStore) -> None:
        for s in self.steps:
            store.register(s.name, self.interval, self.timeout, derived=True)

    def run_pass(self, store: SnapshotStore) -> Snapshot:
        """One pass over every step from one snapshot; all results written together. Returns the snapshot."""
        snap = store.snapshot(inputs_only=True)
        derived: list[Point] = []
        outcomes: list[Outcome] = []
        for step in self.steps:
            outcome = self._run(store, step, snap.extended(derived))
            if outcome.error is None:
                derived += outcome.points
            outcomes.append(outcome)
        store.record_batch(outcomes)
        return snap

    def _run(self, store: SnapshotStore, step: Step, snap: Snapshot) -> Outcome:
        store.begin_attempt(step.name)
        started = time.monotonic()
        try:
            result = step.derive(snap)
        except SourceError as err:
            return Outcome(step.name, time.monotonic() - started, error=err)
        except Exception as exc:  # a bug in one step must not stop the others, nor the loop
            if step.name not in self._crash_logged:
                log.exception("derived source %s raised unexpectedly", step.name)
                self._crash_logged.add(step.name)
            return Outcome(step.name, time.monotonic() - started, error=SourceError("internal", f"{type(exc).__name__}: {exc}"))
        finally:
            store.end_attempt(step.name)
        duration = time.monotonic() - started
        self._crash_logged.discard(step.name)
        if duration > self.timeout:
            return Outcome(
                step.name, duration, error=SourceError("timeout", f"took {duration:.2f}s, over the {self.timeout:.2f}s timeout")
            )
        return Outcome(step.name, duration, result.points, list(result.partial_errors))

    def due_inputs(self, store: SnapshotStore, now: float) -> dict[str, tuple[Mark, float]]:
        """Inputs worth waiting for: name -> (their mark now, latest time the next sample may land), monotonic seconds.

        An input is due when it is up and its next sample (last success plus its
        interval) is expected within ``align_share`` of its interval and of ours,
        or when it has not finished its first attempt yet (the first pass after
        start-up judges the first samples, not an empty store). It has landed
        once its mark (last success, attempted) changes.
        """
        out: dict[str, tuple[Mark, float]] = {}
        for st in store.states().values():
            if st.derived or st.interval <= 0:
                continue
            if not st.attempted:
                out[st.name] = (_mark(st), now + self.align_share * self.interval)
                continue
            if not st.up or st.last_success_mono is None:
                continue
            expected = st.last_success_mono + st.interval
            horizon = self.align_share * min(st.interval, self.interval)
            slack = max(ALIGN_MIN_SLACK_S, ALIGN_SLACK_SHARE * st.interval)
            if now < expected - horizon or now > expected + slack:
                continue  # not due soon (fresh enough), or overdue (maybe stuck: do not wait)
            out[st.name] = (_mark(st), expected + slack)
        return out

    def await_inputs(self, store: SnapshotStore, stop: threading.Event | None = None) -> float:
        """Wait until every due input has landed (bounded, woken by the store's writes); the seconds waited."""
        start = store.monotonic()
        due = self.due_inputs(store, start)
        # never past our own share of the interval, so a pass stays well inside its timeout
        cap = start + self.align_share * self.interval + ALIGN_MIN_SLACK_S
        version = store.version
        now = start
        while due and now < cap and not (stop is not None and stop.is_set()):
            version = store.wait_for_write(version, min(cap, min(d[1] for d in due.values())) - now)
            now = store.monotonic()
            states = store.states()
            due = {n: d for n, d in due.items() if n in states and _mark(states[n]) == d[0] and now < d[1]}
        return now - start

    def make_runner(self, store: SnapshotStore) -> DeriveRunner:
        return DeriveRunner(self, store)

    def close(self) -> None:
        for s in self.steps:
            try:
                s.close()
            except Exception:  # closing must never take the exporter down
                log.exception("closing derived source %s failed", s.name)


class DeriveRunner(LoopThread):
    """The stage's loop: align, one pass, wait out the interval; the runner group's watchdog checks it."""

    def __init__(self, stage: DeriveStage, store: SnapshotStore, log_every: float = LOG_EVERY_S) -> None:
        self.source = stage
        self.stage = stage
        self.store = store
        self._start_thread("source:derive")
        self.transitions = {n: TransitionLog(n, log_every) for n in stage.names}
        stage.register(store)

    @property
    def name(self) -> str:
        return self.stage.name

    def _close(self) -> None:
        self.stage.close()

    def sample_once(self) -> bool:
        """One pass (without waiting for inputs); True when every step succeeded."""
        self.stage.run_pass(self.store)
        states = self.store.states()
        ok = True
        for name, tlog in self.transitions.items():
            st = states.get(name)
            if st is None:
                continue
            tlog.note(st.up, str(st.last_error) if st.last_error else "")
            ok = ok and st.up
        return ok

    def check_overdue(self) -> None:
        """Called by the watchdog: log a hung step as down while it hangs."""
        for name, tlog in self.transitions.items():
            err = self.store.overdue(name)
            if err is not None:
                tlog.note(False, str(err))
            tlog.flush()

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.stage.await_inputs(self.store, self._stop)
            if self._stop.is_set():
                break
            self.sample_once()
            for tlog in self.transitions.values():
                tlog.flush()
            self._stop.wait(max(0.0, self.stage.interval - (time.monotonic() - started)))


__all__ = ["ALIGN_SHARE", "DeriveRunner", "DeriveStage", "Step"]
