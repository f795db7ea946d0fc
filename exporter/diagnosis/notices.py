"""Why a layer is unknown, said in words: the verdict's ``notices``.

Why: "unknown" without a reason sends the user hunting. A verdict with every
layer unknown must say what is missing (no engine reachable, no GPU source)
instead of reassuring anyone; a partial one says which inputs would complete it.
"""

from __future__ import annotations

from collections.abc import Mapping

from exporter.diagnosis import signals as sig
from exporter.store import Snapshot

#: sources that read the store themselves: their health says nothing about the inputs
DERIVED_SOURCES = frozenset({"diagnosis", "parallel", "capacity"})


def notices_for(signals: sig.Signals, snap: Snapshot | None, statuses: Mapping[str, str], app_judged: bool) -> list[str]:
    """Short sentences, most important first."""
    out: list[str] = []
    v = signals.service
    sources = dict(snap.sources) if snap is not None and getattr(snap, "sources", None) else {}
    for name, st in sorted(sources.items()):
        if name in DERIVED_SOURCES or st.up:
            continue
        err = getattr(st, "last_error", None)
        reason = getattr(err, "reason", None) or "no successful sample yet"
        out.append(f"source {name} is down ({reason}): its layers cannot be judged")
    if not signals.scopes["gpu"]:
        out.append("no GPU source: hardware, operator and parallel layers cannot be judged")
    engine_seen = any(k in v for k in (sig.WAITING, sig.RUNNING, sig.TTFT_P95, sig.KV_USAGE, sig.FAILED_BASE))
    if not engine_seen:
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
    if engine_seen and sig.BUSIEST_THREAD not in v:
        out.append("no process sampler (--engine-process or --engine-pid): the serial host ceiling cannot be judged")
    if sig.SLEEPING in v and v[sig.SLEEPING] >= 1:
        out.append("the engine is asleep (sleep mode): it serves nothing by design")
    unknown = [layer for layer, status in statuses.items() if status == "unknown"]
    if unknown and len(unknown) == len(statuses):
        out.append("every layer is unknown: nothing was measured, this is not a clean bill of health")
    return out
