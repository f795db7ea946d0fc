"""Every number the diagnosis judges by, in one config section (``diagnosis:``).

Why one dataclass: the rules table (``rules.py``) names thresholds, never
literals, so an operator can move a line (a tighter TTFT SLO, a GPU whose PCIe
link is slower) in the YAML file without touching code, and docs/diagnosis.md
can list every knob with its default. ``from_mapping`` refuses unknown keys
and bad values with one line naming the key, which ``serve`` turns into exit
status 2 before anything starts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from exporter.values import duration_seconds


@dataclass(frozen=True)
class Thresholds:
    """Defaults are calibrated on the recorded H200 traces (docs/diagnosis.md)."""

    # --- the window and the verdict -----------------------------------------------
    #: seconds of snapshots kept for rates, histogram quantiles and persistence
    window_seconds: float = 20.0
    #: an input that was fresh and misses its samples for at most this long does not blank the
    #: verdict: the last one is held, with a notice (exporter/diagnosis/engine.py); 0 turns it off
    source_gap_seconds: float = 10.0
    #: the shorter look-back of "sustained" gauge checks (GPU idled, requests waited):
    #: long enough to span a bursty load's lulls, short enough not to delay a verdict
    recent_seconds: float = 5.0
    #: consecutive cycles a condition must hold before its cause is reported
    persistence_cycles: int = 1
    #: consecutive cycles a reported cause's condition must fail before it is cleared
    #: (bursty load makes a real bottleneck blink; the verdict should not)
    clear_cycles: int = 3
    #: layer status: score >= warning_score is "warning", >= bottleneck_score "bottleneck"
    warning_score: float = 0.5
    bottleneck_score: float = 0.75

    # --- service level objectives (application layer) --------------------------------
    slo_ttft_p95_seconds: float = 2.0
    slo_itl_p95_seconds: float = 0.2

    # --- hardware ------------------------------------------------------------------
    #: NVML "GPU util" at or above which a GPU counts as busy
    busy_utilization: float = 0.5
    #: tensor pipes this busy make a GPU compute-bound
    compute_tensor_active: float = 0.6
    #: ... or SMs this busy while DRAM is not the limit
    compute_sm_active: float = 0.85
    #: DRAM interface this busy makes a GPU memory-bandwidth-bound (H200 decode GEMV: 0.67-0.75)
    memory_bandwidth_dram_active: float = 0.65
    #: PCIe transmit + receive at or above this is bulk transfer (H200 H2D copy: 58 GB/s;
    #: host-synchronised tiny kernels: 0.26 GB/s)
    pcie_busy_bytes_per_second: float = 2e9
    #: "GPU util" at least this far above SM active: the GPU is "busy" with its SMs idle
    #: (H200 H2D copy: 0.99 vs 0.00)
    util_sm_gap: float = 0.5
    #: SM clock below this share of its maximum, under a power/thermal reason, is throttling
    throttle_clock_ratio: float = 0.9
    #: board power at or above this share of the limit counts as power-capped
    power_cap_ratio: float = 0.95
    #: framebuffer used / total at or above this is exhausted (vLLM preallocates 0.9); an engine
    #: that publishes its KV cache preallocates it, so there it also needs a full KV cache and
    #: requests failing with an error (rules.py _framebuffer_exhausted)
    memory_capacity_ratio: float = 0.97
    #: a throttle explains a symptom only when its clock loss (1 - clock / max) is at least this
    #: share of how far the symptom is past its line (1 - line / value): a board at its power cap
    #: at 81-88 % of its clock is busy, not the cause of a queue whose waits are 5x the line
    throttle_min_share: float = 0.3

    # --- operator ------------------------------------------------------------------
    #: launch-bound: "GPU util" at least this ...
    launch_min_utilization: float = 0.2
    #: ... while SM active is at most this share of "GPU util"
    launch_sm_share_of_utilization: float = 0.25
    #: tensor cores unused: SMs at least this busy ...
    tensor_unused_sm_active: float = 0.5
    #: ... with tensor pipes below this
    tensor_unused_tensor_active: float = 0.05
    #: cuda_graphs_not_covering_batches: engine steps per second at or above this is a decode that
    #: launches often (vLLM's iteration_tokens count rate) ...
    graphs_min_steps_per_second: float = 20.0
    #: ... while SM activity stays below this: each step leaves the GPU mostly idle (launch-bound)
    graphs_sm_active_max: float = 0.5
    #: prefill_chunk_too_small: the prompt p90 at least this many per-step token budgets ("several
    #: times"): TTFT is a count of chunks
    prefill_chunks_min: float = 4.0
    #: the prompt-length p90 (tokens) from which requests are long-context: on a backend the engine
    #: documents as slower for them, a notice says so (exporter/diagnosis/backends.py)
    long_context_prompt_p90_tokens: float = 8192.0

    # --- memory: context reserved per sequence ------------------------------------------
    #: context_reserved_not_used: reserved context at least this many times the p99 of prompt +
    #: output is "far above" what requests use ...
    reserved_over_p99_min: float = 4.0
    #: ... and, without length histograms, this many times the mean per request (or the most a busy
    #: llama.cpp slot held): a stricter factor for a figure that sits below the p99
    reserved_over_mean_min: float = 8.0

    # --- memory (KV cache) -----------------------------------------------------------
    kv_usage_full: float = 0.9
    kv_usage_low: float = 0.5
    #: queue-time p95 at or above this means admitted requests really waited: at least 5 %
    #: waited past vLLM's first queue bucket (0.3 s); a queue that never did reads <= 0.285
    kv_queue_p95_seconds: float = 0.3
    #: preemptions per second over the window above which they are "rising"
    preemption_rate_per_second: float = 0.0
    #: ... and preemptions the window must hold at least: one preemption in a compute-bound overload
    #: is a long request growing into a moment's full cache, not pressure (a rate needs a count)
    preemption_min_count: float = 3.0

    # --- memory: the prefix cache (exporter/diagnosis/prefix_cache.py) ---------------------------
    #: prefix_cache_hit_drop: the hit ratio before the recent seconds must have been at least this
    #: share of the prompt tokens: below it the cache served too little of each prompt for its loss
    #: to move TTFT (many workloads share little, legitimately) ...
    prefix_hit_earlier_min: float = 0.3
    #: ... and the recent ratio below this share of that earlier level: halved, far past the
    #: scatter of which prompts happened to arrive in a few seconds. A held cause stays while the
    #: recent ratio is below this share of ``prefix_hit_earlier_min`` and TTFT is over its SLO
    #: (rules.py _prefix_still_lost): once the drop has left the window, the loss is still the cause
    prefix_hit_drop_ratio: float = 0.5
    #: ... while the prompt tokens looked up per request stayed within this factor of the earlier
    #: figure, either way: the same prompts. Beyond it the workload changed (unique prompts, another
    #: application), and the ratio with it: that is not the cache's fall
    prefix_prompt_change_max: float = 1.5
    #: requests each span (the recent seconds, the window before them) must hold to be compared:
    #: a ratio over a handful of requests is which prompts happened to arrive
    prefix_min_requests: float = 10.0

    # --- scheduler -----------------------------------------------------------------
    #: busiest thread of the serving process at or above this share of a core is saturated
    host_saturated_cpu: float = 0.9
    #: ... or wanting this much (on-CPU + run-queue wait): stricter, because on a contended
    #: node every wake-up waits, so even a half-idle thread can read 0.8-0.9
    host_saturated_demand: float = 0.95
    #: once a serial host ceiling holds, it is released only when the busiest thread falls this far
    #: below both lines (CPU under 0.85, demand under 0.9 by default): a starved thread's one-second
    #: samples scatter +-5 % around its line, and a ceiling that flickers off for three of them would
    #: hand the verdict to the queue it causes
    host_release_margin: float = 0.05
    #: max SM active below this means the SMs are mostly idle
    sm_idle: float = 0.3
    #: requests waiting at or above this is a backlog
    queue_backlog_requests: float = 8.0

    # --- symptoms (what users feel; the verdict starts here) ---------------------------
    #: queue-time p95 at or above this, with requests waiting, is the "queueing" symptom: at
    #: least 5 % of the admitted requests waited past vLLM's first queue bucket (0.3 s); a queue
    #: that never held anyone reads at most 0.285 (the interpolated p95 of that first bucket)
    queueing_p95_seconds: float = 0.3
    #: the waiting queue growing at least this fast (requests/s over the window), while it
    #: never empties, is "throughput no longer follows the offered load"
    saturation_waiting_growth_per_second: float = 0.2
    #: consecutive cycles a symptom must hold before the service counts as degraded
    symptom_persistence_cycles: int = 2
    #: consecutive cycles a reported symptom must fail before it clears
    symptom_clear_cycles: int = 2
    #: causes explaining as much of the symptoms whose severity is within this of the best are a
    #: tie, broken by how long they held, then by the causal order (exporter/diagnosis/ranking.py)
    primary_tie_margin: float = 0.15
    #: ... and so are all causes at least this severe (far past their lines, both)
    primary_confident: float = 0.7
    #: cycles a cause must have held for its confidence to count it as settled
    confidence_settled_cycles: int = 5

    # --- parallel ------------------------------------------------------------------
    #: max / mean SM active of a group at or above this is an imbalance
    imbalance_skew: float = 1.3
    #: ... when the group's mean SM active is at least this (idle groups are not judged)
    imbalance_min_sm_active: float = 0.1
    #: communication_bound (exporter/diagnosis/communication.py): a group's link carries at least this
    #: share of its per-direction capacity in the busier direction, averaged over time. A transfer runs
    #: at 0.85-0.95 of the capacity (after line encoding, the counters count packet headers: the
    #: recorded H200 host-to-device copy moved 58 GB/s of Gen5 x16's 63.0, 0.92) and a tensor-parallel
    #: all-reduce is not overlapped with the math it waits on, so the average is about the share of
    #: each step the collectives take: at 0.4 they hold the step about half the time while the SMs
    #: wait. A TP 4 8B group over PCIe Gen5 x16 reads 0.43-0.6 in the simulator (exporter/simulator/
    #: roofline.py: 46-64 % of its time in all-reduces), over NVLink 4 below 0.1 ...
    communication_link_use: float = 0.4
    #: ... or the engine's last profile spent at least this share of its GPU kernel time in
    #: collectives: a TP 4 decode of an 8B model all-reduces ~49 MiB per step, ~0.1 ms over NVLink 4
    #: beside ~0.8 ms of weight reads (~11 %), ~0.9 ms over PCIe Gen5 x16 (~50 %); 0.3 lies between
    communication_time_share: float = 0.3
    #: ... while the group's mean SM active is below this: the SMs wait through at least half of each
    #: step (a decode's math keeps SM active near 0.9; NCCL's kernels hold a few SMs, 16-32 channels)
    communication_sm_active_max: float = 0.5
    #: PCIe traffic is a group's collectives only when every GPU's transmit and receive are within this
    #: ratio of each other and of the other GPUs' (a ring all-reduce: equal both ways, on every rank);
    #: host<->device copies run one way (pcie_transfer_bound): the two causes are told apart by it
    communication_balance_min: float = 0.7

    # --- speculative decoding --------------------------------------------------------
    spec_acceptance_min: float = 0.5
    #: draft tokens over the window needed before acceptance is judged
    spec_min_draft_tokens: float = 50.0
    #: what one draft token costs, as a share of a target (verification) step, where the engine
    #: measures no draft time (only trtllm-serve does: llm_spec_decode_draft_time_ratio). An
    #: assumption, documented: a draft model of 1/10-1/20 the target's size decodes memory-bound
    #: like the target but pays the fixed per-step costs (kernel launches, sampling, the scheduler)
    #: that do not shrink with its size, so a draft step costs about a tenth of a target step;
    #: EAGLE/Medusa heads cost less, n-gram drafting almost nothing (set lower for those). The draft
    #: pays while tokens per target step exceed 1 + draft tokens x this (exporter/diagnosis/draft_cost.py)
    spec_draft_token_cost: float = 0.1

    # --- application ---------------------------------------------------------------
    #: share of finished requests that were aborted/errored/timed out, or rejected
    failure_share: float = 0.05
    #: requests finished (or rejected) over the window needed before that share is judged
    failure_min_requests: float = 5.0
    #: batching window: TTFT p95 at or above this while the GPU idles and nothing piles up
    batching_ttft_p95_seconds: float = 0.5
    #: the most requests a batching window holds at once before the wait counts as a backlog: a
    #: window of W s at R requests/s holds about R x W (3/s over a 0.8 s window peaks near 8)
    batching_max_waiting: float = 16.0
    # --- application: the canary probe (exporter/probe, exporter/diagnosis/probe.py) ---
    #: front-end overhead: the probe's TTFT exceeds the engine's own by at least this ...
    front_end_overhead_seconds: float = 0.5
    #: ... and that time outside the engine is at least this share of what the client waited
    front_end_overhead_share: float = 0.5
    # --- application: the measured capacity at SLO (exporter/capacity, docs/capacity.md) ---
    #: llm_capacity_used_ratio at or above this, with no symptom yet, is the warning
    #: capacity_nearly_used (past 1, with a symptom, the load past the knee explains it)
    capacity_nearly_used_ratio: float = 0.9

    # --- severity: where each cause is as deep as it goes ----------------------------------------
    # A cause's severity is 0 at its line and 1 at the end named here (rules.py, ``ramp``); among the
    # causes that explain as much of the symptoms the deeper one is the primary (ranking.py). Ends
    # relative to a line (``*_factor``, ``*_excess``) move with it when an operator moves the line.
    #: memory_bandwidth_bound: the DRAM interface this busy is as deep as it goes: the recorded H200
    #: decode GEMV read 0.67-0.75, and HBM sustains about 0.9 of its peak in practice
    memory_bandwidth_dram_severe: float = 0.9
    #: pcie_transfer_bound: PCIe traffic this many times the busy line (16 GB/s by default: a Gen4 x16
    #: link's practical ceiling, a quarter of the recorded H200 copy's 58 GB/s over Gen5)
    pcie_busy_severe_factor: float = 8.0
    #: power_or_thermal_throttling: a clock this far below its maximum (1 - clock / max); the recorded
    #: power-capped H200 GEMM ran at 0.76 of its clock, 0.6 of the way
    throttle_clock_loss_severe: float = 0.4
    #: kv_cache_pressure: preemptions per second this far past the line: one a second recomputes a
    #: whole request's prefill every second
    preemption_severe_excess_per_second: float = 1.0
    #: kv_fragmentation_or_capacity_misjudged: free KV blocks this many times what the head of the
    #: queue needs while it waits: room for four such requests turned away
    kv_room_severe: float = 4.0
    #: serial_host_ceiling: the busiest thread's share of a core counts from this far below its line
    #: (a thread at its line, 0.9, is half way: it leaves a tenth of a core; a full core is the end)
    host_severity_margin: float = 0.1
    #: low_acceptance: a draft that makes each token this many times slower than plain decoding
    draft_slowdown_severe: float = 2.0
    #: slo_breach: a p95 at this multiple of its SLO (twice the promised latency)
    slo_overshoot_severe: float = 2.0
    #: communication_bound: the collectives' share of kernel time at this many times its line (0.6 by
    #: default: the GPU waits on its link more than it computes)
    communication_share_severe_factor: float = 2.0
    #: context_reserved_not_used: reserved context at this many times its line (16x the p99 by default)
    reserved_severe_factor: float = 4.0
    #: prefill_chunk_too_small: the prompt p90 at this many times the chunk line (16 step budgets)
    prefill_chunks_severe_factor: float = 4.0
    #: queue_backlog: this many times the backlog line waiting (32 by default) ...
    queue_backlog_severe_factor: float = 4.0
    #: ... or the queue growing this fast (requests/s): it doubles its line in under 10 s
    queue_growth_severe_per_second: float = 1.0
    #: gpu_imbalance: max / mean SM active this far past its line (2.3 by default: one GPU of a pair
    #: all but alone at work)
    imbalance_skew_severe_excess: float = 1.0
    #: failures: a failed share this high (at least the line): half the requests lost
    failure_share_severe: float = 0.5
    #: front_end_overhead and batching_window_too_large: the time outside the engine, or the TTFT
    #: the window holds requests for, at this many times its line
    latency_severe_factor: float = 4.0

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> Thresholds:
        """Defaults overridden by ``raw``; ValueError("diagnosis.<key>: ...") on a bad entry."""
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise ValueError("diagnosis: expected a mapping of threshold names to numbers")  # noqa: TRY004 - the contract is ValueError
        known = {f.name: f for f in fields(cls)}
        changes: dict[str, Any] = {}
        for key, value in raw.items():
            name = str(key).replace("-", "_")
            if name not in known:
                raise ValueError(f"diagnosis.{key}: unknown setting (see docs/diagnosis.md for the list)")
            changes[name] = _number(name, value, integer=known[name].type in (int, "int"))
        out = replace(cls(), **changes)
        out._check()
        return out

    def _check(self) -> None:
        """Cross-field and range checks, each naming the key."""
        ratios = (
            "warning_score",
            "bottleneck_score",
            "busy_utilization",
            "compute_tensor_active",
            "compute_sm_active",
            "memory_bandwidth_dram_active",
            "util_sm_gap",
            "throttle_clock_ratio",
            "power_cap_ratio",
            "memory_capacity_ratio",
            "launch_min_utilization",
            "launch_sm_share_of_utilization",
            "tensor_unused_sm_active",
            "tensor_unused_tensor_active",
            "kv_usage_full",
            "kv_usage_low",
            "sm_idle",
            "imbalance_min_sm_active",
            "communication_link_use",
            "communication_time_share",
            "communication_sm_active_max",
            "communication_balance_min",
            "spec_acceptance_min",
            "spec_draft_token_cost",
            "failure_share",
            "primary_tie_margin",
            "primary_confident",
            "throttle_min_share",
            "front_end_overhead_share",
            "capacity_nearly_used_ratio",
            "graphs_sm_active_max",
            "host_release_margin",
            "prefix_hit_earlier_min",
            "prefix_hit_drop_ratio",
        )
        for name in ratios:
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"diagnosis.{name}: expected a ratio between 0 and 1, got {v}")
        positive = (
            "window_seconds",
            "recent_seconds",
            "slo_ttft_p95_seconds",
            "slo_itl_p95_seconds",
            "pcie_busy_bytes_per_second",
            "host_saturated_cpu",
            "host_saturated_demand",
            "queue_backlog_requests",
            "batching_ttft_p95_seconds",
            "kv_queue_p95_seconds",
            "queueing_p95_seconds",
            "saturation_waiting_growth_per_second",
            "batching_max_waiting",
            "front_end_overhead_seconds",
            "graphs_min_steps_per_second",
            "long_context_prompt_p90_tokens",
        )
        for name in positive:
            if not getattr(self, name) > 0:
                raise ValueError(f"diagnosis.{name}: expected a positive number, got {getattr(self, name)}")
        for name in (
            "preemption_rate_per_second",
            "preemption_min_count",
            "spec_min_draft_tokens",
            "failure_min_requests",
            "source_gap_seconds",
            "prefix_min_requests",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"diagnosis.{name}: expected a number >= 0, got {getattr(self, name)}")
        for name in (
            "persistence_cycles",
            "clear_cycles",
            "symptom_persistence_cycles",
            "symptom_clear_cycles",
            "confidence_settled_cycles",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"diagnosis.{name}: expected an integer >= 1, got {getattr(self, name)}")
        severe_factors = (
            "pcie_busy_severe_factor",
            "communication_share_severe_factor",
            "reserved_severe_factor",
            "prefill_chunks_severe_factor",
            "queue_backlog_severe_factor",
            "latency_severe_factor",
            "kv_room_severe",
            "draft_slowdown_severe",
            "slo_overshoot_severe",
        )
        for name in severe_factors:  # the end of a scale lies past its line: a factor above 1
            if not getattr(self, name) > 1.0:
                raise ValueError(f"diagnosis.{name}: expected a factor > 1, got {getattr(self, name)}")
        for name in ("preemption_severe_excess_per_second", "imbalance_skew_severe_excess", "queue_growth_severe_per_second"):
            if not getattr(self, name) > 0:
                raise ValueError(f"diagnosis.{name}: expected a positive number, got {getattr(self, name)}")
        for name, line in (
            ("memory_bandwidth_dram_severe", "memory_bandwidth_dram_active"),
            ("failure_share_severe", "failure_share"),
        ):
            if not getattr(self, line) < getattr(self, name) <= 1.0:
                raise ValueError(
                    f"diagnosis.{name}: expected a ratio above {line} ({getattr(self, line)}) and at most 1, "
                    f"got {getattr(self, name)}"
                )
        if not 1.0 - self.throttle_clock_ratio < self.throttle_clock_loss_severe <= 1.0:
            raise ValueError(
                "diagnosis.throttle_clock_loss_severe: expected a clock loss above 1 - throttle_clock_ratio "
                f"({1.0 - self.throttle_clock_ratio:g}) and at most 1, got {self.throttle_clock_loss_severe}"
            )
        if not 0.0 <= self.host_severity_margin < self.host_saturated_cpu:
            raise ValueError(
                f"diagnosis.host_severity_margin: expected 0 to host_saturated_cpu ({self.host_saturated_cpu}), "
                f"got {self.host_severity_margin}"
            )
        for name in ("prefill_chunks_min", "reserved_over_p99_min", "reserved_over_mean_min", "prefix_prompt_change_max"):
            if getattr(self, name) < 1.0:
                raise ValueError(f"diagnosis.{name}: expected a factor >= 1, got {getattr(self, name)}")
        if self.imbalance_skew < 1.0:
            raise ValueError(f"diagnosis.imbalance_skew: expected a number >= 1 (max over mean), got {self.imbalance_skew}")
        if self.warning_score > self.bottleneck_score:
            raise ValueError(
                f"diagnosis.warning_score: must not exceed bottleneck_score ({self.warning_score} > {self.bottleneck_score})"
            )
        if self.kv_usage_low >= self.kv_usage_full:
            raise ValueError(f"diagnosis.kv_usage_low: must be below kv_usage_full ({self.kv_usage_low} >= {self.kv_usage_full})")


def _number(name: str, value: Any, integer: bool) -> float | int:
    """Parse one value; YAML may hand us text ("0.5") as well as numbers.

    A ``*_seconds`` key is a duration in the exporter's one grammar ("500ms", "2s", "1m30s",
    a bare number of seconds: exporter/values.py); any other key is a plain number, no unit.
    """
    if name.endswith("_seconds"):
        return _duration(name, value)
    if isinstance(value, bool) or value is None:
        raise ValueError(f"diagnosis.{name}: expected a number, got {value!r}")
    try:
        f = float(value.strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        raise ValueError(f"diagnosis.{name}: expected a number, got {value!r}") from None
    if math.isnan(f) or math.isinf(f):
        raise ValueError(f"diagnosis.{name}: expected a finite number, got {value!r}")
    if integer:
        if not f.is_integer():
            raise ValueError(f"diagnosis.{name}: expected an integer, got {value!r}")
        return int(f)
    return f


def _duration(name: str, value: Any) -> float:
    """A ``*_seconds`` key: seconds >= 0 (each key's own range is checked by ``Thresholds._check``)."""
    try:
        return duration_seconds(value)
    except ValueError as err:
        raise ValueError(f"diagnosis.{name}: {err}") from None
