"""Why a layer is unknown, said in words: the verdict's ``notices``.

Why: "unknown" without a reason sends the user hunting. A verdict with every
layer unknown must say what is missing (no engine reachable, no GPU source)
instead of reassuring anyone; a partial one says which inputs would complete it.
``missing_inputs`` names each missing input with the causes it leaves unjudged
and what to enable: the ranking lowers the confidence of a verdict that could
not look there, and a "capacity: add replicas" verdict is not given while such
a cause could explain the symptoms (``causality.symptom_advice``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from exporter.diagnosis import signals as sig
from exporter.diagnosis.backends import long_context_notices
from exporter.diagnosis.communication import pipeline_notice
from exporter.diagnosis.thresholds import Thresholds
from exporter.store import Snapshot

View = Mapping[str, float]

#: causes judged from SM activity (DCGM profiling or NVML GPM)
_SM_CAUSES = frozenset(
    {
        "compute_bound",
        "pcie_transfer_bound",
        "launch_bound_small_kernels",
        "tensor_cores_unused",
        "gpu_imbalance",
        "communication_bound",
        "batching_window_too_large",
    }
)
_GPU_CAUSES = _SM_CAUSES | {"memory_bandwidth_bound", "power_or_thermal_throttling", "serial_host_ceiling"}


@dataclass(frozen=True)
class Missing:
    """An input the verdict lacks: what, how to get it, and the causes it leaves unjudged."""

    what: str
    enable: str
    causes: frozenset[str]


def _host_at_a_core(v: View, t: Thresholds) -> bool:
    return v.get(sig.BUSIEST_THREAD, 0.0) >= t.host_saturated_cpu or v.get(sig.BUSIEST_DEMAND, 0.0) >= t.host_saturated_demand


def engine_seen(v: View) -> bool:
    return any(k in v for k in (sig.WAITING, sig.RUNNING, sig.TTFT_P95, sig.KV_USAGE, sig.FAILED_BASE))


def missing_inputs(v: View, t: Thresholds) -> list[Missing]:
    """Inputs missing from a view that a cause of a load symptom needs (in the order to fix them)."""
    out: list[Missing] = []
    if not engine_seen(v):
        return out
    if sig.UTIL_MAX not in v and sig.SM_MAX not in v:
        out.append(Missing("GPU metrics", "a GPU source (--gpu-source)", frozenset(_GPU_CAUSES)))
    elif sig.SM_MAX not in v:
        blocked = set(_SM_CAUSES)
        host_unknown_or_busy = sig.BUSIEST_THREAD not in v or _host_at_a_core(v, t)
        if sig.sm_bound(v, t.sm_idle) is None and host_unknown_or_busy:  # NVML's util cannot prove the SMs idle
            blocked.add("serial_host_ceiling")
        out.append(
            Missing(
                "SM activity",
                "DCGM profiling (--gpu-source dcgm) or NVML GPM (Hopper and newer GPUs)",
                frozenset(blocked),
            )
        )
    sm = sig.sm_bound(v, t.sm_idle)
    if sig.BUSIEST_THREAD not in v and (sm is None or sm < t.sm_idle):  # busy SMs rule the host ceiling out
        out.append(
            Missing(
                "the process sampler",
                "the process sampler (--engine-process or --engine-pid)",
                frozenset({"serial_host_ceiling"}),
            )
        )
    if sig.QUEUE_P95 not in v:
        out.append(
            Missing(
                "the queue-time histogram",
                "an engine version that publishes its queue-time histogram (vLLM request_queue_time_seconds)",
                frozenset({"kv_fragmentation_or_capacity_misjudged"}),
            )
        )
    return out


def notices_for(
    signals: sig.Signals,
    snap: Snapshot | None,
    statuses: Mapping[str, str],
    app_judged: bool,
    t: Thresholds | None = None,
) -> list[str]:
    """Short sentences, most important first."""
    out: list[str] = []
    t = t or Thresholds()
    v = signals.service
    sources = dict(snap.sources) if snap is not None and getattr(snap, "sources", None) else {}
    for name, st in sorted(sources.items()):
        if st.derived or st.up:  # a derived source's health says nothing about the inputs
            continue
        err = getattr(st, "last_error", None)
        reason = getattr(err, "reason", None) or "no successful sample yet"
        out.append(f"source {name} is down ({reason}): its layers cannot be judged")
    if not signals.scopes["gpu"]:
        out.append("no GPU source: hardware, operator and parallel layers cannot be judged")
    seen = engine_seen(v)
    if not seen:
        out.append("no engine metrics: whether users suffer cannot be told (add --engine URL)")
    elif not app_judged:
        out.append("the engine reports no latency, queue or finish data yet: state unknown")
    else:
        if sig.TTFT_P95 not in v and sig.TTFT_P95_RECENT not in v:
            out.append("no requests finished their first token in the window (or the engine has no TTFT histogram)")
        if sig.QUEUE_P95 not in v:
            out.append("engine has no queue-time histogram (or none moved): queueing judged from the waiting gauge")
        if sig.KV_USAGE_MAX not in v and sig.SLOT_CONTEXT_USAGE not in v:
            out.append("engine reports no KV-cache usage: the memory layer cannot be judged")
    if seen and sig.BUSIEST_THREAD not in v:
        out.append("no process sampler (--engine-process or --engine-pid): the serial host ceiling cannot be judged")
    out += _sm_notice(v, t) + _preemption_notice(v, t) + long_context_notices(v, snap, t)
    out += pipeline_notice(v)  # pipeline stages run, and nothing tells their bubbles (exporter/diagnosis/communication.py)
    if sig.SLEEPING in v and v[sig.SLEEPING] >= 1:
        out.append("the engine is asleep (sleep mode): it serves nothing by design")
    unknown = [layer for layer, status in statuses.items() if status == "unknown"]
    if unknown and len(unknown) == len(statuses):
        out.append("every layer is unknown: nothing was measured, this is not a clean bill of health")
    return out


def _sm_notice(v: View, t: Thresholds) -> list[str]:
    """A GPU that reports NVML "GPU util" but no SM activity (every pre-Hopper GPU without DCGM
    profiling): its unknowns are unknown, never busy."""
    if sig.SM_MAX in v or sig.UTIL_MAX not in v:
        return []
    util = v[sig.UTIL_MAX]
    if sig.sm_bound(v, t.sm_idle) is not None:
        host = f'the serial host ceiling judged from NVML "GPU util" ({100 * util:.0f} %, an upper bound of SM activity)'
    else:
        host = f'the serial host ceiling could not be judged (SM activity missing; "GPU util" {100 * util:.0f} % cannot tell)'
    return [
        f"SM activity missing (NVML only): {host}; compute-bound, launch-bound, tensor-core, PCIe, batching-window, "
        "imbalance and communication causes cannot be judged. Enable DCGM profiling (--gpu-source dcgm) or NVML GPM (Hopper and newer)"
    ]


def _preemption_notice(v: View, t: Thresholds) -> list[str]:
    """Preemptions too few to be a rate (``preemption_min_count``): said, not judged."""
    count = v.get(sig.PREEMPTIONS, 0.0)
    floor = max(1.0, t.preemption_min_count)
    if count <= 0 or count >= floor:
        return []
    word = "preemption" if round(count) == 1 else "preemptions"
    return [
        f"{count:.0f} {word} in the window, below {floor:.0f} (diagnosis.preemption_min_count): not judged as KV-cache pressure"
    ]
