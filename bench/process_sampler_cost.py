"""CPU one process sample costs for a serving process with hundreds of threads.

    python3 -m bench.process_sampler_cost              # 300 threads, 50 samples
    python3 -m bench.process_sampler_cost --threads 1000

Why: an engine (vLLM, SGLang) runs hundreds of threads, and the sampler reads
every one of them each ``--process-interval``; on a node whose cores the
engine keeps busy the exporter must stay cheap enough to be scheduled. Prints
the CPU time per sample of ``ProcessSource`` and, for comparison, of psutil's
per-thread listing plus a schedstat read per thread (what the sampler did
before), and the share of one core at a 1 s interval.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import psutil

from exporter.process.sampler import ProcessSource, read_schedstat
from exporter.samples import Sample

#: a child with N threads parked on an Event; exits when its stdin closes
_CHILD = """
import sys, threading
park = threading.Event()
for _ in range(int(sys.argv[1])):
    threading.Thread(target=park.wait, daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""


@contextlib.contextmanager
def many_threads(n: int) -> Iterator[int]:
    """A real python process with ``n`` idle threads (plus its main thread); yields its PID."""
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc.pid
    finally:
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def cpu_per_call(fn: Callable[[], object], repeat: int) -> float:
    """Mean CPU seconds (this thread's, so other load does not count) per call of ``fn``."""
    fn()
    start = time.thread_time()
    for _ in range(repeat):
        fn()
    return (time.thread_time() - start) / repeat


def _psutil_way(pid: int) -> None:
    """What a sample did before: list the tree, then psutil's threads() and a schedstat read per thread."""
    proc = psutil.Process(pid)
    proc.children(recursive=True)
    with proc.oneshot():
        proc.cpu_times()
        proc.memory_info()
        for t in proc.threads():
            read_schedstat(pid, t.id)


def run(threads: int = 300, repeat: int = 50) -> dict[str, float]:
    with many_threads(threads) as pid:
        source = ProcessSource("bench", pid=pid, interval=1.0)
        ours = cpu_per_call(source.sample, repeat)
        before = cpu_per_call(lambda: _psutil_way(pid), repeat)
        counted = next(p.value for p in source.sample().points if isinstance(p, Sample) and p.name == "llm_process_threads")
    return {
        "threads": counted,
        "sample_cpu_ms": ours * 1e3,
        "psutil_per_thread_cpu_ms": before * 1e3,
        "core_share_at_1s": ours / 1.0,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python3 -m bench.process_sampler_cost", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--threads", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args(argv)
    fig = run(args.threads, args.repeat)
    print(f"process with {fig['threads']:.0f} threads:")
    print(
        f"  ProcessSource.sample():           {fig['sample_cpu_ms']:.2f} ms CPU per sample ({fig['core_share_at_1s'] * 100:.2f} % of a core at a 1 s interval)"
    )
    print(f"  psutil threads() + schedstat each: {fig['psutil_per_thread_cpu_ms']:.2f} ms CPU (the former way)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
