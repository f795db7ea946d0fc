"""Which cause can explain which symptom, and which cause comes first: data beside the rules table.

Why a declared map: "the KV cache is full" explains queueing and a high TTFT;
"HBM is saturated" explains a slow decode (ITL) but not a queue. Writing that
down per cause, instead of ranking by raw scores, is what turns a list of
crossed thresholds into one diagnosis: the primary is the holding cause that
explains the most of what users feel. docs/diagnosis.md is checked against it.

* ``EXPLAINS``: cause id -> the symptom ids (``symptoms.py``) it can produce.
* ``CAUSAL_ORDER``: the last tie-break of the ranking (``ranking.py``: how much
  of the symptoms a cause explains with its own evidence, its severity and how
  long it held come first). When all of those tie, the one earlier here wins: it sits further upstream (a full KV
  cache causes the queue, not the other way round; a throttled clock makes the
  GPU look compute-bound, not the reverse). Causes that starve the GPU from
  outside its math (a host thread at a core, PCIe copies, launch overhead) come
  before the KV cache: they stretch every step, so requests hold their blocks
  longer and a full cache is their consequence. The generic "the GPU runs as
  fast as it can" causes come last: they are true of any busy server and only
  win when nothing more specific holds.
* ``REFINES``: a specific cause -> the generic one whose reason it names (a
  context reserved far above use is why requests wait with the KV cache free).
  When both hold, the generic explains only what the specific does not, so the
  cause whose knob fixes it is the primary.
* ``SYMPTOM_CAUSES``: the two ids that name a symptom, not a cause
  (``queue_backlog``, ``slo_breach``). They are the primary only when no cause
  explains the symptoms, and then the advice says so (capacity: add replicas).

Which causes are waste or danger even while users feel nothing (recompute from
preemptions, a throttled clock, a nearly full framebuffer, rejected drafts,
failures) is a column of the rules table (``Rule.warns_alone``): a warning in a
healthy service, never silence.
"""

from __future__ import annotations

from collections.abc import Mapping

from exporter.diagnosis.notices import Missing, missing_inputs
from exporter.diagnosis.symptoms import SYMPTOM_IDS
from exporter.diagnosis.thresholds import Thresholds

TTFT, ITL, QUEUE, SATURATED, FAILURES = "ttft_high", "itl_high", "queueing", "throughput_saturated", "failures"
_ALL_LOAD = frozenset({TTFT, ITL, QUEUE, SATURATED})

EXPLAINS: dict[str, frozenset[str]] = {
    # hardware
    "compute_bound": frozenset({TTFT, QUEUE, SATURATED}),
    "memory_bandwidth_bound": frozenset({ITL}),
    "pcie_transfer_bound": _ALL_LOAD,
    "power_or_thermal_throttling": _ALL_LOAD,
    "memory_capacity_exhausted": frozenset({QUEUE, TTFT, SATURATED, FAILURES}),
    # operator
    "launch_bound_small_kernels": frozenset({ITL, SATURATED, QUEUE}),
    "tensor_cores_unused": frozenset({TTFT, ITL, SATURATED}),
    # an eager decode pays launches every step (ITL); a prompt prefilled over many steps delays its first token
    "cuda_graphs_not_covering_batches": frozenset({ITL, SATURATED, QUEUE}),
    "prefill_chunk_too_small": frozenset({TTFT}),
    # memory: a full KV cache holds requests back (queue, TTFT) and recomputes preempted ones (ITL)
    "kv_cache_pressure": _ALL_LOAD,
    "kv_fragmentation_or_capacity_misjudged": frozenset({QUEUE, TTFT, SATURATED}),
    # context reserved per slot far above use: slots, not memory, run out, and requests queue
    "context_reserved_not_used": frozenset({QUEUE, TTFT, SATURATED}),
    # the prefix cache stopped finding the shared prefix (exporter/diagnosis/prefix_cache.py): prefill
    # recomputes it for every request, and the first token comes later
    "prefix_cache_hit_drop": frozenset({TTFT}),
    # scheduler: one host thread at a core caps every step
    "serial_host_ceiling": _ALL_LOAD,
    "queue_backlog": frozenset({QUEUE, SATURATED, TTFT}),
    # parallel: every step waits for the slowest GPU, so the group serves less than it could
    "gpu_imbalance": _ALL_LOAD,
    # every step, prefill and decode, all-reduces twice per layer: a link at its capacity stretches each
    # decode step (ITL) and caps the steps per second (saturation, and the queue behind it); a prefill
    # all-reduces tokens x hidden per layer, more than a decode step, so the first token waits too (TTFT)
    "communication_bound": _ALL_LOAD,
    # speculative decoding: rejected drafts cost decode time, and the wasted work lowers throughput;
    # the drafts are verified in the same steps as prefill, so under load they take compute prefill
    # needs too (TTFT): a GPU kept busy by thrown-away tokens is not the limit, the drafts are
    "low_acceptance": frozenset({TTFT, ITL, QUEUE, SATURATED}),
    # application
    "batching_window_too_large": frozenset({TTFT, QUEUE}),
    "retries_and_timeouts": frozenset({FAILURES}),
    "slo_breach": frozenset({TTFT, ITL}),
    # application, the canary probe (exporter/diagnosis/probe.py): time in front of the engine delays
    # the first token only; a hung engine is an outage behind every symptom at once
    "front_end_overhead": frozenset({TTFT}),
    "engine_unresponsive": _ALL_LOAD | {FAILURES},
    # application, the capacity profile (exporter/capacity): load past the measured knee is what
    # slows every request down, queued or decoding (rules.py _capacity_shares: only past it)
    "capacity_nearly_used": _ALL_LOAD,
}

CAUSAL_ORDER: tuple[str, ...] = (
    # an outage outranks every slowdown (and OUTAGE_CAUSES makes it the primary whenever it holds)
    "engine_unresponsive",
    # load past the measured capacity at SLO: every layer at its limit is its consequence
    # (OVERLOAD_CAUSES makes it the primary whenever it explains a symptom)
    "capacity_nearly_used",
    "memory_capacity_exhausted",
    # the GPU starved by something outside its math: every step takes longer, so requests
    # hold their KV blocks longer and the cache fills as a consequence
    "serial_host_ceiling",
    # clients wait in front of the engine: after the host thread (an API server at a full core with
    # the GPU idle is that thread), before any cause inside the engine, whose TTFT is fine then
    "front_end_overhead",
    "pcie_transfer_bound",
    # the SMs wait on the group's links, as on a host copy: outside the math, before the KV cache it fills
    "communication_bound",
    # graphs off or too small name why the kernels are launch-bound: before the generic launch cause
    "cuda_graphs_not_covering_batches",
    "launch_bound_small_kernels",
    # the KV cache: the admission limit when the GPU itself is busy; a context reserved far above
    # use says why slots run out with the cache free, before the generic misjudgment
    "context_reserved_not_used",
    "kv_fragmentation_or_capacity_misjudged",
    "kv_cache_pressure",
    # the prefix cache lost the shared prefix: after a full KV cache (which evicts it), before the
    # prefill and compute causes it produces (the GPU redoes work it used to skip)
    "prefix_cache_hit_drop",
    # a prompt prefilled over many steps: TTFT only, after what holds requests back
    "prefill_chunk_too_small",
    "batching_window_too_large",
    # work wasted or unevenly spread: fix it and the GPU does less for the same tokens
    "gpu_imbalance",
    "low_acceptance",
    "tensor_cores_unused",
    # a GPU at its power cap under heavy load: real, but downstream of how much work it is given
    "power_or_thermal_throttling",
    "compute_bound",
    "memory_bandwidth_bound",
    "queue_backlog",
    # timeouts, aborts and rejections are what a backed-up queue does to its clients: with a queue
    # and nothing else at its limit, the queue (capacity) is the story and the failures follow it
    "retries_and_timeouts",
    "slo_breach",
)

SYMPTOM_CAUSES: frozenset[str] = frozenset({"queue_backlog", "slo_breach"})

#: specific cause -> the generic cause it names the reason for. The generic rule sees the effect (requests
#: wait with the KV cache free; small kernels bound by launches), the specific one also sees why (each
#: sequence reserves a context far above use; graphs are off or too small). When both hold, the generic
#: explains only the symptoms its refinement does not (``ranking.score``), so the cause with a knob that
#: fixes it is the primary, whichever of the two is more severe: its severity measures a different thing
#: (how far past the reserved-context line) and held-for cycles start later by construction.
REFINES: dict[str, str] = {
    "context_reserved_not_used": "kv_fragmentation_or_capacity_misjudged",
    "cuda_graphs_not_covering_batches": "launch_bound_small_kernels",
    # one GPU of a group saturated while the others idle: the skew is why that GPU is at its compute
    # limit (rebalanced, the idle ranks take its share); ranked on severity, the hot GPU's 90 % SMs
    # took the primary from its own imbalance (the simulator's tp_imbalance on a starved host)
    "gpu_imbalance": "compute_bound",
}

#: consequence -> the symptom-cause it follows: clients time out, abort and are turned away (429) because
#: the queue in front of them is long (CAUSAL_ORDER's reason). While the leader holds, the follower is not
#: the primary, whatever the severities: ranked on severity, a queue that dipped under its line for a cycle
#: handed the primary to its own timeouts, and hysteresis kept it there; and where a layer's cause explains
#: the queue (a power cap, slots full with memory free), the queue leaves the ranking to it, and the
#: timeouts, explaining the failures at full share, outranked the cause of their queue (both found on the
#: simulator's queue_backlog beside busy loops). The primary is then the queue's cause, or the queue.
FOLLOWS: dict[str, str] = {"retries_and_timeouts": "queue_backlog"}

#: outages: when one holds and explains a symptom it is the primary, whatever else holds (a hung
#: engine's frozen gauges can keep a full KV cache or a queue "holding" that are not the story)
OUTAGE_CAUSES: frozenset[str] = frozenset({"engine_unresponsive"})
#: load past the measured knee: when it explains a symptom (only past the knee, with a profile that
#: is not stale) it is the primary over the causes that load alone produces (LOAD_CONSEQUENCES)
OVERLOAD_CAUSES: frozenset[str] = frozenset({"capacity_nearly_used"})
#: what more load than the measured knee does by itself to a correctly set-up engine: the KV cache
#: fills, the GPU's math or memory bandwidth saturate, the queue grows and clients give up. Where
#: another cause holds beside the overload (a lowered clock, a host thread at a core, a link, a
#: misjudged admission...) the measured knee no longer describes the engine, so capacity is not the
#: primary (issue 32: the capacity override was triggered by its own symptom and hid the cause)
LOAD_CONSEQUENCES: frozenset[str] = frozenset(
    {"kv_cache_pressure", "compute_bound", "memory_bandwidth_bound", "retries_and_timeouts"} | SYMPTOM_CAUSES
)

#: what a symptom-only primary tells the user to do
CAPACITY_ADVICE = (
    "No layer explains it: every layer has headroom, the service simply gets more load than it "
    "serves. Capacity: add replicas or GPUs, or cap concurrency at the gateway."
)


def _blockers(view: Mapping[str, float], explained: frozenset[str], t: Thresholds) -> list[Missing]:
    """The missing inputs behind which a cause could explain ``explained``: while any is missing, a
    symptom-only primary is no capacity verdict."""
    return [m for m in missing_inputs(view, t) if any(EXPLAINS.get(c, frozenset()) & explained for c in m.causes)]


def symptom_advice(advice: str, view: Mapping[str, float], explained: frozenset[str], t: Thresholds) -> str:
    """The advice of a symptom-only primary (queue_backlog, slo_breach). "Capacity: add replicas" only
    when every cause that could explain ``explained`` was judged; while an input is missing behind
    which one could (``notices.missing_inputs``), what to enable instead."""
    blockers = _blockers(view, explained, t)
    if not blockers:
        return CAPACITY_ADVICE + " " + advice
    what = ", ".join(m.what for m in blockers)
    causes = sorted({c for m in blockers for c in m.causes if EXPLAINS.get(c, frozenset()) & explained})
    enable = "; ".join(m.enable for m in blockers)
    return (
        f"Not a capacity verdict yet: {what} missing, so {', '.join(causes)} could explain these symptoms and "
        f"were not judged. Enable {enable}, then read the verdict again; more replicas may not help until then."
    )


#: the last link of a symptom-only primary's chain when every cause that could explain it was judged
NO_LAYER_LINK = "no layer at its limit: more load arrives than the service serves"


def symptom_link(view: Mapping[str, float], explained: frozenset[str], t: Thresholds) -> str:
    """What stands behind a symptom-only primary, as the chain's last link: no layer at its limit, or
    which inputs are missing behind which a cause could be (the same test as ``symptom_advice``)."""
    blockers = _blockers(view, explained, t)
    if not blockers:
        return NO_LAYER_LINK
    return f"not judged: {', '.join(m.what for m in blockers)} missing"


def causal_rank(cause: str) -> int:
    return CAUSAL_ORDER.index(cause) if cause in CAUSAL_ORDER else len(CAUSAL_ORDER)


def check(cause_ids: set[str]) -> None:
    """Guards edits: every cause has an explains entry and a rank, every symptom id is known."""
    missing = cause_ids - set(EXPLAINS)
    extra = set(EXPLAINS) - cause_ids
    unranked = cause_ids - set(CAUSAL_ORDER)
    if missing or extra or unranked:
        raise RuntimeError(f"causality table out of step with rules: missing {missing}, extra {extra}, unranked {unranked}")
    loose = {c for pair in REFINES.items() for c in pair} - cause_ids
    if loose:
        raise RuntimeError(f"REFINES names unknown causes {loose}")
    for cause, syms in EXPLAINS.items():
        unknown = set(syms) - set(SYMPTOM_IDS)
        if unknown:
            raise RuntimeError(f"{cause} explains unknown symptoms {unknown}")
