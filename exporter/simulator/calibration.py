"""Every number the simulated GPU borrows from the real H200 recordings, in one place.

Why one module: the simulator's telemetry is only as believable as its
constants. Each constant below is a per-phase mean of
``exporter/data/traces/kernels.csv`` (first sample of each phase dropped, as in
the traces' README) or a datasheet figure, and names the trace phase it comes
from, so a reader can re-derive it and the calibration test
(tests/simulator/test_calibration.py) recomputes the same means from the CSV
and checks the simulated phases against them.

Percent values are kept in percent (the unit of the CSV and of ``/sim/gpu``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ActivityProfile:
    """What the counters read while the GPU runs one kind of kernel, all of the time.

    Percent of the measurement window; ``power_w`` is the board power at the
    maximum SM clock (before any power cap).
    """

    nvml_gpu_util: float
    nvml_mem_util: float
    sm_util: float
    sm_occupancy: float
    tensor_util: float
    dram_bw_util: float
    power_w: float


#: trace phase ``prefill_gemm_bf16`` (bf16 GEMM 8192^3): compute-bound, tensor pipes busy.
#: Its measured power (651 W) is the power-capped value; the demand at full clock is
#: GEMM_POWER_DEMAND_W below, the cap lowered the clock to 1522 MHz.
GEMM = ActivityProfile(
    nvml_gpu_util=95.0, nvml_mem_util=23.9, sm_util=92.3, sm_occupancy=13.6, tensor_util=89.5, dram_bw_util=17.1, power_w=651.3
)
#: trace phase ``decode_gemv_bf16`` (28672x8192 weights times 8 columns): weight-streaming decode.
GEMV = ActivityProfile(
    nvml_gpu_util=82.5, nvml_mem_util=91.3, sm_util=62.7, sm_occupancy=8.8, tensor_util=11.0, dram_bw_util=71.5, power_w=536.7
)
#: trace phase ``d2d_copy`` (2 GiB device-to-device): pure HBM streaming, the model for
#: long-context attention that reads the KV cache.
STREAM = ActivityProfile(
    nvml_gpu_util=98.1, nvml_mem_util=100.0, sm_util=97.4, sm_occupancy=78.3, tensor_util=0.1, dram_bw_util=86.6, power_w=416.2
)
#: trace phase ``h2d_copy_pcie``: a PCIe copy keeps NVML "GPU util" at 99 % with idle SMs.
PCIE_COPY = ActivityProfile(
    nvml_gpu_util=99.1, nvml_mem_util=2.0, sm_util=0.0, sm_occupancy=0.0, tensor_util=0.0, dram_bw_util=1.1, power_w=132.9
)

#: trace phase ``tiny_kernels_host_bound``: kernels launched one by one from the host, the SMs
#: idle between them (NVML "GPU util" counts the time any kernel runs): an eager decode's launch gaps.
TINY = ActivityProfile(
    nvml_gpu_util=26.5, nvml_mem_util=0.0, sm_util=0.12, sm_occupancy=0.01, tensor_util=0.0, dram_bw_util=0.0, power_w=143.8
)

#: trace phase ``idle`` (also ``init``): deep idle, clocks parked, bitmask 0x1 (GPU idle).
IDLE_POWER_W = 81.2
IDLE_SM_CLOCK_MHZ = 345.0
#: trace phase ``cooldown``: idle between bursts of work, clocks still up.
ACTIVE_IDLE_POWER_W = 127.0

#: CSV constants (same for every row): board and clocks.
GPU_NAME = "NVIDIA H200"
FB_TOTAL_MIB = 143771
POWER_LIMIT_W = 700.0
SM_CLOCK_MAX_MHZ = 1980.0
MEM_CLOCK_MHZ = 3201.0
#: ``prefill_gemm_bf16``: mean SM clock while the 700 W cap held it down.
CAPPED_SM_CLOCK_MHZ = 1522.2
#: ``h2d_copy_pcie``: receive rate of a host-to-device copy (PCIe Gen5 x16), and the
#: transmit rate it caused (completions, flow control).
PCIE_H2D_MIB_S = 55981.5
PCIE_TX_PER_RX = 3342.8 / 55981.5

#: The power controller holds the mean below the limit: measured mean under the cap
#: (651.3 W in ``prefill_gemm_bf16``) over the 700 W limit.
POWER_CAP_HOLD = 651.3 / 700.0
#: Power the GEMM would draw at full clock. Not measured (the cap hid it); chosen so the
#: H200's datasheet 700 W part clearly exceeds its limit on large GEMMs, as the trace shows.
GEMM_POWER_DEMAND_W = 860.0
#: Dynamic power ~ clock^k. k follows from the trace: at the cap the clock fell to
#: 1522/1980 while dynamic power fell from (demand - idle) to (651 - idle).
POWER_CLOCK_EXPONENT = math.log((651.3 - IDLE_POWER_W) / (GEMM_POWER_DEMAND_W - IDLE_POWER_W)) / math.log(
    CAPPED_SM_CLOCK_MHZ / SM_CLOCK_MAX_MHZ
)

#: Temperature follows power (linear fit of the per-phase means: idle 81 W / 36 C,
#: GEMM 651 W / 59 C, GEMV 537 W / 50 C, copy 416 W / 48 C).
TEMP_BASE_C = 32.0
TEMP_C_PER_W = 0.042

#: H200 SXM datasheet: dense bf16 tensor throughput and HBM3e bandwidth.
PEAK_BF16_FLOPS = 989e12
PEAK_HBM_BYTES_S = 4.8e12
#: Achieved fractions of those peaks: GEMMs reach ~70 % of peak; streaming reaches the
#: DRAM activity the copy phase shows (86.6 %).
COMPUTE_EFFICIENCY = 0.70
MEMORY_EFFICIENCY = STREAM.dram_bw_util / 100.0
#: NVLink 4 per direction (H200 SXM: 450 GB/s), for tensor-parallel all-reduce traffic.
NVLINK_BYTES_S = 450e9
#: Fixed GPU time of one engine step (kernel launches, sampling) with CUDA graphs.
STEP_OVERHEAD_S = 0.0002

#: serving.csv, decode phases: one Python thread at 99.7-99.9 % of a core while SM
#: util stays at 1.7-21.7 %: the host-bound signature the ``host_bound`` scenario reproduces.
HOST_BOUND_THREAD_CPU_PCT = 99.8
HOST_BOUND_SM_UTIL_RANGE_PCT = (1.7, 21.7)


def compute_weight(t_compute: float, t_memory: float) -> float:
    """Share of a step's kernel time that behaves like the GEMM phase (vs. GEMV/stream).

    The share of compute time ``s = tc / (tc + tm)`` is sharpened to
    ``s^2 / (s^2 + (1-s)^2)``: a kernel sits near one roof or the other, so a
    decode step with 5 % compute reads like the GEMV trace (tensor 11 %), not a
    5 % blend with the GEMM trace.
    """
    total = t_compute + t_memory
    if total <= 0:
        return 0.0
    s = t_compute / total
    return s * s / (s * s + (1 - s) * (1 - s))


def clock_scale_for(power_demand_w: float, power_limit_w: float) -> float:
    """SM clock as a fraction of its maximum that keeps the board under its power cap."""
    target = power_limit_w * POWER_CAP_HOLD
    if power_demand_w <= target:
        return 1.0
    dynamic = max(power_demand_w - IDLE_POWER_W, 1e-9)
    allowed = max(target - IDLE_POWER_W, 1.0)
    return max(0.2, math.pow(allowed / dynamic, 1.0 / POWER_CLOCK_EXPONENT))


def capped_power(power_demand_w: float, power_limit_w: float) -> float:
    """Board power after the cap: the demand, or the level the controller holds."""
    return min(power_demand_w, power_limit_w * POWER_CAP_HOLD)
