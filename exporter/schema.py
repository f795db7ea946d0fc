"""The single source of every metric name the exporter publishes.

Why one module: dashboards, alert rules, docs/metrics.md, the collector and the
engine adapters all read names, types, units, help texts and layers from here,
so a rename cannot leave a panel dark or an alert dead.

Conventions (Prometheus): base units (seconds, bytes, 0-1 ratios, hertz,
watts), counters end in ``_total``, no colons in names.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Literal

MetricType = Literal["gauge", "counter", "histogram", "info"]

#: The seven layers of the bottleneck map, in the order an engineer walks them.
LAYERS: tuple[str, ...] = (
    "hardware",
    "operator",
    "memory",
    "scheduler",
    "parallel",
    "speculative_decoding",
    "application",
)
#: Layers of our own bookkeeping (not part of the bottleneck map).
META_LAYERS: tuple[str, ...] = ("exporter", "diagnosis")
ALL_LAYERS: tuple[str, ...] = LAYERS + META_LAYERS

GPU_LABELS: tuple[str, ...] = ("gpu", "uuid")
ENGINE_LABELS: tuple[str, ...] = ("server", "engine", "model", "rank")
# --- kubernetes (exporter/kubernetes) ---------------------------------------------
#: Labels engine and process series of discovered serving pods carry in --kubernetes mode
#: (added at start-up by ``extend_labels``; absent otherwise).
KUBERNETES_ENGINE_LABELS: tuple[str, ...] = ("namespace", "pod")
#: Labels naming the container a GPU is allocated to (llm_gpu_pod_info, and the GPU
#: series with --kubernetes-gpu-labels).
KUBERNETES_POD_LABELS: tuple[str, ...] = ("namespace", "pod", "container")
#: Bounded values of ``llm_exporter_kubernetes_pods_skipped_total{reason}``
#: (exporter/kubernetes/pods.py reads them, exporter/kubernetes/discovery.py counts them).
KUBERNETES_POD_SKIP_REASONS: tuple[str, ...] = (
    "malformed",
    "bad_annotation",
    "annotations_too_large",
    "labels_too_large",
    "too_many_pods",
)
# --- end kubernetes -----------------------------------------------------------------

# --- tracing (exporter/tracing) ------------------------------------------------------
#: The OTLP trace receiver's protocols (exporter/tracing/receiver.py): the ``protocol`` label.
TRACE_PROTOCOLS: tuple[str, ...] = ("grpc", "http")
#: Why decoded spans were dropped (``llm_trace_spans_dropped_total{reason}``; exporter/tracing/limits.py).
TRACE_SPAN_DROP_REASONS: tuple[str, ...] = ("rate_limited", "too_many_attributes", "too_many_spans", "internal")
#: Why whole export requests were refused before their spans were counted
#: (``llm_trace_requests_rejected_total{reason}``; exporter/tracing/limits.py).
TRACE_REQUEST_REJECT_REASONS: tuple[str, ...] = (
    "too_large",
    "malformed",
    "unsupported_media_type",
    "unauthorized",
    "busy",
    "rate_limited",
    "timeout",
)
#: Why received spans gave no request record (``llm_trace_spans_ignored_total{reason}``;
#: exporter/tracing/normalize.py): no configured engine claims the span's service, not a request
#: span, its timings missing or out of range, a malformed id, an SGLang slice whose request span
#: never came.
TRACE_SPAN_IGNORE_REASONS: tuple[str, ...] = (
    "unmatched_engine",
    "not_a_request",
    "missing_attributes",
    "bad_value",
    "bad_id",
    "pending_evicted",
)
#: Where a traced request's time went (``llm_traced_request_seconds{phase}``): the three phases
#: (exporter/tracing/record.py) and the two figures users are promised, TTFT and end to end.
TRACE_PHASES: tuple[str, ...] = ("queue", "prefill", "decode", "ttft", "e2e")
#: What became of spans re-exported by ``--otlp-forward`` (exporter/tracing/forward.py).
TRACE_FORWARD_OUTCOMES: tuple[str, ...] = ("sent", "failed", "dropped")
# --- end tracing ----------------------------------------------------------------------

#: The kinds of operator an on-demand profile's GPU kernels are classified into
#: (exporter/profile/classify.py): the values of ``llm_operator_time_share{kind}``.
OPERATOR_KINDS: tuple[str, ...] = ("attention", "gemm", "communication", "memory_copy", "sampling", "other")
#: The workload dimensions ``llm_capacity_workload_drift_ratio{dimension}`` compares.
CAPACITY_DRIFT_DIMENSIONS: tuple[str, ...] = ("prompt_tokens", "output_tokens")


@dataclass(frozen=True)
class ThrottleReason:
    """One bit of the GPU clocks-event (throttle) bitmask and whether it costs speed.

    ``harmful``: the clock is lower than the work could run at because of power or
    heat (what the diagnosis' throttling cause, the recording rule
    ``instance_gpu:llm_gpu_throttled:max`` and the hardware dashboard look for);
    idleness and clocks a user pinned are not.
    """

    bit: int
    name: str
    harmful: bool
    meaning: str


#: The one table of clocks-event (throttle) reasons: the values of
#: ``llm_gpu_throttle_reason_active{reason}``. Source: NVML nvmlClocksEventReasons
#: (nvml.h); DCGM field 112 carries the same bits. NVML, DCGM, replay and sim decode
#: the mask with it (exporter/gpu/fields.py); the diagnosis and the rules read ``harmful``.
THROTTLE_REASONS: tuple[ThrottleReason, ...] = (
    ThrottleReason(0x1, "gpu_idle", False, "nothing runs, so the clock idles down"),
    ThrottleReason(0x2, "applications_clocks_setting", False, "clocks pinned by the application-clocks setting"),
    ThrottleReason(0x4, "sw_power_cap", True, "the driver holds power under the enforced power limit"),
    ThrottleReason(0x8, "hw_slowdown", True, "hardware slowdown (heat or power brake) halves the clock or more"),
    ThrottleReason(0x10, "sync_boost", False, "clocks held in step with other GPUs of a sync-boost group"),
    ThrottleReason(0x20, "sw_thermal_slowdown", True, "the driver lowers the clock to keep the GPU or memory cool"),
    ThrottleReason(0x40, "hw_thermal_slowdown", True, "the hardware lowers the clock: the GPU is too hot"),
    ThrottleReason(0x80, "hw_power_brake_slowdown", True, "an external power brake (the chassis' power supply) slows the GPU"),
    ThrottleReason(0x100, "display_clock_setting", False, "clocks limited by the display clock setting"),
)
#: bit value -> reason name (what the GPU sources decode the bitmask with)
THROTTLE_REASON_BITS: dict[int, str] = {r.bit: r.name for r in THROTTLE_REASONS}
#: reasons that mean "slower than it could be" (power or heat), in bit order
HARMFUL_THROTTLE_REASONS: tuple[str, ...] = tuple(r.name for r in THROTTLE_REASONS if r.harmful)

#: The closed vocabulary of ``llm_requests_finished_total{reason}``, value -> meaning.
#: Every engine row rewrites its raw finish reasons into it (``Rewrite`` in
#: exporter/engines/table.py); a raw value no row knows becomes ``other``, never
#: itself, so the label stays bounded and a failure means the same on every engine.
FINISH_REASONS: dict[str, str] = {
    "stop": "completed: an end-of-sequence token or a stop condition ended it",
    "length": "completed: the output-token limit or the context length cut it",
    "success": "completed; the engine does not say how (TGI, Triton)",
    "abort": "did not complete: the client went away or cancelled it",
    "error": "did not complete: the engine failed it",
    "timeout": "did not complete: a deadline ended it",
    "unknown": "finished; the engine counts finished requests without any reason (SGLang), failures included",
    "other": "a raw reason this exporter does not know (the bounded fallback)",
}
#: The finish reasons that count as failures: the diagnosis' failed share
#: (exporter/diagnosis/signals.py) and the recording rule
#: ``server_model:llm_requests_failed:ratio_rate*`` (alerts/recording.py) both read this.
FAILED_FINISH_REASONS: tuple[str, ...] = ("abort", "error", "timeout")
#: What a raw finish reason becomes when no row of its engine knows it.
FINISH_REASON_FALLBACK = "other"

#: The closed set of ``setting`` values of llm_engine_setting; what each means, and the flag
#: of each engine that sets it, is in exporter/engines/settings.py (NUMBER_SETTINGS, FLAGS).
ENGINE_SETTINGS: tuple[str, ...] = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "max_input_tokens",
    "cuda_graph_max_batch_size",
    "gpu_memory_utilization",
    "slots",
    "context_per_slot",
    "context_size",
    "block_size",
    "tensor_parallel_size",
    "num_speculative_tokens",
    "pipeline_parallel_size",
    "data_parallel_size",
)

#: The closed vocabulary of ``llm_kv_cache_tier_hit_tokens_total{tier}``: where the KV of a
#: cached prompt token was found, tier -> meaning. Engines name their tiers differently (vLLM
#: ``source``: device, host, disk, p2p, external_unspecified; SGLang ``cache_source``: device,
#: host, storage); each row of exporter/engines/mappings/ rewrites its words into these.
KV_CACHE_TIERS: dict[str, str] = {
    "gpu": "the GPU's own KV cache (no copy needed)",
    "host": "host (CPU) memory: copied to the GPU over PCIe before use (vLLM KV offload, SGLang HiCache)",
    "storage": "local disk or a storage backend below host memory (vLLM disk, SGLang HiCache storage)",
    "peer": "another serving instance, over the network (vLLM p2p)",
    "other": "a KV connector that does not say where (vLLM external_unspecified), or a word this exporter does not know",
}
#: The closed vocabulary of ``llm_kv_cache_tier_transfer_bytes_total{direction}``.
KV_TRANSFER_DIRECTIONS: dict[str, str] = {
    "offload": "GPU -> a lower tier (host memory): KV kept instead of dropped when the GPU cache evicts it",
    "load": "a lower tier -> GPU: KV brought back for a hit, instead of recomputed",
}

#: How a metric's series are reduced into one figure (across GPUs, ranks, servers).
Reduce = Literal["sum", "max", "min", "mean"]
#: the PromQL aggregation of each reduction (what signal names are written with)
REDUCE_PROMQL: dict[str, str] = {"sum": "sum", "max": "max", "min": "min", "mean": "avg"}

#: Bounded set of values for the ``reason`` label of llm_exporter_source_errors_total.
SOURCE_ERROR_REASONS: tuple[str, ...] = (
    "timeout",
    "connection",
    "http_status",
    "parse",
    "too_large",
    "too_many_series",
    "library_not_found",
    "gpu_lost",
    "not_supported",
    "file_missing",
    "malformed",
    "dcgm_unavailable",
    "process_gone",
    "redirect",
    "bad_response",
    "internal",
)

#: Bounded set of values for the ``reason`` label of llm_exporter_series_dropped_total.
SERIES_DROP_REASONS: tuple[str, ...] = ("budget", "label_too_long", "bad_histogram", "family_budget")
#: Families an engine source names in the ``family`` label of llm_exporter_series_dropped_total
#: (the first ones dropped, kept for the process's life so each counter only grows); the rest are "other".
SERIES_DROP_FAMILIES = 10
SERIES_DROP_OTHER_FAMILY = "other"


@dataclass(frozen=True)
class MetricSpec:
    """One published metric family: everything a consumer needs to know about it."""

    name: str
    type: MetricType
    unit: str
    help: str
    layer: str
    labels: tuple[str, ...] = ()
    #: Where the value comes from, for docs ("nvml", "dcgm", "engine", "derived", ...).
    origin: str = ""
    #: How consumers reduce its series into one figure (the diagnosis signals, the ramp's
    #: per-scrape gauges, the demo's view): "sum" for extensive quantities (requests,
    #: bytes, watts), "max" for the worst series (usage, activity, skew), "min" for
    #: the tightest, "mean" for a typical level (clocks). None: not reduced (info, exporter
    #: bookkeeping, per-layer diagnosis values).
    reduce: Reduce | None = None
    #: Labels with a closed vocabulary, as (label, allowed values) pairs.
    values: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def closed_values(self, label: str) -> tuple[str, ...] | None:
        """The allowed values of ``label``, or None when its values are open."""
        return next((allowed for name, allowed in self.values if name == label), None)

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "type": self.type,
            "unit": self.unit,
            "help": self.help,
            "layer": self.layer,
            "labels": list(self.labels),
            "origin": self.origin,
            "reduce": self.reduce,
            "values": {label: list(allowed) for label, allowed in self.values},
        }


_Values = tuple[tuple[str, tuple[str, ...]], ...]


def _g(
    name: str,
    unit: str,
    help: str,
    layer: str,
    labels: Iterable[str],
    origin: str,
    reduce: Reduce | None = None,
    values: _Values = (),
) -> MetricSpec:
    return MetricSpec(name, "gauge", unit, help, layer, tuple(labels), origin, reduce, values)


def _c(name: str, unit: str, help: str, layer: str, labels: Iterable[str], origin: str, values: _Values = ()) -> MetricSpec:
    """Counters always reduce by sum: requests, tokens and bytes add up across series."""
    return MetricSpec(name, "counter", unit, help, layer, tuple(labels), origin, "sum", values)


def _h(name: str, help: str, layer: str, labels: Iterable[str], origin: str, unit: str = "seconds") -> MetricSpec:
    """Histograms merge bucket by bucket (a sum of counts) across series."""
    return MetricSpec(name, "histogram", unit, help, layer, tuple(labels), origin, "sum")


_GPU = GPU_LABELS
_ENG = ENGINE_LABELS

_SPECS: list[MetricSpec] = [
    # --- exporter (its own health) -------------------------------------------------
    _g(
        "llm_exporter_source_up",
        "",
        "1 if the source's last sample succeeded, 0 if it failed.",
        "exporter",
        ["source"],
        "exporter",
    ),
    _g(
        "llm_exporter_source_duration_seconds",
        "seconds",
        "Wall time of the source's last sample attempt.",
        "exporter",
        ["source"],
        "exporter",
    ),
    _c(
        "llm_exporter_source_errors_total",
        "",
        "Failed or partially failed samples, by source and reason.",
        "exporter",
        ["source", "reason"],
        "exporter",
    ),
    _g(
        "llm_exporter_source_last_success_timestamp_seconds",
        "seconds",
        "Unix time of the source's last successful sample.",
        "exporter",
        ["source"],
        "exporter",
    ),
    _g(
        "llm_exporter_source_series",
        "",
        "Number of series the source published in its last successful sample.",
        "exporter",
        ["source"],
        "exporter",
    ),
    _c(
        "llm_exporter_series_dropped_total",
        "",
        "Series a source did not publish, by reason: budget (over the per-engine series budget), label_too_long (a label value cut to the length limit; the series is kept), bad_histogram (cumulative bucket counts decrease), family_budget (sample lines of one metric family over its share of the budget, dropped unread; family names it, the first 10 such families by name and the rest as other; empty for the other reasons).",
        "exporter",
        ["source", "reason", "family"],
        "exporter",
    ),
    _g(
        "llm_exporter_build_info",
        "",
        "Always 1; labels carry the exporter version and Python version.",
        "exporter",
        ["version", "python_version"],
        "exporter",
    ),
    _g(
        "llm_exporter_metric_family_excluded",
        "",
        "Always 1 per metric family of the schema that --metrics.include / --metrics.exclude leave out of /metrics (no series: nothing left out). The diagnosis still reads every family; only publishing stops.",
        "exporter",
        ["family"],
        "exporter",
    ),
    # --- hardware -------------------------------------------------------------------
    _g(
        "llm_gpu_info",
        "",
        "Always 1 per GPU; labels name the GPU and the source that reads it.",
        "hardware",
        ["gpu", "uuid", "name", "source"],
        "gpu",
    ),
    _g("llm_gpu_up", "", "1 while the GPU answers, 0 once it is lost or stops answering.", "hardware", _GPU, "gpu", reduce="min"),
    _g(
        "llm_gpu_profiling_available",
        "",
        "1 if SM/tensor/DRAM activity can be read (DCGM profiling or NVML GPM), else 0; which of the four: llm_gpu_profiling_metric_available.",
        "hardware",
        _GPU,
        "gpu",
        reduce="min",
    ),
    _g(
        "llm_gpu_profiling_metric_available",
        "",
        "1 per GPU and profiling metric the GPU source reads (metric: llm_gpu_sm_active_ratio, llm_gpu_sm_occupancy_ratio, llm_gpu_tensor_active_ratio, llm_gpu_dram_active_ratio), 0 for one it cannot (a dcgm-exporter whose collectors CSV leaves the field out).",
        "hardware",
        _GPU + ("metric",),
        "gpu",
        reduce="min",
    ),
    _g(
        "llm_gpu_utilization_ratio",
        "ratio",
        "NVML 'GPU util': share of time any kernel or copy ran. Not SM busyness: 0.99 during a PCIe copy with idle SMs.",
        "hardware",
        _GPU,
        "nvml/dcgm 203",
        reduce="max",
    ),
    _g(
        "llm_gpu_memory_utilization_ratio",
        "ratio",
        "NVML 'memory util': share of time device memory was read or written.",
        "hardware",
        _GPU,
        "nvml/dcgm 204",
        reduce="max",
    ),
    _g(
        "llm_gpu_sm_active_ratio",
        "ratio",
        "Share of SMs with at least one warp resident (DCGM 1002 / GPM SM util).",
        "hardware",
        _GPU,
        "dcgm 1002/gpm",
        reduce="max",
    ),
    _g(
        "llm_gpu_sm_occupancy_ratio",
        "ratio",
        "Resident warps as a share of the maximum (DCGM 1003 / GPM SM occupancy).",
        "hardware",
        _GPU,
        "dcgm 1003/gpm",
        reduce="max",
    ),
    _g(
        "llm_gpu_tensor_active_ratio",
        "ratio",
        "Share of cycles any tensor pipe was busy (DCGM 1004 / GPM any-tensor util).",
        "hardware",
        _GPU,
        "dcgm 1004/gpm",
        reduce="max",
    ),
    _g(
        "llm_gpu_dram_active_ratio",
        "ratio",
        "Share of cycles the DRAM interface moved data (DCGM 1005 / GPM DRAM bandwidth util).",
        "hardware",
        _GPU,
        "dcgm 1005/gpm",
        reduce="max",
    ),
    _g("llm_gpu_memory_used_bytes", "bytes", "Framebuffer memory in use.", "hardware", _GPU, "nvml/dcgm 252", reduce="sum"),
    _g("llm_gpu_memory_total_bytes", "bytes", "Framebuffer memory in total.", "hardware", _GPU, "nvml/dcgm 250", reduce="sum"),
    _g("llm_gpu_power_watts", "watts", "Board power draw.", "hardware", _GPU, "nvml/dcgm 155", reduce="sum"),
    _g("llm_gpu_power_limit_watts", "watts", "Enforced board power limit.", "hardware", _GPU, "nvml/dcgm 164", reduce="sum"),
    _g("llm_gpu_sm_clock_hertz", "hertz", "Current SM clock.", "hardware", _GPU, "nvml/dcgm 100", reduce="mean"),
    _g("llm_gpu_sm_clock_max_hertz", "hertz", "Maximum SM clock.", "hardware", _GPU, "nvml/dcgm 113", reduce="mean"),
    _g("llm_gpu_memory_clock_hertz", "hertz", "Current memory clock.", "hardware", _GPU, "nvml/dcgm 101", reduce="mean"),
    _g(
        "llm_gpu_throttle_reason_active",
        "",
        "1 while this clocks-event (throttle) reason bit is set, else 0.",
        "hardware",
        _GPU + ("reason",),
        "nvml/dcgm 112",
        reduce="max",
        values=(("reason", tuple(THROTTLE_REASON_BITS.values())),),
    ),
    _g(
        "llm_gpu_pcie_transmit_bytes_per_second",
        "bytes_per_second",
        "PCIe transmit rate seen from the GPU (device to host), header and payload.",
        "hardware",
        _GPU,
        "dcgm 1009/gpm",
        reduce="sum",
    ),
    _g(
        "llm_gpu_pcie_receive_bytes_per_second",
        "bytes_per_second",
        "PCIe receive rate seen from the GPU (host to device), header and payload.",
        "hardware",
        _GPU,
        "dcgm 1010/gpm",
        reduce="sum",
    ),
    _g(
        "llm_gpu_nvlink_transmit_bytes_per_second",
        "bytes_per_second",
        "NVLink transmit rate over all links.",
        "parallel",
        _GPU,
        "dcgm 1011/gpm",
        reduce="sum",
    ),
    _g(
        "llm_gpu_nvlink_receive_bytes_per_second",
        "bytes_per_second",
        "NVLink receive rate over all links.",
        "parallel",
        _GPU,
        "dcgm 1012/gpm",
        reduce="sum",
    ),
    # --- the links' capacity (exporter/gpu/fields.py pcie_capacity, nvlink_capacity) ----------------
    _g(
        "llm_gpu_pcie_link_generation",
        "",
        "PCIe generation the GPU's link runs at now (NVML nvmlDeviceGetCurrPcieLinkGeneration, DCGM 237); an idle GPU may train its link down to save power.",
        "hardware",
        _GPU,
        "nvml/dcgm 237",
        reduce="min",
    ),
    _g(
        "llm_gpu_pcie_link_width",
        "",
        "PCIe lanes the GPU's link runs on now (NVML nvmlDeviceGetCurrPcieLinkWidth, DCGM 238).",
        "hardware",
        _GPU,
        "nvml/dcgm 238",
        reduce="min",
    ),
    _g(
        "llm_gpu_pcie_link_max_generation",
        "",
        "Highest PCIe generation the GPU and its slot both support (NVML nvmlDeviceGetMaxPcieLinkGeneration, DCGM 235).",
        "hardware",
        _GPU,
        "nvml/dcgm 235",
        reduce="min",
    ),
    _g(
        "llm_gpu_pcie_link_max_width",
        "",
        "Widest PCIe link the GPU and its slot both support, in lanes (NVML nvmlDeviceGetMaxPcieLinkWidth, DCGM 236): above llm_gpu_pcie_link_width under load, the link trained narrower.",
        "hardware",
        _GPU,
        "nvml/dcgm 236",
        reduce="min",
    ),
    _g(
        "llm_gpu_pcie_link_bandwidth_bytes_per_second",
        "bytes_per_second",
        "PCIe capacity per direction at the current generation and width: lanes x the per-lane rate after line encoding (Gen3 0.985, Gen4 1.969, Gen5 3.938, Gen6 7.563 GB/s). Absent when generation or width is unknown.",
        "hardware",
        _GPU,
        "derived",
        reduce="min",
    ),
    _g(
        "llm_gpu_nvlink_links_active",
        "",
        "NVLinks of the GPU that are up (NVML nvmlDeviceGetNvLinkState); absent on a GPU without NVLink.",
        "parallel",
        _GPU,
        "nvml",
        reduce="min",
    ),
    _g(
        "llm_gpu_nvlink_version",
        "",
        "NVLink generation of the GPU's active links (1-5: P100, V100/Turing, A100, H100/H200, B200); from the GPU architecture, else NVML nvmlDeviceGetNvLinkVersion.",
        "parallel",
        _GPU,
        "nvml",
        reduce="min",
    ),
    _g(
        "llm_gpu_nvlink_bandwidth_bytes_per_second",
        "bytes_per_second",
        "NVLink capacity per direction: active links x the per-link rate of their generation (NVLink 1 20 GB/s; 2, 3 and 4 25 GB/s; 5 50 GB/s). Absent without an active link or for an unknown generation.",
        "parallel",
        _GPU,
        "derived",
        reduce="min",
    ),
    _g("llm_gpu_temperature_celsius", "celsius", "GPU core temperature.", "hardware", _GPU, "nvml/dcgm 150", reduce="max"),
    _c(
        "llm_engine_estimated_gpu_flops_total",
        "",
        "Floating-point operations the engine's cost model estimates it ran, per GPU (vLLM enable_mfu_metrics): a cross-check of measured tensor/SM activity.",
        "hardware",
        _ENG,
        "engine",
    ),
    _c(
        "llm_engine_estimated_gpu_read_bytes_total",
        "bytes",
        "Bytes the engine's cost model estimates it read from GPU memory, per GPU: a cross-check of measured DRAM activity.",
        "hardware",
        _ENG,
        "engine",
    ),
    _c(
        "llm_engine_estimated_gpu_write_bytes_total",
        "bytes",
        "Bytes the engine's cost model estimates it wrote to GPU memory, per GPU.",
        "hardware",
        _ENG,
        "engine",
    ),
    _c(
        "llm_gpu_energy_joules_total",
        "joules",
        "Energy used since the driver loaded (read on a slow cadence: the call costs milliseconds).",
        "hardware",
        _GPU,
        "nvml/dcgm 156",
    ),
    # --- kubernetes (exporter/kubernetes/attribution.py) ------------------------------
    _g(
        "llm_gpu_pod_info",
        "",
        "Always 1 per GPU and container the kubelet allocated it to (PodResources API; MIG devices and time-sliced replicas report their physical GPU's gpu and uuid). Join: llm_gpu_pod_info * on(uuid) group_left llm_gpu_utilization_ratio.",
        "hardware",
        _GPU + KUBERNETES_POD_LABELS,
        "kubelet",
    ),
    _g(
        "llm_gpu_process_memory_used_bytes",
        "bytes",
        "GPU memory used by one container's compute processes on one GPU (NVML running processes, attributed through each process's cgroup); namespace, pod and container empty for processes in no known pod.",
        "hardware",
        ("gpu",) + KUBERNETES_POD_LABELS,
        "nvml/cgroup",
        reduce="sum",
    ),
    _c(
        "llm_exporter_kubernetes_pods_skipped_total",
        "",
        "Pods of the node's pod list left out or read in part, once per list read, by reason: malformed (not a pod with a UID and a name; left out), bad_annotation (an llm-layer-exporter.io annotation that is not valid; not scraped), annotations_too_large and labels_too_large (over the per-pod size; ignored), too_many_pods (over the 512 kept; left out).",
        "exporter",
        ["reason"],
        "kubelet",
        values=(("reason", KUBERNETES_POD_SKIP_REASONS),),
    ),
    # --- end kubernetes ---------------------------------------------------------------
    # --- operator ------------------------------------------------------------------
    _g(
        "llm_engine_config_info",
        "",
        "Always 1; labels carry the engine settings that shape its kernels (whatever the engine serves or its command line says; absent when unknown). enforce_eager: true when CUDA graphs are off; chunked_prefill: true/false; compile_level: the compile / optimisation level (exporter/engines/settings.py; they replace the cuda_graph and compile_mode labels no engine filled, keeping every series under 20 labels in --kubernetes mode).",
        "operator",
        _ENG
        + (
            "block_size",
            "kv_cache_dtype",
            "attention_backend",
            "prefix_caching",
            "spec_method",
            "enforce_eager",
            "chunked_prefill",
            "compile_level",
        ),
        "engine",
    ),
    _g(
        "llm_engine_setting",
        "",
        "A numeric launch setting of the engine, by setting ("
        + ", ".join(ENGINE_SETTINGS)
        + "; what each means and the flag that sets it per engine: exporter/engines/settings.py): read from what the engine serves, else its command line and environment (--engine-pid); absent when unknown, never a guessed default.",
        "operator",
        _ENG + ("setting",),
        "engine",
        reduce="max",
        values=(("setting", ENGINE_SETTINGS),),
    ),
    _g(
        "llm_operator_time_share",
        "",
        "Share (0-1) of the time of the engine's last on-demand profile (POST /profile, exporter/profile/: GPU kernel time; on an engine whose trace has no GPU kernels, CPU operator self time, the answer's basis) spent in one kind of operator: attention, gemm, communication, memory_copy, sampling or other; the kinds of one profile add up to 1. Absent until a profile was taken.",
        "operator",
        ("engine", "kind"),
        "profile",
        reduce="max",
        values=(("kind", OPERATOR_KINDS),),
    ),
    _g(
        "llm_operator_profile_timestamp_seconds",
        "seconds",
        "Unix time the engine's last on-demand profile (POST /profile) ended: how old llm_operator_time_share is.",
        "operator",
        ("engine",),
        "profile",
        reduce="max",
    ),
    _h("llm_request_prefill_seconds", "Per request: time spent in prefill.", "operator", _ENG, "engine"),
    _h("llm_request_decode_seconds", "Per request: time spent in decode.", "operator", _ENG, "engine"),
    # --- memory --------------------------------------------------------------------
    _g("llm_kv_cache_usage_ratio", "ratio", "Share of KV-cache blocks in use.", "memory", _ENG, "engine", reduce="max"),
    _g("llm_kv_cache_capacity_tokens", "tokens", "KV-cache capacity in tokens.", "memory", _ENG, "engine", reduce="sum"),
    _g("llm_kv_cache_block_size_tokens", "tokens", "Tokens per KV-cache block (page).", "memory", _ENG, "engine", reduce="max"),
    _c(
        "llm_kv_cache_preemptions_total",
        "",
        "Requests preempted (evicted and recomputed or retracted) for lack of KV cache.",
        "memory",
        _ENG,
        "engine",
    ),
    _c(
        "llm_prefix_cache_queried_tokens_total",
        "tokens",
        "Prompt tokens looked up in the prefix cache.",
        "memory",
        _ENG,
        "engine",
    ),
    _c("llm_prefix_cache_hit_tokens_total", "tokens", "Prompt tokens found in the prefix cache.", "memory", _ENG, "engine"),
    _c(
        "llm_prompt_tokens_cached_total",
        "tokens",
        "Prompt tokens served from a cache (local and external) instead of computed.",
        "memory",
        _ENG,
        "engine",
    ),
    # KV tiers below the GPU (issue 36): what KV moved between GPU, host memory and storage
    _c(
        "llm_kv_cache_tier_hit_tokens_total",
        "tokens",
        "Prompt tokens whose KV was found in a cache tier instead of computed, by tier ("
        + ", ".join(KV_CACHE_TIERS)
        + "): every tier but gpu was copied to the GPU first.",
        "memory",
        _ENG + ("tier",),
        "engine",
        values=(("tier", tuple(KV_CACHE_TIERS)),),
    ),
    _c(
        "llm_kv_cache_tier_transfer_bytes_total",
        "bytes",
        "KV bytes moved between the GPU and host memory, by direction (offload: GPU to host, load: host back to the GPU).",
        "memory",
        _ENG + ("direction",),
        "engine",
        values=(("direction", tuple(KV_TRANSFER_DIRECTIONS)),),
    ),
    _g(
        "llm_kv_cache_host_usage_ratio",
        "ratio",
        "Share of the host-memory KV tier (offload / swap space) in use.",
        "memory",
        _ENG,
        "engine",
        reduce="max",
    ),
    _c(
        "llm_kv_cache_instance_transfer_seconds_total",
        "seconds",
        "Time spent moving KV between serving instances (prefill to decode, disaggregated serving), summed over transfers.",
        "memory",
        _ENG,
        "engine",
    ),
    _c(
        "llm_kv_cache_instance_transfers_total",
        "",
        "KV transfers between serving instances (disaggregated serving): the count llm_kv_cache_instance_transfer_seconds_total is summed over.",
        "memory",
        _ENG,
        "engine",
    ),
    _h(
        "llm_request_preemptions",
        "Per finished request: how many times it was preempted (tells evenly spread preemption from a few thrashing requests).",
        "memory",
        _ENG,
        "engine",
        unit="",
    ),
    _g(
        "llm_kv_cache_slot_context_tokens",
        "tokens",
        "Context (KV) tokens each sequence slot can hold (llama.cpp n_ctx per slot).",
        "memory",
        _ENG,
        "engine",
        reduce="max",
    ),
    _g(
        "llm_kv_cache_used_tokens",
        "tokens",
        "KV-cache tokens in use over all slots (llama.cpp /slots).",
        "memory",
        _ENG,
        "engine",
        reduce="sum",
    ),
    _g(
        "llm_kv_cache_predicted_max_concurrency",
        "",
        "KV capacity divided by the mean tokens a request holds: how many requests should fit at once.",
        "memory",
        ("server",),
        "derived",
        reduce="min",
    ),
    # --- scheduler -----------------------------------------------------------------
    _g("llm_scheduler_requests_running", "", "Requests in the running batch.", "scheduler", _ENG, "engine", reduce="sum"),
    _g("llm_scheduler_requests_waiting", "", "Requests queued, not yet scheduled.", "scheduler", _ENG, "engine", reduce="sum"),
    _g(
        "llm_scheduler_requests_waiting_by_reason",
        "",
        "Requests queued, by why they wait: capacity (no room in the batch or the KV cache) or deferred (LoRA budget, KV transfer, blocked).",
        "scheduler",
        _ENG + ("reason",),
        "engine",
        reduce="sum",
    ),
    _g(
        "llm_scheduler_slots",
        "",
        "Sequence slots the engine serves at once (llama.cpp -np, from /props).",
        "scheduler",
        _ENG,
        "engine",
        reduce="sum",
    ),
    _g(
        "llm_scheduler_slots_busy",
        "",
        "Sequence slots processing a request now (llama.cpp /slots).",
        "scheduler",
        _ENG,
        "engine",
        reduce="sum",
    ),
    _h(
        "llm_scheduler_iteration_tokens",
        "Per engine step: tokens computed (prompt plus generation); its count rate is the scheduler loop's pace.",
        "scheduler",
        _ENG,
        "engine",
        unit="tokens",
    ),
    _h(
        "llm_scheduler_batch_size",
        "Requests in the running batch, sampled by the exporter at each engine scrape while the engine runs any (no engine publishes a per-step batch-size histogram; fixed buckets 1-1024, bounded).",
        "scheduler",
        _ENG,
        "derived",
        unit="",
    ),
    _h("llm_scheduler_queue_seconds", "Per request: time spent waiting before first scheduled.", "scheduler", _ENG, "engine"),
    _g(
        "llm_process_busiest_thread_cpu_ratio",
        "ratio",
        "CPU of the busiest thread of the serving process tree (1.0 = one full core).",
        "scheduler",
        ("server",),
        "process",
        reduce="max",
    ),
    _g(
        "llm_process_busiest_thread_cpu_demand_ratio",
        "ratio",
        "CPU the busiest thread of the serving process tree wanted: on-CPU plus run-queue wait (1.0 = one full core). Above the CPU it got when the node is contended or the container CPU-limited.",
        "scheduler",
        ("server",),
        "process",
        reduce="max",
    ),
    _g(
        "llm_process_cpu_ratio",
        "ratio",
        "CPU of the whole serving process tree (1.0 = one full core).",
        "scheduler",
        ("server",),
        "process",
        reduce="max",
    ),
    _g(
        "llm_process_resident_memory_bytes",
        "bytes",
        "Resident memory of the serving process tree.",
        "scheduler",
        ("server",),
        "process",
        reduce="sum",
    ),
    _g("llm_process_threads", "", "Threads in the serving process tree.", "scheduler", ("server",), "process", reduce="sum"),
    # --- parallel ------------------------------------------------------------------
    _g("llm_parallel_group_gpus", "", "GPUs in the parallel group.", "parallel", ("group",), "derived", reduce="max"),
    _g(
        "llm_parallel_sm_active_skew_ratio",
        "ratio",
        "Max over mean of SM active across the group's GPUs (1.0 = balanced).",
        "parallel",
        ("group",),
        "derived",
        reduce="max",
    ),
    _g(
        "llm_parallel_interconnect_bytes_per_second",
        "bytes_per_second",
        "Transmit plus receive traffic of the group's GPUs, by link type.",
        "parallel",
        ("group", "link"),
        "derived",
        reduce="sum",
    ),
    # fleet (issue 15): one series per exporter, set by --parallel-group; alerts/fleet.py joins per-node GPU series on it
    _g(
        "llm_parallel_node_group_info",
        "",
        "Always 1 while this node is configured (--parallel-group) as a member of a multi-node parallel (TP/PP) group; the group label is the same on every node of that group, so the fleet rules compute the group's skew across nodes.",
        "parallel",
        ("group",),
        "config",
    ),
    # --- speculative decoding --------------------------------------------------------
    _c("llm_spec_decode_draft_tokens_total", "tokens", "Draft tokens proposed.", "speculative_decoding", _ENG, "engine"),
    _c(
        "llm_spec_decode_accepted_tokens_total",
        "tokens",
        "Draft tokens accepted by the target model.",
        "speculative_decoding",
        _ENG,
        "engine",
    ),
    _c("llm_spec_decode_drafts_total", "", "Draft (verification) steps.", "speculative_decoding", _ENG, "engine"),
    _g(
        "llm_spec_decode_draft_time_ratio",
        "ratio",
        "Share of an engine step's time spent drafting (the engine's figure of its last iteration): what the draft costs, measured.",
        "speculative_decoding",
        _ENG,
        "engine",
        reduce="max",
    ),
    # --- application -----------------------------------------------------------------
    _g(
        "llm_engine_sleep_state",
        "",
        "1 for the engine's current sleep state (awake, weights_offloaded, discard_all), else 0.",
        "application",
        _ENG + ("state",),
        "engine",
        reduce="max",
    ),
    _g(
        "llm_engine_info",
        "",
        "Always 1 per scraped engine; labels carry the detected family and metric generation.",
        "application",
        ("server", "engine", "model", "generation"),
        "engine",
    ),
    _h("llm_request_ttft_seconds", "Per request: time to first token.", "application", _ENG, "engine"),
    _h("llm_request_inter_token_seconds", "Per token: time between consecutive output tokens.", "application", _ENG, "engine"),
    _h("llm_request_e2e_seconds", "Per request: end-to-end latency.", "application", _ENG, "engine"),
    _h(
        "llm_request_prompt_tokens",
        "Per request: prompt length in tokens (cached prefix included), from the engine's own histogram.",
        "application",
        _ENG,
        "engine",
        unit="tokens",
    ),
    _h(
        "llm_request_generation_tokens",
        "Per request: output length in tokens, from the engine's own histogram.",
        "application",
        _ENG,
        "engine",
        unit="tokens",
    ),
    _c(
        "llm_prompt_tokens_total", "tokens", "Prompt tokens processed, prefix-cache hits included.", "application", _ENG, "engine"
    ),
    _c("llm_generation_tokens_total", "tokens", "Output tokens generated.", "application", _ENG, "engine"),
    _c(
        "llm_requests_finished_total",
        "",
        "Finished requests by reason (stop, length, abort, error, ...).",
        "application",
        _ENG + ("reason",),
        "engine",
        values=(("reason", tuple(FINISH_REASONS)),),
    ),
    _c(
        "llm_requests_rejected_total",
        "",
        "Requests the engine refused at admission (queue full, overloaded).",
        "application",
        _ENG + ("reason",),
        "engine",
    ),
    # --- application: the measured capacity at SLO (exporter/capacity, docs/capacity.md) ---
    _g(
        "llm_capacity_concurrency_at_slo",
        "",
        "Concurrent requests the engine was measured to carry within its SLO (the knee of the capacity profile: a tune.json recommendation, else its baseline, or a ramp report.json; --capacity-profile).",
        "application",
        ("engine",),
        "profile",
        reduce="sum",
    ),
    _g(
        "llm_capacity_requests_per_second_at_slo",
        "",
        "Finished requests per second the engine was measured to carry within its SLO (capacity profile).",
        "application",
        ("engine",),
        "profile",
        reduce="sum",
    ),
    _g(
        "llm_capacity_tokens_per_second_at_slo",
        "",
        "Generated tokens per second the engine was measured to carry within its SLO (capacity profile).",
        "application",
        ("engine",),
        "profile",
        reduce="sum",
    ),
    _g(
        "llm_capacity_used_ratio",
        "ratio",
        "Live load over the measured capacity at SLO: the offered request rate (llm_capacity_offered_requests_per_second) over llm_capacity_requests_per_second_at_slo; for an engine without a finished-request counter, in-flight requests over llm_capacity_concurrency_at_slo (1 = at the measured knee; above 1 = past it).",
        "application",
        ("engine",),
        "derived",
        reduce="max",
    ),
    _g(
        "llm_capacity_offered_requests_per_second",
        "",
        "Requests per second the clients offer the engine: its finished-request rate plus the growth of its requests in flight over the capacity window, so a queue the engine's own slowdown builds does not count as more load.",
        "application",
        ("engine",),
        "derived",
        reduce="sum",
    ),
    _g(
        "llm_capacity_recommended_max_concurrency",
        "",
        "Concurrency ceiling to set per replica in the gateway: the profile's knee concurrency less the headroom (--capacity-headroom, default 20 %), at least 1.",
        "application",
        ("engine",),
        "profile",
        reduce="sum",
    ),
    _g(
        "llm_capacity_profile_age_seconds",
        "seconds",
        "Seconds since the capacity profile was measured.",
        "application",
        ("engine",),
        "profile",
        reduce="max",
    ),
    _g(
        "llm_capacity_profile_stale",
        "",
        "1 when the engine's configuration (the settings it publishes and, with a known PID, its command line) differs from the one the capacity profile measured, else 0: re-measure before trusting the capacity gauges.",
        "application",
        ("engine",),
        "derived",
        reduce="max",
    ),
    _g(
        "llm_capacity_workload_drift_ratio",
        "ratio",
        "How far the live workload drifted from the profile's, by dimension (prompt or output tokens per request): live mean over the profile's mean (1 = the workload the profile measured; 8 = prompts eight times longer).",
        "application",
        ("engine", "dimension"),
        "derived",
        reduce="max",
        values=(("dimension", CAPACITY_DRIFT_DIMENSIONS),),
    ),
    _g(
        "llm_parallel_scaling_efficiency_ratio",
        "ratio",
        "The engine's live output tokens/s per GPU over the per-GPU output tokens/s at SLO its capacity profile measured on a smaller layout of the same model (fewer GPUs: tensor_parallel_size x pipeline_parallel_size x data_parallel_size of llm_engine_setting, else the GPUs of llm_gpu_info): 1 = every GPU of the larger layout carries what one of the smaller did; 0.62 = 4x the GPUs serve 2.5x. Live throughput, so it reads the scaling only under load near the knee. Absent without a profile, with the same GPU count, or before a generation-token rate.",
        "parallel",
        ("engine",),
        "derived",
        reduce="min",
    ),
    # --- end capacity --------------------------------------------------------------------
    # --- application: the canary probe (exporter/probe, docs/probe.md) -----------------
    _h(
        "llm_probe_ttft_seconds",
        "Per canary probe: time to first token as a client sees it (from opening the connection to the first chunk carrying text), through the front end the probe is pointed at.",
        "application",
        _ENG,
        "probe",
    ),
    _h(
        "llm_probe_inter_token_seconds",
        "Per canary probe: time between consecutive chunks carrying text, as a client sees it.",
        "application",
        _ENG,
        "probe",
    ),
    _h(
        "llm_probe_duration_seconds",
        "Per canary probe: wall time of the whole probe, from opening the connection to the end of the stream, its failure or its timeout.",
        "application",
        _ENG,
        "probe",
    ),
    _c(
        "llm_probe_requests_total",
        "",
        "Canary probes by result: ok, timeout (no complete answer within probe.timeout, a stalled stream included), http_error (a non-2xx status), bad_stream (not a valid event stream, an error event, no token, ended early), refused (no connection).",
        "application",
        _ENG + ("result",),
        "probe",
        values=(("result", ("ok", "timeout", "http_error", "bad_stream", "refused")),),
    ),
    _c(
        "llm_probe_tokens_total",
        "tokens",
        "Tokens the canary probe itself made the engine process, by kind (prompt, generation): subtract them from the engine's token rates to see the real load.",
        "application",
        _ENG + ("kind",),
        "probe",
        values=(("kind", ("prompt", "generation")),),
    ),
    _g(
        "llm_probe_last_result",
        "",
        "1 for the result of the engine's last canary probe (ok, timeout, http_error, bad_stream, refused), 0 for the others.",
        "application",
        _ENG + ("result",),
        "probe",
        reduce="max",
        values=(("result", ("ok", "timeout", "http_error", "bad_stream", "refused")),),
    ),
    _g(
        "llm_probe_engine_ttft_seconds",
        "seconds",
        "The engine's own TTFT for the last probe: its reported prefill time for that request, else the mean of its TTFT histogram over the probe's window.",
        "application",
        _ENG,
        "probe",
        reduce="max",
    ),
    _g(
        "llm_probe_outside_engine_seconds",
        "seconds",
        "Client-seen TTFT of the last probe minus the engine's own TTFT for it: time spent outside the engine (gateway, proxy, API server, network). Near 0 with nothing in between; slightly negative is measurement noise.",
        "application",
        _ENG,
        "probe",
        reduce="max",
    ),
    _g(
        "llm_probe_engine_frozen",
        "",
        "1 when the engine's /metrics answered during the last (failed) probe but none of its counters or histogram counts moved: a hung engine core; 0 when they moved or the probe succeeded; absent when it could not be told.",
        "application",
        _ENG,
        "probe",
        reduce="max",
    ),
    # --- end canary probe --------------------------------------------------------------
    # --- tracing (exporter/tracing/receiver.py) ---------------------------------------
    _c(
        "llm_trace_spans_received_total",
        "",
        "Spans the OTLP trace receiver accepted and handed on (after its limits), by protocol (grpc, http).",
        "application",
        ["protocol"],
        "otlp",
        values=(("protocol", TRACE_PROTOCOLS),),
    ),
    _c(
        "llm_trace_spans_dropped_total",
        "",
        "Spans the OTLP trace receiver decoded and dropped, by reason: rate_limited (over the spans-per-second budget; the client is told to retry), too_many_attributes (a span over the attribute limit), too_many_spans (past the per-request span limit), internal (the receiver's consumer failed on them).",
        "application",
        ["reason"],
        "otlp",
        values=(("reason", TRACE_SPAN_DROP_REASONS),),
    ),
    _c(
        "llm_trace_requests_rejected_total",
        "",
        "OTLP export requests refused whole before their spans could be counted, by protocol and reason: too_large (body over the byte limit), malformed (not an OTLP trace request), unsupported_media_type (content type or encoding), unauthorized (basic auth failed), busy (too many requests at once, or the password checks are full), rate_limited (the span budget was empty; the body was not read), timeout (the body did not arrive in time).",
        "application",
        ["protocol", "reason"],
        "otlp",
        values=(("protocol", TRACE_PROTOCOLS), ("reason", TRACE_REQUEST_REJECT_REASONS)),
    ),
    _c(
        "llm_trace_spans_ignored_total",
        "",
        "Received spans that gave no request record, by reason: unmatched_engine (no configured engine claims the span's service; set engines[].trace_service), not_a_request (another span of the trace), missing_attributes, bad_value (a timing not a finite number from 0 to a day), bad_id, pending_evicted (an SGLang slice whose request span never came).",
        "application",
        ["reason"],
        "otlp",
        values=(("reason", TRACE_SPAN_IGNORE_REASONS),),
    ),
    _h(
        "llm_traced_request_seconds",
        "Per traced request (the engine's spans): seconds in each phase (queue, prefill, decode) and its TTFT and end-to-end time. OpenMetrics exemplars carry the trace_id of a request in the bucket, for a jump to its trace.",
        "application",
        ["engine", "phase"],
        "otlp",
    ),
    _c(
        "llm_traced_requests_total",
        "",
        "Traced requests joined with the diagnosis over their life, by the primary cause named most while each lived (layer and cause empty: none named, or no cycle recorded).",
        "application",
        ["engine", "layer", "cause"],
        "otlp",
    ),
    _c(
        "llm_trace_spans_forwarded_total",
        "",
        "Spans re-exported to --otlp-forward with the verdict added, by outcome: sent (the backend answered 2xx), failed (an error or another status; not retried), dropped (the forward queue was full).",
        "application",
        ["outcome"],
        "otlp",
        values=(("outcome", TRACE_FORWARD_OUTCOMES),),
    ),
    _g(
        "llm_traced_requests_held",
        "",
        "Traced requests the exporter holds for GET /requests (the slowest of each recent window and a uniform sample, per engine).",
        "application",
        [],
        "otlp",
        reduce="sum",
    ),
    # --- end tracing --------------------------------------------------------------------
    # --- diagnosis -------------------------------------------------------------------
    _g(
        "llm_bottleneck_score",
        "",
        "How strongly the layer limits the service now (a 0-1 score: 0 = not at all, 1 = certain bottleneck).",
        "diagnosis",
        ("engine", "layer"),
        "derived",
    ),
    _g(
        "llm_bottleneck_active",
        "",
        "1 while the named cause holds in the layer, 0 otherwise.",
        "diagnosis",
        ("engine", "layer", "cause"),
        "derived",
    ),
    _g(
        "llm_service_state",
        "",
        "1 for the engine's current state (degraded: a symptom holds; healthy: none does and the data to judge is there; unknown), else 0. Every diagnosis series carries engine: the engine judged, over its own GPUs and process (empty on a node without engines).",
        "diagnosis",
        ("engine", "state"),
        "derived",
    ),
    _g(
        "llm_symptom_active",
        "",
        "1 while the named user-visible symptom holds (TTFT or ITL over the SLO, sustained queueing, saturated throughput, failures), else 0.",
        "diagnosis",
        ("engine", "symptom"),
        "derived",
    ),
    _g(
        "llm_bottleneck_primary",
        "",
        "1 for the one cause that best explains the symptoms now (the page-worthy verdict), 0 for every other cause.",
        "diagnosis",
        ("engine", "layer", "cause"),
        "derived",
    ),
    _g(
        "llm_bottleneck_confidence",
        "",
        "Confidence (0-1) in a holding cause: how complete and independent its evidence is, how long it held, how far past its line; 0 when it does not hold.",
        "diagnosis",
        ("engine", "layer", "cause"),
        "derived",
    ),
    _g(
        "llm_layer_headroom_ratio",
        "ratio",
        "How far the layer is from its nearest limit (1 = idle, 0 = at the limit); NaN while unknown.",
        "diagnosis",
        ("engine", "layer"),
        "derived",
    ),
]

SPECS: dict[str, MetricSpec] = {s.name: s for s in _SPECS}
if len(SPECS) != len(_SPECS):  # pragma: no cover - guards edits to the table above
    raise RuntimeError("duplicate metric name in schema")

#: The exporter's own health families (layer ``exporter``: whether each source is up, its errors and
#: durations, what was dropped, which families are left out). --metrics.include / --metrics.exclude
#: never remove them (exporter/familyfilter.py): an exporter publishing less must still say why.
HEALTH_FAMILIES: frozenset[str] = frozenset(s.name for s in _SPECS if s.layer == "exporter")


# --- kubernetes: labels added at start-up (exporter/kubernetes/settings.py) ----------
#: bumps whenever ``extend_labels`` changes a spec (the collector re-sorts label names then)
LABELS_VERSION = 0


def extend_labels(names: Iterable[str], extra: Iterable[str]) -> Callable[[], None]:
    """Append ``extra`` label names to the specs of ``names`` in ``SPECS``; returns the undo.

    Why at run time: --kubernetes adds ``namespace``/``pod`` to engine series and
    copies an operator-chosen allow-list of pod labels, names no static table can
    hold. Only ``SPECS`` (what the collector renders) changes, before serving
    starts; the declared table (``_SPECS``: docs/metrics.md, ``schema`` CLI) stays
    as written. Labels a spec already has are not added twice.
    """
    global LABELS_VERSION
    extra = tuple(extra)
    before: dict[str, MetricSpec] = {}
    for name in names:
        old = SPECS[name]
        added = tuple(label for label in extra if label not in old.labels)
        if added:
            before[name] = old
            SPECS[name] = replace(old, labels=old.labels + added)
    LABELS_VERSION += 1

    def undo() -> None:
        global LABELS_VERSION
        SPECS.update(before)
        LABELS_VERSION += 1

    return undo


# --- end kubernetes -------------------------------------------------------------------


def spec(name: str) -> MetricSpec:
    """Look a metric up by name; KeyError names the missing metric."""
    try:
        return SPECS[name]
    except KeyError:
        raise KeyError(f"metric {name!r} is not in exporter.schema") from None


def reduce_series(name: str, values: Iterable[float]) -> float | None:
    """``name``'s series reduced into one figure the way its spec says.

    Why here: the diagnosis, the ramp and the demo must agree that waiting
    requests add up while KV usage is the worst rank. NaN series (unknown) are
    left out; None when nothing is left or the metric is not reduced.
    """
    how = spec(name).reduce
    vals = [v for v in values if not math.isnan(v)]
    if how is None or not vals:
        return None
    if how == "sum":
        return sum(vals)
    if how == "max":
        return max(vals)
    if how == "min":
        return min(vals)
    return sum(vals) / len(vals)


def reduced_name(name: str, selector: str = "") -> str:
    """The PromQL-style name of that figure, e.g. ``sum(llm_scheduler_requests_waiting)``.

    The diagnosis names its signals with it, so a signal's name says how it was reduced.
    """
    how = spec(name).reduce
    if how is None:
        raise ValueError(f"metric {name!r} declares no reduction in exporter.schema")
    return f"{REDUCE_PROMQL[how]}({name}{selector})"


def by_layer(layer: str) -> list[MetricSpec]:
    return [s for s in _SPECS if s.layer == layer]


def series_names(s: MetricSpec) -> list[str]:
    """Every sample name a family produces on the wire (histograms have three)."""
    if s.type == "histogram":
        return [f"{s.name}_bucket", f"{s.name}_sum", f"{s.name}_count"]
    return [s.name]


def all_series_names() -> set[str]:
    return {n for s in _SPECS for n in series_names(s)}


def to_json() -> str:
    return json.dumps(
        {"layers": list(ALL_LAYERS), "metrics": [s.as_dict() for s in _SPECS]},
        indent=2,
    )


def to_markdown(
    engine_coverage: dict[str, set[str]] | None = None,
    engine_values: dict[str, dict[str, dict[str, str]]] | None = None,
) -> str:
    """docs/metrics.md: one table per layer, the closed label vocabularies, and per engine
    family what it provides (``engine_coverage``) and how its raw label values map into
    those vocabularies (``engine_values``: metric -> family -> {raw: value})."""
    out = [
        "# Metrics",
        "",
        "Generated from `exporter/schema.py` by `llm-layer-exporter schema --format markdown`.",
        "Do not edit by hand: a test fails when this file is stale.",
        "",
    ]
    for layer in ALL_LAYERS:
        specs = by_layer(layer)
        if not specs:
            continue
        out += [f"## {layer}", "", "| name | type | unit | labels | reduce | help |", "|---|---|---|---|---|---|"]
        for s in specs:
            labels = ", ".join(f"`{label}`" for label in s.labels)
            out.append(f"| `{s.name}` | {s.type} | {s.unit or '-'} | {labels} | {s.reduce or '-'} | {s.help} |")
        out.append("")
    out += _label_values_markdown(engine_values or {})
    if engine_coverage:
        families = sorted(engine_coverage)
        out += [
            "## Engine coverage",
            "",
            "Which neutral names each engine family provides (absent means the engine does not expose the concept; it is never reported as 0).",
            "",
            "| name | " + " | ".join(families) + " |",
            "|---|" + "---|" * len(families),
        ]
        names = sorted({n for provided in engine_coverage.values() for n in provided})
        for n in names:
            out.append(f"| `{n}` | " + " | ".join("yes" if n in engine_coverage[f] else "-" for f in families) + " |")
        out.append("")
    return "\n".join(out)


def _label_values_markdown(engine_values: dict[str, dict[str, dict[str, str]]]) -> list[str]:
    """The closed vocabularies: finish reasons (which count as failures, and each engine's
    raw values) and throttle reasons (which are harmful)."""
    out = [
        "## Label values",
        "",
        "`reduce` above is how the diagnosis, the ramp and the demo reduce a metric's series into one figure.",
        "Labels below have a closed vocabulary: an engine's raw value is rewritten into it, and a raw value",
        f"no engine table knows becomes `{FINISH_REASON_FALLBACK}` (never itself).",
        "",
        "### `llm_requests_finished_total{reason}`",
        "",
        "| reason | failure | meaning |",
        "|---|---|---|",
    ]
    out += [f"| `{r}` | {'yes' if r in FAILED_FINISH_REASONS else '-'} | {m} |" for r, m in FINISH_REASONS.items()]
    out.append("")
    raw = engine_values.get("llm_requests_finished_total", {})
    if raw:
        out += [
            "Raw finish reasons per engine family (the rows in `exporter/engines/mappings/`):",
            "",
            "| family | raw -> reason |",
            "|---|---|",
        ]
        for family in sorted(raw):
            pairs = ", ".join(f"{k} -> `{v}`" for k, v in raw[family].items()) or "(no finish counter)"
            out.append(f"| {family} | {pairs} |")
        out.append("")
    out += ["### `llm_kv_cache_tier_hit_tokens_total{tier}`", "", "| tier | meaning |", "|---|---|"]
    out += [f"| `{t}` | {m} |" for t, m in KV_CACHE_TIERS.items()]
    tiers = engine_values.get("llm_kv_cache_tier_hit_tokens_total", {})
    if tiers:
        out += ["", "Raw tier words per engine family:", "", "| family | raw -> tier |", "|---|---|"]
        for family in sorted(tiers):
            pairs = ", ".join(f"{k} -> `{v}`" for k, v in tiers[family].items()) or "(none documented: absent)"
            out.append(f"| {family} | {pairs} |")
    out += ["", "### `llm_kv_cache_tier_transfer_bytes_total{direction}`", "", "| direction | meaning |", "|---|---|"]
    out += [f"| `{d}` | {m} |" for d, m in KV_TRANSFER_DIRECTIONS.items()]
    out.append("")
    out += ["### `llm_gpu_throttle_reason_active{reason}`", "", "| bit | reason | harmful | meaning |", "|---|---|---|---|"]
    out += [f"| `{r.bit:#x}` | `{r.name}` | {'yes' if r.harmful else '-'} | {r.meaning} |" for r in THROTTLE_REASONS]
    out.append("")
    return out
