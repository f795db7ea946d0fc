"""Drive one simulator with its scenario's load profile for a bounded time (a child process of the tests).

Why a separate process: each scenario's load runs in its own event loop and
CPU share, and the test can stop it like any other child.

    python3 tests/monitoring/drive_load.py SCENARIO BASE_URL DURATION_S
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from exporter.loadgen.runner import run_load
from exporter.simulator.scenarios import get


def main(argv: list[str]) -> int:
    scenario, base_url, duration = argv[0], argv[1], float(argv[2])
    result = asyncio.run(run_load(get(scenario).load_spec(base_url, duration_s=duration)))
    print(result.summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
