"""Background sampling loops: one thread per source, each on its own interval.

Why threads: NVML, DCGM, psutil and requests are blocking libraries; a thread
per source keeps one slow source from delaying another, and the scrape path
only reads the store.
"""

from __future__ import annotations

import logging
import threading
import time

from exporter.samples import SourceError
from exporter.sources import Source
from exporter.store import SnapshotStore

log = logging.getLogger(__name__)


class SourceRunner:
    """Samples one source until stopped; logs once per up/down transition."""

    def __init__(self, source: Source, store: SnapshotStore, clock=time.monotonic) -> None:
        self.source = source
        self.store = store
        self._clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"source:{source.name}", daemon=True)
        self._was_up: bool | None = None
        store.register(source.name, source.interval)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        try:
            self.source.close()
        except Exception:  # closing must never take the exporter down
            log.exception("closing source %s failed", self.source.name)

    def sample_once(self) -> None:
        """One attempt: record success or failure in the store."""
        started = self._clock()
        try:
            result = self.source.sample()
        except SourceError as err:
            duration = self._clock() - started
            self.store.record_failure(self.source.name, err, duration)
            self._transition(False, str(err))
            return
        except Exception as exc:  # a bug in a source must not kill its loop
            duration = self._clock() - started
            err = SourceError("internal", f"{type(exc).__name__}: {exc}")
            self.store.record_failure(self.source.name, err, duration)
            if self._was_up is not False:
                log.exception("source %s raised unexpectedly", self.source.name)
            self._transition(False, str(err))
            return
        duration = self._clock() - started
        if duration > self.source.timeout:
            err = SourceError("timeout", f"sample took {duration:.2f}s, over the {self.source.timeout:.2f}s timeout")
            self.store.record_failure(self.source.name, err, duration)
            self._transition(False, str(err))
            return
        self.store.record_success(self.source.name, result.points, duration, result.partial_errors)
        for perr in result.partial_errors:
            log.debug("source %s partial fault: %s", self.source.name, perr)
        self._transition(True, "")

    def _transition(self, up: bool, detail: str) -> None:
        if up == self._was_up:
            return
        if up:
            if self._was_up is False:
                log.info("source %s recovered", self.source.name)
        else:
            log.warning("source %s down: %s", self.source.name, detail)
        self._was_up = up

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = self._clock()
            self.sample_once()
            elapsed = self._clock() - started
            self._stop.wait(max(0.0, self.source.interval - elapsed))


class RunnerGroup:
    """Starts and stops a set of runners together."""

    def __init__(self, store: SnapshotStore) -> None:
        self.store = store
        self.runners: list[SourceRunner] = []

    def add(self, source: Source) -> SourceRunner:
        runner = SourceRunner(source, self.store)
        self.runners.append(runner)
        return runner

    def start(self) -> None:
        for r in self.runners:
            r.start()

    def stop(self) -> None:
        for r in self.runners:
            r._stop.set()
        for r in self.runners:
            r.stop()
