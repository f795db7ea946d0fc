"""The simulated GPU against the real H200 recordings (exporter/data/traces/kernels.csv).

The roofline alone, and then the live simulator under a prefill-only and a
decode-only load, must land within +-20 % of the measured per-phase means of
SM, tensor and DRAM activity; the power cap must pull the SM clock down as it
did in the GEMM phase.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from exporter.loadgen import LoadSpec
from exporter.simulator import calibration as cal
from exporter.simulator.roofline import GpuParams, StepWork, step_cost
from tests.simulator.sim_helpers import (
    BackgroundLoad,
    get_json,
    sim_server,
    trace_phase_means,
)
from tests.support.waiting import wait_until

TRACE = trace_phase_means()
RATIOS = ("sm_util", "tensor_util", "dram_bw_util")


def within(value: float, measured: float, tol: float = 0.20) -> bool:
    return abs(value - measured) <= tol * measured


def test_calibration_constants_are_the_trace_means() -> None:
    for profile, phase in (
        (cal.GEMM, "prefill_gemm_bf16"),
        (cal.GEMV, "decode_gemv_bf16"),
        (cal.STREAM, "d2d_copy"),
        (cal.PCIE_COPY, "h2d_copy_pcie"),
    ):
        for key in ("nvml_gpu_util", "sm_util", "tensor_util", "dram_bw_util"):
            assert getattr(profile, key) == pytest.approx(TRACE[phase][key], abs=0.06), (phase, key)
    assert cal.CAPPED_SM_CLOCK_MHZ == pytest.approx(TRACE["prefill_gemm_bf16"]["sm_clock_mhz"], abs=0.5)
    assert cal.PCIE_H2D_MIB_S == pytest.approx(TRACE["h2d_copy_pcie"]["pcie_rx_mib_s"], rel=1e-3)


def test_roofline_prefill_step_reads_like_the_gemm_phase() -> None:
    step = step_cost(StepWork(prefill_tokens=2048, attention_pairs=2048 * 1024), GpuParams())[0]
    for key in RATIOS:
        assert within(step.kernel_profile[key], TRACE["prefill_gemm_bf16"][key]), key
    # compute-bound: the 700 W cap holds, the clock falls to ~1520 MHz and the step is slower for it
    assert step.clock_scale * cal.SM_CLOCK_MAX_MHZ == pytest.approx(TRACE["prefill_gemm_bf16"]["sm_clock_mhz"], rel=0.05)
    assert step.kernel_power_w == pytest.approx(700 * cal.POWER_CAP_HOLD)
    uncapped = step_cost(StepWork(prefill_tokens=2048, attention_pairs=2048 * 1024), GpuParams(power_limit_w=2000))[0]
    assert step.kernel_s > uncapped.kernel_s * 1.2


def test_roofline_decode_step_reads_like_the_gemv_phase() -> None:
    step = step_cost(StepWork(decode_tokens=8, decode_seqs=8, attention_pairs=8 * 128, kv_read_tokens=8 * 128), GpuParams())[0]
    for key in RATIOS:
        assert within(step.kernel_profile[key], TRACE["decode_gemv_bf16"][key]), key
    assert step.clock_scale == 1.0  # 537 W: under the cap
    # weight streaming: ~16 GB at ~4.2 TB/s
    assert 0.003 < step.kernel_s < 0.006


def test_pcie_copy_keeps_nvml_util_high_with_idle_sms() -> None:
    step = step_cost(StepWork(h2d_bytes=2 * 1024**3), GpuParams())[0]
    assert step.kernel_s == 0 and step.copy_s == pytest.approx(2 * 1024**3 / (cal.PCIE_H2D_MIB_S * 1024**2))


def test_lower_power_limit_throttles_decode_too() -> None:
    step = step_cost(
        StepWork(decode_tokens=64, decode_seqs=64, attention_pairs=64 * 512, kv_read_tokens=64 * 512),
        GpuParams(power_limit_w=400),
    )[0]
    assert step.clock_scale < 0.8 and step.kernel_power_w == pytest.approx(400 * cal.POWER_CAP_HOLD)


def _live_phase(spec_changes: dict[str, Any], settings: dict[str, Any]) -> dict[str, float]:
    """Window readings of GPU 0 once the load has run a while."""
    with sim_server("healthy", "vllm", **settings) as srv:
        spec = LoadSpec(srv.base_url, duration_s=60, shared_prefix_ratio=0.0, **spec_changes)
        with BackgroundLoad(spec) as load:
            wait_until(lambda: get_json(srv.base_url + "/sim/state")["scheduler"]["steps"] > 20, 30, "20 scheduler steps")
            time.sleep(1.5)  # let the 1 s window fill with steady-state steps
            readings = [get_json(srv.base_url + "/sim/gpu")["gpus"][0] for _ in range(3)]
            load.stop()
    return {k: sum(r[k] for r in readings) / len(readings) for k in ("nvml_gpu_util",) + RATIOS + ("sm_clock_mhz",)}


def test_live_prefill_phase_within_20_percent_of_the_trace() -> None:
    got = _live_phase(
        {"concurrency": 12, "prompt_tokens": ((2048, 1.0),), "max_tokens": ((1, 1.0),)},
        {"time_scale": 2.0, "enable_prefix_caching": False},
    )
    for key in RATIOS:
        assert within(got[key], TRACE["prefill_gemm_bf16"][key]), (key, got)
    assert got["sm_clock_mhz"] < 1700


def test_live_decode_phase_within_20_percent_of_the_trace() -> None:
    got = _live_phase({"concurrency": 8, "prompt_tokens": ((32, 1.0),), "max_tokens": ((4000, 1.0),)}, {"time_scale": 2.0})
    for key in RATIOS:
        assert within(got[key], TRACE["decode_gemv_bf16"][key]), (key, got)
    assert got["sm_clock_mhz"] > 1900
