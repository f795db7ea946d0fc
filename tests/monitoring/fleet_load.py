"""Load for the fleet test (a child process of tests/monitoring/test_fleet_prometheus.py).

    python3 tests/monitoring/fleet_load.py even BASE_URL DURATION_S   # the healthy scenario's open loop
    python3 tests/monitoring/fleet_load.py skew BASE_URL DURATION_S   # a closed loop that outruns max-num-seqs

Why two shapes: ``even`` is what every replica of a balanced fleet gets (about one request
a second, nothing queues); ``skew`` is the extra load a load balancer with a sticky session
piles onto one replica: more clients back to back than its batch holds, so requests wait.
Non-streaming, so the load costs the test's two CPUs little.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from exporter.loadgen.runner import run_load
from exporter.loadgen.spec import LoadSpec
from exporter.simulator.scenarios import get

#: closed-loop clients of the skewed replica: three times the batch of the test's simulators
SKEW_CLIENTS = 24


def spec(mode: str, base_url: str, duration: float) -> LoadSpec:
    if mode == "even":
        return get("healthy").load_spec(base_url, duration_s=duration)
    if mode == "skew":
        return LoadSpec(
            base_url=base_url,
            stream=False,
            concurrency=SKEW_CLIENTS,
            duration_s=duration,
            prompt_tokens=((128, 1.0),),
            max_tokens=((128, 1.0),),
            timeout_s=60.0,
        )
    raise SystemExit(f"unknown mode {mode!r}: expected even or skew")


def main(argv: list[str]) -> int:
    mode, base_url, duration = argv[0], argv[1], float(argv[2])
    result = asyncio.run(run_load(spec(mode, base_url, duration)))
    print(result.summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
