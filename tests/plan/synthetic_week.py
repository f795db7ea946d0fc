"""A synthetic week of one model's fleet as OpenMetrics text, for ``promtool tsdb create-blocks-from openmetrics``.

What it holds, so the test can name the answers before ``plan`` runs: two
replicas (replica-a, replica-b) of model ``tiny``, each measured at 3 req/s and
8 concurrent requests at SLO; a daily cosine of demand peaking at 14:30 UTC
(5 req/s for the fleet) and bottoming at 02:30 (1 req/s); on one day, a surge
of 1.6x from 13:00 to 16:00 UTC, the only hours above the fleet's 6 req/s
(peak hour 14:00 of that day, about 8 req/s). Requests spend ``LATENCY_S`` in
flight (Little's law), a queue builds only during the surge.

A second model, ``small``, runs on one replica (replica-c) with no capacity
gauges (its capacity comes from ``--profile``): half the demand of ``tiny``'s
daily cosine, no surge.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

MODEL = "tiny"
REPLICAS = ("replica-a", "replica-b")
RPS_PER_REPLICA = 3.0
CONCURRENCY_PER_REPLICA = 8
TOKENS_PER_REPLICA = 300.0
PEAK_CENTRE_H = 14.5
SURGE = 1.6
SURGE_HOURS = (13, 16)
LATENCY_S = 1.5
SCRAPE_S = 120
PEAK_HOUR = 14
TROUGH_HOUR = 2
SMALL = "small"
SMALL_REPLICA = "replica-c"
SMALL_SHARE = 0.5


@dataclass(frozen=True)
class Week:
    start: int  # first sample, unix seconds, on an hour
    end: int  # last sample
    surge_day: int  # unix seconds of the surge day's 00:00 UTC


def daily(t: float) -> float:
    hour = (t % 86400) / 3600
    return 3.0 + 2.0 * math.cos(2 * math.pi * (hour - PEAK_CENTRE_H) / 24)


def fleet_rps(t: float, week: Week) -> float:
    rps = daily(t)
    if week.surge_day + SURGE_HOURS[0] * 3600 <= t < week.surge_day + SURGE_HOURS[1] * 3600:
        rps *= SURGE
    return rps


def make_week(now: float, days: int = 7, gap_h: int = 3) -> Week:
    """A week of whole days ending at the last 00:00 UTC at least ``gap_h`` hours before now
    (backfilled samples must be older than the head block).

    Why whole days: ``plan`` counts a day in its hour-of-day means once it has 12 hours of data,
    and its range starts at now - 7 d. A week ending at now's hour left a partial last day whose
    hours 14 and 15 were counted over different days; the surge day then weighed differently in
    the two, and the typical peak hour (14 and 15 are within 1.4 % of each other) followed the
    time of day the test ran. Ending at midnight, the only partial day is the first, a suffix of
    hours from now's hour: 13 to 16 are in it together or it is left out."""
    end = (int(now) - gap_h * 3600) // 86400 * 86400
    start = end - days * 86400
    surge_day = (start // 86400 + 4) * 86400  # a whole day well inside the range
    return Week(start, end, surge_day)


def _labels(**kv: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in kv.items()) + "}"


def _replicas(week: Week) -> list[tuple[str, str, Callable[[float], float]]]:
    """(server, model, that replica's requests/s at t)."""
    out: list[tuple[str, str, Callable[[float], float]]] = [
        (server, MODEL, lambda t: fleet_rps(t, week) / len(REPLICAS)) for server in REPLICAS
    ]
    out.append((SMALL_REPLICA, SMALL, lambda t: daily(t) * SMALL_SHARE))
    return out


def lines(week: Week) -> Iterator[str]:
    ts = range(week.start, week.end + 1, SCRAPE_S)
    base = {"job": "llm", "instance": "127.0.0.1:9750"}
    replicas = _replicas(week)
    yield "# TYPE llm_engine_info gauge"
    for server, model, _ in replicas:
        lab = _labels(**base, server=server, engine="vllm", model=model, generation="v1")
        yield from (f"llm_engine_info{lab} 1 {t}" for t in ts)
    yield "# TYPE llm_requests_finished counter"
    for server, model, rps in replicas:
        lab = _labels(**base, server=server, engine="vllm", model=model, rank="0", reason="stop")
        total = 0.0
        for t in ts:
            total += rps(t) * SCRAPE_S
            yield f"llm_requests_finished_total{lab} {total:.3f} {t}"
    for name in ("running", "waiting"):
        yield f"# TYPE llm_scheduler_requests_{name} gauge"
        for server, model, rps in replicas:
            lab = _labels(**base, server=server, engine="vllm", model=model, rank="0")
            for t in ts:
                flight = rps(t) * LATENCY_S
                running = min(flight, CONCURRENCY_PER_REPLICA)
                v = running if name == "running" else max(0.0, flight - running)
                yield f"llm_scheduler_requests_{name}{lab} {v:.3f} {t}"
    gauges = {
        "llm_capacity_requests_per_second_at_slo": RPS_PER_REPLICA,
        "llm_capacity_concurrency_at_slo": CONCURRENCY_PER_REPLICA,
        "llm_capacity_tokens_per_second_at_slo": TOKENS_PER_REPLICA,
    }
    for name, value in gauges.items():
        yield f"# TYPE {name} gauge"
        for server in REPLICAS:
            lab = _labels(**base, engine=server)
            yield from (f"{name}{lab} {value} {t}" for t in ts)
    yield "# EOF"


def openmetrics(week: Week) -> str:
    return "\n".join(lines(week)) + "\n"
