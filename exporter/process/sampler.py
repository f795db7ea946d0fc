"""Per-thread CPU of the serving process tree: the scheduler layer's missing signal.

Why per thread: on an H200, Hugging Face decode ran at 8 tokens/s with SMs 2 %
busy while one Python thread sat at 99.7 % of a core (shared/traces/h200). The
process as a whole may read 1.04 cores on a 64-core node, which looks idle;
the busiest thread at 1.0 is the serial ceiling. Threads of child processes
count too (vLLM and SGLang run the scheduler and workers as children).

CPU is the delta of each thread's user + system time between two samples
divided by the wall time between them (1.0 = one full core), so the first
sample publishes memory and thread count only and CPU from the second on.

CPU *demand* adds the time the thread sat runnable on a run queue
(``/proc/PID/task/TID/schedstat``, Linux). On a contended node or under a
container CPU limit a serial scheduler thread may get 30 % of a core while it
wants 100 %: it is still the ceiling, and only its demand shows it (measured
here: the simulator's host-bound scheduler thread read 0.18-0.45 CPU and 0.99-1.00
demand at a load average of 8 on 2 cores).

The process is found by PID or by a command-line substring. A vanished PID is
a source fault (``process_gone``), never a crash; with a substring the next
sample looks for the process again (a restarted server gets a new PID).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from exporter.samples import Point, Sample, SampleResult, SourceError

_GONE = (psutil.NoSuchProcess, psutil.ZombieProcess)


@dataclass
class _Previous:
    wall: float
    #: (pid, tid) -> cumulative user + system seconds of that thread
    threads: dict[tuple[int, int], float]
    #: (pid, tid) -> cumulative on-CPU + run-queue wait seconds (schedstat), where readable
    demand: dict[tuple[int, int], float]
    #: pid -> (create_time, cumulative user + system seconds of that process)
    processes: dict[int, tuple[float, float]]


def read_schedstat(pid: int, tid: int) -> float | None:
    """On-CPU plus run-queue wait seconds of one thread, or None where the kernel has no schedstat."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
            fields = f.read().split()
        return (int(fields[0]) + int(fields[1])) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def find_by_substring(needle: str, exclude: set[int]) -> psutil.Process | None:
    """The oldest process whose command line contains ``needle``, outside ``exclude``.

    Among matches, a process whose parent also matches is skipped, so the tree's
    root is chosen (its children are sampled with it).
    """
    matches: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["pid", "cmdline", "create_time"]):
        try:
            cmdline = proc.info.get("cmdline") or []
        except _GONE:
            continue
        if proc.pid in exclude or needle not in " ".join(cmdline):
            continue
        matches[proc.pid] = proc
    roots = []
    for proc in matches.values():
        try:
            if proc.ppid() in matches:
                continue
        except _GONE:
            continue
        roots.append(proc)
    if not roots:
        return None
    return min(roots, key=lambda p: (p.info.get("create_time") or 0.0, p.pid))


def own_family() -> set[int]:
    """This exporter and its ancestors, whose command lines carry the substring as a flag.

    ``sh -c "llm-layer-exporter serve --engine-process vllm"`` matches "vllm"
    itself. Children are not excluded: ``demo`` runs the simulator as one.
    """
    me = psutil.Process()
    family = {me.pid}
    try:
        family.update(p.pid for p in me.parents())
    except _GONE:  # pragma: no cover - an ancestor exiting mid-walk
        pass
    return family


class ProcessSource:
    """Source ``process:<server>``: CPU, threads and memory of one serving process tree."""

    def __init__(
        self,
        server: str,
        *,
        pid: int | None = None,
        substring: str | None = None,
        interval: float = 1.0,
        timeout: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if pid is None and not substring:
            raise ValueError("ProcessSource needs a pid or a command-line substring")
        self.name = f"process:{server}"
        self.server = server
        self.pid = pid
        self.substring = substring
        self.interval = interval
        self.timeout = timeout
        self._clock = clock
        self._proc: psutil.Process | None = None
        self._prev: _Previous | None = None
        self._tried_pid = False

    # ------------------------------------------------------------------ resolving

    def _resolve(self) -> psutil.Process:
        """The root process, found again if the one we had is gone."""
        if self._proc is not None:
            try:
                if self._proc.is_running() and self._proc.status() != psutil.STATUS_ZOMBIE:
                    return self._proc
            except _GONE:
                pass
            self._proc, self._prev = None, None
        if self.pid is not None and not self._tried_pid:
            self._tried_pid = True
            try:
                self._proc = psutil.Process(self.pid)
                if self._proc.status() == psutil.STATUS_ZOMBIE:
                    raise psutil.ZombieProcess(self.pid)
                return self._proc
            except _GONE:
                self._proc = None
        if self.substring:
            found = find_by_substring(self.substring, own_family())
            if found is not None:
                self._proc = found
                return found
            raise SourceError("process_gone", f"no process whose command line contains {self.substring!r}")
        raise SourceError("process_gone", f"process {self.pid} is gone")

    # ------------------------------------------------------------------ sampling

    def sample(self) -> SampleResult:
        root = self._resolve()
        try:
            tree = [root, *root.children(recursive=True)]
        except _GONE:
            self._proc, self._prev = None, None
            raise SourceError("process_gone", f"process {root.pid} exited") from None
        except psutil.AccessDenied as err:
            raise SourceError("not_supported", f"permission denied reading process {root.pid}: {err}") from None
        wall = self._clock()
        threads: dict[tuple[int, int], float] = {}
        demand: dict[tuple[int, int], float] = {}
        processes: dict[int, tuple[float, float]] = {}
        rss = 0.0
        n_threads = 0
        for proc in tree:
            try:
                with proc.oneshot():
                    cpu = proc.cpu_times()
                    created = proc.create_time()
                    mem = proc.memory_info().rss
                    tlist = proc.threads()
            except _GONE:
                if proc is root:
                    self._proc, self._prev = None, None
                    raise SourceError("process_gone", f"process {root.pid} exited") from None
                continue  # a child that exited mid-sample is simply not counted
            except psutil.AccessDenied as err:
                if proc is root:
                    raise SourceError("not_supported", f"permission denied reading process {root.pid}: {err}") from None
                continue
            processes[proc.pid] = (created, cpu.user + cpu.system)
            rss += mem
            n_threads += len(tlist)
            for t in tlist:
                threads[(proc.pid, t.id)] = t.user_time + t.system_time
                wanted = read_schedstat(proc.pid, t.id)
                if wanted is not None:
                    demand[(proc.pid, t.id)] = wanted
        labels = {"server": self.server}
        points: list[Point] = [
            Sample("llm_process_resident_memory_bytes", labels, float(rss)),
            Sample("llm_process_threads", labels, float(n_threads)),
        ]
        prev = self._prev
        self._prev = _Previous(wall, threads, demand, processes)
        if prev is not None and wall > prev.wall:
            dt = wall - prev.wall
            busiest = _busiest(threads, prev.threads, dt)
            total = sum(
                (cpu - prev.processes[pid][1]) / dt
                for pid, (created, cpu) in processes.items()
                if pid in prev.processes and prev.processes[pid][0] == created and cpu >= prev.processes[pid][1]
            )
            points.append(Sample("llm_process_busiest_thread_cpu_ratio", labels, busiest))
            points.append(Sample("llm_process_cpu_ratio", labels, total))
            if demand and prev.demand:
                # never below the CPU actually used (the two clocks tick differently)
                wanted = max(_busiest(demand, prev.demand, dt), busiest)
                points.append(Sample("llm_process_busiest_thread_cpu_demand_ratio", labels, wanted))
        return SampleResult(points)

    def close(self) -> None:
        """Holds no file descriptors between samples (psutil opens /proc per call)."""
        self._proc, self._prev = None, None

    @property
    def resolved_pid(self) -> int | None:
        """PID of the process being sampled now (None until found)."""
        return self._proc.pid if self._proc is not None else None


def _busiest(now: dict[tuple[int, int], float], before: dict[tuple[int, int], float], dt: float) -> float:
    """Largest per-thread increase over ``dt`` seconds (threads seen both times)."""
    return max(((v - before[k]) / dt for k, v in now.items() if k in before and v >= before[k]), default=0.0)


__all__ = ["ProcessSource", "find_by_substring", "own_family", "read_schedstat"]
