"""The single source of every metric name the exporter publishes.

Why one module: dashboards, alert rules, docs/metrics.md, the collector and the
engine adapters all read names, types, units, help texts and layers from here,
so a rename cannot leave a panel dark or an alert dead.

Conventions (Prometheus): base units (seconds, bytes, 0-1 ratios, hertz,
watts), counters end in ``_total``, no colons in names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable, Literal

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

#: Reasons a GPU clocks-event (throttle) bitmask bit stands for, keyed by bit value.
#: Source: NVML nvmlClocksEventReasons (nvml.h); the same bits in DCGM field 112.
THROTTLE_REASON_BITS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}

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
    "stale_input",
    "redirect",
    "internal",
)

#: Bounded set of values for the ``reason`` label of llm_exporter_series_dropped_total.
SERIES_DROP_REASONS: tuple[str, ...] = ("budget", "label_too_long", "bad_histogram")


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

    @property
    def exposed_name(self) -> str:
        """Name as it appears on the wire for its first sample line."""
        return self.name

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "type": self.type,
            "unit": self.unit,
            "help": self.help,
            "layer": self.layer,
            "labels": list(self.labels),
            "origin": self.origin,
        }


def _g(name: str, unit: str, help: str, layer: str, labels: Iterable[str], origin: str) -> MetricSpec:
    return MetricSpec(name, "gauge", unit, help, layer, tuple(labels), origin)


def _c(name: str, unit: str, help: str, layer: str, labels: Iterable[str], origin: str) -> MetricSpec:
    return MetricSpec(name, "counter", unit, help, layer, tuple(labels), origin)


def _h(name: str, help: str, layer: str, labels: Iterable[str], origin: str, unit: str = "seconds") -> MetricSpec:
    return MetricSpec(name, "histogram", unit, help, layer, tuple(labels), origin)


_GPU = GPU_LABELS
_ENG = ENGINE_LABELS

_SPECS: list[MetricSpec] = [
    # --- exporter (its own health) -------------------------------------------------
    _g("llm_exporter_source_up", "", "1 if the source's last sample succeeded, 0 if it failed.", "exporter", ["source"], "exporter"),
    _g("llm_exporter_source_duration_seconds", "seconds", "Wall time of the source's last sample attempt.", "exporter", ["source"], "exporter"),
    _c("llm_exporter_source_errors_total", "", "Failed or partially failed samples, by source and reason.", "exporter", ["source", "reason"], "exporter"),
    _g("llm_exporter_source_last_success_timestamp_seconds", "seconds", "Unix time of the source's last successful sample.", "exporter", ["source"], "exporter"),
    _g("llm_exporter_source_series", "", "Number of series the source published in its last successful sample.", "exporter", ["source"], "exporter"),
    _c("llm_exporter_series_dropped_total", "", "Series a source did not publish, by reason: budget (over the per-engine series budget), label_too_long (a label value cut to the length limit; the series is kept), bad_histogram (cumulative bucket counts decrease).", "exporter", ["source", "reason"], "exporter"),
    _g("llm_exporter_build_info", "", "Always 1; labels carry the exporter version and Python version.", "exporter", ["version", "python_version"], "exporter"),
    # --- hardware -------------------------------------------------------------------
    _g("llm_gpu_info", "", "Always 1 per GPU; labels name the GPU and the source that reads it.", "hardware", ["gpu", "uuid", "name", "source"], "gpu"),
    _g("llm_gpu_up", "", "1 while the GPU answers, 0 once it is lost or stops answering.", "hardware", _GPU, "gpu"),
    _g("llm_gpu_profiling_available", "", "1 if SM/tensor/DRAM activity can be read (DCGM profiling or NVML GPM), else 0.", "hardware", _GPU, "gpu"),
    _g("llm_gpu_utilization_ratio", "ratio", "NVML 'GPU util': share of time any kernel or copy ran. Not SM busyness: 0.99 during a PCIe copy with idle SMs.", "hardware", _GPU, "nvml/dcgm 203"),
    _g("llm_gpu_memory_utilization_ratio", "ratio", "NVML 'memory util': share of time device memory was read or written.", "hardware", _GPU, "nvml/dcgm 204"),
    _g("llm_gpu_sm_active_ratio", "ratio", "Share of SMs with at least one warp resident (DCGM 1002 / GPM SM util).", "hardware", _GPU, "dcgm 1002/gpm"),
    _g("llm_gpu_sm_occupancy_ratio", "ratio", "Resident warps as a share of the maximum (DCGM 1003 / GPM SM occupancy).", "hardware", _GPU, "dcgm 1003/gpm"),
    _g("llm_gpu_tensor_active_ratio", "ratio", "Share of cycles any tensor pipe was busy (DCGM 1004 / GPM any-tensor util).", "hardware", _GPU, "dcgm 1004/gpm"),
    _g("llm_gpu_dram_active_ratio", "ratio", "Share of cycles the DRAM interface moved data (DCGM 1005 / GPM DRAM bandwidth util).", "hardware", _GPU, "dcgm 1005/gpm"),
    _g("llm_gpu_memory_used_bytes", "bytes", "Framebuffer memory in use.", "hardware", _GPU, "nvml/dcgm 252"),
    _g("llm_gpu_memory_total_bytes", "bytes", "Framebuffer memory in total.", "hardware", _GPU, "nvml/dcgm 250"),
    _g("llm_gpu_power_watts", "watts", "Board power draw.", "hardware", _GPU, "nvml/dcgm 155"),
    _g("llm_gpu_power_limit_watts", "watts", "Enforced board power limit.", "hardware", _GPU, "nvml/dcgm 164"),
    _g("llm_gpu_sm_clock_hertz", "hertz", "Current SM clock.", "hardware", _GPU, "nvml/dcgm 100"),
    _g("llm_gpu_sm_clock_max_hertz", "hertz", "Maximum SM clock.", "hardware", _GPU, "nvml/dcgm 113"),
    _g("llm_gpu_memory_clock_hertz", "hertz", "Current memory clock.", "hardware", _GPU, "nvml/dcgm 101"),
    _g("llm_gpu_throttle_reason_active", "", "1 while this clocks-event (throttle) reason bit is set, else 0.", "hardware", _GPU + ("reason",), "nvml/dcgm 112"),
    _g("llm_gpu_pcie_transmit_bytes_per_second", "bytes_per_second", "PCIe transmit rate seen from the GPU (device to host), header and payload.", "hardware", _GPU, "dcgm 1009/gpm"),
    _g("llm_gpu_pcie_receive_bytes_per_second", "bytes_per_second", "PCIe receive rate seen from the GPU (host to device), header and payload.", "hardware", _GPU, "dcgm 1010/gpm"),
    _g("llm_gpu_nvlink_transmit_bytes_per_second", "bytes_per_second", "NVLink transmit rate over all links.", "parallel", _GPU, "dcgm 1011/gpm"),
    _g("llm_gpu_nvlink_receive_bytes_per_second", "bytes_per_second", "NVLink receive rate over all links.", "parallel", _GPU, "dcgm 1012/gpm"),
    _g("llm_gpu_temperature_celsius", "celsius", "GPU core temperature.", "hardware", _GPU, "nvml/dcgm 150"),
    _c("llm_engine_estimated_gpu_flops_total", "", "Floating-point operations the engine's cost model estimates it ran, per GPU (vLLM enable_mfu_metrics): a cross-check of measured tensor/SM activity.", "hardware", _ENG, "engine"),
    _c("llm_engine_estimated_gpu_read_bytes_total", "bytes", "Bytes the engine's cost model estimates it read from GPU memory, per GPU: a cross-check of measured DRAM activity.", "hardware", _ENG, "engine"),
    _c("llm_engine_estimated_gpu_write_bytes_total", "bytes", "Bytes the engine's cost model estimates it wrote to GPU memory, per GPU.", "hardware", _ENG, "engine"),
    _c("llm_gpu_energy_joules_total", "joules", "Energy used since the driver loaded (read on a slow cadence: the call costs milliseconds).", "hardware", _GPU, "nvml/dcgm 156"),
    # --- operator ------------------------------------------------------------------
    _g(
        "llm_engine_config_info",
        "",
        "Always 1; labels carry the engine settings that shape its kernels (whatever the engine exposes; empty when unknown).",
        "operator",
        _ENG + ("block_size", "kv_cache_dtype", "attention_backend", "cuda_graph", "compile_mode", "prefix_caching", "spec_method"),
        "engine",
    ),
    _h("llm_request_prefill_seconds", "Per request: time spent in prefill.", "operator", _ENG, "engine"),
    _h("llm_request_decode_seconds", "Per request: time spent in decode.", "operator", _ENG, "engine"),
    # --- memory --------------------------------------------------------------------
    _g("llm_kv_cache_usage_ratio", "ratio", "Share of KV-cache blocks in use.", "memory", _ENG, "engine"),
    _g("llm_kv_cache_capacity_tokens", "tokens", "KV-cache capacity in tokens.", "memory", _ENG, "engine"),
    _g("llm_kv_cache_block_size_tokens", "tokens", "Tokens per KV-cache block (page).", "memory", _ENG, "engine"),
    _c("llm_kv_cache_preemptions_total", "", "Requests preempted (evicted and recomputed or retracted) for lack of KV cache.", "memory", _ENG, "engine"),
    _c("llm_prefix_cache_queried_tokens_total", "tokens", "Prompt tokens looked up in the prefix cache.", "memory", _ENG, "engine"),
    _c("llm_prefix_cache_hit_tokens_total", "tokens", "Prompt tokens found in the prefix cache.", "memory", _ENG, "engine"),
    _c("llm_prompt_tokens_cached_total", "tokens", "Prompt tokens served from a cache (local and external) instead of computed.", "memory", _ENG, "engine"),
    _h("llm_request_preemptions", "Per finished request: how many times it was preempted (tells evenly spread preemption from a few thrashing requests).", "memory", _ENG, "engine", unit=""),
    _g("llm_kv_cache_slot_context_tokens", "tokens", "Context (KV) tokens each sequence slot can hold (llama.cpp n_ctx per slot).", "memory", _ENG, "engine"),
    _g("llm_kv_cache_used_tokens", "tokens", "KV-cache tokens in use over all slots (llama.cpp /slots).", "memory", _ENG, "engine"),
    _g("llm_kv_cache_predicted_max_concurrency", "", "KV capacity divided by the mean tokens a request holds: how many requests should fit at once.", "memory", ("server",), "derived"),
    # --- scheduler -----------------------------------------------------------------
    _g("llm_scheduler_requests_running", "", "Requests in the running batch.", "scheduler", _ENG, "engine"),
    _g("llm_scheduler_requests_waiting", "", "Requests queued, not yet scheduled.", "scheduler", _ENG, "engine"),
    _g("llm_scheduler_requests_waiting_by_reason", "", "Requests queued, by why they wait: capacity (no room in the batch or the KV cache) or deferred (LoRA budget, KV transfer, blocked).", "scheduler", _ENG + ("reason",), "engine"),
    _g("llm_scheduler_slots", "", "Sequence slots the engine serves at once (llama.cpp -np, from /props).", "scheduler", _ENG, "engine"),
    _g("llm_scheduler_slots_busy", "", "Sequence slots processing a request now (llama.cpp /slots).", "scheduler", _ENG, "engine"),
    _h("llm_scheduler_iteration_tokens", "Per engine step: tokens computed (prompt plus generation); its count rate is the scheduler loop's pace.", "scheduler", _ENG, "engine", unit="tokens"),
    _h("llm_scheduler_queue_seconds", "Per request: time spent waiting before first scheduled.", "scheduler", _ENG, "engine"),
    _g("llm_process_busiest_thread_cpu_ratio", "ratio", "CPU of the busiest thread of the serving process tree (1.0 = one full core).", "scheduler", ("server",), "process"),
    _g("llm_process_busiest_thread_cpu_demand_ratio", "ratio", "CPU the busiest thread of the serving process tree wanted: on-CPU plus run-queue wait (1.0 = one full core). Above the CPU it got when the node is contended or the container CPU-limited.", "scheduler", ("server",), "process"),
    _g("llm_process_cpu_ratio", "ratio", "CPU of the whole serving process tree (1.0 = one full core).", "scheduler", ("server",), "process"),
    _g("llm_process_resident_memory_bytes", "bytes", "Resident memory of the serving process tree.", "scheduler", ("server",), "process"),
    _g("llm_process_threads", "", "Threads in the serving process tree.", "scheduler", ("server",), "process"),
    # --- parallel ------------------------------------------------------------------
    _g("llm_parallel_group_gpus", "", "GPUs in the parallel group.", "parallel", ("group",), "derived"),
    _g("llm_parallel_sm_active_skew_ratio", "ratio", "Max over mean of SM active across the group's GPUs (1.0 = balanced).", "parallel", ("group",), "derived"),
    _g("llm_parallel_interconnect_bytes_per_second", "bytes_per_second", "Transmit plus receive traffic of the group's GPUs, by link type.", "parallel", ("group", "link"), "derived"),
    # --- speculative decoding --------------------------------------------------------
    _c("llm_spec_decode_draft_tokens_total", "tokens", "Draft tokens proposed.", "speculative_decoding", _ENG, "engine"),
    _c("llm_spec_decode_accepted_tokens_total", "tokens", "Draft tokens accepted by the target model.", "speculative_decoding", _ENG, "engine"),
    _c("llm_spec_decode_drafts_total", "", "Draft (verification) steps.", "speculative_decoding", _ENG, "engine"),
    # --- application -----------------------------------------------------------------
    _g("llm_engine_sleep_state", "", "1 for the engine's current sleep state (awake, weights_offloaded, discard_all), else 0.", "application", _ENG + ("state",), "engine"),
    _g("llm_engine_info", "", "Always 1 per scraped engine; labels carry the detected family and metric generation.", "application", ("server", "engine", "model", "generation"), "engine"),
    _h("llm_request_ttft_seconds", "Per request: time to first token.", "application", _ENG, "engine"),
    _h("llm_request_inter_token_seconds", "Per token: time between consecutive output tokens.", "application", _ENG, "engine"),
    _h("llm_request_e2e_seconds", "Per request: end-to-end latency.", "application", _ENG, "engine"),
    _c("llm_prompt_tokens_total", "tokens", "Prompt tokens processed, prefix-cache hits included.", "application", _ENG, "engine"),
    _c("llm_generation_tokens_total", "tokens", "Output tokens generated.", "application", _ENG, "engine"),
    _c("llm_requests_finished_total", "", "Finished requests by reason (stop, length, abort, error, ...).", "application", _ENG + ("reason",), "engine"),
    _c("llm_requests_rejected_total", "", "Requests the engine refused at admission (queue full, overloaded).", "application", _ENG + ("reason",), "engine"),
    # --- diagnosis -------------------------------------------------------------------
    _g("llm_bottleneck_score", "", "How strongly the layer limits the service now (a 0-1 score: 0 = not at all, 1 = certain bottleneck).", "diagnosis", ("layer",), "derived"),
    _g("llm_bottleneck_active", "", "1 while the named cause holds in the layer, 0 otherwise.", "diagnosis", ("layer", "cause"), "derived"),
    _g("llm_service_state", "", "1 for the service's current state (degraded: a symptom holds; healthy: none does and the data to judge is there; unknown), else 0.", "diagnosis", ("state",), "derived"),
    _g("llm_symptom_active", "", "1 while the named user-visible symptom holds (TTFT or ITL over the SLO, sustained queueing, saturated throughput, failures), else 0.", "diagnosis", ("symptom",), "derived"),
    _g("llm_bottleneck_primary", "", "1 for the one cause that best explains the symptoms now (the page-worthy verdict), 0 for every other cause.", "diagnosis", ("layer", "cause"), "derived"),
    _g("llm_bottleneck_confidence", "", "Confidence (0-1) in a holding cause: how complete and independent its evidence is, how long it held, how far past its line; 0 when it does not hold.", "diagnosis", ("layer", "cause"), "derived"),
    _g("llm_layer_headroom_ratio", "ratio", "How far the layer is from its nearest limit (1 = idle, 0 = at the limit); NaN while unknown.", "diagnosis", ("layer",), "derived"),
]

SPECS: dict[str, MetricSpec] = {s.name: s for s in _SPECS}
if len(SPECS) != len(_SPECS):  # pragma: no cover - guards edits to the table above
    raise RuntimeError("duplicate metric name in schema")


def spec(name: str) -> MetricSpec:
    """Look a metric up by name; KeyError names the missing metric."""
    try:
        return SPECS[name]
    except KeyError:
        raise KeyError(f"metric {name!r} is not in exporter.schema") from None


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


def to_markdown(engine_coverage: dict[str, set[str]] | None = None) -> str:
    """docs/metrics.md: one table per layer, plus which engine family provides what."""
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
        out += [f"## {layer}", "", "| name | type | unit | labels | help |", "|---|---|---|---|---|"]
        for s in specs:
            labels = ", ".join(f"`{label}`" for label in s.labels)
            out.append(f"| `{s.name}` | {s.type} | {s.unit or '-'} | {labels} | {s.help} |")
        out.append("")
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
