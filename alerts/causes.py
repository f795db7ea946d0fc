"""The diagnosis causes we alert on, with the words an on-call engineer reads.

Why a table: the cause ids are a contract with exporter/diagnosis (issue 5); one
row per cause gives one ticket alert, one runbook section (holding the anchor
``<a id="CAUSE">`` that the page LLMServiceDegraded links to when this cause is
primary) and one Overview timeline row, so adding a cause here and its runbook
section is the whole change on the monitoring side.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cause:
    """One ``llm_bottleneck_active{layer, cause}`` series and the alert that watches it."""

    layer: str
    cause: str
    alert: str
    summary: str
    what: str
    dashboard: str
    #: an outage, not a slowdown: its alert pages on its own (severity page, ``kind="outage"``) and is
    #: not muted by the per-exporter page; it mutes that page instead when the page names it
    pages: bool = False


#: Dashboard title per layer (kept in step with dashboards/boards/*).
LAYER_DASHBOARD: dict[str, str] = {
    "hardware": "LLM / Hardware",
    "operator": "LLM / Hardware",
    "memory": "LLM / Memory / KV cache",
    "scheduler": "LLM / Scheduler",
    "parallel": "LLM / Parallelism",
    "speculative_decoding": "LLM / Speculative decoding",
    "application": "LLM / Application & SLO",
}


def _c(layer: str, cause: str, alert: str, summary: str, what: str, pages: bool = False) -> Cause:
    return Cause(layer, cause, alert, summary, what, LAYER_DASHBOARD[layer], pages)


CAUSES: tuple[Cause, ...] = (
    _c(
        "hardware",
        "compute_bound",
        "LLMComputeBound",
        "GPU compute is the limit",
        "SMs and tensor pipes are saturated; more throughput needs fewer FLOPs per token or more GPUs.",
    ),
    _c(
        "hardware",
        "memory_bandwidth_bound",
        "LLMMemoryBandwidthBound",
        "GPU memory bandwidth is the limit",
        "DRAM is busy while tensor pipes idle, the decode signature; larger batches, quantised weights or KV cache help.",
    ),
    _c(
        "hardware",
        "pcie_transfer_bound",
        "LLMPCIeTransferBound",
        "PCIe transfers hold the GPU",
        "'GPU util' is high while SMs idle and PCIe moves data: KV swap/offload or host copies stall the GPU.",
    ),
    _c(
        "hardware",
        "power_or_thermal_throttling",
        "LLMGPUThrottling",
        "GPU clocks are throttled by power or heat",
        "The SM clock sits below its maximum with a power or thermal throttle reason set; work takes longer per step.",
    ),
    _c(
        "hardware",
        "memory_capacity_exhausted",
        "LLMGPUMemoryExhausted",
        "GPU memory is exhausted",
        "Framebuffer memory is nearly full; the next allocation can fail or force the engine to shrink its KV cache.",
    ),
    _c(
        "operator",
        "launch_bound_small_kernels",
        "LLMLaunchBoundSmallKernels",
        "Small kernels leave the GPU launch-bound",
        "'GPU util' is far above SM active without PCIe traffic or a saturated host: many tiny kernels; CUDA graphs or larger batches help.",
    ),
    _c(
        "operator",
        "tensor_cores_unused",
        "LLMTensorCoresUnused",
        "Tensor cores are not used",
        "SMs are busy but tensor pipes idle: the model runs in a dtype or kernel path that skips tensor cores.",
    ),
    _c(
        "operator",
        "cuda_graphs_not_covering_batches",
        "LLMCUDAGraphsNotCovering",
        "The decode runs without CUDA graphs",
        "CUDA graphs are off (enforce_eager) or most batches are larger than the largest captured graph, and the launch-bound decode leaves SMs idle.",
    ),
    _c(
        "operator",
        "prefill_chunk_too_small",
        "LLMPrefillChunkTooSmall",
        "Prompts are prefilled over many small chunks",
        "The prompt p90 is several times the per-step token budget: each prompt takes many engine steps before its first token.",
    ),
    _c(
        "memory",
        "kv_cache_pressure",
        "LLMKVCachePressure",
        "KV cache pressure preempts requests",
        "The KV cache is nearly full and requests are preempted and recomputed; throughput drops and latency climbs.",
    ),
    _c(
        "memory",
        "kv_fragmentation_or_capacity_misjudged",
        "LLMKVFragmentation",
        "Requests wait while the KV cache is far from full",
        "Requests queue although KV usage is well below full: fragmentation, a block size or max-num-seqs limit, not memory, holds them.",
    ),
    _c(
        "memory",
        "context_reserved_not_used",
        "LLMContextReservedNotUsed",
        "Each sequence reserves far more context than requests use",
        "Requests wait for a slot while each slot reserves context far above the p99 of prompt + output: the reservation, not memory, is the limit.",
    ),
    _c(
        "memory",
        "prefix_cache_hit_drop",
        "LLMPrefixCacheHitDrop",
        "The prefix cache stopped finding the shared prefix",
        "The prefix-cache hit ratio fell to under half of its earlier level while prompts stayed the same, and TTFT rose: "
        "prefill redoes the shared prefix. Prefix caching switched off, a router that lost session affinity or a changed "
        "system prompt.",
    ),
    _c(
        "scheduler",
        "serial_host_ceiling",
        "LLMSerialHostCeiling",
        "A single host thread caps the service",
        "One thread of the serving process runs at a full core while SMs idle and work queues: the serial scheduler loop is the ceiling.",
    ),
    _c(
        "scheduler",
        "queue_backlog",
        "LLMQueueBacklog",
        "The request queue is growing",
        "Requests arrive faster than the engine finishes them; the queue and TTFT keep growing.",
    ),
    _c(
        "parallel",
        "gpu_imbalance",
        "LLMGPUImbalance",
        "GPUs of one parallel group are unevenly loaded",
        "One GPU of the group is much busier than the others; the group runs at the pace of its slowest member.",
    ),
    _c(
        "parallel",
        "communication_bound",
        "LLMCommunicationBound",
        "A parallel group waits on its interconnect",
        "The group's links run near their capacity (or its collectives take much of each step) while its SMs wait: tensor parallelism costs more than it splits.",
    ),
    _c(
        "speculative_decoding",
        "low_acceptance",
        "LLMSpecDecodeLowAcceptance",
        "Speculative decoding drafts are mostly rejected",
        "The target model rejects most draft tokens, so drafting costs more than it saves.",
    ),
    _c(
        "application",
        "batching_window_too_large",
        "LLMBatchingWindowTooLarge",
        "The batching window delays requests",
        "TTFT is high while the GPU idles: requests wait for a batch to fill instead of being served.",
    ),
    _c(
        "application",
        "retries_and_timeouts",
        "LLMRetriesAndTimeouts",
        "Clients time out and retry",
        "Aborted and retried requests pile up, adding load that produces no answers.",
    ),
    _c(
        "application",
        "slo_breach",
        "LLMSLOBreach",
        "Latency is above its SLO",
        "TTFT or ITL p95 is above the configured SLO according to the diagnosis.",
    ),
    # --- the canary probe (exporter/probe, docs/probe.md) ---
    _c(
        "application",
        "front_end_overhead",
        "LLMFrontEndOverhead",
        "Clients wait far longer than the engine says",
        "The canary probe's time to first token is far above the engine's own for the same request: the time is spent in front of the engine (gateway, proxy, API server, network).",
    ),
    _c(
        "application",
        "engine_unresponsive",
        "LLMEngineUnresponsive",
        "The engine is hung: requests get no answer",
        "The canary probe timed out while the engine's /metrics still answered with every counter frozen: the engine core is hung. An outage, not a slowdown.",
        pages=True,
    ),
    # --- the measured capacity at SLO (exporter/capacity, issue 22) ---
    _c(
        "application",
        "capacity_nearly_used",
        "LLMCapacityNearlyUsed",
        "The load is near the measured capacity at SLO",
        "The engine carries nearly as much as its capacity profile (tune or ramp, --capacity-profile) measured it can "
        "within the SLO, or more: past that knee latency climbs and requests queue. Add a replica or cap concurrency at "
        "the gateway at llm_capacity_recommended_max_concurrency.",
    ),
)


def by_alert() -> dict[str, Cause]:
    return {c.alert: c for c in CAUSES}
