"""The tour's plan: which scenarios it visits, the primary each must name, how long and how fast.

Why apart: the command's flag defaults (exporter/commands/demo.py), the tour, its summary
and tests/diagnosis/test_diagnosis_scenarios.py's contract all read this one list.
"""

from __future__ import annotations

import argparse

from exporter.errors import UsageError
from exporter.simulator.scenarios import NAMES

#: the primary each scenario must produce: the contract of tests/diagnosis/test_diagnosis_scenarios.py
#: (a test checks the two agree); None: the diagnosis must read healthy
EXPECTED_PRIMARY: dict[str, str | None] = {
    "healthy": None,
    "kv_pressure": "memory/kv_cache_pressure",
    "kv_fragmentation": "memory/kv_fragmentation_or_capacity_misjudged",
    "host_bound": "scheduler/serial_host_ceiling",
    "memory_bandwidth_bound": "hardware/memory_bandwidth_bound",
    "power_throttled": "hardware/power_or_thermal_throttling",
    "pcie_bound": "hardware/pcie_transfer_bound",
    "low_spec_acceptance": "speculative_decoding/low_acceptance",
    "tp_imbalance": "parallel/gpu_imbalance",
    "batching_window": "application/batching_window_too_large",
    "queue_backlog": "scheduler/queue_backlog",
    "healthy_busy": None,
    # prefix sharing works: healthy until POST /sim/prefix_cache breaks it mid-run (the proof:
    # tests/diagnosis/test_prefix_cache_stack.py), which a scenario switch cannot show
    "shared_prefix": None,
}
#: the tour: healthy, then every scenario that stands for a cause
TOUR: tuple[str, ...] = tuple(name for name, primary in EXPECTED_PRIMARY.items() if primary or name == "healthy")
TOUR_SECONDS = 30.0
#: the tour's simulator and diagnosis, as the scenario proofs run them (tp_imbalance needs 4 GPUs:
#: the GPU count is fixed when the simulator starts)
TOUR_GPUS = 4
TOUR_TIME_SCALE = 4.0
TOUR_WINDOW_SECONDS = 10


def tour_names(args: argparse.Namespace) -> list[str]:
    """The scenarios ``--tour`` asks for (default: the whole tour), healthy first, each once."""
    if args.tour is None:
        return list(TOUR)
    names = [n.strip() for n in args.tour.split(",") if n.strip()]
    unknown = [n for n in names if n not in NAMES]
    if unknown or not names:
        raise UsageError(f"--tour: unknown scenario {', '.join(unknown) or '(none given)'}; expected some of {', '.join(NAMES)}")
    return ["healthy"] + [n for i, n in enumerate(names) if n != "healthy" and n not in names[:i]]
