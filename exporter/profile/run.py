"""One on-demand profile: check the request, drive the engine, read its traces, classify, keep.

Why every refusal is decided before the engine is touched: an unknown engine, a
bad ``seconds``, an engine without a profiler route or one already profiling is
answered at once and changes nothing. Once the engine is profiling, the stop is
always sent (a profiler left running slows the engine until it is restarted),
and whatever the traces turn out to be, the lock is released.

Why the basis is said: the shares are of GPU kernel time where the trace has GPU
kernels (``"basis": "gpu_kernels"``); a CPU engine's trace has none, and there its
CPU operators' self time is where the time went (``"basis": "cpu_ops"``), so that
split is the one answered and published. A trace with neither publishes nothing
(a split of nothing would be a made-up number): its answer says so and the last
shares stay.

Why a shutdown: ``serve`` waits for this request before it exits, so at SIGTERM
(``begin_shutdown``) the wait for ``seconds`` ends, the stop is still sent, every
profiler call ends within calls.SHUTDOWN_GRACE_S, and no trace is read.

Why ``seconds`` in ASCII digits only: ``float()`` also takes ``0_1``, ``1e1``,
``inf`` and every script's digits (``١``); a number an operator did not type in
the form the docs show is refused (400), not guessed.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exporter.profile.calls import SHUTDOWN_GRACE_S, Shutdown
from exporter.profile.classify import CpuOpSplit, Split
from exporter.profile.driver import NO_PROFILER, PROFILER_ROUTES, EngineProfiler, ProfilerError, hint_for
from exporter.profile.state import ProfileState, Published
from exporter.profile.summary import prompt_p50, sentence
from exporter.profile.trace import TraceError, list_traces, new_traces, read_split

if TYPE_CHECKING:
    from exporter.engines.config import EngineConfig
    from exporter.profile.config import ProfileConfig
    from exporter.store import SnapshotStore

log = logging.getLogger(__name__)

DEFAULT_SECONDS = 10.0
MIN_SECONDS, MAX_SECONDS = 0.5, 60.0
#: how long /stop_profile may take (a GPU worker writes tens of MB of trace before it answers)
STOP_TIMEOUT_S = 120.0
#: after the stop answered, how long the trace files may take to appear and stop growing
SETTLE_TIMEOUT_S = 15.0
SETTLE_POLL_S = 0.25
#: engine names listed in a 404 body at most
MAX_NAMES_LISTED = 20
#: ``seconds`` as the docs write it: ASCII digits, an optional fraction ("5", "0.5", ".5")
_SECONDS = re.compile(r"[0-9]{1,6}(?:\.[0-9]{0,9})?|\.[0-9]{1,9}")
SHUTTING_DOWN = "the exporter is shutting down"


@dataclass(frozen=True)
class Outcome:
    """The HTTP status and the JSON body to answer with."""

    status: int
    body: dict[str, Any]


def error(status: int, message: str, **extra: Any) -> Outcome:
    return Outcome(status, {"error": " ".join(message.split())[:500], **extra})


def parse_seconds(raw: str | None) -> float:
    """``seconds`` from the query: a number in [MIN_SECONDS, MAX_SECONDS], DEFAULT_SECONDS when absent."""
    if raw is None or raw == "":
        return DEFAULT_SECONDS
    if _SECONDS.fullmatch(raw) is None:  # re's [0-9] is ASCII only, whatever str.isdigit() would say
        raise ValueError(f"seconds: expected a number of seconds in ASCII digits such as 5 or 0.5, got {raw[:40]!r}")
    value = float(raw)
    if not MIN_SECONDS <= value <= MAX_SECONDS:
        raise ValueError(f"seconds: expected {MIN_SECONDS:g}-{MAX_SECONDS:g}, got {raw[:40]!r}")
    return value


class Profiler:
    """Takes profiles of the configured engines and keeps the last one of each in ``state``."""

    def __init__(
        self,
        settings: ProfileConfig,
        engines: Sequence[EngineConfig],
        store: SnapshotStore,
        state: ProfileState,
        clock: Callable[[], float] = time.time,
        shutdown_grace: float = SHUTDOWN_GRACE_S,
    ) -> None:
        self.settings = settings
        self.engines = {e.name: e for e in engines}
        self.store = store
        self.state = state
        self._clock = clock
        #: begun at SIGTERM (begin_shutdown): profiler calls end within ``shutdown_grace``
        self.shutdown = Shutdown(shutdown_grace)
        #: set on shutdown: a profile waiting out its seconds stops early (and still sends the stop)
        self.stopping = self.shutdown.event

    def begin_shutdown(self) -> None:
        """``serve`` is stopping: end the profile in flight within the grace, refuse new ones (idempotent)."""
        self.shutdown.begin()

    def family(self, cfg: EngineConfig) -> str | None:
        """The engine's family: as configured, else as its scrape detected it (None before one)."""
        if cfg.type != "auto":
            return cfg.type
        for info in self.store.snapshot().samples("llm_engine_info", server=cfg.name):
            if info.labels.get("engine"):
                return info.labels["engine"]
        return None

    def take(self, engine: str | None, seconds_raw: str | None) -> Outcome:
        """Run one profile and answer it (every refusal with its status and a one-line error)."""
        known = sorted(self.engines)[:MAX_NAMES_LISTED]
        if not engine:
            return error(400, "engine: name the engine to profile (?engine=NAME)", engines=known)
        cfg = self.engines.get(engine)
        if cfg is None:
            return error(404, f"unknown engine {engine[:200]!r}", engines=known)
        try:
            seconds = parse_seconds(seconds_raw)
        except ValueError as err:
            return error(400, str(err))
        family = self.family(cfg)
        if family is None:
            return error(
                503, f"engine {engine!r}: its type is not known yet (no successful scrape); retry, or set its type: in engines:"
            )
        if family not in PROFILER_ROUTES:
            return error(422, f"engine {engine!r} is {family}: {NO_PROFILER.get(family, 'it has no profiler route')}")
        if self.shutdown.begun:
            return error(503, f"{SHUTTING_DOWN}: no new profile")
        busy = self.state.begin(engine)
        if busy is not None:
            return error(409, f"a profile of engine {busy!r} is running; one profile at a time, retry when it ends")
        try:
            return self._profile(cfg, family, seconds)
        finally:
            self.state.end()

    def _profile(self, cfg: EngineConfig, family: str, seconds: float) -> Outcome:
        directory = Path(self.settings.directory or "")
        snap_before = self.store.snapshot()
        try:
            before = list_traces(directory)
        except TraceError as err:
            return error(503, str(err))
        try:
            driver = EngineProfiler(cfg, family, self.shutdown)
            driver.start(str(directory))
        except ProfilerError as err:
            return error(err.status, err.message)
        log.info("profiling engine %s for %gs", cfg.name, seconds)
        self.stopping.wait(seconds)
        try:
            driver.stop(STOP_TIMEOUT_S)
        except ProfilerError as err:
            return error(err.status, f"stopping the profiler: {err.message}")
        if self.shutdown.begun:
            return error(503, f"{SHUTTING_DOWN}: the profiler was stopped, its traces not read")
        ended = self._clock()
        try:
            paths = self._settled_traces(directory, before)
        except TraceError as err:
            return error(502, str(err))
        if not paths:
            return error(
                502,
                f"engine {cfg.name!r} wrote no trace file (*.json, *.json.gz) into {directory} within "
                f"{SETTLE_TIMEOUT_S:g}s of the stop: {hint_for(family)}",
            )
        split, cpu = Split(), CpuOpSplit()

        def add(event: dict[str, Any]) -> None:
            if self.stopping.is_set():  # a large trace is not read while serve waits to exit
                raise TraceError(SHUTTING_DOWN)
            split.add(event)
            cpu.add(event)

        try:
            read = read_split(paths, add, self.settings.max_trace_bytes)
        except TraceError as err:
            if self.shutdown.begun:
                return error(503, f"{SHUTTING_DOWN}: the profiler was stopped, its traces not read")
            log.warning("profile of %s: %s", cfg.name, err)
            return error(422, f"trace refused: {err}", trace_files=[p.name for p in paths])
        body = self._body(cfg.name, family, seconds, ended, split, cpu, paths, read)
        body["prompt_tokens_p50"], body["prompt_tokens_during_profile"] = prompt_p50(snap_before, self.store.snapshot(), cfg.name)
        body["summary"] = sentence(body)
        published = Published(body["shares"], ended) if body["shares"] else None
        self.state.keep(cfg.name, body, published)
        return Outcome(200, body)

    def _settled_traces(self, directory: Path, before: dict[Path, tuple[int, int]]) -> list[Path]:
        """The trace files new since ``before``, once they exist and held still for one poll."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        last: list[Path] | None = None
        last_now: dict[Path, tuple[int, int]] = {}
        while True:
            now = list_traces(directory)
            found = new_traces(before, now)
            if found and found == last and all(now[p] == last_now.get(p) for p in found):
                return found
            last, last_now = found, now
            if time.monotonic() >= deadline or self.stopping.wait(SETTLE_POLL_S):
                return found

    @staticmethod
    def _body(
        engine: str, family: str, seconds: float, ended: float, split: Split, cpu: CpuOpSplit, paths: list[Path], read: int
    ) -> dict[str, Any]:
        cpu_us = cpu.self_time_us()
        cpu_shares = cpu.shares(cpu_us)
        basis, shares = ("gpu_kernels", split.shares()) if split.kernels else ("cpu_ops", cpu_shares)
        body: dict[str, Any] = {
            "engine": engine,
            "family": family,
            "seconds": seconds,
            "ended_at": ended,
            # what ``shares`` (and llm_operator_time_share) splits: GPU kernel time, else CPU operator self time
            "basis": basis if shares else None,
            "shares": shares,
            "kernels": split.kernels,
            "kernel_seconds": split.time_us / 1e6,
            "top_kernels": split.top(),
            "other_events": split.other_events,
            # the CPU operators' own split (self time), always answered: beside GPU kernels it shows the host side
            "cpu_ops": cpu.events,
            "cpu_op_seconds": sum(cpu_us.values()) / 1e6,
            "cpu_op_shares": cpu_shares,
            "cpu_ops_left_out": cpu.truncated,
            "trace_files": [p.name for p in paths],
            "trace_bytes": read,
        }
        if not shares:
            body["message"] = (
                "neither GPU kernels nor CPU operators in the trace (a profiler without its activities?): "
                "no time split, llm_operator_time_share not changed"
            )
        return body
