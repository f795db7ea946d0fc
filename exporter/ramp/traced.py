"""Where a ramp step's requests spent their time, from the engine's own spans (docs/tracing.md).

When the exporter receives the engine's request spans (``GET /requests`` answers), each step
records the traced requests that arrived during it: how many, and the shares of their summed
end-to-end time spent in the queue, in prefill and in decode, plus the queue's share of their
summed TTFT. The exporter keeps the slowest requests of each minute and a uniform sample
(exporter/tracing/reservoir.py), so the figures are over what it kept, said with the count;
the load generator's ``traceparent`` ties each to its trace for a look in the user's backend.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass
class TracedFigures:
    """The traced requests that arrived during one step."""

    requests: int = 0
    #: shares of their summed end-to-end time (None: no request reported that phase)
    queue_share: float | None = None
    prefill_share: float | None = None
    decode_share: float | None = None
    #: the queue's share of their summed TTFT
    queue_share_of_ttft: float | None = None


def _number(r: Mapping[str, Any], key: str) -> float | None:
    v = r.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else None


def traced_figures(held: Iterable[Mapping[str, Any]], start: float, end: float) -> TracedFigures:
    """Figures over the held requests whose arrival (Unix seconds) lies in [start, end)."""
    seen: set[tuple[str, str]] = set()
    phases = {"queue_seconds": 0.0, "prefill_seconds": 0.0, "decode_seconds": 0.0}
    counted = dict.fromkeys(phases, 0)
    e2e_total = ttft_total = queue_in_ttft = 0.0
    n = 0
    for r in held:
        arrival, e2e = _number(r, "arrival"), _number(r, "e2e_seconds")
        key = (str(r.get("trace_id")), str(r.get("span_id")))
        if arrival is None or not start <= arrival < end or key in seen or not e2e:
            continue
        seen.add(key)
        n += 1
        e2e_total += e2e
        for k in phases:
            v = _number(r, k)
            if v is not None:
                phases[k] += v
                counted[k] += 1
        ttft, queue = _number(r, "ttft_seconds"), _number(r, "queue_seconds")
        if ttft and queue is not None:
            ttft_total += ttft
            queue_in_ttft += queue

    def share(k: str) -> float | None:
        return phases[k] / e2e_total if counted[k] and e2e_total > 0 else None

    return TracedFigures(
        requests=n,
        queue_share=share("queue_seconds"),
        prefill_share=share("prefill_seconds"),
        decode_share=share("decode_seconds"),
        queue_share_of_ttft=queue_in_ttft / ttft_total if ttft_total > 0 else None,
    )


def sentence(t: TracedFigures) -> str | None:
    """ "12 traced requests: 63 % of their time queued, 10 % in prefill, 27 % in decode"; None without any."""
    if t.requests == 0:
        return None
    parts = [
        f"{v * 100:.0f} % {what}"
        for v, what in ((t.queue_share, "queued"), (t.prefill_share, "in prefill"), (t.decode_share, "in decode"))
        if v is not None
    ]
    said = f"{t.requests} traced request{'s' if t.requests != 1 else ''}"
    return f"{said}: {', '.join(parts)} of their end-to-end time" if parts else said
