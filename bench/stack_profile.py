"""A sampling profiler for a running ``serve``: where its threads spend their time, by thread.

    python3 -m bench.stack_profile OUT.txt -- serve --gpu-source ... (any ``llm-layer-exporter`` arguments)

Why sampling, and why this one: py-spy is not installed here, and cProfile sees
only the thread it was started in, while the exporter's time is spread over
the event loop, the anyio worker threads, and one thread per source. A daemon
thread reads ``sys._current_frames()`` every ``PERIOD_S`` and counts, per
thread group (the thread's name without its number), the innermost frame
(self time) and every function on the stack (inclusive time). Samples are
wall-clock: a thread blocked in ``select`` or a lock counts too, which is what
shows a thread *waiting* for the GIL or a lock rather than computing. On exit
(SIGTERM ends ``serve`` normally) the summary is written to OUT.
"""

from __future__ import annotations

import collections
import re
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

PERIOD_S = 0.002
_TOP = 25
_PREFIX = re.compile(r"^.*/(site-packages|lib/python3\.\d+)/|^" + re.escape(str(Path(__file__).resolve().parents[1])) + "/")
_NUMBER = re.compile(r"[-_ ]?\d+$|\(.*\)$")


def _where(frame: FrameType) -> str:
    code = frame.f_code
    path = code.co_filename
    path = _PREFIX.sub("", path)
    return f"{code.co_name} ({path}:{code.co_firstlineno})"


def thread_cpu(into: dict[int, tuple[str, float]]) -> None:
    """On-CPU seconds of every live thread since it started (/proc/self/task/TID/schedstat), by native id."""
    for t in threading.enumerate():
        try:
            with open(f"/proc/self/task/{t.native_id}/schedstat", "rb") as f:
                into[t.native_id or 0] = (_NUMBER.sub("", t.name) or "?", int(f.read().split()[0]) / 1e9)
        except (OSError, ValueError, IndexError):
            continue


class StackSampler:
    """Counts self and inclusive samples per thread group until stopped."""

    def __init__(self, period: float = PERIOD_S) -> None:
        self.period = period
        self.samples: collections.Counter[str] = collections.Counter()
        self.self_time: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        self.inclusive: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stack-sampler", daemon=True)
        self.started = time.monotonic()
        #: native id -> (thread group, on-CPU seconds at the last look): threads that ended keep their last figure
        self.cpu: dict[int, tuple[str, float]] = {}
        self.cpu0 = time.process_time()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(2)

    def _run(self) -> None:
        me = threading.get_ident()
        next_cpu = 0.0
        while not self._stop.wait(self.period):
            if time.monotonic() >= next_cpu:
                thread_cpu(self.cpu)
                next_cpu = time.monotonic() + 0.5
            names = {t.ident: t.name for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                group = _NUMBER.sub("", names.get(ident, "?")) or "?"
                self.samples[group] += 1
                self.self_time[group][_where(frame)] += 1
                seen = set()
                f: FrameType | None = frame
                while f is not None:
                    w = _where(f)
                    if w not in seen:
                        seen.add(w)
                        self.inclusive[group][w] += 1
                    f = f.f_back

    def summary(self) -> str:
        span = time.monotonic() - self.started
        out = [f"stack samples every {self.period * 1e3:.0f} ms over {span:.1f} s (wall-clock: waiting counts)"]
        out.append(f"process CPU {time.process_time() - self.cpu0:.1f} s over the span")
        thread_cpu(self.cpu)
        cpu: dict[str, float] = collections.defaultdict(float)
        for group, seconds in self.cpu.values():
            cpu[group] += seconds
        out.append(f"the sampler itself: {cpu.get('stack-sampler', 0.0):.2f} s CPU")
        for group, n in self.samples.most_common():
            out.append(f"\n== thread {group}: {n} samples, {cpu.get(group, 0.0):.2f} s CPU since it started")
            out.append("  self:")
            out.extend(f"    {100 * c / n:5.1f} %  {w}" for w, c in self.self_time[group].most_common(_TOP))
            out.append("  inclusive:")
            out.extend(f"    {100 * c / n:5.1f} %  {w}" for w, c in self.inclusive[group].most_common(_TOP))
        return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] != "--":
        print("usage: python3 -m bench.stack_profile OUT -- EXPORTER-ARGS...", file=sys.stderr)
        return 2
    out, args = Path(argv[0]), argv[2:]
    from exporter.cli import main as exporter_main

    def _exit(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    # uvicorn re-raises the SIGTERM it caught once it has shut down; this handler turns it into an exit
    # that runs the ``finally`` below (the default one would end the process before the summary is written)
    signal.signal(signal.SIGTERM, _exit)
    sampler = StackSampler()
    sampler.start()
    try:
        return exporter_main(args)
    finally:
        sampler.stop()
        out.write_text(sampler.summary())


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
