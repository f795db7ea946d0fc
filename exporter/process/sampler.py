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

The process is found by PID, by a command-line substring or by a ``finder``
callable (a discovered pod's container, through its cgroup: exporter/kubernetes).
A vanished PID is a source fault (``process_gone``), never a crash; with a
substring or a finder the next sample looks for the process again (a restarted
server gets a new PID).

Why the cost is bounded, and how (an engine has hundreds of threads, and the
sampler must stay cheap on a node whose CPUs the engine keeps busy): psutil's
``Process.threads()`` opens and parses ``/proc/PID/task/TID/stat`` per thread
and the schedstat read opened a second file per thread, 6.5 ms of CPU per
sample for one process with 300 threads (0.65 % of a core at the default 1 s).
Now each thread costs one small read of ``/proc/PID/task/TID/schedstat``, whose
first two fields give both on-CPU time (nanoseconds, finer than stat's 10 ms
ticks) and run-queue wait; ``stat`` is read only where schedstat is missing or
reads zero (kernels without sched_info): about 1 ms for the same process
(``python3 -m bench.process_sampler_cost``; tests/process/test_sampler_cost.py
holds it under a bound). Two further bounds: at most
``MAX_THREADS_PER_PROCESS`` threads are read per process per sample (the
main thread and the oldest after it, where an engine's scheduler threads live,
in allocation order from the main thread's TID, since TIDs wrap at pid_max; all
are counted in ``llm_process_threads``), and the process tree, which psutil finds
by reading every process on the node, is re-listed every ``TREE_REFRESH_S``
seconds rather than on every sample (a new worker process is picked up within
that time). The interval stays the operator's (``--process-interval``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from exporter.samples import Point, Sample, SampleResult, SourceError

_GONE = (psutil.NoSuchProcess, psutil.ZombieProcess)

#: most threads read per process per sample (more are counted, not read)
MAX_THREADS_PER_PROCESS = 2048
#: seconds between two listings of the process tree (psutil walks all of /proc for one)
TREE_REFRESH_S = 10.0
_CLK_TCK = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
_HAVE_PROC_TASKS = os.path.isdir(f"/proc/{os.getpid()}/task")

#: tid -> (cumulative on-CPU seconds, on-CPU + run-queue wait seconds or None)
ThreadTimes = dict[int, tuple[float, float | None]]


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


def _read_small(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 512)
    finally:
        os.close(fd)


#: above any pid_max Linux allows (2**22 on 64-bit), so TIDs modulo it keep their allocation order
_TID_SPACE = 1 << 22


def _allocation_order(pid: int, tid: int) -> int:
    """How long after the main thread ``tid`` was allocated: 0 for the main thread (TID = PID).

    TIDs wrap at pid_max, so a thread created after the wrap has a lower TID than
    the main thread; counting forward from the PID modulo the TID space keeps the
    creation order either way.
    """
    return (tid - pid) % _TID_SPACE


def read_thread_times(pid: int, limit: int = MAX_THREADS_PER_PROCESS) -> tuple[int, ThreadTimes]:
    """(number of threads, times of at most ``limit`` of them, the oldest first) from /proc.

    One read per thread: schedstat's on-CPU and wait nanoseconds; the thread's
    ``stat`` (user + system ticks, no demand) only where schedstat is missing
    or all zero. Raises psutil.NoSuchProcess when the process is gone.
    """
    base = f"/proc/{pid}/task/"
    try:
        names = os.listdir(base)
    except FileNotFoundError:
        raise psutil.NoSuchProcess(pid) from None
    tids = [int(n) for n in names if n.isdigit()]
    if len(tids) > limit:
        tids = sorted(tids, key=lambda tid: _allocation_order(pid, tid))[:limit]
    out: ThreadTimes = {}
    for tid in tids:
        try:
            fields = _read_small(f"{base}{tid}/schedstat").split()
            run_ns = int(fields[0])
            if run_ns > 0:
                out[tid] = (run_ns / 1e9, (run_ns + int(fields[1])) / 1e9)
                continue
        except (OSError, ValueError, IndexError):
            pass
        try:  # no usable schedstat: user + system ticks from stat (after the command name)
            data = _read_small(f"{base}{tid}/stat")
            rest = data[data.rfind(b")") + 2 :].split()
            out[tid] = ((int(rest[11]) + int(rest[12])) / _CLK_TCK, None)
        except (OSError, ValueError, IndexError):
            continue  # the thread exited between the listing and the read
    return len(names), out


def _psutil_thread_times(proc: psutil.Process) -> tuple[int, ThreadTimes]:
    """The same from psutil, where there is no /proc/PID/task (not Linux)."""
    tlist = proc.threads()
    return len(tlist), {t.id: (t.user_time + t.system_time, None) for t in tlist}


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
        finder: Callable[[], int | None] | None = None,
        interval: float = 1.0,
        timeout: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if pid is None and not substring and finder is None:
            raise ValueError("ProcessSource needs a pid, a command-line substring or a finder")
        self.name = f"process:{server}"
        self.server = server
        self.pid = pid
        self.substring = substring
        #: returns the root PID now, None when not found (a discovered pod's container: exporter/kubernetes)
        self.finder = finder
        self.interval = interval
        self.timeout = timeout
        self._clock = clock
        self._proc: psutil.Process | None = None
        self._prev: _Previous | None = None
        self._tried_pid = False
        self._tree_list: list[psutil.Process] = []
        self._tree_of: int | None = None
        self._tree_at: float | None = None

    # ------------------------------------------------------------------ resolving

    def _resolve(self) -> psutil.Process:
        """The root process, found again if the one we had is gone."""
        if self._proc is not None:
            try:
                if self._proc.is_running() and self._proc.status() != psutil.STATUS_ZOMBIE:
                    return self._proc
            except _GONE:
                pass
            self._forget()
        if self.finder is not None:
            found_pid = self.finder()
            if found_pid is None:
                raise SourceError("process_gone", f"no process found for {self.server}")
            try:
                self._proc = psutil.Process(found_pid)
                return self._proc
            except _GONE:
                raise SourceError("process_gone", f"process {found_pid} of {self.server} exited") from None
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

    def _tree(self, root: psutil.Process) -> list[psutil.Process]:
        """The root and its descendants, re-listed every ``TREE_REFRESH_S`` seconds."""
        now = self._clock()
        if self._tree_of != root.pid or self._tree_at is None or now - self._tree_at >= TREE_REFRESH_S:
            self._tree_list = [root, *root.children(recursive=True)]
            self._tree_of, self._tree_at = root.pid, now
        return self._tree_list

    def sample(self) -> SampleResult:
        root = self._resolve()
        try:
            tree = self._tree(root)
        except _GONE:
            self._forget()
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
                count, times = read_thread_times(proc.pid) if _HAVE_PROC_TASKS else _psutil_thread_times(proc)
            except _GONE:
                if proc is root:
                    self._forget()
                    raise SourceError("process_gone", f"process {root.pid} exited") from None
                self._tree_at = None  # a child exited: list the tree afresh next time
                continue  # a child that exited mid-sample is simply not counted
            except psutil.AccessDenied as err:
                if proc is root:
                    raise SourceError("not_supported", f"permission denied reading process {root.pid}: {err}") from None
                continue
            processes[proc.pid] = (created, cpu.user + cpu.system)
            rss += mem
            n_threads += count
            for tid, (used, wanted) in times.items():
                threads[(proc.pid, tid)] = used
                if wanted is not None:
                    demand[(proc.pid, tid)] = wanted
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
            total = _total_cpu(processes, prev.processes, threads, prev.threads, dt)
            points.append(Sample("llm_process_busiest_thread_cpu_ratio", labels, busiest))
            points.append(Sample("llm_process_cpu_ratio", labels, total))
            if demand and prev.demand:
                # never below the CPU actually used (the two clocks tick differently)
                wanted = max(_busiest(demand, prev.demand, dt), busiest)
                points.append(Sample("llm_process_busiest_thread_cpu_demand_ratio", labels, wanted))
        return SampleResult(points)

    def _forget(self) -> None:
        self._proc, self._prev, self._tree_at = None, None, None

    def close(self) -> None:
        """Holds no file descriptors between samples (every /proc file is closed after its read)."""
        self._forget()

    @property
    def resolved_pid(self) -> int | None:
        """PID of the process being sampled now (None until found)."""
        return self._proc.pid if self._proc is not None else None


def _total_cpu(
    processes: dict[int, tuple[float, float]],
    before: dict[int, tuple[float, float]],
    threads: dict[tuple[int, int], float],
    threads_before: dict[tuple[int, int], float],
    dt: float,
) -> float:
    """CPU of the tree over ``dt`` in cores: per process, its ticks (which count threads that
    exited meanwhile) or the sum of its threads' finer schedstat times, whichever is larger."""
    by_pid: dict[int, float] = {}
    for (pid, tid), used in threads.items():
        was = threads_before.get((pid, tid))
        if was is not None and used >= was:
            by_pid[pid] = by_pid.get(pid, 0.0) + used - was
    total = 0.0
    for pid, (created, cpu) in processes.items():
        old = before.get(pid)
        if old is None or old[0] != created or cpu < old[1]:
            continue
        total += max(cpu - old[1], by_pid.get(pid, 0.0)) / dt
    return total


def _busiest(now: dict[tuple[int, int], float], before: dict[tuple[int, int], float], dt: float) -> float:
    """Largest per-thread increase over ``dt`` seconds (threads seen both times)."""
    return max(((v - before[k]) / dt for k, v in now.items() if k in before and v >= before[k]), default=0.0)


__all__ = ["ProcessSource", "find_by_substring", "own_family", "read_schedstat", "read_thread_times"]
