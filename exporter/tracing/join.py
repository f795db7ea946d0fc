"""A request joined with what the layers were doing while it lived: the answer to "why was it slow?".

The record says where the request's time went (queue, prefill, decode); the verdict
history (exporter/tracing/history.py) says what each layer was doing over
[arrival, finish]. The explanation keeps, per headline figure, its highest value over
that life, the primary cause the diagnosis named most often while the request lived
(the later one on a tie: nearer the moment the request ended, when the slowness is
whole), and one sentence:

    TTFT 2.4 s: 2.1 s in the queue, prefill 0.3 s, while the KV cache was 100 % full with
    44 waiting and 10.0 preemptions/s -> memory/kv_cache_pressure

Which figures the sentence names follows where the time went: a request that waited
is told the queue and what held it (KV, waiting, preemptions); one that decoded slowly
is told the GPU and the serving thread. A cycle is judged on what was sampled up to it,
so the moments read run from ``arrival`` to ``finish`` plus one ``slack_s`` (a diagnosis
cycle) past the end; a request shorter than a cycle that finds none there is told the cycle
in force when it arrived (exporter/tracing/log.py, ``RequestLog.moments_of``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter.tracing.history import Moment
from exporter.tracing.record import RequestRecord

#: how each figure is said (value -> words), in the order the sentence names them
_SAID: dict[str, str] = {
    "kv_cache_usage": "the KV cache was {pct} full",
    "requests_waiting": "{int} waiting",
    "preemptions_per_second": "{num} preemptions/s",
    "sm_active": "SMs {pct} active",
    "busiest_thread_cpu": "the busiest serving thread at {pct} of a core",
}
#: the figures that say why a request waited, and why it ran slowly once admitted
_QUEUE_FIGURES = ("kv_cache_usage", "requests_waiting", "preemptions_per_second")
_RUN_FIGURES = ("sm_active", "busiest_thread_cpu", "kv_cache_usage")


@dataclass(frozen=True)
class Explanation:
    """What the layers did while one request lived."""

    #: (layer, cause) the diagnosis named most while the request lived; None when it named none
    primary: tuple[str, str] | None
    sentence: str
    #: figure -> its highest value over the request's life
    figures: dict[str, float] = field(default_factory=dict)
    #: the share of the cycles over its life whose state was degraded (None: no cycle recorded)
    degraded_share: float | None = None
    #: cycles read
    moments: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "primary": {"layer": self.primary[0], "cause": self.primary[1]} if self.primary else None,
            "sentence": self.sentence,
            "figures": self.figures,
            "degraded_share": self.degraded_share,
            "moments": self.moments,
        }


def explain(record: RequestRecord, moments: Sequence[Moment]) -> Explanation:
    """The explanation of ``record`` from the moments over its life (oldest first)."""
    figures: dict[str, float] = {}
    for m in moments:
        for name, value in m.figures.items():
            figures[name] = max(value, figures.get(name, value))
    named = Counter(m.primary for m in moments if m.primary is not None)
    primary = None
    if named:
        top = max(named.values())
        primary = next(m.primary for m in reversed(moments) if m.primary is not None and named[m.primary] == top)
    degraded = sum(m.state == "degraded" for m in moments) / len(moments) if moments else None
    return Explanation(primary, sentence(record, figures, primary, bool(moments)), figures, degraded, len(moments))


def _seconds(x: float) -> str:
    return f"{x * 1000:.0f} ms" if x < 1 else f"{x:.1f} s"


def _say(name: str, value: float) -> str:
    return _SAID[name].format(pct=f"{value * 100:.0f} %", int=f"{value:.0f}", num=f"{value:.1f}")


def _timeline(r: RequestRecord) -> tuple[str, bool]:
    """Where the time went, and whether it was the queue (else the run) that took most of it."""
    parts = []
    head = f"TTFT {_seconds(r.ttft_seconds)}" if r.ttft_seconds is not None else ""
    if r.e2e_seconds is not None:
        head = f"{head} of {_seconds(r.e2e_seconds)}" if head else f"{_seconds(r.e2e_seconds)} end to end"
    if r.queue_seconds is not None:
        parts.append(f"{_seconds(r.queue_seconds)} in the queue")
    if r.prefill_seconds is not None:
        parts.append(f"prefill {_seconds(r.prefill_seconds)}")
    if r.decode_seconds is not None:
        tokens = f" for {r.completion_tokens} tokens" if r.completion_tokens else ""
        parts.append(f"decode {_seconds(r.decode_seconds)}{tokens}")
    run = (r.prefill_seconds or 0.0) + (r.decode_seconds or 0.0)
    queued = r.queue_seconds is not None and r.queue_seconds >= run
    text = (head + ": " if head else "") + ", ".join(parts) if parts else head or "no timings in its span"
    return text, queued


def sentence(record: RequestRecord, figures: dict[str, float], primary: tuple[str, str] | None, judged: bool) -> str:
    """One line: where the time went, what the layers did meanwhile, the cause named."""
    timeline, queued = _timeline(record)
    if not judged:
        return f"{timeline}; no diagnosis cycle recorded while it lived"
    order = _QUEUE_FIGURES if queued else _RUN_FIGURES
    said = [_say(n, figures[n]) for n in order if n in figures and not (n == "preemptions_per_second" and figures[n] <= 0)]
    if "requests_waiting" in order and figures.get("requests_waiting", 0.0) < 1:
        said = [x for x in said if not x.endswith(" waiting")]
    while_ = f", while {' with '.join(said[:2])}{''.join(' and ' + x for x in said[2:])}" if said else ""
    cause = f" -> {primary[0]}/{primary[1]}" if primary else "; no bottleneck named"
    return f"{timeline}{while_}{cause}"
