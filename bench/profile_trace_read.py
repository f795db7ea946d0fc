"""Reading cost of a profile's Chrome trace: MB/s, events/s and the peak RSS it adds.

Why it matters: ``POST /profile`` reads the engine's traces inside the exporter
(exporter/profile/trace.py), and a GPU trace of a few seconds is hundreds of MB of
JSON; the read must stream (memory flat whatever the size) and finish in seconds.

    python -m bench.profile_trace_read                 # a generated GPU trace: 297 MB of JSON, 12 MB gzipped
    python -m bench.profile_trace_read TRACE.json.gz   # a real one (the CPU vLLM's, say)

Each measurement runs in a fresh interpreter, so the peak RSS is the reader's own.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def measure(path: Path) -> dict[str, float]:
    """Read ``path`` once here (call in a fresh process): bytes, seconds, events, kernels, RSS."""
    from exporter.profile.classify import CpuOpSplit, Split
    from exporter.profile.trace import read_split

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    split, cpu = Split(), CpuOpSplit()
    count = 0

    def add(event: dict) -> None:  # type: ignore[type-arg]
        nonlocal count
        count += 1
        split.add(event)
        cpu.add(event)

    t0 = time.perf_counter()
    read = read_split([path], add, 16 * 1024**3)
    cpu.shares()
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "file_mb": path.stat().st_size / 1e6,
        "json_mb": read / 1e6,
        "events": float(count),
        "kernels": float(split.kernels),
        "seconds": seconds,
        "mb_per_s": read / seconds / 1e6,
        "events_per_s": count / seconds,
        "peak_rss_added_mib": (after - before) / 1024,
    }


def _generate(path: Path, repeats: int) -> None:
    """A GPU-style trace (tests/profile/traces.py's kernels), written event by event."""
    import gzip

    from tests.profile.traces import gpu_trace

    one = gpu_trace(
        {"attention": 600.0, "gemm": 300.0, "communication": 40.0, "memory_copy": 30.0, "sampling": 20.0, "other": 10.0}, 1
    )
    body = one["traceEvents"]
    with gzip.open(path, "wt", compresslevel=1) as fh:
        fh.write('{"schemaVersion": 1, "traceEvents": [')
        for i in range(repeats):
            fh.write(("," if i else "") + ",".join(json.dumps(e) for e in body))
        fh.write("]}")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--read"]:
        print(json.dumps(measure(Path(argv[1]))))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(a) for a in argv]
        if not paths:
            paths = [Path(tmp) / "generated.pt.trace.json.gz"]
            _generate(paths[0], 30_000)
        for path in paths:
            out = subprocess.run(
                [sys.executable, "-m", "bench.profile_trace_read", "--read", str(path)],
                capture_output=True,
                text=True,
                check=True,
            )
            r = json.loads(out.stdout)
            print(
                f"{path.name}: {r['file_mb']:.1f} MB on disk, {r['json_mb']:.0f} MB JSON, {r['events']:.0f} events "
                f"({r['kernels']:.0f} GPU kernels) in {r['seconds']:.2f} s: {r['mb_per_s']:.0f} MB/s, "
                f"{r['events_per_s'] / 1e3:.0f}k events/s, peak RSS +{r['peak_rss_added_mib']:.1f} MiB"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
