"""The rules table: one row per cause, as data.

Why a table: a reader finds "when do we call it kv_cache_pressure, and what do
we tell the user" in one row, docs/diagnosis.md is checked against it, and a
new cause is one more row. Each row names its layer, its cause id (a contract
with dashboards and alerts), the scope it is judged in (per GPU, per parallel
group, or the whole service), the signals it cannot be judged without, its
condition and severity over those signals (``signals.py`` names), the evidence
to show and the advice to give.

Severity is 0-1 inside the cause ("how deep past the line"). Whether a cause
that holds is a bottleneck depends on the symptoms (``symptoms.py``): which
symptoms each cause can explain, and which cause comes first, is declared in
``causality.py``. Beside the condition a row carries what the verdict needs to
speak: ``describe`` (the cause's link of the chain, with numbers), ``proximity``
and ``limit`` (how near the layer's resource is to its limit, for headroom),
and ``warns_alone`` (waste or danger even while nobody suffers).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from exporter.diagnosis import capacity_profile as cp
from exporter.diagnosis import causality
from exporter.diagnosis import communication as cm
from exporter.diagnosis import draft_cost as dc
from exporter.diagnosis import kv_tiers as kt
from exporter.diagnosis import prefix_cache as pc
from exporter.diagnosis import probe as pr
from exporter.diagnosis import signals as s
from exporter.diagnosis.finite import ceil_or_none, finite_or_none, ratio
from exporter.diagnosis.notices import missing_inputs
from exporter.diagnosis.symptoms import (
    excess,
    itl_high,
    latest_p95,
    queue_sustained,
    queueing,
    ttft_high,
    waited_while_queued,
    waits_proven,
)
from exporter.diagnosis.thresholds import Thresholds
from exporter.schema import HARMFUL_THROTTLE_REASONS, LAYERS

View = Mapping[str, float]
Predicate = Callable[[View, Thresholds], bool]
Severity = Callable[[View, Thresholds], float]
#: (view, thresholds, the observed symptoms the cause can explain) -> symptom -> 0-1 share of it
#: the cause explains with evidence of its own (ranking.py ranks by the sum)
Share = Callable[[View, Thresholds, frozenset[str]], Mapping[str, float]]


@dataclass(frozen=True)
class Rule:
    """One cause: when it holds, how bad it is, what proves it, what to do."""

    layer: str
    cause: str
    scope: str  # "gpu" | "group" | "service"
    #: every one of these signals must be present to judge the cause
    requires: tuple[str, ...]
    condition: Predicate
    severity: Severity
    evidence: tuple[str, ...]
    advice: str
    #: at least one of these must be present too (for "either TTFT or ITL")
    requires_any: tuple[str, ...] = ()
    #: the cause's link in the symptom -> cause chain, with its numbers
    describe: Callable[[View, Thresholds], str] | None = None
    #: 0-1, how close the resource this rule watches is to its limit (1 = at the limit)
    proximity: Severity | None = None
    #: what that resource is, for the headroom sentence ("HBM bandwidth")
    limit: str = ""
    #: holds -> a warning even in a healthy service (waste or danger on its own)
    warns_alone: Predicate | None = None
    #: how much of each symptom it explains with its own evidence (None: all of each it can explain)
    share: Share | None = None
    #: while the cause holds, this looser condition keeps it holding (None: ``condition`` itself): a
    #: release line below the entry line, for a signal that hovers at its line once the cause is real
    sustain: Predicate | None = None

    def judgeable(self, view: View) -> bool:
        if any(name not in view for name in self.requires):
            return False
        return not self.requires_any or any(name in view for name in self.requires_any)


def ramp(x: float, lo: float, hi: float) -> float:
    """0 at ``lo``, 1 at ``hi``, linear and clamped in between. Past either end by more than a double
    holds (``x - lo`` overflows to ±Inf) is still past it; NaN (no figure) reads 0, never "deep"."""
    if math.isnan(x):
        return 0.0
    if hi <= lo:
        return 1.0 if x >= hi else 0.0
    return min(1.0, max(0.0, (x - lo) / (hi - lo)))


def host_load(v: View) -> float:
    """How much of a core the busiest serving thread used, or wanted where the run queue shows it.

    A serial thread starved by a contended node or a CPU limit gets less than a
    core while it wants a full one; it is the ceiling all the same.
    """
    return max(v.get(s.BUSIEST_THREAD, 0.0), v.get(s.BUSIEST_DEMAND, 0.0))


def host_saturated(v: View, t: Thresholds, margin: float = 0.0) -> bool:
    """A serving thread at (or wanting) a full core, within ``margin`` below both lines; False when no
    process sampler runs."""
    return (
        v.get(s.BUSIEST_THREAD, 0.0) >= t.host_saturated_cpu - margin
        or v.get(s.BUSIEST_DEMAND, 0.0) >= t.host_saturated_demand - margin
    )


def sm_bound(v: View, t: Thresholds) -> float | None:
    """SM activity, or NVML's util where it proves the SMs idle (``signals.sm_bound``)."""
    return s.sm_bound(v, t.sm_idle)


def preempting(v: View, t: Thresholds) -> bool:
    """Preemptions rise, and the window holds enough of them to be a pattern (``preemption_min_count``)."""
    return v.get(s.PREEMPTION_RATE, 0.0) > t.preemption_rate_per_second and v.get(s.PREEMPTIONS, math.inf) >= max(
        1.0, t.preemption_min_count
    )


def work_queued(v: View) -> bool:
    """Work is waiting on the host. With engine metrics: requests waiting.

    Replay-only or GPU-only deployments have no queue to read; then the GPU
    having run anything in the window stands in for it (a process burning a core
    while its GPU never ran a kernel is loading a model, not serving).
    """
    if s.WAITING in v or s.RUNNING in v:
        # one request running and none waiting is the common interactive case (a
        # closed-loop client): the host thread is still the ceiling of that request
        return v.get(s.WAITING, 0.0) >= 1 or v.get(s.RUNNING, 0.0) >= 1
    return v.get(s.UTIL_MAX_WINDOW, 0.0) > 0.0


def _compute_bound(v: View, t: Thresholds) -> bool:
    return v[s.TENSOR] >= t.compute_tensor_active or (
        v[s.SM] >= t.compute_sm_active and v[s.DRAM] < t.memory_bandwidth_dram_active
    )


def _compute_severity(v: View, t: Thresholds) -> float:
    by_tensor = ramp(v[s.TENSOR], t.compute_tensor_active, 1.0)
    by_sm = ramp(v[s.SM], t.compute_sm_active, 1.0) if v[s.DRAM] < t.memory_bandwidth_dram_active else 0.0
    return max(by_tensor, by_sm)


def _throttled(v: View, t: Thresholds) -> bool:
    if v[s.UTIL] < t.busy_utilization or v[s.CLOCK_RATIO] >= t.throttle_clock_ratio:
        return False
    return v.get(s.THROTTLED, 0.0) >= 1.0 or v.get(s.POWER_RATIO, 0.0) >= t.power_cap_ratio


def throttle_share(v: View, t: Thresholds, symptoms: frozenset[str]) -> float:
    """The share of the slowdown a throttled clock explains: its clock loss (1 - clock / max) over
    how far the root symptom is past its line (queueing when requests queue: TTFT and saturation
    follow from the queue; else the worst latency). 0 below ``throttle_min_share`` (a busy board at
    its cap, not the cause) or when the symptom's size cannot be told."""
    if s.CLOCK_RATIO not in v or not symptoms:
        return 0.0
    loss = max(0.0, 1.0 - v[s.CLOCK_RATIO])
    roots = ["queueing"] if "queueing" in symptoms else sorted(symptoms)
    sizes = [x for sym in roots if (x := excess(v, t, sym)) is not None]
    if not sizes:
        return 0.0
    worst = max(sizes)
    share = 1.0 if worst <= 0 else min(1.0, loss / worst)
    return share if share >= t.throttle_min_share else 0.0


def _throttle_shares(v: View, t: Thresholds, symptoms: frozenset[str]) -> dict[str, float]:
    share = throttle_share(v, t, symptoms)
    return {sym: share for sym in symptoms}


def _compute_shares(v: View, t: Thresholds, symptoms: frozenset[str]) -> dict[str, float]:
    """Compute-bound at a throttled clock explains nothing of its own where, at the full clock, the
    same work would leave the pipes under their line (activity x clock ratio): the clock is the
    limit, and the throttle that explains the slowdown is the cause (its consequence, not a rival)."""
    if s.CLOCK_RATIO in v and s.UTIL in v and _throttled(v, t) and throttle_share(v, t, symptoms) > 0:
        r = v[s.CLOCK_RATIO]
        at_full_clock = {**v, s.TENSOR: v[s.TENSOR] * r, s.SM: v[s.SM] * r}
        if not _compute_bound(at_full_clock, t):
            return {sym: 0.0 for sym in symptoms}
    return {sym: 1.0 for sym in symptoms}


def _framebuffer_exhausted(v: View, t: Thresholds) -> bool:
    """The framebuffer nearly full. An engine that publishes its KV cache preallocates it (TGI by
    default, vLLM at gpu_memory_utilization 0.98): that framebuffer figure is not exhaustion while
    the KV cache has room or no request failed with an engine error (the only allocation-failure
    evidence engines publish); then the KV-cache causes speak for the memory."""
    if v[s.MEM_RATIO] < t.memory_capacity_ratio:
        return False
    usage = kv_usage(v)
    if usage is None:
        return True
    return usage >= t.kv_usage_full and v.get(s.ERRORED, 0.0) > 0


def _sms_far_below_util(v: View, t: Thresholds) -> bool:
    return v[s.SM] <= t.launch_sm_share_of_utilization * v[s.UTIL]


def gpu_idle(v: View, t: Thresholds) -> bool:
    """The GPU mostly waits: few SMs busy and, where known, kernels running a small share of the time."""
    return v[s.SM_MAX] < t.sm_idle and v.get(s.UTIL_MAX, 0.0) < t.busy_utilization


def recent_p95(v: View, recent: str, window: str) -> float:
    """A quantile over the recent seconds; the window's when nothing was observed recently."""
    return v[recent] if recent in v else v[window]


def _requests_really_wait(v: View, t: Thresholds) -> bool:
    """Waiting is sustained: admitted requests waited long (queue-time p95 over the recent
    seconds), and some wait in those seconds.

    The waiting gauge alone flickers (0 on one scrape, 10 on the next) and a healthy
    server shows a waiting request now and then; the queue-time quantile does not.
    Engines without a queue-time histogram fall back to "waiting now".
    """
    if queue_sustained(v):
        return True
    if s.QUEUE_P95 in v:
        return waited_while_queued(v, t) >= 1 and recent_p95(v, s.QUEUE_P95_RECENT, s.QUEUE_P95) >= t.kv_queue_p95_seconds
    return v[s.WAITING] >= 1


def kv_usage(v: View) -> float | None:
    """KV-cache usage over the window: the engine's own gauge, else llama.cpp's slot context in use."""
    if s.KV_USAGE_MAX in v:
        return v[s.KV_USAGE_MAX]
    return v.get(s.SLOT_CONTEXT_USAGE)


def held_for_capacity(v: View, t: Thresholds | None = None) -> bool:
    """Requests wait for room (batch slots or KV), not for other reasons.

    First-party where the engine says so (vLLM ``waiting_by_reason``, llama.cpp
    all slots busy, i.e. running sequences at the engine's own slot count);
    elsewhere any sustained wait counts. With ``t`` and waits the queue-time
    histogram proves, the capacity gauge is read over the whole window.
    """
    if s.WAITING_CAPACITY in v:
        seen = max(v.get(s.WAITING_CAPACITY_MAX, v[s.WAITING_CAPACITY]), v.get(s.WAITING_CAPACITY_MAX_QUEUE, 0.0))
        if t is not None and waits_proven(v, t):
            seen = max(seen, v.get(s.WAITING_CAPACITY_MAX_WINDOW, 0.0))
        return seen >= 1
    if s.SLOTS in v and s.SLOTS_BUSY in v:
        return v.get(s.SLOTS_BUSY_MAX, v[s.SLOTS_BUSY]) >= v[s.SLOTS] and v.get(s.WAITING_MAX, v.get(s.WAITING, 0.0)) >= 1
    return True


def running_seen(v: View, t: Thresholds) -> float:
    """The most requests seen running while the queue waited (the recent seconds, the queue span;
    the window where the histogram proves the waits)."""
    seen = max(v.get(s.RUNNING_MAX_RECENT, v.get(s.RUNNING, 0.0)), v.get(s.RUNNING_MAX_QUEUE, 0.0))
    if waits_proven(v, t):
        seen = max(seen, v.get(s.RUNNING_MAX, 0.0))
    return seen


def kv_room(v: View, t: Thresholds) -> tuple[float, float, float, float] | None:
    """(free blocks, blocks the head of the queue needs, blocks per request, head requests) from the
    engine's own KV model; None where the engine publishes no capacity and block size.

    Free blocks: (1 - usage, the window's max) x capacity / block size; llama.cpp's slots count
    context tokens (block = 1 token). A request needs its mean tokens (prompt + output over the
    window's finished requests; else what the running ones hold each) in blocks. The head of the
    queue is as many of the waiting requests as run now (all of them when fewer wait): room for
    them means the batch could at least double on the memory it has, so slots or the admission
    budget, not memory, hold the queue. A cache with room for a request or two more is well used.

    Also None where a figure of that model is not a representable number (an engine's 1.7e308 KV
    capacity times its usage overflows; ``math.ceil`` of the infinity raised OverflowError and took
    the diagnosis down, issue 37): the callers then judge the usage alone, as without a KV model.
    """
    usage, model = kv_usage(v), _kv_blocks(v)
    if usage is None or model is None:
        return None
    block, capacity = model
    running = running_seen(v, t)
    tokens = v.get(s.TOKENS_PER_REQUEST)
    if tokens is None and running >= 1:
        tokens = ratio(usage * capacity, running)
    blocks = ratio(tokens, block) if tokens else None
    per_request = ceil_or_none(blocks) if blocks is not None else None
    if per_request is None:
        return None
    head = max(1.0, min(max(waited_while_queued(v, t), 1.0), max(running, 1.0)))
    free, need = ratio((1.0 - usage) * capacity, block), finite_or_none(head * per_request)
    return None if free is None or need is None else (free, need, per_request, head)


def _kv_blocks(v: View) -> tuple[float, float] | None:
    """(block size, capacity) in tokens: the engine's KV model, else llama.cpp's slots (block = 1
    token); None without one, or where slots x context per slot overflows."""
    if v.get(s.KV_CAPACITY, 0.0) > 0 and v.get(s.KV_BLOCK, 0.0) > 0 and s.KV_USAGE_MAX in v:
        return v[s.KV_BLOCK], v[s.KV_CAPACITY]
    if s.SLOT_CONTEXT_USAGE in v and v.get(s.SLOT_CONTEXT, 0.0) > 0 and v.get(s.SLOTS, 0.0) > 0:
        capacity = finite_or_none(v[s.SLOTS] * v[s.SLOT_CONTEXT])
        return None if capacity is None else (1.0, capacity)
    return None


def _kv_full(v: View, t: Thresholds) -> bool:
    """Full and hurting: preemptions recompute work, or requests are held back for KV room.

    A full cache that holds requests back *without* preempting (an engine that
    admits conservatively) limits admission just the same.
    """
    usage = kv_usage(v)
    if usage is None:
        return False
    # A preemption happens only when the running requests no longer fit: it proves the cache
    # was full at that moment, even when the sampled gauge (a snapshot every few seconds,
    # in steps of one block of a small cache) missed it. A cache that reads mostly free
    # while preempting is something else; then the gauge must say full too. One preemption
    # is a long request growing into a moment's full cache: a pattern needs a count.
    if preempting(v, t) and usage >= t.kv_usage_low:
        return True
    if usage < t.kv_usage_full:
        return False
    held_back = v.get(s.WAITING_MIN, 0.0) >= 1 or (
        s.QUEUE_P95 in v
        and v.get(s.WAITING_MAX, 0.0) >= 1
        and recent_p95(v, s.QUEUE_P95_RECENT, s.QUEUE_P95) >= t.kv_queue_p95_seconds
    )
    return held_back and held_for_capacity(v, t)


def _kv_shares(v: View, t: Thresholds, symptoms: frozenset[str]) -> dict[str, float]:
    """A full cache holds requests back (queue, TTFT, saturation); it slows decoding (ITL) only by
    recomputing preempted requests, so ITL needs the preemptions."""
    return {sym: 0.0 if sym == "itl_high" and not preempting(v, t) else 1.0 for sym in symptoms}


def _kv_severity(v: View, t: Thresholds) -> float:
    """How deep the cache itself is past its line: the preemption rate (only once it is a pattern)
    and how full it is. Not the queue behind it: that is the symptom, counted by what it explains,
    and a queue of eight would make every full cache as severe as the worst (issue 20)."""
    rate = v.get(s.PREEMPTION_RATE, 0.0) if preempting(v, t) else 0.0
    return max(
        ramp(rate, t.preemption_rate_per_second, t.preemption_rate_per_second + t.preemption_severe_excess_per_second),
        ramp(kv_usage(v) or 0.0, t.kv_usage_full, 1.0),
    )


def kv_holds_the_head(v: View, t: Thresholds) -> bool:
    """The free KV cache would hold the head of the queue (``kv_room``); where the engine publishes
    no KV model, the window's usage at most ``kv_usage_low``."""
    room = kv_room(v, t)
    if room is not None:
        return room[0] >= room[1]
    usage = kv_usage(v)
    return usage is not None and usage <= t.kv_usage_low


def _kv_fragmentation(v: View, t: Thresholds) -> bool:
    """Requests wait for capacity while the free KV cache would hold the head of the queue, and the
    engine keeps stepping.

    The GPU clause tells a misjudged KV budget (admitted requests decode back to
    back, "GPU util" high, the rest wait) from a batching window (requests held
    while the GPU idles), whose queue also waits with the cache free. Without GPU
    data the GPU is unknown, never busy: then only the engine's own word that the
    requests wait for capacity (vLLM's reason, llama.cpp's slots) makes the claim.
    """
    if kv_usage(v) is None or not _requests_really_wait(v, t) or not held_for_capacity(v, t):
        return False
    if running_seen(v, t) < 1 or not kv_holds_the_head(v, t):
        return False
    if s.UTIL_MAX in v:
        if v[s.UTIL_MAX] < t.busy_utilization:
            return False
    elif s.WAITING_CAPACITY not in v and s.SLOTS not in v:
        return False
    return not _serial_host(v, t) and not _gpu_compute_saturated(v, t)


def _kv_fragmentation_severity(v: View, t: Thresholds) -> float:
    """Deeper the more wait and the more room the cache has beyond the head of the queue."""
    room = kv_room(v, t)
    if room is not None:
        spare = ramp(room[0] / max(room[1], 1.0), 1.0, t.kv_room_severe)
    else:
        spare = ramp(t.kv_usage_low - (kv_usage(v) or 0.0), 0.0, t.kv_usage_low)
    return (ramp(waited_while_queued(v, t), 0.0, t.queue_backlog_requests) + spare) / 2


def _gpu_compute_saturated(v: View, t: Thresholds) -> bool:
    """Some GPU at the compute-bound line, read by ``_compute_bound`` itself: a larger batch would not
    run faster. The tensor pipes, or the SMs busy while HBM is not (a GPU whose clock is throttled does
    the same work with its SMs busier: that batch is no more admission-limited than at the full
    clock). A bandwidth-bound decode is different: more sequences per weight read is what helps it.
    The service view holds each figure's max over its GPUs, not the pairs, so the SM way counts only
    while every GPU's DRAM is under the bandwidth line, and not at all while DRAM activity is unknown
    (read as at its limit)."""
    busiest = {s.TENSOR: v.get(s.TENSOR_MAX, 0.0), s.SM: v.get(s.SM_MAX, 0.0), s.DRAM: v.get(s.DRAM_MAX, 1.0)}
    return _compute_bound(busiest, t)


def _serial_host(v: View, t: Thresholds, margin: float = 0.0) -> bool:
    """A serving thread at a full core (within ``margin``) while the SMs are idle (``sm_bound``: NVML's
    util where it proves them idle) and work is queued; False where SM activity is unknown."""
    sm = sm_bound(v, t)
    return sm is not None and host_saturated(v, t, margin) and sm < t.sm_idle and work_queued(v)


def _serial_host_sustained(v: View, t: Thresholds) -> bool:
    """The release line of a held serial host ceiling: the same, within ``host_release_margin``."""
    return _serial_host(v, t, t.host_release_margin)


def _serial_host_severity(v: View, t: Thresholds) -> float:
    """Deeper the closer the thread is to a full core and the idler the SMs."""
    sm = sm_bound(v, t)
    return (
        ramp(host_load(v), t.host_saturated_cpu - t.host_severity_margin, 1.0) + ramp(t.sm_idle - (sm or 0.0), 0.0, t.sm_idle)
    ) / 2


def _imbalance(v: View, t: Thresholds) -> bool:
    return v[s.GROUP_GPUS] >= 2 and v[s.GROUP_SM_MEAN] >= t.imbalance_min_sm_active and v[s.GROUP_SKEW] >= t.imbalance_skew


def _low_acceptance(v: View, t: Thresholds) -> bool:
    """Most draft tokens rejected, or the draft costs more target-step work than it saves
    (exporter/diagnosis/draft_cost.py): judged once enough tokens were drafted."""
    if v[s.SPEC_DRAFT] < max(1.0, t.spec_min_draft_tokens) or s.SPEC_ACCEPTANCE not in v:
        return False
    cost = dc.draft_cost(v, t.spec_draft_token_cost)
    return v[s.SPEC_ACCEPTANCE] < t.spec_acceptance_min or (cost is not None and not cost.pays)


def _spec_severity(v: View, t: Thresholds) -> float:
    """How far acceptance is below its line, or how much slower than plain decoding the draft
    makes each token (a slow-down of x2 is as deep as it goes)."""
    low = ramp(t.spec_acceptance_min - v[s.SPEC_ACCEPTANCE], 0.0, t.spec_acceptance_min)
    cost = dc.draft_cost(v, t.spec_draft_token_cost)
    slower = ramp(1.0 / cost.speedup, 1.0, t.draft_slowdown_severe) if cost is not None and cost.speedup > 0 else 0.0
    return max(low, slower)


def _batching_window(v: View, t: Thresholds) -> bool:
    """TTFT high while the GPU idled throughout the time those requests waited (a bursty GPU
    that idles now and then, with requests queued behind long prefills, is not a batching
    window; nor is the tail of a burst or a backlog that has just drained)."""
    return (
        recent_p95(v, s.TTFT_P95_RECENT, s.TTFT_P95) >= t.batching_ttft_p95_seconds
        and gpu_idle(v, t)
        and v.get(s.UTIL_MAX_TTFT, v.get(s.UTIL_MAX_RECENT, 0.0)) < t.busy_utilization
        and v.get(s.WAITING_MAX_TTFT, v.get(s.WAITING, 0.0)) < t.batching_max_waiting
        and v.get(s.KV_USAGE_MAX, 0.0) < t.kv_usage_full
        and v.get(s.PREEMPTION_RATE, 0.0) <= t.preemption_rate_per_second
        and not host_saturated(v, t)
    )


def _failures(v: View, t: Thresholds) -> bool:
    return v[s.FAILED_BASE] >= t.failure_min_requests and v.get(s.FAILED_SHARE, 0.0) >= t.failure_share


def _slo_severity(v: View, t: Thresholds) -> float:
    ttft = (latest_p95(v, s.TTFT_P95_RECENT, s.TTFT_P95) or 0.0) / t.slo_ttft_p95_seconds
    itl = (latest_p95(v, s.ITL_P95_RECENT, s.ITL_P95) or 0.0) / t.slo_itl_p95_seconds
    return max(ramp(ttft, 1.0, t.slo_overshoot_severe), ramp(itl, 1.0, t.slo_overshoot_severe))


def pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def _describe_compute(v: View, t: Thresholds) -> str:
    return f"tensor pipes {pct(v[s.TENSOR])} busy, SMs {pct(v[s.SM])} (compute-bound)"


def _describe_hbm(v: View, t: Thresholds) -> str:
    return f"HBM {pct(v[s.DRAM])} busy (memory-bandwidth-bound decode)"


def _describe_pcie(v: View, t: Thresholds) -> str:
    text = f'PCIe {v[s.PCIE] / 1e9:.1f} GB/s while "GPU util" {pct(v[s.UTIL])} but SMs {pct(v[s.SM])}'
    return kt.with_offload(text, v, "; meanwhile ")  # the KV offload traffic on the link, where the engine counts it


def _describe_throttle(v: View, t: Thresholds) -> str:
    out = f"SM clock at {pct(v[s.CLOCK_RATIO])} of max"
    if s.POWER_RATIO in v:
        out += f", power at {pct(v[s.POWER_RATIO])} of the limit"
    return out


def _describe_fb(v: View, t: Thresholds) -> str:
    out = f"GPU memory {pct(v[s.MEM_RATIO])} used"
    usage = kv_usage(v)
    if usage is not None:  # an engine's preallocation: exhaustion only with its KV cache full and errors
        out += f", the engine's KV cache {pct(usage)} full and {v.get(s.ERRORED, 0.0):.0f} requests failed with errors"
    return out


def _describe_launch(v: View, t: Thresholds) -> str:
    return f'"GPU util" {pct(v[s.UTIL])} but SMs {pct(v[s.SM])} (tiny kernels, launch-bound)'


def _describe_tensor_unused(v: View, t: Thresholds) -> str:
    return f"SMs {pct(v[s.SM])} busy, tensor pipes {pct(v[s.TENSOR])}"


def _describe_kv_full(v: View, t: Thresholds) -> str:
    out = f"KV cache {pct(kv_usage(v) or 0.0)} full"
    rate = v.get(s.PREEMPTION_RATE, 0.0)
    if preempting(v, t):
        out += f", {rate:.2g} preemptions/s"
    elif s.WAITING_CAPACITY in v:
        out += f", {v[s.WAITING_CAPACITY]:.0f} requests held for capacity"
    else:
        out += ", admission held back"
    return kt.with_offload(out, v)  # evictions kept in host memory and loaded back, where the engine counts them


def _describe_kv_misjudged(v: View, t: Thresholds) -> str:
    usage = kv_usage(v) or 0.0
    room = kv_room(v, t)
    fits = ""
    if room is not None:
        free, _need, per, head = room
        fits = f": its {free:.0f} free blocks would hold the next {head:.0f} waiting ({per:.0f} blocks each)"
    if s.SLOTS in v and s.SLOTS_BUSY in v:
        return f"all {v[s.SLOTS]:.0f} slots busy while only {pct(usage)} of their context is used{fits}"
    running = max(running_seen(v, t), v.get(s.RUNNING_MAX, 0.0))
    return f"only {running:.0f} running while the KV cache is {pct(usage)} full{fits} (batch slots, not memory, are the limit)"


def _describe_host(v: View, t: Thresholds) -> str:
    if s.SM_MAX in v:
        return f"busiest serving thread at {pct(host_load(v))} of a core while SMs are {pct(v[s.SM_MAX])} busy"
    return f'busiest serving thread at {pct(host_load(v))} of a core while "GPU util" is {pct(sm_bound(v, t) or 0.0)} (SMs idle)'


def _describe_backlog(v: View, t: Thresholds) -> str:
    unknown = [m.what for m in missing_inputs(v, t)]
    if unknown:
        return f"{v[s.WAITING]:.0f} requests waiting, no layer judged at its limit ({', '.join(unknown)} missing)"
    return f"{v[s.WAITING]:.0f} requests waiting with every layer below its limit"


def _describe_imbalance(v: View, t: Thresholds) -> str:
    return f"one GPU's SMs ×{v[s.GROUP_SKEW]:.2f} the group mean"


def _gb(x: float) -> str:
    return f"{x / 1e9:.0f}" if x >= 10e9 else f"{x / 1e9:.1f}"


def _describe_communication(v: View, t: Thresholds) -> str:
    """ "TP 4 over PCIe Gen5 x16: 49 GB/s of 63 GB/s per GPU while SM active 31 %", the profile's
    share added where it is what holds."""
    parts = [cm.layout(v)]
    if cm.ON_NVLINK in v:
        if v[cm.ON_NVLINK] == 1.0:
            link = f"NVLink ({v[cm.NVLINK_LINKS]:.0f} links)" if cm.NVLINK_LINKS in v else "NVLink"
        elif cm.PCIE_GEN in v and cm.PCIE_WIDTH in v:
            link = f"PCIe Gen{v[cm.PCIE_GEN]:.0f} x{v[cm.PCIE_WIDTH]:.0f}"
        else:
            link = "PCIe"
        parts.append(f" over {link}")
    text = "".join(parts)
    if cm.TRAFFIC in v and cm.CAPACITY in v:
        text += f": {_gb(v[cm.TRAFFIC])} GB/s of {_gb(v[cm.CAPACITY])} GB/s per GPU"
    if cm.by_profile(v, t):
        text += f"{';' if ':' in text else ':'} collectives {pct(v[cm.COMM_SHARE])} of the last profile's GPU time"
    return f"{text} while SM active {pct(v[s.GROUP_SM_MEAN])}"


def _communication_severity(v: View, t: Thresholds) -> float:
    """Deeper the fuller the link (or the larger the collectives' share) and the idler the SMs."""
    link = ramp(v.get(cm.USE, 0.0), t.communication_link_use, 1.0) if cm.by_link(v, t) else 0.0
    share = ramp(
        v.get(cm.COMM_SHARE, 0.0),
        t.communication_time_share,
        min(1.0, t.communication_share_severe_factor * t.communication_time_share),
    )
    wait = ramp(t.communication_sm_active_max - v[s.GROUP_SM_MEAN], 0.0, t.communication_sm_active_max)
    return (max(link, share if cm.by_profile(v, t) else 0.0) + wait) / 2


def _describe_spec(v: View, t: Thresholds) -> str:
    cost = dc.draft_cost(v, t.spec_draft_token_cost)
    if cost is None:  # neither the draft tokens per step nor the setting: acceptance alone
        return f"{pct(v.get(s.SPEC_ACCEPTANCE, 0.0))} of draft tokens accepted"
    return dc.describe(cost)


def _describe_batching(v: View, t: Thresholds) -> str:
    return f"TTFT p95 {recent_p95(v, s.TTFT_P95_RECENT, s.TTFT_P95):.2f} s while the GPU idles (SMs {pct(v[s.SM_MAX])})"


def _describe_failures(v: View, t: Thresholds) -> str:
    return f"{pct(v.get(s.FAILED_SHARE, 0.0))} of requests failed, timed out or were rejected"


def _describe_slo(v: View, t: Thresholds) -> str:
    return "latency over the SLO with no layer at its limit"


def _slo_proximity(v: View, t: Thresholds) -> float:
    ttft = latest_p95(v, s.TTFT_P95_RECENT, s.TTFT_P95) or 0.0
    itl = latest_p95(v, s.ITL_P95_RECENT, s.ITL_P95) or 0.0
    return min(1.0, max(ttft / t.slo_ttft_p95_seconds, itl / t.slo_itl_p95_seconds))


# ------------------------------------------------------------------ the canary probe (exporter/probe)


def _front_end_overhead(v: View, t: Thresholds) -> bool:
    """Clients wait much longer than the engine says it took: the time outside the engine is
    past its line and most of what the client waited (so the engine's own TTFT is fine)."""
    outside, client = v[pr.PROBE_OUTSIDE], v.get(pr.PROBE_CLIENT_TTFT, 0.0)
    return outside >= t.front_end_overhead_seconds and outside >= t.front_end_overhead_share * client


def _describe_front_end(v: View, t: Thresholds) -> str:
    out = (
        f"clients wait {v.get(pr.PROBE_CLIENT_TTFT, 0.0):.2f} s for the first token, the engine says "
        f"{v[pr.PROBE_ENGINE_TTFT]:.2f} s: {v[pr.PROBE_OUTSIDE]:.2f} s outside the engine"
    )
    if host_saturated(v, t):
        out += f" (the serving process's busiest thread at {pct(host_load(v))} of a core)"
    return out


def _describe_unresponsive(v: View, t: Thresholds) -> str:
    return (
        f"the canary's last request to {v[pr.PROBE_HUNG]:.0f} engine(s) timed out while its /metrics "
        "answered with every counter frozen (the engine core is hung)"
    )


_THROTTLE_REASONS = tuple(f'llm_gpu_throttle_reason_active{{reason="{r}"}}' for r in HARMFUL_THROTTLE_REASONS)

# ------------------------------------------------------------------ launch settings against what the engine sees
#: the thresholds (``graphs_*``, ``prefill_chunks_min``, ``reserved_over_*``) are fields of
#: ``Thresholds`` (exporter/diagnosis/thresholds.py), settable in the ``diagnosis:`` section


def _launch_bound_steps(v: View, t: Thresholds) -> bool:
    """A decode that launches often and leaves the SMs mostly idle per step: the engine's step rate at
    ``graphs_min_steps_per_second`` (where it publishes one; else "GPU util" at the launch-bound line)
    with SM activity below ``graphs_sm_active_max``. Unknown SM activity is never idle."""
    sm = sm_bound(v, t)
    if sm is None or sm >= t.graphs_sm_active_max or v.get(s.RUNNING, 0.0) < 1:
        return False
    if s.ENGINE_STEPS_RATE in v:
        return v[s.ENGINE_STEPS_RATE] >= t.graphs_min_steps_per_second
    return v.get(s.UTIL_MAX, 0.0) >= t.launch_min_utilization


def _graphs_not_covering(v: View, t: Thresholds) -> bool:
    return v[s.GRAPHS_UNCOVERED] >= 1 and _launch_bound_steps(v, t)


def _graphs_severity(v: View, t: Thresholds) -> float:
    sm = sm_bound(v, t) or 0.0
    return ramp(t.graphs_sm_active_max - sm, 0.0, t.graphs_sm_active_max)


def _describe_graphs(v: View, t: Thresholds) -> str:
    if v.get(s.EAGER) == 1.0:
        why = "CUDA graphs off (enforce_eager)"
    else:
        why = f"median batch {v[s.BATCH_P50]:.0f} above the largest captured graph ({v[s.CUDA_GRAPH_MAX]:.0f})"
    pace = f"{v[s.ENGINE_STEPS_RATE]:.0f} steps/s" if s.ENGINE_STEPS_RATE in v else f'"GPU util" {pct(v.get(s.UTIL_MAX, 0.0))}'
    return f"decode runs eager: {why}, {pace} with SMs {pct(sm_bound(v, t) or 0.0)} busy"


def _chunks(v: View) -> float:
    return v[s.PROMPT_P90] / max(v[s.STEP_BUDGET], 1.0)


def _describe_chunks(v: View, t: Thresholds) -> str:
    return (
        f"{s.prompt_p90_text(v)} over a {v[s.STEP_BUDGET]:.0f}-token step budget: "
        f"{'at least ' if v.get(s.PROMPT_P90_FLOOR) == 1.0 else ''}{math.ceil(_chunks(v)):.0f} prefill steps "
        "before the first token"
    )


def _used_length(v: View, t: Thresholds) -> tuple[float, float, str] | None:
    """(tokens requests use, the factor "far above" needs, what the figure is): the length
    histograms' p99s, else the mean per finished request, else the most a busy slot held (llama.cpp);
    the two stand-ins need the stricter factor. None when nothing tells."""
    if s.LENGTH_P99 in v:
        return v[s.LENGTH_P99], t.reserved_over_p99_min, "p99 prompt + p99 output"
    if s.TOKENS_PER_REQUEST in v:
        return v[s.TOKENS_PER_REQUEST], t.reserved_over_mean_min, "mean prompt + output"
    if s.SLOT_HELD_MAX in v:
        return v[s.SLOT_HELD_MAX], t.reserved_over_mean_min, "the most a busy slot held"
    return None


def _capacity_nearly_used(v: View, t: Thresholds) -> bool:
    """The load is near (or past) the measured capacity at SLO, and the profile still describes the engine."""
    return v.get(cp.STALE) != 1.0 and v[cp.USED] >= t.capacity_nearly_used_ratio


def _capacity_shares(v: View, t: Thresholds, symptoms: frozenset[str]) -> dict[str, float]:
    """Past the measured knee (used >= 1) the load explains every load symptom; short of it, none."""
    return {sym: 1.0 for sym in symptoms} if v.get(cp.USED, 0.0) >= 1.0 else {}


def _describe_capacity(v: View, t: Thresholds) -> str:
    used = v[cp.USED]
    knee = f"knee {v[cp.CONCURRENCY]:.0f} concurrent" if cp.CONCURRENCY in v else "the measured knee"
    if cp.RPS in v:
        knee += f", {v[cp.RPS]:.3g} req/s"
    age = f"; profile {cp.age_text(v[cp.AGE])} old" if cp.AGE in v else ""
    if used >= 1.0:
        return f"load {100 * used:.0f} % of the measured capacity at SLO: past the measured knee ({knee}{age})"
    return f"load {100 * used:.0f} % of the measured capacity at SLO ({knee}{age})"


def _context_reserved(v: View, t: Thresholds) -> bool:
    """Capacity holds the queue (requests really wait, held for capacity: llama.cpp's slots all busy)
    while each sequence reserves far more context than requests use."""
    found = _used_length(v, t)
    if found is None:
        return False
    used, factor, _ = found
    if used <= 0 or v[s.RESERVED_CONTEXT] < factor * used:
        return False
    return _requests_really_wait(v, t) and held_for_capacity(v, t) and running_seen(v, t) >= 1


def _context_severity(v: View, t: Thresholds) -> float:
    used, factor, _ = _used_length(v, t) or (0.0, t.reserved_over_mean_min, "")
    return ramp(v[s.RESERVED_CONTEXT] / max(used, 1.0), factor, t.reserved_severe_factor * factor)


def _describe_context(v: View, t: Thresholds) -> str:
    used, _, what = _used_length(v, t) or (0.0, 0.0, "unknown")
    return f"each slot reserves {v[s.RESERVED_CONTEXT]:.0f} context tokens while requests use {used:.0f} ({what}), and requests wait for a slot"


# ------------------------------------------------------------------ the prefix cache (exporter/diagnosis/prefix_cache.py)


def _prefix_same_prompts(v: View, t: Thresholds) -> bool:
    """Both spans hold enough requests and their prompts are as long, within ``prefix_prompt_change_max``
    either way: the workload did not change, so a fall is the cache's. The prompts' own length
    (``llm_prompt_tokens_total`` per request) where the engine counts it: the tokens looked up per
    request fall with the lookups themselves in a span where caching was off part of the time; else
    the tokens looked up per request."""
    recent, earlier = v.get(pc.PROMPT_PER_REQUEST_RECENT), v.get(pc.PROMPT_PER_REQUEST_EARLIER)
    if recent is None or earlier is None:
        recent, earlier = v.get(pc.QUERIED_PER_REQUEST_RECENT), v.get(pc.QUERIED_PER_REQUEST_EARLIER)
    if recent is None or earlier is None or recent <= 0 or earlier <= 0:
        return False
    if min(v.get(pc.REQUESTS_RECENT, 0.0), v.get(pc.REQUESTS_EARLIER, 0.0)) < t.prefix_min_requests:
        return False
    return max(recent / earlier, earlier / recent) <= t.prefix_prompt_change_max


def _prefix_hit_drop(v: View, t: Thresholds) -> bool:
    """The hit ratio of the recent seconds fell below ``prefix_hit_drop_ratio`` of its own level before
    them, that level was at least ``prefix_hit_earlier_min``, and the prompts stayed the same."""
    earlier = v.get(pc.HIT_EARLIER)
    if earlier is None or earlier < t.prefix_hit_earlier_min:
        return False
    return v[pc.HIT_RECENT] < t.prefix_hit_drop_ratio * earlier and _prefix_same_prompts(v, t)


def _prefix_still_lost(v: View, t: Thresholds) -> bool:
    """Release line of a held drop: once the drop has left the window, the loss is still the cause of
    a TTFT over its SLO while the ratio stays below ``prefix_hit_drop_ratio`` x ``prefix_hit_earlier_min``
    (recent requests enough to tell); without it the verdict handed TTFT to whatever else held a
    window after the change, while prefill still redid every shared prefix."""
    if _prefix_hit_drop(v, t):
        return True
    enough = v.get(pc.REQUESTS_RECENT, 0.0) >= t.prefix_min_requests
    return enough and v[pc.HIT_RECENT] < t.prefix_hit_drop_ratio * t.prefix_hit_earlier_min and ttft_high(v, t)


def _prefix_severity(v: View, t: Thresholds) -> float:
    """How much of the level it held the ratio lost: 0 at the line (half), 1 when nothing hits."""
    earlier = max(v.get(pc.HIT_EARLIER, 0.0), t.prefix_hit_earlier_min)
    return ramp(1.0 - v[pc.HIT_RECENT] / earlier, 1.0 - t.prefix_hit_drop_ratio, 1.0)


def _tokens(x: float) -> str:
    """A prompt length as a person says it: two significant figures ("2,000" for 2,048; "640"), in
    integer arithmetic, so an engine's 1.7e308 still prints (a float round there overflowed)."""
    if not math.isfinite(x) or x < 100:
        return f"{x:,.0f}"
    scale = 10 ** (int(math.log10(x)) - 1)
    return f"{round(x / scale) * scale:,}"


def _describe_prefix(v: View, t: Thresholds) -> str:
    recent = v[pc.HIT_RECENT]
    prompts = v.get(pc.PROMPT_PER_REQUEST_RECENT, v.get(pc.QUERIED_PER_REQUEST_RECENT))
    size = f"~{_tokens(prompts)} tokens" if prompts is not None else "the same length"
    earlier = v.get(pc.HIT_EARLIER)
    if earlier is not None and v.get(pc.LOOKUPS_STOPPED) and _prefix_hit_drop(v, t):
        return (
            f"the engine stopped looking prompts up in its prefix cache (hits were {pct(earlier)} of prompt tokens) "
            f"while prompts stayed {size}: prefix caching is off, prefill redoes the shared prefix"
        )
    if earlier is not None and _prefix_hit_drop(v, t):
        return (
            f"prefix-cache hits fell from {pct(earlier)} to {pct(recent)} of prompt tokens while prompts stayed "
            f"{size}: prefill redoes the shared prefix"
        )
    return (
        f"prefix-cache hits still at {pct(recent)} of prompt tokens (prompts {size}) since they fell: prefill "
        "redoes the shared prefix"
    )


def with_backend(describe: Callable[[View, Thresholds], str]) -> Callable[[View, Thresholds], str]:
    """``describe`` followed by the attention backend the engine runs, where it is known: every
    operator and memory finding names the kernels it is about (issue 23)."""

    def described(v: View, t: Thresholds) -> str:
        text = describe(v, t)
        backend = s.attention_backend(v)
        return text if backend is None else f"{text} (attention backend {backend})"

    return described


RULES: tuple[Rule, ...] = (
    # ------------------------------------------------------------------ hardware
    Rule(
        "hardware",
        "compute_bound",
        "gpu",
        requires=(s.SM, s.TENSOR, s.DRAM),
        condition=_compute_bound,
        severity=_compute_severity,
        evidence=(s.TENSOR, s.SM, s.DRAM, s.UTIL),
        advice="The GPU's compute units are the limit (tensor pipes or SMs saturated). Expected for "
        "prefill-heavy work. To go faster: lower precision (FP8), a quantised or smaller model, more GPUs "
        "(tensor parallel), or prefix caching so shared prompts are not recomputed.",
        describe=_describe_compute,
        share=_compute_shares,
        # SMs count as compute only where HBM is not the limit (a streaming decode keeps warps resident too)
        proximity=lambda v, t: max(v[s.TENSOR], v[s.SM] if v[s.DRAM] < t.memory_bandwidth_dram_active else 0.0),
        limit="compute (tensor pipes / SMs)",
    ),
    Rule(
        "hardware",
        "memory_bandwidth_bound",
        "gpu",
        requires=(s.DRAM,),
        condition=lambda v, t: v[s.DRAM] >= t.memory_bandwidth_dram_active,
        severity=lambda v, t: ramp(v[s.DRAM], t.memory_bandwidth_dram_active, t.memory_bandwidth_dram_severe),
        evidence=(s.DRAM, s.SM, s.TENSOR, s.UTIL),
        advice="Decode streams weights and KV cache from HBM as fast as it goes. Raise the batch (more tokens "
        "per weight read), quantise weights or KV cache (FP8, INT4), prefer GQA/MLA models, or add GPUs.",
        describe=_describe_hbm,
        proximity=lambda v, t: v[s.DRAM],
        limit="HBM bandwidth",
    ),
    Rule(
        "hardware",
        "pcie_transfer_bound",
        "gpu",
        requires=(s.UTIL, s.SM, s.PCIE),
        # PCIe traffic with a parallel group's collective shape is communication_bound's, not copies
        condition=lambda v, t: (
            v[s.UTIL] >= t.busy_utilization
            and v[s.PCIE] >= t.pcie_busy_bytes_per_second
            and v[s.UTIL] - v[s.SM] >= t.util_sm_gap
            and not cm.collective_pcie(v, t)
        ),
        severity=lambda v, t: (
            (
                ramp(v[s.UTIL] - v[s.SM], t.util_sm_gap, 1.0)
                + ramp(v[s.PCIE], t.pcie_busy_bytes_per_second, t.pcie_busy_severe_factor * t.pcie_busy_bytes_per_second)
            )
            / 2
        ),
        evidence=(s.UTIL, s.SM, s.PCIE, *kt.EVIDENCE),
        advice='The GPU waits on host<->device copies over PCIe: "GPU util" is high while the SMs are idle. '
        "Look for KV-cache swap or CPU offload, weights streamed from host memory, unpinned host buffers or "
        "per-step tensor copies; keep data resident on the GPU, pin host memory, or give the KV cache more GPU memory.",
        describe=_describe_pcie,
    ),
    Rule(
        "hardware",
        "power_or_thermal_throttling",
        "gpu",
        requires=(s.UTIL, s.CLOCK_RATIO),
        condition=_throttled,
        severity=lambda v, t: ramp(1.0 - v[s.CLOCK_RATIO], 1.0 - t.throttle_clock_ratio, t.throttle_clock_loss_severe),
        evidence=(s.CLOCK_RATIO, s.CLOCK, s.POWER_RATIO, s.THROTTLED, *_THROTTLE_REASONS, s.TEMP, s.UTIL),
        advice="The SM clock is held below its maximum by the power cap or by heat (clocks-event reasons). "
        "Check cooling and the enforced power limit (nvidia-smi -q -d POWER,PERFORMANCE); at the cap, expect "
        "less throughput per GPU, or lower the power drawn per token (FP8, better batching).",
        describe=_describe_throttle,
        proximity=lambda v, t: v.get(s.POWER_RATIO, 0.0),
        limit="board power",
        warns_alone=lambda v, t: True,
        share=_throttle_shares,
    ),
    Rule(
        "hardware",
        "memory_capacity_exhausted",
        "gpu",
        requires=(s.MEM_RATIO,),
        condition=_framebuffer_exhausted,
        severity=lambda v, t: ramp(v[s.MEM_RATIO], t.memory_capacity_ratio, 1.0),
        evidence=(s.MEM_RATIO, s.MEM_USED, s.MEM_TOTAL),
        advice="GPU memory is (nearly) full: out-of-memory errors, allocator fragmentation and a starved KV cache "
        "follow. Lower gpu_memory_utilization, max_model_len or max_num_seqs, quantise weights or KV cache, "
        "or shard the model over more GPUs.",
        describe=_describe_fb,
        warns_alone=lambda v, t: True,
    ),
    # ------------------------------------------------------------------ operator
    Rule(
        "operator",
        "launch_bound_small_kernels",
        "gpu",
        requires=(s.UTIL, s.SM, s.PCIE),
        condition=lambda v, t: (
            v[s.UTIL] >= t.launch_min_utilization
            and _sms_far_below_util(v, t)
            and v[s.PCIE] < t.pcie_busy_bytes_per_second
            and not host_saturated(v, t)
        ),
        severity=lambda v, t: ramp(1.0 - v[s.SM] / max(v[s.UTIL], 1e-9), 1.0 - t.launch_sm_share_of_utilization, 1.0),
        evidence=(s.UTIL, s.SM, s.PCIE, s.BUSIEST_THREAD, s.BUSIEST_DEMAND),
        advice="Kernels are too small to fill the GPU and launches or host synchronisations between them "
        'dominate: "GPU util" counts time any kernel runs, SM active shows almost no SM busy. Enable CUDA '
        "graphs (vLLM: drop enforce_eager), torch.compile, fuse small ops, avoid per-step .item()/host syncs, "
        "and batch more work per launch.",
        describe=_describe_launch,
        proximity=lambda v, t: (
            ramp(1.0 - v[s.SM] / max(v[s.UTIL], 1e-9), 0.0, 1.0 - t.launch_sm_share_of_utilization)
            if v[s.UTIL] >= t.launch_min_utilization
            else 0.0
        ),
        limit='kernel launch rate (SMs idle while "GPU util" counts)',
    ),
    Rule(
        "operator",
        "tensor_cores_unused",
        "gpu",
        requires=(s.SM, s.TENSOR, s.DRAM),
        condition=lambda v, t: (
            v[s.SM] >= t.tensor_unused_sm_active
            and v[s.TENSOR] < t.tensor_unused_tensor_active
            and v[s.DRAM] < t.memory_bandwidth_dram_active
        ),
        severity=lambda v, t: ramp(v[s.SM], t.tensor_unused_sm_active, 1.0),
        evidence=(s.SM, s.TENSOR, s.DRAM),
        advice="SMs are busy but the tensor pipes are idle: the math runs on CUDA cores. Check the dtype "
        "(FP32 weights or activations instead of BF16/FP16/FP8), TF32 disabled, an attention backend or "
        "custom kernel without tensor-core support, or matrix shapes that are not multiples of 8/16.",
        describe=_describe_tensor_unused,
    ),
    Rule(
        "operator",
        "cuda_graphs_not_covering_batches",
        "service",
        requires=(s.GRAPHS_UNCOVERED,),
        requires_any=(s.SM_MAX, s.UTIL_MAX),
        condition=_graphs_not_covering,
        severity=_graphs_severity,
        evidence=(s.EAGER, s.CUDA_GRAPH_MAX, s.BATCH_P50, s.ENGINE_STEPS_RATE, s.SM_MAX, s.UTIL_MAX, s.RUNNING),
        advice="The decode runs eager, paying a kernel launch per op and step: CUDA graphs are off or most steps "
        "run at batch sizes above the largest captured graph. Turn graphs on (vLLM: drop --enforce-eager; "
        "SGLang: drop --disable-cuda-graph; TGI: --cuda-graphs with sizes), or capture larger batches (vLLM "
        "--max-cudagraph-capture-size / --cudagraph-capture-sizes, SGLang --cuda-graph-max-bs) up to the batch "
        "sizes that run (llm_scheduler_batch_size). Each captured size costs GPU memory taken from the KV cache.",
        describe=_describe_graphs,
        proximity=lambda v, t: 1.0 if v[s.GRAPHS_UNCOVERED] >= 1 else 0.0,
        limit="kernel launches per decode step",
    ),
    Rule(
        "operator",
        "prefill_chunk_too_small",
        "service",
        requires=(s.PROMPT_P90, s.STEP_BUDGET),
        condition=lambda v, t: _chunks(v) >= t.prefill_chunks_min,
        severity=lambda v, t: ramp(_chunks(v), t.prefill_chunks_min, t.prefill_chunks_severe_factor * t.prefill_chunks_min),
        evidence=(s.PROMPT_P90, s.STEP_BUDGET, s.TTFT_P95_RECENT, s.TTFT_P95, s.ITL_P95),
        advice="Prompts are several times the engine's per-step token budget, so each is prefilled over many "
        "steps and TTFT is a count of chunks. Raise the budget (vLLM --max-num-batched-tokens, SGLang "
        "--chunked-prefill-size, TGI --max-batch-prefill-tokens, trtllm-serve --max_num_tokens, llama.cpp -b) "
        "toward the prompt p90. The trade-off: a larger chunk makes the decode steps it shares longer, so the "
        "running requests' ITL rises while a long prompt prefills; keep it where the ITL SLO still holds.",
        describe=_describe_chunks,
        proximity=lambda v, t: min(1.0, _chunks(v) / t.prefill_chunks_min),
        limit="the per-step token budget",
    ),
    # ------------------------------------------------------------------ memory (KV cache)
    Rule(
        "memory",
        "kv_cache_pressure",
        "service",
        requires=(),
        requires_any=(s.KV_USAGE_MAX, s.SLOT_CONTEXT_USAGE),
        condition=_kv_full,
        severity=_kv_severity,
        evidence=(
            s.KV_USAGE_MAX,
            s.KV_USAGE,
            s.SLOT_CONTEXT_USAGE,
            s.PREEMPTION_RATE,
            s.PREEMPTIONS,
            s.WAITING,
            s.WAITING_CAPACITY,
            s.RUNNING,
            s.QUEUE_P95_RECENT,
            *kt.EVIDENCE,
        ),
        advice="The KV cache is full and requests are preempted (evicted, then recomputed), wasting GPU work "
        "and spiking latency. Lower max_num_seqs or max_num_batched_tokens, give the KV cache more memory "
        "(gpu_memory_utilization, FP8 KV cache), shorten max_model_len, enable prefix caching, or add replicas.",
        describe=_describe_kv_full,
        proximity=lambda v, t: kv_usage(v) or 0.0,
        limit="KV cache",
        warns_alone=preempting,
        share=_kv_shares,
    ),
    Rule(
        "memory",
        "kv_fragmentation_or_capacity_misjudged",
        "service",
        requires=(s.WAITING,),
        requires_any=(s.KV_USAGE_MAX, s.SLOT_CONTEXT_USAGE),
        condition=_kv_fragmentation,
        severity=_kv_fragmentation_severity,
        evidence=(
            s.WAITING,
            s.WAITING_MAX,
            s.WAITING_MAX_QUEUE,
            s.WAITING_MAX_WINDOW,
            s.WAITING_CAPACITY,
            s.WAITING_CAPACITY_MAX_QUEUE,
            s.WAITING_CAPACITY_MAX_WINDOW,
            s.QUEUE_P95_RECENT,
            s.QUEUE_P95,
            s.KV_USAGE_MAX,
            s.KV_USAGE,
            s.SLOT_CONTEXT_USAGE,
            s.SLOTS,
            s.SLOTS_BUSY,
            s.KV_CAPACITY,
            s.KV_BLOCK,
            s.TOKENS_PER_REQUEST,
            s.RUNNING,
            s.RUNNING_MAX,
            s.UTIL_MAX,
            s.TENSOR_MAX,
            s.SM_MAX,
            s.DRAM_MAX,
        ),
        advice="Requests queue although most of the KV cache is free: the scheduler believes it has no room. "
        "Check the block size and fragmentation, max_num_seqs (batch slots full while memory is free), a KV "
        "budget reserved for max_model_len instead of real lengths, or an admission watermark set too high.",
        describe=_describe_kv_misjudged,
        proximity=lambda v, t: min(1.0, v[s.SLOTS_BUSY] / v[s.SLOTS]) if v.get(s.SLOTS) and s.SLOTS_BUSY in v else 0.0,
        limit="sequence slots",
    ),
    Rule(
        "memory",
        "context_reserved_not_used",
        "service",
        requires=(s.RESERVED_CONTEXT, s.WAITING),
        requires_any=(s.LENGTH_P99, s.TOKENS_PER_REQUEST, s.SLOT_HELD_MAX),
        condition=_context_reserved,
        severity=_context_severity,
        evidence=(
            s.RESERVED_CONTEXT,
            s.LENGTH_P99,
            s.TOKENS_PER_REQUEST,
            s.SLOT_HELD_MAX,
            s.SLOTS,
            s.SLOTS_BUSY,
            s.SLOT_CONTEXT_USAGE,
            s.WAITING,
            s.QUEUE_P95_RECENT,
        ),
        advice="The engine reserves KV memory per sequence for the configured maximum context, far above what "
        "requests use, so capacity runs out in slots while most of the reserved context stays empty. Serve "
        "more sequences in the same memory: llama.cpp raise -np keeping -c (each slot gets -c / -np), or lower "
        "-c per slot toward the p99 of prompt + output; engines that reserve by max length: lower max_model_len "
        "(vLLM --max-model-len, trtllm-serve --max_seq_len) toward that p99, leaving headroom for the longest requests.",
        describe=_describe_context,
        proximity=lambda v, t: min(1.0, v[s.SLOTS_BUSY] / v[s.SLOTS]) if v.get(s.SLOTS) and s.SLOTS_BUSY in v else 0.0,
        limit="context reserved per sequence",
    ),
    Rule(
        "memory",
        "prefix_cache_hit_drop",
        "service",
        requires=(pc.HIT_RECENT,),
        condition=_prefix_hit_drop,
        sustain=_prefix_still_lost,
        severity=_prefix_severity,
        evidence=(
            pc.HIT_RECENT,
            pc.HIT_EARLIER,
            pc.QUERIED_PER_REQUEST_RECENT,
            pc.QUERIED_PER_REQUEST_EARLIER,
            pc.REQUESTS_RECENT,
            pc.REQUESTS_EARLIER,
            pc.LOOKUPS_STOPPED,
            pc.PROMPT_PER_REQUEST_RECENT,
            pc.PROMPT_PER_REQUEST_EARLIER,
            s.TTFT_P95_RECENT,
            s.KV_USAGE_MAX,
        ),
        advice="The prefix cache stopped finding the prompts' shared prefix while the prompts stayed the same, "
        "so prefill recomputes it for every request and the time to first token rises. Check that prefix "
        "caching is still enabled on the engine after the last deployment (llm_engine_config_info{prefix_caching}; "
        "vLLM: --enable-prefix-caching, on by default; SGLang: no --disable-radix-cache); that the router still "
        "sends a session or conversation to the same replica (session affinity, prefix-aware routing); and whether "
        "the system prompt or a template changed so prompts no longer share their beginning (a timestamp, request "
        "id or per-user text at the start, a per-request cache salt). A KV "
        "cache too small to keep the prefix evicts it as well: the memory layer's kv_cache_pressure says so.",
        describe=_describe_prefix,
        # a fresh fall is waste on its own (prefill redone for every request): a warning while nobody suffers
        warns_alone=_prefix_hit_drop,
    ),
    # ------------------------------------------------------------------ scheduler
    Rule(
        "scheduler",
        "serial_host_ceiling",
        "service",
        requires=(s.BUSIEST_THREAD,),
        requires_any=(s.SM_MAX, s.UTIL_MAX),
        condition=_serial_host,
        sustain=_serial_host_sustained,
        severity=_serial_host_severity,
        evidence=(
            s.BUSIEST_THREAD,
            s.BUSIEST_DEMAND,
            s.SM_MAX,
            s.UTIL_MAX,
            s.WAITING,
            s.RUNNING,
            s.UTIL_MAX_WINDOW,
            s.PROCESS_CPU,
        ),
        advice="One thread of the serving process is at a full core while the GPU's SMs are mostly idle: the "
        "serial host loop (Python scheduling, sampling, kernel launches) is the ceiling and a faster GPU will "
        "not help. Enable CUDA graphs, use an engine with an overlapped/async scheduler (vLLM V1, SGLang), "
        "batch more requests per step, or run more replicas (data parallel) on the same GPU. If the thread's CPU "
        "demand is near a core but its CPU is not, it is starved: give the server dedicated cores or a higher CPU limit.",
        describe=_describe_host,
        proximity=lambda v, t: min(1.0, host_load(v)),
        limit="the busiest serving thread",
    ),
    Rule(
        "scheduler",
        "queue_backlog",
        "service",
        requires=(s.WAITING,),
        condition=lambda v, t: v[s.WAITING] >= t.queue_backlog_requests or queueing(v, t),
        severity=lambda v, t: max(
            ramp(v[s.WAITING], t.queue_backlog_requests, t.queue_backlog_severe_factor * t.queue_backlog_requests),
            ramp(v.get(s.WAITING_GROWTH, 0.0), 0.0, t.queue_growth_severe_per_second),
        ),
        evidence=(s.WAITING, s.WAITING_GROWTH, s.RUNNING, s.QUEUE_P95),
        advice="Requests pile up faster than the server finishes them: the offered load exceeds capacity. "
        "Add replicas or GPUs, cap concurrency at the gateway, lower max_tokens, and check the other layers "
        "for what limits throughput.",
        describe=_describe_backlog,
        proximity=lambda v, t: min(1.0, v[s.WAITING] / t.queue_backlog_requests),
        limit="the request queue",
    ),
    # ------------------------------------------------------------------ parallel
    Rule(
        "parallel",
        "gpu_imbalance",
        "group",
        requires=(s.GROUP_SKEW, s.GROUP_SM_MEAN, s.GROUP_GPUS),
        condition=_imbalance,
        severity=lambda v, t: ramp(v[s.GROUP_SKEW], t.imbalance_skew, t.imbalance_skew + t.imbalance_skew_severe_excess),
        evidence=(s.GROUP_SKEW, s.GROUP_SM_MEAN, s.GROUP_SM_MAX, s.GROUP_GPUS),
        advice="One GPU of the group works much harder than the others (max over mean SM active), so every "
        "tensor/pipeline-parallel step waits for it. Check uneven pipeline stages, MoE expert load skew (hot "
        "experts), data-parallel routing, or another process sharing that GPU.",
        describe=_describe_imbalance,
    ),
    Rule(
        "parallel",
        "communication_bound",
        "group",
        requires=(s.GROUP_GPUS, s.GROUP_SM_MEAN),
        requires_any=(cm.USE, cm.COMM_SHARE),
        condition=cm.communication_bound,
        severity=_communication_severity,
        evidence=cm.EVIDENCE,
        advice="The GPUs of the group wait on each other: their collectives (the all-reduces of tensor "
        "parallelism) run near the link's capacity, or take much of each step, while the SMs idle. Use fewer "
        "tensor-parallel ranks and more data-parallel replicas where the model fits (TP 2 x DP 2 instead of "
        "TP 4), pipeline parallelism across GPUs without NVLink, or a faster interconnect (NVLink, GPUs on "
        "one PCIe switch with peer-to-peer on). Check NCCL: NCCL_DEBUG=INFO shows the transport (P2P, SHM "
        "or NET) and NCCL_P2P_DISABLE must not be set; a PCIe link trained below its maximum generation "
        "or width (llm_gpu_pcie_link_generation / _width against their max) carries less (x8 of x16: half).",
        describe=_describe_communication,
    ),
    # ------------------------------------------------------------------ speculative decoding
    Rule(
        "speculative_decoding",
        "low_acceptance",
        "service",
        requires=(s.SPEC_DRAFT,),
        condition=_low_acceptance,
        severity=_spec_severity,
        evidence=(s.SPEC_ACCEPTANCE, s.SPEC_DRAFT, *dc.EVIDENCE),
        advice="Most draft tokens are rejected, so speculative decoding spends GPU time on drafts that are "
        "thrown away. Propose fewer speculative tokens, use a draft closer to the target (same family, EAGLE "
        "heads trained for it), keep n-gram drafting for repetitive text, or turn it off for this traffic. "
        "Once tokens per target step fall below 1 + the draft's cost, speculation makes decoding slower "
        "than none: turn it off.",
        describe=_describe_spec,
        warns_alone=lambda v, t: True,
    ),
    # ------------------------------------------------------------------ application
    Rule(
        "application",
        "batching_window_too_large",
        "service",
        requires=(s.TTFT_P95, s.SM_MAX),
        condition=_batching_window,
        severity=lambda v, t: ramp(
            recent_p95(v, s.TTFT_P95_RECENT, s.TTFT_P95),
            t.batching_ttft_p95_seconds,
            t.latency_severe_factor * t.batching_ttft_p95_seconds,
        ),
        evidence=(
            s.TTFT_P95_RECENT,
            s.TTFT_P95,
            s.QUEUE_P95_RECENT,
            s.SM_MAX,
            s.UTIL_MAX,
            s.UTIL_MAX_RECENT,
            s.UTIL_MAX_TTFT,
            s.WAITING,
            s.WAITING_MAX_TTFT,
            s.KV_USAGE_MAX,
        ),
        advice="Time to first token is high while the GPU idles and nothing piles up: requests are held back "
        "waiting for a batch to fill. Shorten the batching delay (Triton max_queue_delay_microseconds, TGI "
        "waiting_served_ratio / max_waiting_tokens, a gateway batch window) and let continuous batching "
        "admit requests at once.",
        describe=_describe_batching,
    ),
    Rule(
        "application",
        "retries_and_timeouts",
        "service",
        requires=(s.FAILED_BASE,),
        condition=_failures,
        severity=lambda v, t: ramp(v.get(s.FAILED_SHARE, 0.0), t.failure_share, t.failure_share_severe),
        evidence=(s.FAILED_SHARE, s.FAILED_RATE, s.REJECTED_RATE, s.FINISHED_RATE, s.WAITING),
        advice="A notable share of requests time out, abort, fail or are rejected, and clients retry, adding "
        "load. Find what is slow in the other layers, set client timeouts above the p99 latency, retry with "
        "back-off and jitter, and cap the queue so requests fail fast instead of timing out.",
        describe=_describe_failures,
        warns_alone=lambda v, t: True,
    ),
    Rule(
        "application",
        "slo_breach",
        "service",
        requires=(),
        requires_any=(s.TTFT_P95, s.ITL_P95),
        condition=lambda v, t: ttft_high(v, t) or itl_high(v, t),
        severity=_slo_severity,
        evidence=(s.TTFT_P95, s.ITL_P95),
        advice="Latency percentiles exceed the configured SLOs (diagnosis.slo_ttft_p95_seconds, "
        "slo_itl_p95_seconds). This is the symptom; the other layers' causes say why. TTFT: queueing and "
        "prefill (scheduler, memory, compute). ITL: decode step time (memory bandwidth, batch size, host overhead).",
        describe=_describe_slo,
        proximity=_slo_proximity,
        limit="the latency SLO",
    ),
    # ------------------------------------------------------------------ application: the canary probe
    Rule(
        "application",
        "front_end_overhead",
        "service",
        requires=(pr.PROBE_OUTSIDE, pr.PROBE_ENGINE_TTFT),
        condition=_front_end_overhead,
        severity=lambda v, t: ramp(
            v[pr.PROBE_OUTSIDE], t.front_end_overhead_seconds, t.latency_severe_factor * t.front_end_overhead_seconds
        ),
        evidence=(
            pr.PROBE_CLIENT_TTFT,
            pr.PROBE_ENGINE_TTFT,
            pr.PROBE_OUTSIDE,
            pr.PROBE_TTFT,
            s.BUSIEST_THREAD,
            s.BUSIEST_DEMAND,
            s.PROCESS_CPU,
        ),
        advice="Clients wait much longer for their first token than the engine says it took: the time is spent "
        "in front of the engine's scheduler. Look at what sits between clients and the engine: a gateway, proxy "
        "or load balancer (its own queue, response buffering, TLS, auth, retries), the network, and the engine's "
        "own API-server process (HTTP parsing, chat templates, tokenisation). If the serving process's busiest "
        "thread is at a full core, the API server is the ceiling: run more API-server processes (vLLM "
        "--api-server-count), replicas, or move tokenisation off that thread; with the GPU idle as well the "
        "scheduler layer's serial_host_ceiling names it. Compare llm_probe_ttft_seconds with "
        "llm_request_ttft_seconds on the Application dashboard.",
        describe=_describe_front_end,
    ),
    Rule(
        "application",
        "engine_unresponsive",
        "service",
        requires=(pr.PROBE_HUNG,),
        condition=lambda v, t: v[pr.PROBE_HUNG] >= 1,
        severity=lambda v, t: 1.0,  # an outage, not a slowdown
        evidence=(pr.PROBE_HUNG, pr.PROBE_FAILING, s.WAITING, s.RUNNING),
        advice="The engine accepts requests but answers none, while its /metrics still answers with counters "
        "that do not move: the engine core is hung (a deadlock, a stuck collective or NCCL call, a GPU fault, "
        "a stopped process). Before restarting, collect: py-spy dump --pid <engine core pid> (vLLM: the "
        "EngineCore process, not the API server; py-spy dump --native for a stuck CUDA call), nvidia-smi (and "
        "nvidia-smi -q -d PERFORMANCE, Xid lines in dmesg), and the last log lines of the engine. Then restart "
        "the engine and file the dump with the engine's project.",
        describe=_describe_unresponsive,
        warns_alone=lambda v, t: True,  # an outage is news even when no other symptom can be judged
    ),
    # ------------------------------------------------------------------ application: the capacity profile
    Rule(
        "application",
        "capacity_nearly_used",
        "service",
        requires=(cp.USED,),
        condition=_capacity_nearly_used,
        severity=lambda v, t: ramp(v[cp.USED], t.capacity_nearly_used_ratio, 1.0),
        evidence=(cp.USED, cp.CONCURRENCY, cp.RPS, cp.RECOMMENDED, s.RUNNING, s.WAITING, s.FINISHED_RATE, cp.AGE, cp.STALE),
        advice="The engine carries nearly as much as its capacity profile measured it can within the SLO (tune or "
        "ramp, --capacity-profile), or more: past that knee latency climbs and requests queue. Add a replica "
        "before the SLO breaks, or cap concurrency at the gateway at llm_capacity_recommended_max_concurrency. "
        "If the workload drifted (llm_capacity_workload_drift_ratio far from 1) or the profile is old, re-measure.",
        describe=_describe_capacity,
        proximity=lambda v, t: min(1.0, v[cp.USED]),
        limit="the measured capacity at SLO",
        warns_alone=lambda v, t: True,  # nobody suffers yet: that is the point of the warning
        share=_capacity_shares,
    ),
)

#: operator and memory findings name the attention backend in their link of the chain
RULES = tuple(
    replace(r, describe=with_backend(r.describe)) if r.layer in ("operator", "memory") and r.describe is not None else r
    for r in RULES
)

#: every cause id by layer, in table order (a contract with dashboards and alerts)
CAUSES: dict[str, tuple[str, ...]] = {layer: tuple(r.cause for r in RULES if r.layer == layer) for layer in LAYERS}


def _check_table() -> None:
    """Guards edits: known layers and scopes, unique cause ids, every layer covered."""
    seen: set[str] = set()
    for r in RULES:
        if r.layer not in LAYERS:
            raise RuntimeError(f"rule {r.cause}: unknown layer {r.layer}")
        if r.scope not in s.SCOPES:
            raise RuntimeError(f"rule {r.cause}: unknown scope {r.scope}")
        if r.cause in seen:
            raise RuntimeError(f"duplicate cause id {r.cause}")
        seen.add(r.cause)
    missing = [layer for layer, causes in CAUSES.items() if not causes]
    if missing:
        raise RuntimeError(f"layers without a rule: {missing}")
    undescribed = [r.cause for r in RULES if r.describe is None]
    if undescribed:
        raise RuntimeError(f"rules without a describe (their link of the chain): {undescribed}")
    causality.check(seen)


_check_table()
