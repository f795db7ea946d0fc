"""Background sampling loops: one thread per source, each on its own interval.

Why threads: NVML, DCGM, psutil and requests are blocking libraries; a thread
per source keeps one slow source from delaying another, and the scrape path
only reads the store.

Why the loop is built to be calm on a starved node (a CPU vLLM keeping every
core busy): a source is marked down only on a real miss, an error or an
attempt that outlived its timeout, never because its loop woke late; after
``BACKOFF_AFTER`` consecutive failures the next attempt waits longer, doubling
up to ``BACKOFF_CAP`` intervals, so a failing source costs less while it fails;
and up/down transitions are logged at most once per ``LOG_EVERY_S`` per source,
the others counted and reported on the next line (``TransitionLog``).

Why a watchdog: an attempt that hangs writes nothing. The store fails it as a
``timeout`` once it outlives its timeout (see ``exporter.store``); the group's
watchdog notices that within ``WATCH_PERIOD_S`` and logs the transition, so a
hang is visible in the log as well as in ``llm_exporter_source_up``.

Why the group takes loops other than a source's: the derive stage
(exporter/derive.py) runs several derived sources in one pass on one thread; it
brings its own loop (``make_runner``), which the group starts, watches and
stops like any other.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol, cast

from exporter.samples import SourceError
from exporter.sources import Source, attempt_bound
from exporter.store import SnapshotStore

log = logging.getLogger(__name__)

#: consecutive failures before the next attempt is delayed beyond one interval
BACKOFF_AFTER = 2
#: the longest delay between attempts of a failing source, in intervals
BACKOFF_CAP = 4.0
#: at most one transition line per source in this many seconds
LOG_EVERY_S = 60.0
#: how often the group's watchdog looks for hung attempts and due log lines
WATCH_PERIOD_S = 0.5
#: how long stopping waits, in all, for in-flight samples before giving up on closing them
STOP_WAIT_S = 5.0


def backoff_delay(interval: float, failures: int) -> float:
    """Seconds from one attempt's start to the next after ``failures`` consecutive failures."""
    if failures <= BACKOFF_AFTER:
        return interval
    return interval * min(BACKOFF_CAP, 2.0 ** (failures - BACKOFF_AFTER))


class TransitionLog:
    """Logs one source's up/down transitions, at most one line per ``every`` seconds.

    Transitions inside the quiet period are counted, not logged; the next line
    (a new transition after the period, or ``flush`` once it is over) says how
    many were left out and gives the state at that moment, so the log is never
    left showing a stale state nor loses the count of flaps.
    """

    def __init__(self, name: str, every: float = LOG_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.every = every
        self._clock = clock
        self._lock = threading.Lock()
        self._up: bool | None = None
        self._detail = ""
        self._logged_at: float | None = None
        self.suppressed = 0
        self.suppressed_total = 0

    @property
    def up(self) -> bool | None:
        return self._up

    def note(self, up: bool, detail: str = "") -> None:
        """The source is now ``up`` (``detail``: why it is down); logs if it changed and is due."""
        with self._lock:
            if up == self._up:
                return
            first = self._up is None
            self._up, self._detail = up, detail
            if first and up:
                return  # starting up fine is not news
            now = self._clock()
            if self._logged_at is None or now - self._logged_at >= self.every:
                self._emit(now)
            else:
                self.suppressed += 1
                self.suppressed_total += 1

    def flush(self) -> None:
        """Once the quiet period is over, log the current state if transitions were left out."""
        with self._lock:
            if self.suppressed and self._logged_at is not None and self._clock() - self._logged_at >= self.every:
                self._emit(self._clock())

    def _emit(self, now: float) -> None:
        extra = ""
        if self.suppressed:
            extra = f" ({self.suppressed} transition(s) not logged in the last {now - (self._logged_at or now):.0f}s)"
        if self._up:
            log.info("source %s recovered%s", self.name, extra)
        else:
            log.warning("source %s down: %s%s", self.name, self._detail, extra)
        self._logged_at = now
        self.suppressed = 0


class Loop(Protocol):
    """What the group runs: a ``SourceRunner``, or a loop a source brings (``make_runner``)."""

    @property
    def name(self) -> str: ...

    def start(self) -> None: ...

    def request_stop(self) -> None: ...

    def stop(self, timeout: float = STOP_WAIT_S) -> None: ...

    def check_overdue(self) -> None: ...

    def sample_once(self) -> bool: ...


class BringsItsLoop(Protocol):
    """A runnable that is no single source (the derive stage): it makes its own loop."""

    name: str

    def make_runner(self, store: SnapshotStore) -> Loop: ...

    def close(self) -> None: ...


class LoopThread:
    """A daemon thread running ``_loop`` until stopped, and closing what it ran once it ended.

    Why one base: a source's runner and the derive stage's runner stop the same way: ask,
    join for a bounded time, and close only once no sample is running (a hung sample keeps
    its resources, and one log line says so).
    """

    _thread: threading.Thread
    _stop: threading.Event

    def _start_thread(self, name: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def _loop(self) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self._thread.start()

    def request_stop(self) -> None:
        self._stop.set()

    def stop(self, timeout: float = STOP_WAIT_S) -> None:
        """Stop the loop; close only once no sample is running."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("%s: a sample is still running after %.1fs; not closing it", self._thread.name, timeout)
            return
        self._close()


class SourceRunner(LoopThread):
    """Samples one source until stopped; tells the store when each attempt starts."""

    def __init__(
        self,
        source: Source,
        store: SnapshotStore,
        clock: Callable[[], float] = time.monotonic,
        log_every: float = LOG_EVERY_S,
    ) -> None:
        self.source = source
        self.store = store
        self._clock = clock
        self._start_thread(f"source:{source.name}")
        self.transitions = TransitionLog(source.name, log_every)
        self.failures = 0
        self._crash_logged = False
        self.bound = attempt_bound(source)
        store.register(source.name, source.interval, self.bound)

    @property
    def name(self) -> str:
        return self.source.name

    def _close(self) -> None:
        try:
            self.source.close()
        except Exception:  # closing must never take the exporter down
            log.exception("closing source %s failed", self.source.name)

    def sample_once(self) -> bool:
        """One attempt: record success or failure in the store; True on success."""
        name = self.source.name
        self.store.begin_attempt(name)
        started = self._clock()
        try:
            result = self.source.sample()
        except SourceError as err:
            self._fail(err, self._clock() - started)
            return False
        except Exception as exc:  # a bug in a source must not kill its loop
            crash = SourceError("internal", f"{type(exc).__name__}: {exc}")
            if not self._crash_logged:
                log.exception("source %s raised unexpectedly", name)
                self._crash_logged = True
            self._fail(crash, self._clock() - started)
            return False
        duration = self._clock() - started
        if duration > self.bound:
            msg = f"sample took {duration:.2f}s, over the {self.bound:.2f}s timeout"
            self._fail(SourceError("timeout", msg), duration)
            return False
        self.store.record_success(name, result.points, duration, result.partial_errors)
        for perr in result.partial_errors:
            log.debug("source %s partial fault: %s", name, perr)
        self.failures = 0
        self._crash_logged = False
        self.transitions.note(True)
        return True

    def _fail(self, err: SourceError, duration: float) -> None:
        self.store.record_failure(self.source.name, err, duration)
        self.failures += 1
        self.transitions.note(False, str(err))

    def check_overdue(self) -> None:
        """Called by the watchdog: log a hung attempt as down while it hangs."""
        err = self.store.overdue(self.source.name)
        if err is not None:
            self.transitions.note(False, str(err))
        self.transitions.flush()

    def next_delay(self) -> float:
        """Seconds from the last attempt's start to the next one."""
        return backoff_delay(self.source.interval, self.failures)

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = self._clock()
            self.sample_once()
            self.transitions.flush()
            elapsed = self._clock() - started
            self._stop.wait(max(0.0, self.next_delay() - elapsed))


def runner_for(source: Source | BringsItsLoop, store: SnapshotStore) -> Loop:
    """The loop that runs ``source``: its own (``make_runner``) or a ``SourceRunner``."""
    if hasattr(source, "make_runner"):
        return cast("BringsItsLoop", source).make_runner(store)
    return SourceRunner(source, store)


class RunnerGroup:
    """Starts and stops a set of runners together, with one watchdog for all of them.

    Why sources can come and go while it runs: serving-pod discovery
    (``exporter/kubernetes/discovery.py``) adds an engine source when a pod
    appears and removes it when the pod goes. ``add`` on a started group starts
    the runner at once; ``remove`` stops it, closes the source and drops its
    results from the store. A source with a ``bind_runner_group(group)`` method
    is handed the group when added (that is how discovery reaches it).
    """

    def __init__(self, store: SnapshotStore, watch_period: float = WATCH_PERIOD_S) -> None:
        self.store = store
        self.runners: list[Loop] = []
        self.watch_period = watch_period
        self._lock = threading.Lock()
        self._started = False
        self._stopping = False
        self._stop = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, name="source-watchdog", daemon=True)

    def add(self, source: Source | BringsItsLoop) -> Loop:
        """A source (or anything with ``make_runner(store)``, the derive stage), started at once if the group runs."""
        bind = getattr(source, "bind_runner_group", None)
        if callable(bind):
            bind(self)
        with self._lock:
            runner = runner_for(source, self.store)
            self.runners.append(runner)
            if self._started and not self._stopping:
                runner.start()
        return runner

    def remove(self, name: str, timeout: float = STOP_WAIT_S) -> bool:
        """Stop and close the source named ``name`` and drop its results; False when there is none."""
        with self._lock:
            found = [r for r in self.runners if r.name == name]
            self.runners = [r for r in self.runners if r.name != name]
        for r in found:
            r.stop(timeout)
        if found:
            self.store.unregister(name)
        return bool(found)

    def _current(self) -> list[Loop]:
        with self._lock:
            return list(self.runners)

    def start(self) -> None:
        with self._lock:
            self._started = True
            runners = list(self.runners)
        for r in runners:
            r.start()
        self._watchdog.start()

    def _watch(self) -> None:
        while not self._stop.wait(self.watch_period):
            for r in self._current():
                try:
                    r.check_overdue()
                except Exception:  # the watchdog must outlive any one source
                    log.exception("watchdog check of %s failed", r.name)

    def stop(self, timeout: float = STOP_WAIT_S) -> None:
        """Stop every loop; wait at most ``timeout`` in all for samples still running."""
        self._stop.set()
        with self._lock:
            self._stopping = True
            runners = list(self.runners)
        for r in runners:
            r.request_stop()
        deadline = time.monotonic() + timeout
        for r in runners:
            r.stop(max(0.0, deadline - time.monotonic()))
        if self._watchdog.is_alive():
            self._watchdog.join(timeout)
