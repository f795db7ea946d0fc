"""The two probe causes in the diagnosis: ``application/front_end_overhead`` and ``application/engine_unresponsive``.

Proven here, on synthetic snapshots of what the probe and the engine publish:
* the client-seen TTFT of the probe makes ``ttft_high`` hold while the engine's own TTFT
  is fine, and ``front_end_overhead`` is then the primary, with probe TTFT, engine TTFT
  and the API-server CPU as evidence;
* it does not hold when the engine's own TTFT is most of the wait, nor under its line;
* a hung engine (last probe timed out, engine counters frozen) is the primary even
  while its frozen gauges keep a full KV cache and a queue "holding", is reported
  even with no engine data at all, and clears once a probe succeeds;
* a timeout while the engine moves (an overloaded engine) is a failure, not a hang;
  ``http_error`` alone is no symptom and no cause;
* the signals pair each engine's time outside with its own TTFT.
"""

from __future__ import annotations

import math

from exporter.diagnosis import probe as pr
from exporter.diagnosis.thresholds import Thresholds
from exporter.diagnosis.window import Window
from exporter.probe.stream import RESULTS
from exporter.samples import HistogramSample, Point, Sample
from exporter.store import Snapshot
from tests.diagnosis.diag_points import ENG, engine, healthy_gpu, histogram, primary, process, reported, run

P = dict(ENG)
INF = math.inf


def probe(
    i: int,
    last: str = "ok",
    outside: float | None = None,
    engine_ttft: float | None = None,
    frozen: float | None = None,
    client_ttft: float | None = None,
    server: str = "sim",
) -> list[Point]:
    """What the probe source publishes after its i-th probe (one TTFT observation per cycle)."""
    labels = {**P, "server": server}
    pts: list[Point] = [Sample("llm_probe_last_result", {**labels, "result": r}, float(r == last)) for r in RESULTS]
    if outside is not None and engine_ttft is not None:
        pts += [
            Sample("llm_probe_outside_engine_seconds", labels, outside),
            Sample("llm_probe_engine_ttft_seconds", labels, engine_ttft),
        ]
    if frozen is not None:
        pts.append(Sample("llm_probe_engine_frozen", labels, frozen))
    n = float(i + 1) if client_ttft is not None else 0.0
    total = (client_ttft or 0.0) * n
    pts.append(HistogramSample("llm_probe_ttft_seconds", labels, ((0.5, 0.0), (2.5, n), (INF, n)), total, n))
    return pts


def engine_ttft_hist(i: int, ttft: float) -> HistogramSample:
    return histogram("llm_request_ttft_seconds", [ttft] * (20 * (i + 1)))


SLO = Thresholds(slo_ttft_p95_seconds=1.0)


def test_front_end_overhead_is_the_primary_when_clients_wait_and_the_engine_does_not() -> None:
    cycles = [
        healthy_gpu()
        + engine(waiting=0, running=1, kv=0.2)
        + process(0.4)
        + [engine_ttft_hist(i, 0.04)]
        + probe(i, outside=1.2, engine_ttft=0.05, client_ttft=1.25)
        for i in range(5)
    ]
    v = run(cycles, thresholds=SLO)[-1]
    assert v.state == "degraded"
    assert [x.id for x in v.symptoms] == ["ttft_high"] and "canary probe" in v.symptoms[0].text
    assert primary(v) == "front_end_overhead"
    cause = v.primary
    assert cause is not None
    assert cause.layer == "application" and cause.explains == ("ttft_high",)
    assert "1.20 s outside the engine" in cause.summary
    assert {pr.PROBE_CLIENT_TTFT, pr.PROBE_ENGINE_TTFT, pr.PROBE_OUTSIDE, pr.PROBE_TTFT} <= set(cause.evidence)
    assert any("llm_process_busiest_thread_cpu_ratio" in k for k in cause.evidence)
    assert cause.evidence[pr.PROBE_OUTSIDE] == 1.2


def test_no_front_end_overhead_when_the_engine_itself_is_slow_or_the_gap_is_small() -> None:
    slow_engine = [healthy_gpu() + engine(kv=0.2) + probe(i, outside=0.6, engine_ttft=2.0, client_ttft=2.6) for i in range(4)]
    assert "front_end_overhead" not in run(slow_engine, thresholds=SLO)[-1].holding
    small = [healthy_gpu() + engine(kv=0.2) + probe(i, outside=0.3, engine_ttft=0.05, client_ttft=0.35) for i in range(4)]
    v = run(small, thresholds=SLO)[-1]
    assert "front_end_overhead" not in v.holding and v.state == "healthy"


def hung_engine_cycles(n: int) -> list[list[Point]]:
    """A hung engine core: its gauges frozen at a full KV cache and a queue; the probe times out."""
    return [
        healthy_gpu() + engine(waiting=20, running=8, kv=1.0, preemptions=0) + probe(i, last="timeout", frozen=1.0)
        for i in range(n)
    ]


def test_a_hung_engine_outranks_every_engine_side_cause() -> None:
    without_probe = run([healthy_gpu() + engine(waiting=20, running=8, kv=1.0) for _ in range(5)])[-1]
    assert primary(without_probe) == "kv_cache_pressure"  # what the frozen gauges alone would say
    v = run(hung_engine_cycles(5))[-1]
    assert v.state == "degraded" and "failures" in {x.id for x in v.symptoms}
    assert primary(v) == "engine_unresponsive"
    assert v.primary is not None
    assert v.primary.evidence[pr.PROBE_HUNG] == 1.0
    assert "kv_cache_pressure" in v.holding
    active = {p.labels["cause"]: p.value for p in v.points() if p.name == "llm_bottleneck_active" and isinstance(p, Sample)}
    assert active["engine_unresponsive"] == 1.0


def test_a_hung_engine_is_reported_with_no_engine_data_and_clears_after_a_good_probe() -> None:
    t = Thresholds(clear_cycles=2)
    cycles = [probe(i, last="timeout", frozen=1.0) for i in range(3)] + [probe(3 + i, last="ok", frozen=0.0) for i in range(3)]
    verdicts = run(cycles, thresholds=t)
    assert "engine_unresponsive" in reported(verdicts[0])  # reported from the first cycle (warns alone)
    assert primary(verdicts[2]) == "engine_unresponsive"
    assert [("engine_unresponsive" in reported(v)) for v in verdicts[3:]] == [True, False, False]


def test_a_timeout_while_the_engine_moves_is_a_failure_not_a_hang() -> None:
    v = run([healthy_gpu() + engine(kv=0.3) + probe(i, last="timeout", frozen=0.0) for i in range(4)])[-1]
    assert "engine_unresponsive" not in v.holding
    assert "failures" in {x.id for x in v.symptoms}
    assert "canary probe's last request" in next(x.text for x in v.symptoms if x.id == "failures")


def test_http_error_alone_is_no_symptom_and_no_cause() -> None:
    v = run([healthy_gpu() + engine(kv=0.3) + probe(i, last="http_error") for i in range(4)])[-1]
    assert v.state == "healthy" and v.symptoms == [] and reported(v) == set()


def test_a_refused_probe_with_no_engine_data_leaves_the_service_unknown_not_healthy() -> None:
    v = run([probe(i, last="refused") for i in range(3)])[-1]
    assert v.state == "unknown" and reported(v) == set()


def test_signals_pair_each_engines_time_outside_with_its_own_ttft() -> None:
    w = Window(20.0)
    for i in range(2):
        w.add(
            Snapshot(
                1000.0 + i,
                probe(i, outside=0.1, engine_ttft=0.9, client_ttft=1.0, server="a")
                + probe(i, outside=0.7, engine_ttft=0.2, client_ttft=0.9, server="b", last="timeout", frozen=1.0),
                {},
                monotonic=1000.0 + i,
            )
        )
    v: dict[str, float] = {}
    pr.probe_signals(w, v)
    assert v[pr.PROBE_OUTSIDE] == 0.7 and v[pr.PROBE_ENGINE_TTFT] == 0.2
    assert v[pr.PROBE_CLIENT_TTFT] == 0.7 + 0.2
    assert (v[pr.PROBE_FAILING], v[pr.PROBE_HUNG]) == (1.0, 1.0)
    assert v[pr.PROBE_TTFT] == (1.0 + 0.9) / 2  # one new observation per server in the window
