"""From a window of snapshots to named signals the rules judge.

Why a separate step: the rules table stays pure data over names such as
``llm_gpu_sm_active_ratio`` or ``rate(llm_kv_cache_preemptions_total)``; the
arithmetic of getting there (per-GPU pairing, counter deltas, histogram
quantiles, which GPUs form a group) lives here once. A signal that cannot be
computed is absent, never 0, so a rule that needs it is "not judged" and its
layer shows ``unknown`` rather than a false ``ok``.

Signals come in three scopes: per GPU (keyed by the ``gpu`` label), per
parallel group, and one ``service`` scope for engine, process and whole-node
aggregates. Signal names are what the verdict shows as evidence.

How a metric's series are reduced into one service-wide figure (waiting requests
add up, KV usage is the worst rank) is the metric's ``reduce`` in
``exporter/schema.py``, and such a signal is named after it
(``schema.reduced_name``); the failure reasons and the harmful throttle reasons
are the schema's too, so the alerts and the ramp cannot judge differently.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from exporter.diagnosis import communication, draft_cost, kv_tiers
from exporter.diagnosis.capacity_profile import capacity_signals
from exporter.diagnosis.finite import mean, ratio
from exporter.diagnosis.prefix_cache import prefix_signals
from exporter.diagnosis.probe import probe_signals
from exporter.diagnosis.window import Window
from exporter.schema import FAILED_FINISH_REASONS, HARMFUL_THROTTLE_REASONS, reduce_series, reduced_name
from exporter.store import Snapshot

# --- per GPU (latest snapshot) ------------------------------------------------------
UTIL = "llm_gpu_utilization_ratio"
SM = "llm_gpu_sm_active_ratio"
TENSOR = "llm_gpu_tensor_active_ratio"
DRAM = "llm_gpu_dram_active_ratio"
MEM_USED = "llm_gpu_memory_used_bytes"
MEM_TOTAL = "llm_gpu_memory_total_bytes"
MEM_RATIO = "llm_gpu_memory_used_bytes / llm_gpu_memory_total_bytes"
POWER = "llm_gpu_power_watts"
POWER_RATIO = "llm_gpu_power_watts / llm_gpu_power_limit_watts"
CLOCK = "llm_gpu_sm_clock_hertz"
CLOCK_RATIO = "llm_gpu_sm_clock_hertz / llm_gpu_sm_clock_max_hertz"
TEMP = "llm_gpu_temperature_celsius"
PCIE = "llm_gpu_pcie_transmit_bytes_per_second + llm_gpu_pcie_receive_bytes_per_second"
#: per GPU: 1 while any harmful throttle reason (power or heat, exporter/schema.py THROTTLE_REASONS) is set
THROTTLED = reduced_name("llm_gpu_throttle_reason_active", '{reason=~"' + "|".join(HARMFUL_THROTTLE_REASONS) + '"}')

# --- per parallel group ---------------------------------------------------------------
GROUP_SKEW = "llm_parallel_sm_active_skew_ratio"
GROUP_GPUS = "llm_parallel_group_gpus"
GROUP_SM_MEAN = "avg(llm_gpu_sm_active_ratio)"
GROUP_SM_MAX = "max(llm_gpu_sm_active_ratio)"
TENSOR_MAX = "max(llm_gpu_tensor_active_ratio)"

# --- service (engines, processes, node-wide GPU aggregates) ---------------------------------
# each named after how the schema reduces the metric across its series, e.g. "sum(llm_scheduler_requests_waiting)"
SM_MAX = reduced_name(SM)
TENSOR_MAX = reduced_name(TENSOR)
DRAM_MAX = reduced_name(DRAM)
UTIL_MAX = reduced_name(UTIL)
UTIL_MAX_WINDOW = f"max_over_window({UTIL_MAX})"
UTIL_MAX_RECENT = f"max_over_recent({UTIL_MAX})"
BUSIEST_THREAD_METRIC = "llm_process_busiest_thread_cpu_ratio"
BUSIEST_DEMAND_METRIC = "llm_process_busiest_thread_cpu_demand_ratio"
PROCESS_CPU_METRIC = "llm_process_cpu_ratio"
BUSIEST_THREAD = reduced_name(BUSIEST_THREAD_METRIC)
BUSIEST_DEMAND = reduced_name(BUSIEST_DEMAND_METRIC)
PROCESS_CPU = reduced_name(PROCESS_CPU_METRIC)
WAITING_METRIC = "llm_scheduler_requests_waiting"
RUNNING_METRIC = "llm_scheduler_requests_running"
BY_REASON_METRIC = "llm_scheduler_requests_waiting_by_reason"
KV_METRIC = "llm_kv_cache_usage_ratio"
WAITING = reduced_name(WAITING_METRIC)
WAITING_GROWTH = f"deriv({WAITING})"
WAITING_MAX = f"max_over_recent({WAITING})"
RUNNING = reduced_name(RUNNING_METRIC)
KV_USAGE = reduced_name(KV_METRIC)
KV_USAGE_MAX = f"max_over_window({KV_USAGE})"
PREEMPTION_RATE = "rate(llm_kv_cache_preemptions_total)"
#: how many preemptions the window holds: a rate of one preemption is not pressure
PREEMPTIONS = "increase(llm_kv_cache_preemptions_total)"
#: the engine's own KV model: capacity and block (page) size in tokens, and the mean tokens a
#: finished request held (prompt + output over the window): free blocks against the blocks the
#: head of the queue needs is the capacity question the engine's numbers answer
KV_CAPACITY = reduced_name("llm_kv_cache_capacity_tokens")
KV_BLOCK = reduced_name("llm_kv_cache_block_size_tokens")
TOKENS_PER_REQUEST = "increase(llm_prompt_tokens_total + llm_generation_tokens_total) / increase(llm_requests_finished_total)"
TTFT_P95 = "p95(llm_request_ttft_seconds)"
ITL_P95 = "p95(llm_request_inter_token_seconds)"
QUEUE_P95 = "p95(llm_scheduler_queue_seconds)"
#: the same quantiles over the recent seconds: what requests see *now*, not diluted by the rest
#: of the window (after a change, the old regime's requests outnumber the new ones). A p95 of a
#: handful of requests is their maximum, so the look-back extends (one snapshot at a time, up to
#: the window) until it holds at least MIN_QUANTILE_OBSERVATIONS requests.
TTFT_P95_RECENT = "p95_over_recent(llm_request_ttft_seconds)"
ITL_P95_RECENT = "p95_over_recent(llm_request_inter_token_seconds)"
QUEUE_P95_RECENT = "p95_over_recent(llm_scheduler_queue_seconds)"
#: the fewest requests waiting in any snapshot of the recent seconds: >= 1 means nobody drained
#: the queue in that time (a flickering gauge reads 0 now and then; a sustained queue never does)
WAITING_MIN = f"min_over_recent({WAITING})"
#: first-party "why do they wait" (vLLM >= 0.11): capacity = no room in the batch or the KV cache
WAITING_CAPACITY = reduced_name(BY_REASON_METRIC, '{reason="capacity"}')
WAITING_DEFERRED = reduced_name(BY_REASON_METRIC, '{reason="deferred"}')
#: the same gauges over the recent seconds: one scrape can land between two engine steps and
#: read 0 running, 0 waiting on a busy server, so "is anything waiting for capacity" looks back
WAITING_CAPACITY_MAX = f"max_over_recent({WAITING_CAPACITY})"
#: the same over the whole window: where the queue-time histogram proves long waits while every
#: look of the recent seconds read 0 / 0 (a starved front end answers /metrics in idle moments)
WAITING_MAX_WINDOW = f"max_over_window({WAITING})"
WAITING_CAPACITY_MAX_WINDOW = f"max_over_window({WAITING_CAPACITY})"
#: llama.cpp sequence slots (from /props and /slots) and the context they hold
SLOTS_METRIC = "llm_scheduler_slots"
SLOTS_BUSY_METRIC = "llm_scheduler_slots_busy"
SLOT_CONTEXT_METRIC = "llm_kv_cache_slot_context_tokens"
KV_USED_METRIC = "llm_kv_cache_used_tokens"
SLOTS = reduced_name(SLOTS_METRIC)
SLOTS_BUSY = reduced_name(SLOTS_BUSY_METRIC)
SLOTS_BUSY_MAX = f"max_over_recent({SLOTS_BUSY})"
RUNNING_MAX_RECENT = f"max_over_recent({RUNNING})"
RUNNING_MAX = f"max_over_window({RUNNING})"
SLOT_CONTEXT = reduced_name(SLOT_CONTEXT_METRIC)
SLOT_CONTEXT_USAGE = f"{reduced_name(KV_USED_METRIC)} / ({SLOTS} * {SLOT_CONTEXT})"
#: the scheduler loop's pace (vLLM iteration_tokens histogram)
ENGINE_STEPS_RATE = "rate(llm_scheduler_iteration_tokens_count)"
#: the engine's launch settings (exporter/engines/settings.py) against what it really sees:
#: the largest captured CUDA graph against the running batch (sampled per scrape,
#: exporter/engines/batchsize.py), the per-step token budget against the prompt lengths, and the
#: context each slot reserves against the lengths requests use (prompt p99 + output p99 bounds
#: the p99 of their sum from above, so "far above it" holds for the sum too)
SETTING_METRIC = "llm_engine_setting"
CONFIG_METRIC = "llm_engine_config_info"
CUDA_GRAPH_MAX = reduced_name(SETTING_METRIC, '{setting="cuda_graph_max_batch_size"}')
STEP_BUDGET = reduced_name(SETTING_METRIC, '{setting="max_num_batched_tokens"}')
RESERVED_CONTEXT = reduced_name(SETTING_METRIC, '{setting="context_per_slot"}')
EAGER = 'llm_engine_config_info{enforce_eager="true"}'
BATCH_P50 = "p50(llm_scheduler_batch_size)"
#: 1 when the decode runs without CUDA graphs (graphs off, or the median batch above the largest
#: captured graph), 0 when the graphs are known to cover it; absent when that cannot be told
GRAPHS_UNCOVERED = "cuda_graphs_uncovered"
PROMPT_P90 = "p90(llm_request_prompt_tokens)"
#: 1 when the prompt p90 lies past the histogram's last finite bound: PROMPT_P90 is that bound, a floor
PROMPT_P90_FLOOR = "p90(llm_request_prompt_tokens) beyond the last bucket"
LENGTH_P99 = "p99(llm_request_prompt_tokens) + p99(llm_request_generation_tokens)"
#: llama.cpp has neither length histograms nor finished-request counters: the most context one
#: busy slot held on average at any scrape of the window (/slots), a lower bound of what requests use
SLOT_HELD_MAX = f"max_over_window({reduced_name('llm_kv_cache_used_tokens')} / {reduced_name('llm_scheduler_slots_busy')})"
#: the attention backend the engine runs, as a signal named after it (value 1): the chain names it
ATTENTION_BACKEND_PREFIX = 'llm_engine_config_info{attention_backend="'
SLEEP_METRIC = "llm_engine_sleep_state"
SLEEPING = reduced_name(SLEEP_METRIC, '{state!="awake"}')
GENERATION_RATE = "rate(llm_generation_tokens_total)"
MIN_QUANTILE_OBSERVATIONS = 20
#: over the look-back of the recent TTFT p95 *and* that p95 before it: the requests whose first
#: token was observed there arrived up to that long before, so this is what the GPU and the queue
#: did while they waited
UTIL_MAX_TTFT = f"max_over_ttft_span({UTIL_MAX})"
WAITING_MAX_TTFT = f"max_over_ttft_span({WAITING})"
#: the same over the look-back of the recent queue-time p95 *and* that p95 before it: the requests
#: whose queue time was observed there waited through that span, so this is what the queue, its
#: reasons and the batch looked like while they waited. A server whose gauges flicker (a starved
#: front end, a scrape between two engine steps) still shows the wait its histogram proves; a
#: short p95 keeps the span near the recent seconds.
WAITING_MAX_QUEUE = f"max_over_queue_span({WAITING})"
WAITING_CAPACITY_MAX_QUEUE = f"max_over_queue_span({WAITING_CAPACITY})"
RUNNING_MAX_QUEUE = f"max_over_queue_span({RUNNING})"
SPEC_DRAFT = "increase(llm_spec_decode_draft_tokens_total)"
SPEC_ACCEPTANCE = "increase(llm_spec_decode_accepted_tokens_total) / increase(llm_spec_decode_draft_tokens_total)"
#: finish reasons that mean the request did not complete: the schema's one set (the recording rule reads it too)
FAILED_REASONS: tuple[str, ...] = FAILED_FINISH_REASONS
FAILED_RATE = 'rate(llm_requests_finished_total{reason=~"' + "|".join(FAILED_REASONS) + '"})'
REJECTED_RATE = "rate(llm_requests_rejected_total)"
FINISHED_RATE = "rate(llm_requests_finished_total)"
FAILED_SHARE = "failed_or_rejected_share"
FAILED_BASE = "increase(llm_requests_finished_total + llm_requests_rejected_total)"
#: requests that finished with an engine error: the only allocation-failure evidence engines publish
ERRORED = 'increase(llm_requests_finished_total{reason="error"})'


SCOPES: tuple[str, ...] = ("gpu", "group", "service")

#: the metric families the signals read from a snapshot (the diagnosis window keeps only these)
_READ_PREFIXES: tuple[str, ...] = (
    "llm_gpu_",
    "llm_parallel_",
    "llm_process_",
    "llm_probe_",
    "llm_capacity_",
    "llm_prefix_cache_",
)  # llm_probe_: exporter/diagnosis/probe.py; llm_capacity_: exporter/diagnosis/capacity_profile.py;
# llm_prefix_cache_: exporter/diagnosis/prefix_cache.py
_READ_NAMES: frozenset[str] = frozenset(
    {
        "llm_scheduler_requests_waiting",
        "llm_scheduler_requests_running",
        "llm_scheduler_requests_waiting_by_reason",
        "llm_scheduler_slots",
        "llm_scheduler_slots_busy",
        "llm_kv_cache_slot_context_tokens",
        "llm_kv_cache_used_tokens",
        "llm_engine_sleep_state",
        "llm_kv_cache_usage_ratio",
        "llm_kv_cache_preemptions_total",
        "llm_kv_cache_capacity_tokens",
        "llm_kv_cache_block_size_tokens",
        "llm_prompt_tokens_total",
        "llm_request_ttft_seconds",
        "llm_request_inter_token_seconds",
        "llm_scheduler_queue_seconds",
        "llm_scheduler_iteration_tokens",
        "llm_generation_tokens_total",
        "llm_spec_decode_draft_tokens_total",
        "llm_spec_decode_accepted_tokens_total",
        "llm_requests_finished_total",
        "llm_requests_rejected_total",
        "llm_engine_setting",
        "llm_engine_config_info",
        "llm_request_prompt_tokens",
        "llm_request_generation_tokens",
        "llm_scheduler_batch_size",
    }
)


def reads(name: str) -> bool:
    """Whether the signals read metric family ``name`` (what the diagnosis window keeps)."""
    return (
        name in _READ_NAMES
        or name.startswith(_READ_PREFIXES)
        or name in kv_tiers.READS  # KV moved to and from host memory (exporter/diagnosis/kv_tiers.py)
        or name in draft_cost.READS  # what the speculative draft costs (exporter/diagnosis/draft_cost.py)
        or name in communication.READS  # the profile's collective share (exporter/diagnosis/communication.py)
    )


@dataclass
class Signals:
    """Named values by scope: ``{"gpu": {"0": {...}}, "group": {"all": {...}}, "service": {"": {...}}}``."""

    scopes: dict[str, dict[str, dict[str, float]]] = field(default_factory=lambda: {s: {} for s in SCOPES})
    #: signals left out because their value was NaN or infinite (an engine may report one): sorted names
    non_finite: list[str] = field(default_factory=list)

    @property
    def service(self) -> dict[str, float]:
        return self.scopes["service"].setdefault("", {})

    def view(self, scope: str, key: str) -> dict[str, float]:
        """What a rule of ``scope`` sees for one instance: its own signals over the service's."""
        if scope == "service":
            return dict(self.service)
        return {**self.service, **self.scopes[scope][key]}


def compute(window: Window, groups: Mapping[str, list[str]] | None = None, recent_seconds: float = 5.0) -> Signals:
    """Every signal the window supports. ``groups`` maps group name to GPU index labels;
    ``max_over_recent`` signals look back ``recent_seconds`` only."""
    sig = Signals()
    snap = window.latest
    if snap is None:
        return sig
    sig.scopes["gpu"] = gpu_signals(snap)
    sig.scopes["group"] = group_signals(snap, sig.scopes["gpu"], groups or {})
    sig.scopes["service"] = {"": service_signals(window, sig.scopes["gpu"], recent_seconds)}
    # each group's link against its capacity, and the shape of its PCIe traffic (communication_bound)
    communication.link_signals(snap, sig.scopes, groups or resolve_groups(None, snap))
    sig.non_finite = _drop_non_finite(sig.scopes)
    return sig


def _drop_non_finite(scopes: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    """Remove every NaN or infinite signal (no rule can judge one; some would raise on it); their names."""
    dropped: set[str] = set()
    for instances in scopes.values():
        for values in instances.values():
            bad = [k for k, x in values.items() if not math.isfinite(x)]
            for k in bad:
                del values[k]
            dropped.update(bad)
    return sorted(dropped)


def live_gpus(snap: Snapshot) -> list[str]:
    """GPU index labels that report and are not marked lost."""
    down = {p.labels.get("gpu", "") for p in snap.samples("llm_gpu_up") if p.value == 0}
    seen: dict[str, None] = {}
    for p in snap.points:
        if p.name.startswith("llm_gpu_") and "gpu" in p.labels and p.labels["gpu"] not in down:
            seen.setdefault(p.labels["gpu"], None)
    return sorted(seen, key=lambda g: (len(g), g))


def gpu_signals(snap: Snapshot) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for gpu in live_gpus(snap):
        v = {
            name: val
            for name in (UTIL, SM, TENSOR, DRAM, MEM_USED, MEM_TOTAL, POWER, CLOCK, TEMP)
            if (val := snap.maximum(name, gpu=gpu)) is not None
        }
        total = snap.maximum(MEM_TOTAL, gpu=gpu)
        if MEM_USED in v and total is not None:
            _put(v, MEM_RATIO, _divide(v[MEM_USED], total))
        limit = snap.maximum("llm_gpu_power_limit_watts", gpu=gpu)
        if POWER in v and limit is not None:
            _put(v, POWER_RATIO, _divide(v[POWER], limit))
        clock_max = snap.maximum("llm_gpu_sm_clock_max_hertz", gpu=gpu)
        if CLOCK in v and clock_max is not None:
            _put(v, CLOCK_RATIO, _divide(v[CLOCK], clock_max))
        tx = snap.total("llm_gpu_pcie_transmit_bytes_per_second", gpu=gpu)
        rx = snap.total("llm_gpu_pcie_receive_bytes_per_second", gpu=gpu)
        if tx is not None or rx is not None:
            v[PCIE] = (tx or 0.0) + (rx or 0.0)
        reasons = {p.labels.get("reason", ""): p.value for p in snap.samples("llm_gpu_throttle_reason_active", gpu=gpu)}
        if reasons:
            v[THROTTLED] = (
                reduce_series("llm_gpu_throttle_reason_active", (reasons.get(r, 0.0) for r in HARMFUL_THROTTLE_REASONS)) or 0.0
            )
            for r in HARMFUL_THROTTLE_REASONS:
                if reasons.get(r):
                    v[f'llm_gpu_throttle_reason_active{{reason="{r}"}}'] = reasons[r]
        out[gpu] = v
    return out


def resolve_groups(configured: Mapping[str, list[int]] | None, snap: Snapshot) -> dict[str, list[str]]:
    """Group name -> GPU index labels; with none configured, one group ``all`` of every live GPU."""
    if configured:
        return {name: [str(i) for i in idx] for name, idx in configured.items()}
    gpus = live_gpus(snap)
    return {"all": gpus} if gpus else {}


def group_signals(
    snap: Snapshot, gpus: Mapping[str, Mapping[str, float]], groups: Mapping[str, list[str]]
) -> dict[str, dict[str, float]]:
    """Size, mean / max SM active and skew (max over mean) of each group's live GPUs."""
    if not groups:
        groups = resolve_groups(None, snap)
    out: dict[str, dict[str, float]] = {}
    for name, members in groups.items():
        v: dict[str, float] = {}
        sm = [gpus[g][SM] for g in members if g in gpus and SM in gpus[g]]
        average = mean(sm)
        if average is not None:
            v[GROUP_SM_MEAN] = average
            v[GROUP_SM_MAX] = max(sm)
            # the figure the parallel step publishes (exporter/diagnosis/parallel.py), from the same GPU points
            _put(v, GROUP_SKEW, skew(sm, average))
        v[GROUP_GPUS] = float(len(members))
        out[name] = v
    return out


def skew(values: list[float], average: float) -> float | None:
    """Max over mean of a group's SM activity; all idle is balanced (1), not infinitely skewed;
    None where the quotient overflows (a huge member over a tiny mean)."""
    return ratio(max(values), average) if average > 0 else 1.0


def service_signals(window: Window, gpus: Mapping[str, Mapping[str, float]], recent_seconds: float = 5.0) -> dict[str, float]:
    snap = window.latest
    assert snap is not None
    v: dict[str, float] = {}
    for metric, key in ((SM, SM_MAX), (TENSOR, TENSOR_MAX), (DRAM, DRAM_MAX), (UTIL, UTIL_MAX)):
        _put(v, key, reduce_series(metric, [g[metric] for g in gpus.values() if metric in g]))
    util_hist = window.gauge_history(lambda s: figure(s, UTIL))
    if util_hist:
        v[UTIL_MAX_WINDOW] = max(util_hist)
        _put(v, UTIL_MAX_RECENT, max(window.gauge_history(lambda s: figure(s, UTIL), recent_seconds), default=None))
    _put(v, BUSIEST_THREAD, figure(snap, BUSIEST_THREAD_METRIC))
    _put(v, BUSIEST_DEMAND, figure(snap, BUSIEST_DEMAND_METRIC))
    _put(v, PROCESS_CPU, figure(snap, PROCESS_CPU_METRIC))
    _put(v, WAITING, figure(snap, WAITING_METRIC))
    _put(v, WAITING_CAPACITY, figure(snap, BY_REASON_METRIC, reason="capacity"))
    _put(v, WAITING_DEFERRED, figure(snap, BY_REASON_METRIC, reason="deferred"))
    _put(v, SLOTS, figure(snap, SLOTS_METRIC))
    _put(v, SLOTS_BUSY, figure(snap, SLOTS_BUSY_METRIC))
    slot_ctx = figure(snap, SLOT_CONTEXT_METRIC)
    _put(v, SLOT_CONTEXT, slot_ctx)
    used = figure(snap, KV_USED_METRIC)
    if slot_ctx and used is not None and v.get(SLOTS):
        _put(v, SLOT_CONTEXT_USAGE, _divide(used, v[SLOTS] * slot_ctx))
    _put(
        v,
        SLEEPING,
        reduce_series(SLEEP_METRIC, [p.value for p in snap.samples(SLEEP_METRIC) if p.labels.get("state") not in ("", "awake")]),
    )
    running_hist = window.gauge_history(lambda s: figure(s, RUNNING_METRIC))
    if running_hist:
        v[RUNNING_MAX] = max(running_hist)
    _put(
        v,
        WAITING_CAPACITY_MAX_WINDOW,
        max(window.gauge_history(lambda s: figure(s, BY_REASON_METRIC, reason="capacity")), default=None),
    )
    for name, reduce in (
        (WAITING_CAPACITY_MAX, lambda s: figure(s, BY_REASON_METRIC, reason="capacity")),
        (SLOTS_BUSY_MAX, lambda s: figure(s, SLOTS_BUSY_METRIC)),
        (RUNNING_MAX_RECENT, lambda s: figure(s, RUNNING_METRIC)),
    ):
        _put(v, name, max(window.gauge_history(reduce, recent_seconds), default=None))
    _put(v, RUNNING, figure(snap, RUNNING_METRIC))
    waiting_hist = window.gauge_history(lambda s: figure(s, WAITING_METRIC))
    if waiting_hist:
        v[WAITING_MAX_WINDOW] = max(waiting_hist)
        recent = window.gauge_history(lambda s: figure(s, WAITING_METRIC), recent_seconds)
        _put(v, WAITING_MAX, max(recent, default=None))
        if len(recent) >= 2:  # "never drained" needs more than one look
            v[WAITING_MIN] = min(recent)
    if len(waiting_hist) >= 2 and window.span > 0:
        _put(v, WAITING_GROWTH, _divide(waiting_hist[-1] - waiting_hist[0], window.span))
    _put(v, KV_USAGE, figure(snap, KV_METRIC))
    kv_hist = window.gauge_history(lambda s: figure(s, KV_METRIC))
    if kv_hist:
        v[KV_USAGE_MAX] = max(kv_hist)
    _put(v, PREEMPTION_RATE, window.rate("llm_kv_cache_preemptions_total"))
    _put(v, PREEMPTIONS, window.counter_delta("llm_kv_cache_preemptions_total"))
    _kv_model(window, v)
    _put(v, TTFT_P95, window.quantile("llm_request_ttft_seconds", 0.95))
    _put(
        v,
        ITL_P95_RECENT,
        _first(window.recent_quantile("llm_request_inter_token_seconds", 0.95, MIN_QUANTILE_OBSERVATIONS, recent_seconds)),
    )
    _pace(window, v)
    _put(v, ITL_P95, window.quantile("llm_request_inter_token_seconds", 0.95))
    _put(v, QUEUE_P95, window.quantile("llm_scheduler_queue_seconds", 0.95))
    queue = window.recent_quantile("llm_scheduler_queue_seconds", 0.95, MIN_QUANTILE_OBSERVATIONS, recent_seconds)
    if queue is not None:
        v[QUEUE_P95_RECENT] = queue[0]
        span = min(window.seconds, max(recent_seconds, queue[1]) + queue[0])
        reads: tuple[tuple[str, Callable[[Snapshot], float | None]], ...] = (
            (WAITING_MAX_QUEUE, lambda s: figure(s, WAITING_METRIC)),
            (WAITING_CAPACITY_MAX_QUEUE, lambda s: figure(s, BY_REASON_METRIC, reason="capacity")),
            (RUNNING_MAX_QUEUE, lambda s: figure(s, RUNNING_METRIC)),
        )
        for name, reduce in reads:
            _put(v, name, max(window.gauge_history(reduce, span), default=None))
    ttft = window.recent_quantile("llm_request_ttft_seconds", 0.95, MIN_QUANTILE_OBSERVATIONS, recent_seconds)
    if ttft is not None:
        v[TTFT_P95_RECENT] = ttft[0]
        span = min(window.seconds, ttft[1] + ttft[0])
        if util_hist:
            _put(v, UTIL_MAX_TTFT, max(window.gauge_history(lambda s: figure(s, UTIL), span), default=None))
        if waiting_hist:
            _put(v, WAITING_MAX_TTFT, max(window.gauge_history(lambda s: figure(s, WAITING_METRIC), span), default=None))
    drafted = window.counter_delta("llm_spec_decode_draft_tokens_total")
    accepted = window.counter_delta("llm_spec_decode_accepted_tokens_total")
    if drafted is not None:
        v[SPEC_DRAFT] = drafted
        if accepted is not None and drafted > 0:
            _put(v, SPEC_ACCEPTANCE, _divide(accepted, drafted))
    draft_cost.draft_signals(window, v)  # tokens per target step against the draft's cost
    kv_tiers.tier_signals(window, v)  # KV moved between the GPU and host memory / storage
    _failures(window, v)
    _settings(window, v)
    probe_signals(window, v)  # the canary probe's figures (exporter/diagnosis/probe.py)
    capacity_signals(window, v)  # the capacity profile's (exporter/diagnosis/capacity_profile.py)
    prefix_signals(
        window, v, recent_seconds
    )  # the prefix cache's hit ratio, now against earlier (exporter/diagnosis/prefix_cache.py)
    return v


def sm_bound(v: Mapping[str, float], sm_idle: float) -> float | None:
    """The busiest GPU's SM activity, or, where only NVML reports (no DCGM profiling, no GPM), its
    "GPU util" when that is below ``sm_idle``: SMs cannot be active while no kernel runs, so util
    bounds SM activity from above and proves the SMs idle. None: unknown (missing GPU data is
    never read as busy, nor as idle)."""
    if SM_MAX in v:
        return v[SM_MAX]
    util = v.get(UTIL_MAX)
    return util if util is not None and util < sm_idle else None


def figure(snap: Snapshot, metric: str, **match: str) -> float | None:
    """``metric``'s matching series in ``snap`` reduced the way the schema says (None: absent)."""
    return reduce_series(metric, snap.values(metric, **match))


def _pace(window: Window, v: dict[str, float]) -> None:
    """Engine steps per second; tokens out (the demo's tok/s, exporter/demo/rows.py)."""
    steps = window.histogram_delta_count("llm_scheduler_iteration_tokens")
    span = window.span
    if steps is not None and span > 0:
        _put(v, ENGINE_STEPS_RATE, _divide(steps, span))
    _put(v, GENERATION_RATE, window.rate("llm_generation_tokens_total"))


def _kv_model(window: Window, v: dict[str, float]) -> None:
    """KV capacity and block size as the engine publishes them, and the mean tokens per finished request."""
    snap = window.latest
    assert snap is not None
    _put(v, KV_CAPACITY, figure(snap, "llm_kv_cache_capacity_tokens"))
    _put(v, KV_BLOCK, figure(snap, "llm_kv_cache_block_size_tokens"))
    finished = window.counter_delta("llm_requests_finished_total")
    prompt = window.counter_delta("llm_prompt_tokens_total")
    generated = window.counter_delta("llm_generation_tokens_total")
    if finished and prompt is not None and generated is not None and prompt + generated > 0:
        _put(v, TOKENS_PER_REQUEST, _divide(prompt + generated, finished))


def _settings(window: Window, v: dict[str, float]) -> None:
    """The launch settings and the distributions they are compared with (see CUDA_GRAPH_MAX above)."""
    snap = window.latest
    assert snap is not None
    for key, setting in ((CUDA_GRAPH_MAX, "cuda_graph_max_batch_size"), (STEP_BUDGET, "max_num_batched_tokens")):
        _put(v, key, figure(snap, SETTING_METRIC, setting=setting))
    _put(v, RESERVED_CONTEXT, figure(snap, SETTING_METRIC, setting="context_per_slot"))
    eager = {p.labels.get("enforce_eager", "") for p in snap.samples(CONFIG_METRIC)}
    if "true" in eager:
        v[EAGER] = 1.0
    elif "false" in eager:
        v[EAGER] = 0.0
    backends = sorted({b for p in snap.samples(CONFIG_METRIC) if _backend_ok(b := p.labels.get("attention_backend", ""))})
    if backends:
        v[ATTENTION_BACKEND_PREFIX + backends[0] + '"}'] = 1.0
    _put(v, BATCH_P50, window.quantile("llm_scheduler_batch_size", 0.5))
    if v.get(EAGER) == 1.0:
        v[GRAPHS_UNCOVERED] = 1.0
    elif CUDA_GRAPH_MAX in v and BATCH_P50 in v:
        v[GRAPHS_UNCOVERED] = 1.0 if v[BATCH_P50] > v[CUDA_GRAPH_MAX] else 0.0
    _put(v, PROMPT_P90, window.quantile("llm_request_prompt_tokens", 0.9))
    if PROMPT_P90 in v and window.quantile_beyond_bounds("llm_request_prompt_tokens", 0.9):
        v[PROMPT_P90_FLOOR] = 1.0
    prompt99 = window.quantile("llm_request_prompt_tokens", 0.99)
    output99 = window.quantile("llm_request_generation_tokens", 0.99)
    if prompt99 is not None and output99 is not None:
        v[LENGTH_P99] = prompt99 + output99

    def held(snap: Snapshot) -> float | None:
        """Tokens per busy slot at one scrape; None where it cannot be told (a quotient that overflows
        is skipped like an absent scrape, so one huge pair never hides the others)."""
        used, busy = figure(snap, KV_USED_METRIC), figure(snap, SLOTS_BUSY_METRIC)
        return ratio(used, busy) if used is not None and busy else None

    _put(v, SLOT_HELD_MAX, max(window.gauge_history(held), default=None))


def _backend_ok(name: str) -> bool:
    """A backend name fit for a signal name: short, no quote or brace (engines' names are identifiers)."""
    return 0 < len(name) <= 64 and all(c.isalnum() or c in "_.:+-" for c in name)


def attention_backend(v: Mapping[str, float]) -> str | None:
    """The attention backend named in the view (``ATTENTION_BACKEND_PREFIX``), or None."""
    for key in v:
        if key.startswith(ATTENTION_BACKEND_PREFIX):
            return key[len(ATTENTION_BACKEND_PREFIX) : -2]
    return None


def _first(pair: tuple[float, float] | None) -> float | None:
    return None if pair is None else pair[0]


def _failures(window: Window, v: dict[str, float]) -> None:
    finished = window.counter_delta("llm_requests_finished_total")
    failed = window.counter_delta("llm_requests_finished_total", lambda lb: lb.get("reason", "") in FAILED_REASONS)
    rejected = window.counter_delta("llm_requests_rejected_total")
    if finished is None and rejected is None:
        return
    span = window.span
    base = (finished or 0.0) + (rejected or 0.0)
    bad = (failed or 0.0) + (rejected or 0.0)
    v[FAILED_BASE] = base
    errored = window.counter_delta("llm_requests_finished_total", lambda lb: lb.get("reason", "") == "error")
    _put(v, ERRORED, errored)
    if span > 0:
        _put(v, FINISHED_RATE, _divide(finished or 0.0, span))
        _put(v, FAILED_RATE, _divide(failed or 0.0, span))
        if rejected is not None:
            _put(v, REJECTED_RATE, _divide(rejected, span))
    if base > 0:
        _put(v, FAILED_SHARE, _divide(bad, base))


def _divide(numerator: float, denominator: float) -> float | None:
    """A signal's quotient: None where the denominator is 0 (a product of two tiny figures underflows to
    0 and ``/`` would raise ZeroDivisionError); NaN where the denominator itself overflowed and ±Inf
    where the quotient does, so ``_drop_non_finite`` leaves the signal out and names it, never a wrong
    finite figure (x / Inf would read 0)."""
    if denominator == 0:
        return None
    return numerator / denominator if math.isfinite(denominator) else math.nan


def prompt_p90_text(v: Mapping[str, float]) -> str:
    """ "prompt p90 1200 tokens", or "prompt p90 above 5000 tokens" where the percentile is past the
    histogram's last finite bound (the figure is then that bound, not the p90: issue 32)."""
    above = "above " if v.get(PROMPT_P90_FLOOR) == 1.0 else ""
    return f"prompt p90 {above}{v[PROMPT_P90]:.0f} tokens"


def _put(d: dict[str, float], key: str, value: float | None) -> None:
    if value is not None:
        d[key] = value
