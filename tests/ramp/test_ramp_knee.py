"""Knee detection and the layer that gave out first (the primary at the knee, else layer statuses) on synthetic steps."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from exporter.ramp.knee import KneeCriteria, Saturation, baseline_saturated, fallback_note, find_knee, first_saturated_layer
from exporter.ramp.model import Step
from tests.ramp.ramp_steps import (
    KV_ROWS,
    diagnosis_doc,
    healthy_layers,
    kv_pressure_docs,
    kv_pressure_layers,
    kv_primary,
    primary,
    steps_from_docs,
    table,
)

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
    knee = find_knee(steps, KneeCriteria(ttft_jump_min_s=0.001))
    assert knee is not None and knee.concurrency == 2


def test_error_share_flags_a_step() -> None:
    steps = table([(1, 100, 0.1), (2, 200, 0.1)])
    steps[1].client.errors = 10  # 10 of 110 failed
    knee = find_knee(steps)
    assert knee is not None and knee.flags == ["errors"]


def test_throughput_drop_is_flat_and_unmeasured_ttft_is_ignored() -> None:
    steps = table([(1, 100, None), (2, 210, None), (4, 150, None)])
    knee = find_knee(steps)
    assert knee is not None and knee.concurrency == 4 and knee.scaling is not None and knee.scaling < 0
    assert knee.ttft_p95_ratio is None


def saturated_at_knee(
    rows: Sequence[tuple[int, float, float | None]], layers: Sequence[Mapping[str, tuple[str, float]]], concurrency: int
) -> Saturation | None:
    """The layer that gave out first, once the table's knee is asserted at ``concurrency``."""
    steps = table(rows, layers)
    knee = find_knee(steps)
    assert knee is not None and knee.concurrency == concurrency
    return first_saturated_layer(steps, knee)


def test_same_step_bottlenecks_prefer_the_layer_that_warned_first() -> None:
    rows = [(1, 100, 0.1), (2, 200, 0.1), (4, 250, 0.1), (8, 260, 0.1)]
    layers = [
        {"memory": ("ok", 0.1), "scheduler": ("ok", 0.1)},
        {"memory": ("warning", 0.4), "scheduler": ("ok", 0.2)},
        {"memory": ("bottleneck", 0.8), "scheduler": ("bottleneck", 0.9)},
        {"memory": ("bottleneck", 0.9), "scheduler": ("bottleneck", 0.9)},
    ]
    sat = saturated_at_knee(rows, layers, 4)
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
    sat = saturated_at_knee(rows, layers, 8)
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
    sat = saturated_at_knee(rows, layers, 8)
    assert sat is not None and (sat.layer, sat.concurrency, sat.crossed) == ("memory", 8, True)
    assert baseline_saturated(table(rows, layers)) == ["hardware"]


def test_falls_back_to_baseline_layer_when_nothing_crossed() -> None:
    rows = [(1, 100, 0.1), (2, 105, 0.1)]
    layers = [
        {"scheduler": ("bottleneck", 0.8), "hardware": ("warning", 0.5)},
        {"scheduler": ("bottleneck", 0.9), "hardware": ("warning", 0.5)},
    ]
    steps = table(rows, layers)
    sat = first_saturated_layer(steps, find_knee(steps))
    assert sat is not None and (sat.layer, sat.concurrency, sat.crossed) == ("scheduler", 2, False)
    assert sat.cause == "scheduler_cause"


def test_a_layer_that_warned_recovered_and_broke_is_named_where_it_broke() -> None:
    rows = [(1, 100, 0.1), (2, 200, 0.1), (4, 400, 0.1), (8, 410, 0.1)]
    layers = [
        {"memory": ("ok", 0.1), "scheduler": ("ok", 0.1)},
        {"memory": ("warning", 0.5), "scheduler": ("ok", 0.1)},
        {"memory": ("ok", 0.3), "scheduler": ("ok", 0.2)},
        {"memory": ("bottleneck", 0.9), "scheduler": ("warning", 0.5)},
    ]
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
    layers = [
        {"hardware": ("ok", 0.4), "memory": ("ok", 0.0)},
        {"hardware": ("bottleneck", 0.8), "memory": ("bottleneck", 0.8)},
        {"hardware": ("bottleneck", 0.8), "memory": ("bottleneck", 0.9)},
    ]
    steps = table(rows, layers)
    steps[0].diagnosis.layers["hardware"].worst_status = "warning"
    assert baseline_saturated(steps) == ["hardware"]
    sat = first_saturated_layer(steps, find_knee(steps))
    assert sat is not None and sat.layer == "memory"


# ------------------------------------------------------------------ symptom-first: the primary gave out


def test_kv_pressure_names_the_knee_primary_memory_and_the_baseline_is_healthy() -> None:
    steps = steps_from_docs(KV_ROWS, kv_pressure_docs())
    knee = find_knee(steps)
    assert knee is not None and knee.concurrency == 8
    assert steps[0].diagnosis.state == "healthy" and baseline_saturated(steps) == []
    sat = first_saturated_layer(steps, knee)
    assert sat is not None
    assert (sat.layer, sat.cause, sat.source, sat.concurrency, sat.crossed) == ("memory", "kv_cache_pressure", "primary", 8, True)
    assert (sat.readings, sat.degraded_readings, sat.state, sat.status) == (5, 6, "degraded", "bottleneck")
    assert sat.chain == "6 requests waiting, queue p95 780 ms ← KV cache 93 % full, 7.5 preemptions/s"
    assert sat.confidence == pytest.approx(0.918) and sat.explains == ["queueing"] and sat.note == ""
    assert sat.advice and "rate(llm_kv_cache_preemptions_total)" in sat.evidence


def test_a_minority_of_degraded_readings_at_the_knee_still_names_the_primary() -> None:
    # the old failure: 55 preemptions at the last step, the memory layer ok by the step's median
    # status, so "no layer reached warning"; 3 of 8 readings were degraded with memory primary
    docs = kv_pressure_docs()
    ok_memory = {**healthy_layers(), "memory": ("ok", 0.3, 0.1)}
    docs[3] = [diagnosis_doc("healthy", ok_memory) for _ in range(5)]
    docs[3] += [diagnosis_doc("degraded", ok_memory, kv_primary()) for _ in range(3)]
    docs[2] = [diagnosis_doc("healthy", healthy_layers()) for _ in range(6)]
    steps = steps_from_docs(KV_ROWS, docs)
    knee = find_knee(steps)
    assert knee is not None and knee.diagnosis.state == "healthy" and knee.diagnosis.layers["memory"].status == "ok"
    sat = first_saturated_layer(steps, knee)
    assert sat is not None and (sat.layer, sat.cause, sat.source, sat.readings) == ("memory", "kv_cache_pressure", "primary", 3)
    assert sat.status == "ok" and sat.chain


def test_knee_without_degraded_readings_uses_the_first_degraded_step_before_it() -> None:
    rows = [(1, 100, 0.1), (2, 200, 0.1), (4, 400, 0.1), (8, 420, 0.1)]
    busy = {"hardware": ("ok", 0.3, 0.2), "scheduler": ("warning", 0.6, 0.1)}
    docs = [
        [diagnosis_doc("healthy", healthy_layers()) for _ in range(4)],
        [diagnosis_doc("healthy", healthy_layers()) for _ in range(4)],
        [diagnosis_doc("degraded", busy, primary("scheduler", "serial_host_ceiling"))] * 2
        + [diagnosis_doc("degraded", busy, primary("memory", "kv_cache_pressure"))],
        [diagnosis_doc("healthy", busy) for _ in range(4)],
    ]
    steps = steps_from_docs(rows, docs)
    knee = find_knee(steps)
    assert knee is not None and knee.concurrency == 8
    sat = first_saturated_layer(steps, knee)
    assert sat is not None and (sat.layer, sat.cause, sat.concurrency, sat.source) == (
        "scheduler",
        "serial_host_ceiling",
        4,
        "primary",
    )
    assert "knee step (concurrency 8)" in sat.note and "concurrency 4" in sat.note


def _statuses_only_ramp(late: str = "healthy") -> list[Step]:
    """Knee at 4; layer statuses cross (memory warning at 2, bottleneck at 4); the service healthy to 8."""
    rows = [(1, 100, 0.1), (2, 200, 0.1), (4, 250, 0.1), (8, 260, 0.1), (16, 265, 0.1)]
    both = {"memory": ("bottleneck", 0.9, 0.0), "scheduler": ("bottleneck", 0.9, 0.0)}
    docs = [
        [diagnosis_doc("healthy", {"memory": ("ok", 0.1, 0.8), "scheduler": ("ok", 0.1, 0.9)})] * 3,
        [diagnosis_doc("healthy", {"memory": ("warning", 0.5, 0.1), "scheduler": ("ok", 0.1, 0.9)})] * 3,
        [diagnosis_doc("healthy", {"memory": ("bottleneck", 0.8, 0.0), "scheduler": ("ok", 0.2, 0.8)})] * 3,
        [diagnosis_doc("healthy", both)] * 3,
        [diagnosis_doc(late, both, primary("scheduler", "queue_backlog") if late == "degraded" else None)] * 3,
    ]
    return steps_from_docs(rows, docs)


def test_no_degraded_step_falls_back_to_layer_statuses_and_says_so() -> None:
    steps = _statuses_only_ramp()
    knee = find_knee(steps)
    assert knee is not None and knee.concurrency == 4
    sat = first_saturated_layer(steps, knee)
    assert sat is not None and (sat.layer, sat.status, sat.concurrency, sat.source) == ("memory", "bottleneck", 4, "saturation")
    assert sat.chain == "" and sat.confidence is None and sat.cause is None and sat.state == "healthy"
    assert sat.note == "no reading at or before the knee (concurrency 4) was degraded; named from the layer statuses instead"


def test_degraded_two_steps_after_the_knee_falls_back_and_the_note_names_it() -> None:
    steps = _statuses_only_ramp(late="degraded")
    sat = first_saturated_layer(steps, find_knee(steps))
    assert sat is not None and (sat.layer, sat.source) == ("memory", "saturation")
    assert "(the first degraded step came after it: concurrency 16, primary scheduler/queue_backlog)" in sat.note
    assert sat.note.endswith("; named from the layer statuses instead")


def test_degraded_only_in_the_step_that_confirms_the_knee_names_its_primary() -> None:
    # kv_pressure with the knee one step early: 4 flattens (preemptions start, a memory warning,
    # nobody suffers yet), 8 confirms it and is the first degraded step
    rows = [(1, 210, 0.03), (2, 425, 0.013), (4, 600, 0.019), (8, 622, 0.886)]
    docs = kv_pressure_docs()
    steps = steps_from_docs(rows, docs)
    knee = find_knee(steps)
    assert knee is not None and knee.concurrency == 4 and knee.diagnosis.state == "healthy"
    sat = first_saturated_layer(steps, knee)
    assert sat is not None and (sat.layer, sat.cause, sat.source, sat.concurrency) == (
        "memory",
        "kv_cache_pressure",
        "primary",
        8,
    )
    assert sat.chain and sat.note == (
        "no reading at or before the knee (concurrency 4) was degraded (the diagnosis lags "
        "the load by its window); named from the step that confirmed the knee, concurrency 8"
    )


def test_an_older_exporter_without_state_falls_back_to_layer_statuses() -> None:
    rows = [(1, 100, 0.1), (2, 110, 0.1)]
    docs = [
        [diagnosis_doc(None, {"scheduler": ("ok", 0.1, None)})] * 3,
        [diagnosis_doc(None, {"scheduler": ("bottleneck", 0.9, None)})] * 3,
    ]
    steps = steps_from_docs(rows, docs)
    sat = first_saturated_layer(steps, find_knee(steps))
    assert sat is not None and (sat.layer, sat.source) == ("scheduler", "saturation") and "was degraded" in sat.note


def test_the_same_primary_at_the_baseline_did_not_give_out_during_the_ramp() -> None:
    rows = [(1, 100, 0.1), (2, 105, 0.1)]
    degraded = [diagnosis_doc("degraded", kv_pressure_layers(), kv_primary()) for _ in range(3)]
    steps = steps_from_docs(rows, [degraded, degraded])
    assert steps[0].diagnosis.state == "degraded"
    sat = first_saturated_layer(steps, find_knee(steps))
    assert sat is not None and (sat.layer, sat.source, sat.concurrency, sat.crossed) == ("memory", "primary", 2, False)


def test_healthy_ramp_without_knee_names_nothing() -> None:
    rows = [(1, 100, 0.1), (2, 200, 0.1), (4, 400, 0.1)]
    steps = steps_from_docs(rows, [[diagnosis_doc("healthy", healthy_layers())] * 3] * 3)
    assert find_knee(steps) is None and first_saturated_layer(steps, None) is None
    assert [s.diagnosis.state for s in steps] == ["healthy"] * 3


def test_nothing_named_when_degraded_only_later_and_no_layer_warned() -> None:
    rows = [(1, 100, 0.1), (2, 200, 0.1), (4, 210, 0.1), (8, 215, 0.1), (16, 216, 0.1)]
    calm = [diagnosis_doc("healthy", healthy_layers())] * 3
    late = [diagnosis_doc("degraded", {"scheduler": ("bottleneck", 1.0, 0.0)}, primary("scheduler", "serial_host_ceiling"))] * 3
    steps = steps_from_docs(rows, [calm, calm, calm, calm, late])
    knee = find_knee(steps)
    assert knee is not None and knee.concurrency == 4
    assert first_saturated_layer(steps, knee) is None
    assert fallback_note(steps, knee, None) == (
        "no reading at or before the knee (concurrency 4) was degraded (the first degraded step came after it: "
        "concurrency 16, primary scheduler/serial_host_ceiling), and no layer reached warning at or before it"
    )
