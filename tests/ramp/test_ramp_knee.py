"""Knee detection and first-saturated-layer selection on synthetic step tables."""

from __future__ import annotations

import pytest
from exporter.ramp.knee import KneeCriteria, baseline_saturated, find_knee, first_saturated_layer
from tests.ramp.ramp_steps import table

CONC = [1, 2, 4, 8, 16, 32]


def test_linear_scaling_has_no_knee() -> None:
    steps = table([(c, 100.0 * c, 0.1) for c in CONC])
    assert find_knee(steps) is None
    assert [s.scaling for s in steps[1:]] == pytest.approx([1.0] * 5)
    assert all(not s.flags for s in steps)


def test_mildly_sublinear_scaling_is_not_a_knee() -> None:
    # 0.8 efficiency per doubling: bends slowly, never flat
    rows, tok = [], 100.0
    for c in CONC:
        rows.append((c, tok, 0.1))
        tok *= 1.8
    assert find_knee(table(rows)) is None


def test_throughput_plateau_is_the_knee() -> None:
    steps = table([(1, 100, 0.1), (2, 200, 0.1), (4, 390, 0.11), (8, 450, 0.12), (16, 460, 0.13)])
    knee = find_knee(steps)
    assert knee is not None and knee.concurrency == 8
    assert knee.flags == ["throughput_flat"]
    assert knee.scaling == pytest.approx((450 / 390 - 1) / 1.0)


def test_threshold_is_configurable() -> None:
    steps = table([(1, 100, 0.1), (2, 170, 0.1), (4, 280, 0.1)])  # scaling 0.7 then ~0.65
    assert find_knee(steps, KneeCriteria(min_scaling=0.5)) is None
    knee = find_knee(steps, KneeCriteria(min_scaling=0.75))
    assert knee is not None and knee.concurrency == 2


def test_ttft_jump_is_a_knee_even_while_throughput_scales() -> None:
    steps = table([(1, 100, 0.10), (2, 200, 0.12), (4, 400, 0.50), (8, 800, 0.6)])
    knee = find_knee(steps)
    assert knee is not None and knee.concurrency == 4
    assert knee.flags == ["ttft_jump"]
    assert knee.ttft_p95_ratio == pytest.approx(0.5 / 0.12)


def test_tiny_absolute_ttft_wobble_is_not_a_jump() -> None:
    steps = table([(1, 100, 0.002), (2, 200, 0.006), (4, 400, 0.015)])
    assert find_knee(steps) is None
    assert find_knee(steps, KneeCriteria(ttft_jump_min_s=0.001)).concurrency == 2  # type: ignore[union-attr]


def test_error_share_flags_a_step() -> None:
    steps = table([(1, 100, 0.1), (2, 200, 0.1)])
    steps[1].client.errors = 10  # 10 of 110 failed
    knee = find_knee(steps)
    assert knee is not None and knee.flags == ["errors"]


def test_throughput_drop_is_flat_and_unmeasured_ttft_is_ignored() -> None:
    steps = table([(1, 100, None), (2, 210, None), (4, 150, None)])
    knee = find_knee(steps)
    assert knee is not None and knee.concurrency == 4 and knee.scaling < 0  # type: ignore[operator]
    assert knee.ttft_p95_ratio is None


def test_same_step_bottlenecks_prefer_the_layer_that_warned_first() -> None:
    rows = [(1, 100, 0.1), (2, 200, 0.1), (4, 250, 0.1), (8, 260, 0.1)]
    layers = [
        {"memory": ("ok", 0.1), "scheduler": ("ok", 0.1)},
        {"memory": ("warning", 0.4), "scheduler": ("ok", 0.2)},
        {"memory": ("bottleneck", 0.8), "scheduler": ("bottleneck", 0.9)},
        {"memory": ("bottleneck", 0.9), "scheduler": ("bottleneck", 0.9)},
    ]
    steps = table(rows, layers)
    knee = find_knee(steps)
    assert knee is not None and knee.concurrency == 4
    sat = first_saturated_layer(steps, knee)
    assert sat is not None
    # memory and scheduler both reach bottleneck at 4; memory warned first (at 2)
    assert (sat.layer, sat.status, sat.concurrency, sat.cause) == ("memory", "bottleneck", 4, "memory_cause")
    assert sat.evidence == {"memory_metric": 0.8} and sat.advice == "fix memory"


def test_bottleneck_crossing_wins_over_an_earlier_warning() -> None:
    # a GPU getting busier (warning at 2) while throughput scales is not what bent the curve
    rows = [(1, 100, 0.1), (2, 200, 0.1), (4, 400, 0.1), (8, 420, 0.1), (16, 430, 0.1)]
    layers = [
        {"hardware": ("ok", 0.3), "scheduler": ("ok", 0.1)},
        {"hardware": ("warning", 0.55), "scheduler": ("ok", 0.2)},
        {"hardware": ("warning", 0.6), "scheduler": ("ok", 0.3)},
        {"hardware": ("warning", 0.6), "scheduler": ("bottleneck", 0.8)},
        {"hardware": ("warning", 0.6), "scheduler": ("bottleneck", 0.9)},
    ]
    steps = table(rows, layers)
    knee = find_knee(steps)
    assert knee is not None and knee.concurrency == 8
    sat = first_saturated_layer(steps, knee)
    assert sat is not None and (sat.layer, sat.status, sat.concurrency) == ("scheduler", "bottleneck", 8)


def test_earliest_warning_when_nothing_reached_bottleneck() -> None:
    rows = [(1, 100, 0.1), (2, 200, 0.1), (4, 250, 0.1), (8, 260, 0.1)]
    layers = [
        {"memory": ("ok", 0.1), "scheduler": ("ok", 0.1)},
        {"memory": ("warning", 0.5), "scheduler": ("ok", 0.1)},
        {"memory": ("warning", 0.6), "scheduler": ("warning", 0.7)},
        {"memory": ("warning", 0.6), "scheduler": ("warning", 0.7)},
    ]
    steps = table(rows, layers)
    sat = first_saturated_layer(steps, find_knee(steps))
    assert sat is not None and (sat.layer, sat.status, sat.concurrency) == ("memory", "warning", 2)
    assert sat.evidence == {"memory_metric": 0.5}


def test_same_step_prefers_bottleneck_then_score() -> None:
    rows = [(1, 100, 0.1), (2, 110, 0.1)]
    layers = [
        {"memory": ("ok", 0.1)},
        {"memory": ("warning", 0.45), "scheduler": ("bottleneck", 0.7), "hardware": ("bottleneck", 0.6)},
    ]
    steps = table(rows, layers)
    sat = first_saturated_layer(steps, find_knee(steps))
    assert sat is not None and sat.layer == "scheduler"


def test_crossing_after_the_knee_or_without_knee_is_not_reported() -> None:
    rows = [(1, 100, 0.1), (2, 110, 0.1), (4, 115, 0.1)]
    layers = [{"memory": ("ok", 0.1)}, {"memory": ("ok", 0.2)}, {"memory": ("bottleneck", 0.9)}]
    steps = table(rows, layers)
    knee = find_knee(steps)
    assert knee is not None and knee.concurrency == 2
    assert first_saturated_layer(steps, knee) is None
    linear = table([(1, 100, 0.1), (2, 200, 0.1)], [{"memory": ("warning", 0.4)}, {"memory": ("warning", 0.4)}])
    assert first_saturated_layer(linear, find_knee(linear)) is None


def test_unknown_layers_never_saturate() -> None:
    rows = [(1, 100, 0.1), (2, 100, 0.1)]
    steps = table(rows, [{"parallel": ("unknown", 0.0)}, {"parallel": ("unknown", 0.0)}])
    assert first_saturated_layer(steps, find_knee(steps)) is None


def test_layer_saturated_at_baseline_does_not_cross() -> None:
    # a decoding GPU is memory-bandwidth-bound from concurrency 1: baseline, not the break
    rows = [(1, 100, 0.1), (2, 200, 0.1), (4, 400, 0.1), (8, 420, 0.6)]
    layers = [
        {"hardware": ("warning", 0.55), "memory": ("ok", 0.0)},
        {"hardware": ("warning", 0.6), "memory": ("ok", 0.1)},
        {"hardware": ("bottleneck", 0.8), "memory": ("ok", 0.2)},
        {"hardware": ("bottleneck", 0.9), "memory": ("bottleneck", 0.85)},
    ]
    steps = table(rows, layers)
    knee = find_knee(steps)
    assert knee is not None and knee.concurrency == 8
    sat = first_saturated_layer(steps, knee)
    assert sat is not None and (sat.layer, sat.concurrency, sat.crossed) == ("memory", 8, True)
    assert baseline_saturated(steps) == ["hardware"]


def test_falls_back_to_baseline_layer_when_nothing_crossed() -> None:
    rows = [(1, 100, 0.1), (2, 105, 0.1)]
    layers = [{"scheduler": ("bottleneck", 0.8), "hardware": ("warning", 0.5)},
              {"scheduler": ("bottleneck", 0.9), "hardware": ("warning", 0.5)}]
    steps = table(rows, layers)
    sat = first_saturated_layer(steps, find_knee(steps))
    assert sat is not None and (sat.layer, sat.concurrency, sat.crossed) == ("scheduler", 2, False)
    assert sat.cause == "scheduler_cause"


def test_a_layer_that_warned_recovered_and_broke_is_named_where_it_broke() -> None:
    rows = [(1, 100, 0.1), (2, 200, 0.1), (4, 400, 0.1), (8, 410, 0.1)]
    layers = [{"memory": ("ok", 0.1), "scheduler": ("ok", 0.1)},
              {"memory": ("warning", 0.5), "scheduler": ("ok", 0.1)},
              {"memory": ("ok", 0.3), "scheduler": ("ok", 0.2)},
              {"memory": ("bottleneck", 0.9), "scheduler": ("warning", 0.5)}]
    steps = table(rows, layers)
    sat = first_saturated_layer(steps, find_knee(steps))
    assert sat is not None and (sat.layer, sat.status, sat.concurrency) == ("memory", "bottleneck", 8)


def test_one_step_dip_the_ramp_recovers_from_is_transient() -> None:
    steps = table([(1, 100, 0.1), (2, 200, 0.1), (4, 250, 0.1), (8, 800, 0.1), (16, 1600, 0.1)])
    assert find_knee(steps) is None
    assert steps[2].transient_flags == ["throughput_flat"] and steps[2].flags == []
    assert steps[3].flags == []  # 250 -> 800 is a rebound, not a knee either


def test_one_step_ttft_spike_is_transient() -> None:
    steps = table([(1, 100, 0.10), (2, 200, 0.50), (4, 400, 0.11), (8, 800, 0.12)])
    assert find_knee(steps) is None
    assert steps[1].transient_flags == ["ttft_jump"]


def test_flag_on_the_last_step_cannot_be_contradicted() -> None:
    steps = table([(1, 100, 0.1), (2, 200, 0.1), (4, 230, 0.1)])
    knee = find_knee(steps)
    assert knee is not None and knee.concurrency == 4 and knee.flags == ["throughput_flat"]


def test_plateau_after_knee_confirms_it() -> None:
    # knee at 8: 4 -> 16 is still flat even though 8 -> 16 has a noisy uptick
    steps = table([(1, 100, 0.1), (2, 200, 0.1), (4, 400, 0.1), (8, 420, 0.1), (16, 600, 0.1)])
    knee = find_knee(steps)
    assert knee is not None and knee.concurrency == 8


def test_a_layer_that_touched_warning_at_baseline_is_a_baseline_condition() -> None:
    # DRAM hovering at the threshold at concurrency 1: median sample ok, one sample warning
    rows = [(1, 100, 0.1), (2, 200, 0.1), (4, 210, 0.1)]
    layers = [{"hardware": ("ok", 0.4), "memory": ("ok", 0.0)},
              {"hardware": ("bottleneck", 0.8), "memory": ("bottleneck", 0.8)},
              {"hardware": ("bottleneck", 0.8), "memory": ("bottleneck", 0.9)}]
    steps = table(rows, layers)
    steps[0].diagnosis.layers["hardware"].worst_status = "warning"
    assert baseline_saturated(steps) == ["hardware"]
    sat = first_saturated_layer(steps, find_knee(steps))
    assert sat is not None and sat.layer == "memory"
