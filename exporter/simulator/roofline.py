"""GPU time and counter activity of one engine step, from a roofline model.

Why a roofline: whether a step is compute-bound (prefill: FLOPs dominate) or
memory-bound (decode: streaming weights and KV dominate) decides both how long
it takes and what SM / tensor / DRAM counters read while it runs. The time
comes from FLOPs over achieved tensor throughput and bytes over achieved HBM
bandwidth; the counter readings come from the measured H200 phases in
:mod:`exporter.simulator.calibration`, blended by how compute-bound the step is.
A power cap lowers the SM clock (and so lengthens compute-bound work), as it
did in the trace.

Parallel layouts (``--tensor-parallel-size``/``-tp``, ``--pipeline-parallel-size``/``-pp``,
``--data-parallel-size``/``-dp``, ``--interconnect nvlink|pcie``; settings.Layout). Every
figure follows from the model shape (``--params-b``, ``--layers``, ``--hidden``, KV heads) and
the link, none is fitted:

* **Tensor parallel, n GPUs.** Each computes 1/n of every layer: 1/n of the FLOPs, of the
  weights it streams and of the KV heads it reads (a whole KV head where n exceeds their
  count: vLLM replicates them). Attention and MLP each end in an all-reduce of the
  activations (tokens x hidden x 2 bytes): two per layer per step. NCCL's ring sends (and
  receives) 2 (n - 1) / n of them per GPU; time = bytes / link bandwidth + a per-call
  latency. **Not overlapped**: the next layer needs the reduced activations (vLLM's default
  TP has no async-TP or sequence parallelism), so the step is the per-GPU roofline plus the
  communication. While it runs the counters read as the PCIe copy phase (bytes moving, SMs
  nearly idle: NCCL runs one thread block per channel).
* **Links, per direction.** NVLink 4 (H100 / H200 SXM, the board the calibration recorded):
  18 links x 25 GB/s = 450 GB/s (NVIDIA's datasheet "900 GB/s" counts both directions).
  PCIe Gen5 x16: 32 GT/s x 16 lanes x 128/130 / 8 = 63.0 GB/s line rate, 58.7 GB/s measured
  (the trace's host-to-device copy: ``--pcie-mib-s``'s default 55,981.5 MiB/s, which the
  peers' traffic uses too); GPU-to-GPU through a PCIe switch gets at most that.
* **Per-call latency.** NCCL's own tuning model (``src/graph/tuning.cc``) for a ring
  all-reduce in its LL protocol, the one it picks for a decode step's small messages: 6.6 us
  + 2 (n - 1) hops of 0.6 us (NVLink) or 1.0 us (PCIe): TP 2 7.8 / 8.6 us, TP 4 10.2 / 12.6 us,
  TP 8 15.0 / 20.6 us. On NVLink vLLM's custom all-reduce beats NCCL on small messages, so
  that figure is an upper bound; over PCIe vLLM turns its custom one off beyond two GPUs and
  NCCL's applies.
* **What follows** for the 8B default at TP 4 (per GPU 4 GB of weights at 4.8 TB/s x 0.866):
  a 2048-token step (the default per-step budget) computes for 16.1 ms and communicates for
  28.2 ms over PCIe (x1.76: 64 % of the step) against 4.2 ms over NVLink (x0.26); a decode of
  256 sequences at 1k context x1.31 against x0.34, of 64 sequences x0.99 against x0.46 (the
  per-call latencies, 64 calls a step, weigh most there).
* **Pipeline parallel, p stages.** The layers split as vLLM splits them (``stage_layers``),
  the step in m = min(p, requests) micro-batches (vLLM keeps p batches in flight). Stage s
  takes tau_s per micro-batch: its layers' roofline on 1/m of the step, its all-reduces, and
  the send of its activations to the next stage (tokens x hidden x 2 / n bytes per GPU, one
  hop of latency). The step is ``sum(tau) + (m - 1) * max(tau)``: ``(m + p - 1) * tau`` for
  equal stages, a bubble of ``(p - 1) / (m + p - 1)`` in which each GPU waits, idle. Every
  micro-batch streams its stage's weights again, so PP lengthens a memory-bound decode step:
  it buys memory, not speed.
* **Data parallel** replicas and the KV capacity of a layout: exporter/simulator/engine.py
  (``Replica``, ``replica_kv_blocks``).

The pre-layout ``--gpus N`` group (the ``tp_imbalance`` scenario: 450 GB/s, no per-call
latency, communication read as kernel time, the KV pool as given) and the single GPU are
kept bit for bit (``GpuParams.modelled`` False; tests/simulator/test_sim_layout.py holds
their pre-layout record).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from exporter.simulator import calibration as cal
from exporter.simulator.calibration import ActivityProfile
from exporter.simulator.settings import ModelGeometry

MIB = 1024 * 1024
PROFILE_KEYS: tuple[str, ...] = ("nvml_gpu_util", "nvml_mem_util", "sm_util", "sm_occupancy", "tensor_util", "dram_bw_util")

#: NVLink 4 per direction (H100 / H200 SXM: 18 links x 25 GB/s; NVIDIA's "900 GB/s" counts both directions)
NVLINK_BYTES_S = cal.NVLINK_BYTES_S
#: NCCL's own latency model (src/graph/tuning.cc, NCCL 2.2x ``baseLat``): the fixed cost of a ring
#: collective in its LL protocol, the one it picks for the small messages of a decode step
NCCL_BASE_LATENCY_S = 6.6e-6
#: ... plus one hop per ring step (``hwLat``, Ring / LL): 0.6 us over NVLink, 1.0 us over PCIe
HOP_LATENCY_S: dict[str, float] = {"nvlink": 0.6e-6, "pcie": 1.0e-6}


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
    #: requests scheduled (prefill and decode): how many micro-batches a pipeline can split the step into
    seqs: int = 0

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
    #: bytes this GPU sent to its peers (tensor-parallel all-reduces, pipeline sends) over its link
    link_tx_bytes: float
    flops: float = 0.0
    bytes: float = 0.0
    compute_weight: float = 0.0
    #: bytes it received from its peers (the all-reduce's equal the sent; a pipeline stage receives its input)
    link_rx_bytes: float = 0.0
    #: the peers' link is PCIe (``--interconnect pcie``): the peer bytes read on the PCIe counters, not NVLink's
    over_pcie: bool = False
    #: of ``kernel_s``, the time spent communicating (all-reduces and pipeline sends, not overlapped)
    comm_s: float = 0.0
    #: the communication reads as the copy phase, SMs idle (a modelled layout): the power cap holds the clock
    #: during the math only (exporter/simulator/gpu.py). False: the pre-layout group reads it as kernel time
    comm_idle: bool = False
    #: time in the step this GPU waits, idle, on the other pipeline stages (the bubble)
    stall_s: float = 0.0

    @property
    def busy_s(self) -> float:
        return self.kernel_s + self.copy_s

    @property
    def span_s(self) -> float:
        """How long the step holds this GPU: busy, then waiting on the pipeline."""
        return self.busy_s + self.stall_s

    @property
    def nvlink_bytes(self) -> float:
        """Bytes sent over NVLink (0 when the peers' link is PCIe)."""
        return 0.0 if self.over_pcie else self.link_tx_bytes


@dataclass
class GpuParams:
    """The knobs of the roofline that are settings, not calibration."""

    #: GPUs of one tensor-parallel group (one pipeline stage)
    gpus: int = 1
    power_limit_w: float = cal.POWER_LIMIT_W
    pcie_mib_s: float = cal.PCIE_H2D_MIB_S
    #: HBM bandwidth (the H200's by default); a bandwidth-poor GPU stretches every decode step
    hbm_bytes_s: float = cal.PEAK_HBM_BYTES_S
    tp_imbalance: float = 1.0
    draft_share: float = 0.05
    geometry: ModelGeometry = field(default_factory=ModelGeometry)
    #: pipeline stages, ``gpus`` GPUs each
    pp: int = 1
    #: the layout model (settings.Layout.modelled): per-call latencies, the link chosen, KV heads replicated
    #: past their count, link time read as a copy. False: the pre-layout ``--gpus`` group, kept bit for bit
    modelled: bool = False
    #: the peers' link: ``nvlink`` or ``pcie``
    interconnect: str = "nvlink"

    @property
    def link_bytes_s(self) -> float:
        """Per-direction bandwidth of the peers' link: NVLink 4's, or the PCIe link's (``pcie_mib_s``)."""
        return self.pcie_mib_s * MIB if self.interconnect == "pcie" else NVLINK_BYTES_S

    @property
    def kv_replication(self) -> float:
        """How much more KV each GPU holds than 1/TP: with more GPUs than KV heads, each holds one whole head
        (vLLM replicates them), so TP 16 of 8 KV heads reads twice its 1/16."""
        geo = self.geometry
        return self.gpus / geo.kv_heads if self.modelled and self.gpus > geo.kv_heads else 1.0


def blend(a: ActivityProfile, b: ActivityProfile, weight_b: float) -> dict[str, float]:
    """Readings of ``a`` and ``b`` mixed ``1 - weight_b : weight_b``."""
    return {k: (1 - weight_b) * getattr(a, k) + weight_b * getattr(b, k) for k in PROFILE_KEYS}


def _mix(x: dict[str, float], y: dict[str, float], weight_y: float) -> dict[str, float]:
    return {k: (1 - weight_y) * x[k] + weight_y * y[k] for k in PROFILE_KEYS}


def gpu_shares(params: GpuParams) -> list[float]:
    """Share of the group's work each GPU does: 1/N each, GPU 0 scaled by the imbalance."""
    n = params.gpus
    # a modelled layout's single-GPU stage has no group to be uneven in (the pre-layout model kept as it was)
    imbalance = 1.0 if params.modelled and n == 1 else params.tp_imbalance
    return [(imbalance if i == 0 else 1.0) / n for i in range(n)]


def stage_layers(layers: int, pp: int) -> list[int]:
    """Layers of each pipeline stage, as vLLM splits them (``get_pp_indices``): an even share each, the
    remainder one apiece to the stages before the last (which also holds the LM head)."""
    parts = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        parts[-i] += 1
    return parts


def micro_batches(work: StepWork, pp: int) -> int:
    """Micro-batches a pipeline of ``pp`` stages splits a step into: one per stage (vLLM keeps ``pp``
    batches in flight), at most one per scheduled request."""
    return max(1, min(pp, work.seqs or work.decode_seqs or 1))


def allreduce_latency_s(n: int, interconnect: str) -> float:
    """Fixed cost of one ring all-reduce over ``n`` GPUs: NCCL's base latency plus one link hop per ring step."""
    return NCCL_BASE_LATENCY_S + 2 * (n - 1) * HOP_LATENCY_S[interconnect]


def p2p_latency_s(interconnect: str) -> float:
    """Fixed cost of one pipeline send (one hop)."""
    return NCCL_BASE_LATENCY_S + HOP_LATENCY_S[interconnect]


def step_cost(work: StepWork, params: GpuParams) -> list[GpuStep]:
    """Per-GPU busy time and activity of ``work`` on one replica: ``gpus`` x ``pp`` GPUs, stage by stage
    (GPU ``stage * gpus + tp_rank``); empty work costs nothing."""
    if work.empty:
        return [
            GpuStep(0.0, 0.0, {k: 0.0 for k in PROFILE_KEYS}, 0.0, 1.0, 0.0, 0.0, 0.0) for _ in range(params.gpus * params.pp)
        ]
    if params.pp == 1:
        return [_rank_cost(work, params, share, params.geometry.layers, 1, False, False) for share in gpu_shares(params)]
    return _pipeline_cost(work, params)


def _pipeline_cost(work: StepWork, params: GpuParams) -> list[GpuStep]:
    """A step through ``pp`` stages in ``m`` micro-batches: stage s takes tau_s per micro-batch, the step
    ``sum(tau) + (m - 1) * max(tau)`` (equal stages: ``(m + pp - 1) * tau``, a bubble of ``(pp - 1) / (m + pp - 1)``);
    each GPU is busy ``m * tau_s`` of it and waits the rest."""
    m = micro_batches(work, params.pp)
    parts = stage_layers(params.geometry.layers, params.pp)
    last = params.pp - 1
    stages = [
        [_rank_cost(work, params, share, layers, m, s < last, s > 0) for share in gpu_shares(params)]
        for s, layers in enumerate(parts)
    ]
    taus = [max(r.kernel_s for r in stage) for stage in stages]
    pipeline_s = sum(taus) + (m - 1) * max(taus)
    out = []
    for stage in stages:
        for r in stage:
            busy = r.kernel_s * m
            out.append(
                dataclasses.replace(
                    r,
                    kernel_s=busy,
                    comm_s=r.comm_s * m,
                    link_tx_bytes=r.link_tx_bytes * m,
                    link_rx_bytes=r.link_rx_bytes * m,
                    flops=r.flops * m,
                    bytes=r.bytes * m,
                    stall_s=max(0.0, pipeline_s - busy),
                )
            )
    return out


def _rank_cost(work: StepWork, params: GpuParams, share: float, layers: int, micro: int, send: bool, recv: bool) -> GpuStep:
    """One GPU's kernels for one micro-batch (``1 / micro`` of ``work``) over ``layers`` layers, doing ``share``
    of the group's work, plus the copies of the whole step. ``send`` / ``recv``: it hands its activations to
    the next pipeline stage / takes them from the previous one."""
    geo = params.geometry
    pcie_bytes_s = params.pcie_mib_s * MIB
    tokens: float = work.tokens
    pairs: float = work.attention_pairs
    kv_read: float = work.kv_read_tokens
    seqs: float = work.decode_seqs
    if micro > 1:
        tokens, pairs, kv_read, seqs = tokens / micro, pairs / micro, kv_read / micro, seqs / micro
    layer_share = 1.0
    if layers != geo.layers:  # a pipeline stage: its slice of the layers
        layer_share = layers / geo.layers
        share = share * layer_share
    kv_share = share * params.kv_replication if params.kv_replication != 1.0 else share
    flops = share * (2.0 * geo.params_b * 1e9 * tokens + 4.0 * geo.layers * geo.hidden * pairs)
    kv_bytes = kv_share * geo.kv_bytes_per_token * (kv_read + tokens)
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
        d_flops = share * 2.0 * params.draft_share * geo.params_b * 1e9 * seqs
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
        gap = work.eager_launch_s if layer_share == 1.0 else work.eager_launch_s * layer_share
        profile = _mix(profile, {k: getattr(cal.TINY, k) for k in PROFILE_KEYS}, gap / (kernel + gap))
        demand = (kernel * demand + gap * cal.TINY.power_w) / (kernel + gap)
        kernel += gap
    n = params.gpus
    comm = 0.0
    sent = received = 0.0
    if n > 1 and tokens:
        # two all-reduces per layer of the activations (tokens x hidden), ring algorithm: each GPU sends
        # (and receives) 2 (n - 1) / n of them, in the critical path of the next layer (not overlapped)
        sent = received = 2.0 * layers * tokens * geo.hidden * geo.dtype_bytes * 2.0 * (n - 1) / n
        comm = sent / params.link_bytes_s
        if params.modelled:
            comm += 2 * layers * allreduce_latency_s(n, params.interconnect)
    if params.modelled and tokens and (send or recv):
        # each GPU of a stage hands its 1/TP slice of the activations to its twin in the next stage
        hop = tokens * geo.hidden * geo.dtype_bytes / n
        if send:
            comm += hop / params.link_bytes_s + p2p_latency_s(params.interconnect)
            sent += hop
        if recv:
            received += hop
    if comm:
        if params.modelled:
            # NCCL moves bytes with a few SMs (one block per channel): read as the PCIe copy phase, SMs idle
            copying = {k: getattr(cal.PCIE_COPY, k) for k in PROFILE_KEYS}
            profile = _mix(profile, copying, comm / (kernel + comm))
            demand = (kernel * demand + comm * cal.PCIE_COPY.power_w) / (kernel + comm)
        kernel += comm
    ranks = n * params.pp
    h2d = work.h2d_bytes / ranks
    d2h = work.d2h_bytes / ranks
    copy = (h2d + d2h) / pcie_bytes_s
    return GpuStep(
        kernel_s=kernel,
        copy_s=copy,
        kernel_profile=profile,
        kernel_power_w=cal.capped_power(demand, params.power_limit_w),
        clock_scale=clock,
        h2d_bytes=h2d,
        d2h_bytes=d2h,
        link_tx_bytes=sent,
        flops=flops,
        bytes=total_bytes,
        compute_weight=w,
        link_rx_bytes=received,
        over_pcie=params.interconnect == "pcie",
        comm_s=comm,
        comm_idle=params.modelled and comm > 0,
    )
