"""GPU time and counter activity of one engine step, from a roofline model.

Why a roofline: whether a step is compute-bound (prefill: FLOPs dominate) or
memory-bound (decode: streaming weights and KV dominate) decides both how long
it takes and what SM / tensor / DRAM counters read while it runs. The time
comes from FLOPs over achieved tensor throughput and bytes over achieved HBM
bandwidth; the counter readings come from the measured H200 phases in
:mod:`exporter.simulator.calibration`, blended by how compute-bound the step is.
A power cap lowers the SM clock (and so lengthens compute-bound work), as it
did in the trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from exporter.simulator import calibration as cal
from exporter.simulator.calibration import ActivityProfile
from exporter.simulator.settings import ModelGeometry

MIB = 1024 * 1024
PROFILE_KEYS: tuple[str, ...] = ("nvml_gpu_util", "nvml_mem_util", "sm_util", "sm_occupancy", "tensor_util", "dram_bw_util")


@dataclass
class StepWork:
    """What one engine step asks of the whole tensor-parallel group."""

    #: prompt tokens computed this step (prefix-cache hits excluded)
    prefill_tokens: int = 0
    #: tokens computed for requests in decode (1 + draft tokens each)
    decode_tokens: int = 0
    decode_seqs: int = 0
    #: sum over computed tokens of the context each one attends to
    attention_pairs: float = 0.0
    #: sum over scheduled requests of the KV tokens their attention reads
    kv_read_tokens: int = 0
    #: speculative decoding: draft passes this step (each over decode_seqs sequences)
    draft_passes: int = 0
    #: host -> device and device -> host copies (KV swap-in / offload loads, swap-out / stores)
    h2d_bytes: float = 0.0
    d2h_bytes: float = 0.0
    #: an eager decode step (no CUDA graph covers it): its kernel launches add this long, SMs idle
    eager_launch_s: float = 0.0

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.decode_tokens

    @property
    def empty(self) -> bool:
        return self.tokens == 0 and self.h2d_bytes == 0 and self.d2h_bytes == 0


@dataclass
class GpuStep:
    """One GPU's share of a step: how long it is busy and what its counters read meanwhile."""

    kernel_s: float
    copy_s: float
    #: percent readings while the kernels run (copies read as PCIE_COPY)
    kernel_profile: dict[str, float]
    kernel_power_w: float
    clock_scale: float
    h2d_bytes: float
    d2h_bytes: float
    nvlink_bytes: float
    flops: float = 0.0
    bytes: float = 0.0
    compute_weight: float = 0.0

    @property
    def busy_s(self) -> float:
        return self.kernel_s + self.copy_s


@dataclass
class GpuParams:
    """The knobs of the roofline that are settings, not calibration."""

    gpus: int = 1
    power_limit_w: float = cal.POWER_LIMIT_W
    pcie_mib_s: float = cal.PCIE_H2D_MIB_S
    #: HBM bandwidth (the H200's by default); a bandwidth-poor GPU stretches every decode step
    hbm_bytes_s: float = cal.PEAK_HBM_BYTES_S
    tp_imbalance: float = 1.0
    draft_share: float = 0.05
    geometry: ModelGeometry = field(default_factory=ModelGeometry)


def blend(a: ActivityProfile, b: ActivityProfile, weight_b: float) -> dict[str, float]:
    """Readings of ``a`` and ``b`` mixed ``1 - weight_b : weight_b``."""
    return {k: (1 - weight_b) * getattr(a, k) + weight_b * getattr(b, k) for k in PROFILE_KEYS}


def _mix(x: dict[str, float], y: dict[str, float], weight_y: float) -> dict[str, float]:
    return {k: (1 - weight_y) * x[k] + weight_y * y[k] for k in PROFILE_KEYS}


def gpu_shares(params: GpuParams) -> list[float]:
    """Share of the group's work each GPU does: 1/N each, GPU 0 scaled by the imbalance."""
    n = params.gpus
    return [(params.tp_imbalance if i == 0 else 1.0) / n for i in range(n)]


def step_cost(work: StepWork, params: GpuParams) -> list[GpuStep]:
    """Per-GPU busy time and activity of ``work``; empty work costs nothing."""
    geo = params.geometry
    out: list[GpuStep] = []
    if work.empty:
        return [GpuStep(0.0, 0.0, {k: 0.0 for k in PROFILE_KEYS}, 0.0, 1.0, 0.0, 0.0, 0.0) for _ in range(params.gpus)]
    pcie_bytes_s = params.pcie_mib_s * MIB
    tokens = work.tokens
    for share in gpu_shares(params):
        flops = share * (2.0 * geo.params_b * 1e9 * tokens + 4.0 * geo.layers * geo.hidden * work.attention_pairs)
        kv_bytes = share * geo.kv_bytes_per_token * (work.kv_read_tokens + tokens)
        weight_bytes = share * geo.weight_bytes if tokens else 0.0
        total_bytes = weight_bytes + kv_bytes
        t_compute = flops / (cal.PEAK_BF16_FLOPS * cal.COMPUTE_EFFICIENCY)
        t_memory = total_bytes / (params.hbm_bytes_s * cal.MEMORY_EFFICIENCY)
        w = cal.compute_weight(t_compute, t_memory)
        stream_share = kv_bytes / total_bytes if total_bytes else 0.0
        memory_profile = blend(cal.GEMV, cal.STREAM, stream_share)
        profile = _mix(memory_profile, {k: getattr(cal.GEMM, k) for k in PROFILE_KEYS}, w)
        memory_power = (1 - stream_share) * cal.GEMV.power_w + stream_share * cal.STREAM.power_w
        demand = (1 - w) * memory_power + w * cal.GEMM_POWER_DEMAND_W
        clock = cal.clock_scale_for(demand, params.power_limit_w)
        kernel = (max(t_compute / clock, t_memory) + cal.STEP_OVERHEAD_S) if tokens else 0.0
        # speculative decoding: sequential draft passes of a small model (weight-streaming, GEMV-like)
        if work.draft_passes and work.decode_seqs:
            d_flops = share * 2.0 * params.draft_share * geo.params_b * 1e9 * work.decode_seqs
            d_bytes = share * params.draft_share * geo.weight_bytes
            d_time = work.draft_passes * (
                max(
                    d_flops / (cal.PEAK_BF16_FLOPS * cal.COMPUTE_EFFICIENCY * clock),
                    d_bytes / (params.hbm_bytes_s * cal.MEMORY_EFFICIENCY),
                )
                + cal.STEP_OVERHEAD_S
            )
            gemv = {k: getattr(cal.GEMV, k) for k in PROFILE_KEYS}
            profile = _mix(profile, gemv, d_time / (kernel + d_time)) if kernel + d_time else profile
            demand = (kernel * demand + d_time * cal.GEMV.power_w) / (kernel + d_time)
            kernel += d_time
        if work.eager_launch_s > 0 and kernel > 0:
            # launched op by op: the gaps between tiny launches read as the host-bound kernels phase
            gap = work.eager_launch_s
            profile = _mix(profile, {k: getattr(cal.TINY, k) for k in PROFILE_KEYS}, gap / (kernel + gap))
            demand = (kernel * demand + gap * cal.TINY.power_w) / (kernel + gap)
            kernel += gap
        nvlink = 0.0
        if params.gpus > 1 and tokens:
            # two all-reduces per layer of the activations, ring algorithm
            nvlink = 2.0 * geo.layers * tokens * geo.hidden * geo.dtype_bytes * 2.0 * (params.gpus - 1) / params.gpus
            kernel += nvlink / cal.NVLINK_BYTES_S
        h2d = work.h2d_bytes / params.gpus
        d2h = work.d2h_bytes / params.gpus
        copy = (h2d + d2h) / pcie_bytes_s
        out.append(
            GpuStep(
                kernel_s=kernel,
                copy_s=copy,
                kernel_profile=profile,
                kernel_power_w=cal.capped_power(demand, params.power_limit_w),
                clock_scale=clock,
                h2d_bytes=h2d,
                d2h_bytes=d2h,
                nvlink_bytes=nvlink,
                flops=flops,
                bytes=total_bytes,
                compute_weight=w,
            )
        )
    return out
