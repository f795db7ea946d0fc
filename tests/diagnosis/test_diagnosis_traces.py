"""The diagnosis on the real H200 recordings (exporter/data/traces), row by row.

Each row is one diagnosis cycle, exactly as ``--gpu-source replay:`` plays it.
The first rows of a phase mix the previous phase (the GPM windows straddle the
switch), so each phase is judged on its rows after the first two.

The recordings hold no engine, so whether users suffered is supplied: with a
symptom (an engine beside the trace whose TTFT or ITL is over the SLO) each
phase's cause is the primary; with a healthy engine beside it the same GPU data
is headroom, not a bottleneck (throttling stays a warning: waste on its own);
with no engine at all the causes are candidates and the state is unknown.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from exporter.diagnosis.engine import DiagnosisEngine, Verdict
from exporter.diagnosis.thresholds import Thresholds
from tests.diagnosis.diag_traces import engine_points, snapshot, trace_rows

SETTLE_ROWS = 2
#: a cause stays reported for clear_cycles - 1 cycles after its condition fails (hysteresis)
CLEAR_ROWS = SETTLE_ROWS + Thresholds().clear_cycles - 1


def verdicts_by_phase(
    name: str, with_process: bool = True, symptom: str | None = None, only: str | None = None
) -> dict[str, list[Verdict]]:
    """Verdicts per phase; ``symptom`` ("none", "ttft", "itl") adds an engine beside the trace
    (in phase ``only`` alone when given, healthy elsewhere)."""
    eng = DiagnosisEngine()
    out: dict[str, list[Verdict]] = defaultdict(list)
    for i, row in enumerate(trace_rows(name, with_process)):
        points = list(row.points)
        if symptom is not None:
            points += engine_points(i, symptom if only in (None, row.phase) else "none")
        out[row.phase].append(eng.observe(snapshot(points, float(i))))
    return out


@pytest.fixture(scope="module")
def kernels() -> dict[str, list[Verdict]]:
    return verdicts_by_phase("kernels")


@pytest.fixture(scope="module")
def serving() -> dict[str, list[Verdict]]:
    return verdicts_by_phase("serving")


def share(verdicts: list[Verdict], layer: str, cause: str) -> float:
    settled = verdicts[SETTLE_ROWS:]
    return sum((layer, cause) in v.active() for v in settled) / len(settled)


@pytest.mark.parametrize(
    "phase, layer, cause",
    [
        ("h2d_copy_pcie", "hardware", "pcie_transfer_bound"),
        ("tiny_kernels_host_bound", "operator", "launch_bound_small_kernels"),
        ("prefill_gemm_bf16", "hardware", "power_or_thermal_throttling"),
        ("prefill_gemm_bf16", "hardware", "compute_bound"),
        ("decode_gemv_bf16", "hardware", "memory_bandwidth_bound"),
    ],
)
def test_kernel_phase_is_named(kernels: dict[str, list[Verdict]], phase: str, layer: str, cause: str) -> None:
    assert share(kernels[phase], layer, cause) == 1.0
    assert all(v.layers[layer].status in ("warning", "bottleneck") for v in kernels[phase][SETTLE_ROWS:])


def test_pcie_copy_is_not_mistaken_for_busy_compute(kernels: dict[str, list[Verdict]]) -> None:
    """NVML says 99 % busy; the SMs are idle: neither compute- nor launch-bound."""
    for v in kernels["h2d_copy_pcie"][CLEAR_ROWS:]:
        assert {c.cause for c in v.bottlenecks} == {"pcie_transfer_bound"}


def test_decode_gemv_is_memory_not_compute_bound(kernels: dict[str, list[Verdict]]) -> None:
    settled = kernels["decode_gemv_bf16"][CLEAR_ROWS:]
    assert not any(("hardware", "compute_bound") in v.active() for v in settled)


def test_idle_phases_raise_no_cause(kernels: dict[str, list[Verdict]], serving: dict[str, list[Verdict]]) -> None:
    """Idle phases raise nothing once the previous phase's causes have cleared."""
    for phases, names in ((kernels, ("init", "idle", "cooldown")), (serving, ("load", "idle_loaded", "cooldown"))):
        for name in names:
            for v in phases[name][CLEAR_ROWS:]:
                assert v.bottlenecks == [], (name, v.bottlenecks)
                assert v.layers["hardware"].status == "ok"


def test_without_engine_or_process_the_other_layers_are_unknown_not_ok(kernels: dict[str, list[Verdict]]) -> None:
    v = kernels["idle"][-1]
    assert v.layers["memory"].status == "unknown"
    assert v.layers["scheduler"].status == "unknown"
    assert v.layers["application"].status == "unknown"
    assert v.layers["memory"].score is None


def test_batch1_decode_hits_the_serial_host_ceiling(serving: dict[str, list[Verdict]]) -> None:
    """HF generate, batch 1: one thread at 99.7 % of a core, SMs 2 % busy."""
    assert share(serving["decode_b1_hf_generate"], "scheduler", "serial_host_ceiling") == 1.0
    for v in serving["decode_b1_hf_generate"][SETTLE_ROWS:]:
        assert v.layers["scheduler"].status == "warning"  # a candidate: no engine says users suffer
        assert v.layers["hardware"].status == "ok"  # the GPU has headroom: no hardware cause


#: phase -> (the symptom users would feel, the primary it must be named)
SYMPTOMATIC = [
    ("kernels", "h2d_copy_pcie", "ttft", "hardware", "pcie_transfer_bound"),
    ("kernels", "tiny_kernels_host_bound", "itl", "operator", "launch_bound_small_kernels"),
    # issue 20: the GEMM at the 700 W cap runs at 76 % of its clock; a 4.9 s TTFT against the 2 s SLO is
    # 59 % past its line, of which the clock loss explains 41 %: at the full clock the tensor pipes would
    # still be at 68 %, so compute-bound is the primary and the throttle contributes its share
    # (test_the_capped_gemm_throttle_contributes_its_share; before, the fixed order made it the primary)
    ("kernels", "prefill_gemm_bf16", "ttft", "hardware", "compute_bound"),
    ("kernels", "decode_gemv_bf16", "itl", "hardware", "memory_bandwidth_bound"),
    ("serving", "decode_b1_hf_generate", "itl", "scheduler", "serial_host_ceiling"),
]


def test_the_capped_gemm_throttle_contributes_its_share() -> None:
    verdicts = verdicts_by_phase("kernels", symptom="ttft", only="prefill_gemm_bf16")["prefill_gemm_bf16"]
    for v in verdicts[SETTLE_ROWS + Thresholds().symptom_persistence_cycles :]:
        roles = {c.cause: c.role for c in v.bottlenecks}
        assert roles["compute_bound"] == "primary", roles
        # its share of the slowdown where the clock dips lowest, else a warning (waste on its own)
        assert roles["power_or_thermal_throttling"] in ("contributing", "warning"), roles


@pytest.mark.parametrize("trace, phase, symptom, layer, cause", SYMPTOMATIC, ids=[r[1] for r in SYMPTOMATIC])
def test_phase_with_a_symptom_names_its_cause_as_the_primary(
    trace: str, phase: str, symptom: str, layer: str, cause: str
) -> None:
    verdicts = verdicts_by_phase(trace, symptom=symptom, only=phase)[phase]
    # symptoms need symptom_persistence_cycles to count, on top of the phase's settling rows
    settled = verdicts[SETTLE_ROWS + Thresholds().symptom_persistence_cycles :]
    assert settled
    for v in settled:
        assert v.state == "degraded"
        assert v.primary is not None and (v.primary.layer, v.primary.cause) == (layer, cause), v.primary
        assert v.layers[layer].status == "bottleneck" and v.layers[layer].headroom == 0.0
        assert v.primary.chain and "←" in v.primary.chain and 0.5 <= v.primary.confidence <= 1.0


@pytest.mark.parametrize("trace, phase, symptom, layer, cause", SYMPTOMATIC, ids=[r[1] for r in SYMPTOMATIC])
def test_phase_without_a_symptom_is_headroom_not_a_bottleneck(
    trace: str, phase: str, symptom: str, layer: str, cause: str
) -> None:
    for v in verdicts_by_phase(trace, symptom="none")[phase][CLEAR_ROWS:]:
        assert v.state == "healthy" and v.primary is None
        assert cause in v.holding  # the condition still holds: the layer is near its limit
        if "power_or_thermal_throttling" in v.holding:  # waste on its own: a warning even when healthy
            assert v.layers[layer].status == "warning"
            continue
        assert v.layers[layer].status == "ok", (phase, v.layers[layer])
        assert v.layers[layer].headroom is not None and "headroom" in v.layers[layer].limit


def test_larger_decode_batches_stay_host_bound(serving: dict[str, list[Verdict]]) -> None:
    assert share(serving["decode_b64_hf_generate"], "scheduler", "serial_host_ceiling") == 1.0
    assert share(serving["decode_b256_hf_generate"], "scheduler", "serial_host_ceiling") >= 0.75


def test_gpu_metrics_alone_miss_the_host_ceiling() -> None:
    """The same decode without the per-thread CPU column: scheduler unknown, no false verdict."""
    phases = verdicts_by_phase("serving", with_process=False)
    for v in phases["decode_b1_hf_generate"][CLEAR_ROWS:]:
        assert ("scheduler", "serial_host_ceiling") not in v.active()
        assert v.layers["scheduler"].status == "unknown"
        assert v.layers["hardware"].status == "ok"
