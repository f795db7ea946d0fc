"""Every simulator scenario is named by the diagnosis, and `healthy` raises nothing.

One stack for the module (simulator and exporter as real processes, the
scenario's own load from the load generator): it starts in `healthy`, then for
each scenario goes back to `healthy` until no cause holds, switches live
(POST /sim/scenario) and waits, for a bounded number of diagnosis cycles, for
the cause that scenario stands for. The diagnosis window is shortened to 10 s
(config file) so the return to healthy takes seconds, not the default 20 s.
"""

from __future__ import annotations

import json

import pytest

from tests.diagnosis.sim_stack import Stack, causes

pytestmark = pytest.mark.integration

#: scenario -> the (layer, cause) it must produce (a contract with exporter/simulator/scenarios.py)
EXPECTED: list[tuple[str, str, str]] = [
    ("kv_pressure", "memory", "kv_cache_pressure"),
    ("kv_fragmentation", "memory", "kv_fragmentation_or_capacity_misjudged"),
    ("host_bound", "scheduler", "serial_host_ceiling"),
    ("memory_bandwidth_bound", "hardware", "memory_bandwidth_bound"),
    ("power_throttled", "hardware", "power_or_thermal_throttling"),
    ("pcie_bound", "hardware", "pcie_transfer_bound"),
    ("low_spec_acceptance", "speculative_decoding", "low_acceptance"),
    ("tp_imbalance", "parallel", "gpu_imbalance"),
    ("batching_window", "application", "batching_window_too_large"),
    ("queue_backlog", "scheduler", "queue_backlog"),
]
MAX_CYCLES = 45
HEALTHY_SECONDS = 25.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    cfg = tmp_path_factory.mktemp("diagnosis") / "exporter.yaml"
    cfg.write_text("diagnosis:\n  window_seconds: 10\n")
    with Stack(gpus=4, time_scale=4.0, config=cfg) as s:
        yield s


def _story(verdicts: list[dict]) -> str:
    return "\n".join(json.dumps({"causes": sorted(causes(v)), "layers": {k: x["status"] for k, x in v["layers"].items()}})
                     for v in verdicts[-8:])


def test_healthy_raises_no_bottleneck_over_its_whole_run(stack):
    verdicts = stack.verdicts(HEALTHY_SECONDS)
    assert len(verdicts) >= HEALTHY_SECONDS / 2  # the diagnosis kept cycling
    loud = [v for v in verdicts if causes(v, min_score=0.5)]
    assert not loud, _story(loud)
    last = verdicts[-1]["layers"]
    # judged, not merely unknown: GPU, engine and process data all arrived
    for layer in ("hardware", "operator", "memory", "scheduler", "parallel", "application"):
        assert last[layer]["status"] == "ok", (layer, last[layer])


@pytest.mark.parametrize("scenario, layer, cause", EXPECTED, ids=[e[0] for e in EXPECTED])
def test_scenario_is_named(stack, scenario, layer, cause):
    assert stack.back_to_healthy(quiet_cycles=3, timeout=90), "the stack did not return to a quiet healthy state"
    cycles, seen = stack.switch_and_count(scenario, layer, cause, max_cycles=MAX_CYCLES)
    assert cycles is not None, f"{scenario}: {layer}/{cause} not reported within {MAX_CYCLES} cycles\n{_story(seen)}"
    named = next(b for b in seen[-1]["bottlenecks"] if (b["layer"], b["cause"]) == (layer, cause))
    assert named["evidence"] and named["advice"]
    assert seen[-1]["layers"][layer]["status"] in ("warning", "bottleneck")
