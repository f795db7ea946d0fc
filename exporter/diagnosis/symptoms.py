"""What users feel: the application-level symptoms the verdict starts from.

Why symptoms first: a layer near its limit is not a problem until someone
suffers. Batch-1 decode always reads HBM hard; a busy GPU is what it was bought
for. The diagnosis therefore asks first whether the service is in trouble (TTFT
or ITL over the SLO, requests queueing, throughput that no longer follows the
offered load, failures) and only then walks the layers for the cause that
explains it. Symptoms are engine-neutral: they read only schema signals that
every engine adapter maps (latency histograms, running/waiting gauges, finished
counters), so the same definition holds for vLLM, SGLang, TGI, TensorRT-LLM and
llama.cpp.

Each symptom is a row: its id (a contract: ``llm_symptom_active{symptom}`` and
``/diagnosis`` ``symptoms[].id``), the signals it needs to be judged, when it
holds, the evidence to show, and a short sentence with the numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from exporter.diagnosis import signals as s
from exporter.diagnosis.probe import PROBE_FAILING, PROBE_TTFT
from exporter.diagnosis.thresholds import Thresholds

View = Mapping[str, float]


@dataclass(frozen=True)
class Symptom:
    """One user-visible symptom."""

    id: str
    #: at least one of these must be present to judge it
    requires_any: tuple[str, ...]
    condition: Callable[[View, Thresholds], bool]
    evidence: tuple[str, ...]
    describe: Callable[[View, Thresholds], str]

    def judgeable(self, view: View) -> bool:
        return any(name in view for name in self.requires_any)


def latest_p95(v: View, recent: str, window: str) -> float | None:
    """The worse of the recent quantile and the window's; None if neither is known.

    The recent look (the last seconds, at least 20 requests) makes a symptom show
    at once; the window's (20 s) keeps it while the service alternates between
    slow bursts and fast lulls, as a CPU-bound front end or a preemption storm
    does: users felt it within the window, so it is not cleared by one fast second.
    """
    found = [v[name] for name in (recent, window) if name in v]
    return max(found) if found else None


def ttft_high(v: View, t: Thresholds) -> bool:
    p95 = latest_p95(v, s.TTFT_P95_RECENT, s.TTFT_P95)
    return (p95 is not None and p95 > t.slo_ttft_p95_seconds) or probe_ttft_high(v, t)


def probe_ttft_high(v: View, t: Thresholds) -> bool:
    """What clients see, measured by the canary probe (exporter/diagnosis/probe.py): the engine's
    own TTFT misses the time spent in front of it (gateway, proxy, API server)."""
    client = v.get(PROBE_TTFT)
    return client is not None and client > t.slo_ttft_p95_seconds


def itl_high(v: View, t: Thresholds) -> bool:
    p95 = latest_p95(v, s.ITL_P95_RECENT, s.ITL_P95)
    return p95 is not None and p95 > t.slo_itl_p95_seconds


def queue_sustained(v: View) -> bool:
    """Nobody drained the queue over the recent seconds (every snapshot had a request waiting)."""
    return v.get(s.WAITING_MIN, 0.0) >= 1  # absent until there are two looks


def waits_proven(v: View, t: Thresholds) -> bool:
    """The queue-time histogram shows the recently admitted requests really waited (recent p95 at
    or past ``queueing_p95_seconds``): then the gauges may be read over the whole window."""
    return v.get(s.QUEUE_P95_RECENT, 0.0) >= t.queueing_p95_seconds


def waited_while_queued(v: View, t: Thresholds | None = None) -> float:
    """The most requests seen waiting over the recent seconds or, longer, over the span the
    recently admitted requests spent queued (``signals.WAITING_MAX_QUEUE``); with ``t`` and waits
    the histogram proves, over the whole window (a server whose scrapes only succeed in its idle
    moments reads 0 waiting in every look of that span while its histogram shows 4 s waits)."""
    seen = max(v.get(s.WAITING_MAX, v.get(s.WAITING, 0.0)), v.get(s.WAITING_MAX_QUEUE, 0.0))
    if t is not None and waits_proven(v, t):
        seen = max(seen, v.get(s.WAITING_MAX_WINDOW, 0.0))
    return seen


def excess(v: View, t: Thresholds, symptom: str) -> float | None:
    """How far an observed symptom is past its line, as a share of its value (1 - line / value):
    what a partial cause (a throttled clock) must account for. None when it cannot be told.

    Queueing: the queue-time p95 against ``queueing_p95_seconds``, else the share of requests
    waiting; saturation: the queue's growth against what arrives (growth + finished)."""
    if symptom == "ttft_high":
        found = [x for x in (latest_p95(v, s.TTFT_P95_RECENT, s.TTFT_P95), v.get(PROBE_TTFT)) if x is not None]
        return _past(max(found), t.slo_ttft_p95_seconds) if found else None
    if symptom == "itl_high":
        p95 = latest_p95(v, s.ITL_P95_RECENT, s.ITL_P95)
        return None if p95 is None else _past(p95, t.slo_itl_p95_seconds)
    if symptom == "queueing":
        p95 = latest_p95(v, s.QUEUE_P95_RECENT, s.QUEUE_P95)
        if p95 is not None and p95 >= t.queueing_p95_seconds:
            return _past(p95, t.queueing_p95_seconds)
        waiting, running = waited_while_queued(v), v.get(s.RUNNING_MAX_RECENT, v.get(s.RUNNING))
        return None if running is None or waiting + running <= 0 else waiting / (waiting + running)
    if symptom == "throughput_saturated":
        growth, done = v.get(s.WAITING_GROWTH), v.get(s.FINISHED_RATE)
        return None if growth is None or done is None or growth + done <= 0 else max(0.0, growth) / (growth + done)
    return None


def _past(value: float, line: float) -> float:
    return 0.0 if value <= 0 else max(0.0, 1.0 - line / value)


def queueing(v: View, t: Thresholds) -> bool:
    """Requests wait: long queue times for those admitted, or a queue that never empties.

    The second clause matters most when nothing is admitted at all (every slot
    taken): then the queue-time histogram does not move, yet the queue stays.
    """
    queue_p95 = latest_p95(v, s.QUEUE_P95_RECENT, s.QUEUE_P95)
    waited_long = queue_p95 is not None and queue_p95 >= t.queueing_p95_seconds and waited_while_queued(v, t) >= 1
    return waited_long or queue_sustained(v)


def _throughput_saturated(v: View, t: Thresholds) -> bool:
    """The queue grows while the server keeps finishing at its pace: admissions no longer follow the load."""
    return queue_sustained(v) and v.get(s.WAITING_GROWTH, 0.0) >= t.saturation_waiting_growth_per_second


def _failures(v: View, t: Thresholds) -> bool:
    """A notable share of requests failed, or the canary's last request timed out or broke off."""
    engine = v.get(s.FAILED_BASE, 0.0) >= t.failure_min_requests and v.get(s.FAILED_SHARE, 0.0) >= t.failure_share
    return engine or v.get(PROBE_FAILING, 0.0) >= 1


def fmt_seconds(x: float) -> str:
    if x >= 10:
        return f"{x:.0f} s"
    if x >= 1:
        return f"{x:.2g} s"
    return f"{x * 1000:.0f} ms"


def _describe_ttft(v: View, t: Thresholds) -> str:
    p95 = latest_p95(v, s.TTFT_P95_RECENT, s.TTFT_P95)
    if (p95 is None or p95 <= t.slo_ttft_p95_seconds) and probe_ttft_high(v, t):
        return f"client-seen TTFT (canary probe) {fmt_seconds(v[PROBE_TTFT])} > SLO {fmt_seconds(t.slo_ttft_p95_seconds)}"
    return f"TTFT p95 {fmt_seconds(p95 or 0.0)} > SLO {fmt_seconds(t.slo_ttft_p95_seconds)}"


def _describe_itl(v: View, t: Thresholds) -> str:
    p95 = latest_p95(v, s.ITL_P95_RECENT, s.ITL_P95) or 0.0
    return f"ITL p95 {fmt_seconds(p95)} > SLO {fmt_seconds(t.slo_itl_p95_seconds)}"


def _describe_queueing(v: View, t: Thresholds) -> str:
    parts = [f"{waited_while_queued(v, t):.0f} requests waiting"]
    queue_p95 = latest_p95(v, s.QUEUE_P95_RECENT, s.QUEUE_P95)
    if queue_p95 is not None:
        parts.append(f"queue p95 {fmt_seconds(queue_p95)}")
    if s.WAITING_CAPACITY in v and v.get(s.WAITING, 0.0) > 0:
        parts.append(f"{v[s.WAITING_CAPACITY]:.0f} of them for capacity")
    return ", ".join(parts)


def _describe_saturated(v: View, t: Thresholds) -> str:
    out = f"queue growing {v.get(s.WAITING_GROWTH, 0.0):.2g}/s"
    if s.FINISHED_RATE in v:
        out += f" while {v[s.FINISHED_RATE]:.2g} requests/s finish"
    return out


def _describe_failures(v: View, t: Thresholds) -> str:
    engine = v.get(s.FAILED_BASE, 0.0) >= t.failure_min_requests and v.get(s.FAILED_SHARE, 0.0) >= t.failure_share
    if not engine and v.get(PROBE_FAILING, 0.0) >= 1:
        return f"the canary probe's last request to {v[PROBE_FAILING]:.0f} engine(s) timed out or broke off"
    return f"{100 * v.get(s.FAILED_SHARE, 0.0):.0f} % of requests failed, timed out or were rejected"


SYMPTOMS: tuple[Symptom, ...] = (
    Symptom(
        "ttft_high",
        (s.TTFT_P95, s.TTFT_P95_RECENT, PROBE_TTFT),
        ttft_high,
        (s.TTFT_P95_RECENT, s.TTFT_P95, PROBE_TTFT),
        _describe_ttft,
    ),
    Symptom("itl_high", (s.ITL_P95, s.ITL_P95_RECENT), itl_high, (s.ITL_P95_RECENT, s.ITL_P95), _describe_itl),
    Symptom(
        "queueing",
        (s.WAITING, s.QUEUE_P95),
        queueing,
        (
            s.WAITING,
            s.WAITING_MAX,
            s.WAITING_MAX_QUEUE,
            s.WAITING_MAX_WINDOW,
            s.WAITING_MIN,
            s.QUEUE_P95_RECENT,
            s.QUEUE_P95,
            s.WAITING_CAPACITY,
            s.WAITING_DEFERRED,
        ),
        _describe_queueing,
    ),
    Symptom(
        "throughput_saturated",
        (s.WAITING,),
        _throughput_saturated,
        (s.WAITING_GROWTH, s.WAITING_MIN, s.FINISHED_RATE, s.RUNNING, s.RUNNING_MAX),
        _describe_saturated,
    ),
    Symptom(
        "failures",
        (s.FAILED_BASE, PROBE_FAILING),
        _failures,
        (s.FAILED_SHARE, s.FAILED_RATE, s.REJECTED_RATE, s.FINISHED_RATE, PROBE_FAILING),
        _describe_failures,
    ),
)

SYMPTOM_IDS: tuple[str, ...] = tuple(x.id for x in SYMPTOMS)


@dataclass(frozen=True)
class ObservedSymptom:
    """A symptom that holds now, with its numbers."""

    id: str
    text: str
    evidence: dict[str, float]

    def as_dict(self) -> dict[str, object]:
        return {"id": self.id, "text": self.text, "evidence": self.evidence}


def observe(view: View, t: Thresholds) -> tuple[list[ObservedSymptom], bool]:
    """The symptoms that hold, and whether any symptom could be judged at all."""
    held: list[ObservedSymptom] = []
    judged = False
    for sym in SYMPTOMS:
        if not sym.judgeable(view):
            continue
        judged = True
        if sym.condition(view, t):
            evidence = {n: float(f"{view[n]:.6g}") for n in sym.evidence if n in view}
            held.append(ObservedSymptom(sym.id, sym.describe(view, t), evidence))
    return held, judged
