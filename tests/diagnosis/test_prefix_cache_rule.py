"""memory/prefix_cache_hit_drop on synthetic windows: a fall of the engine's own prefix-cache hit ratio,
with the prompts unchanged, explains a TTFT over its SLO; a ratio that was always low, a workload that
changed, or a fall while TTFT is fine does not make it the primary (issue 36, item 3).

One cycle is one second of a server finishing ``PER_CYCLE`` requests of ``PROMPT`` tokens each, built
from schema names (tests/diagnosis/diag_points.py); the window and recent seconds are the defaults
(20 s, 5 s).
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.diagnosis import prefix_cache as pc
from exporter.diagnosis.engine import Verdict
from exporter.diagnosis.thresholds import Thresholds
from exporter.samples import Point
from tests.diagnosis.diag_points import ENG, _s, engine, healthy_gpu, histogram, primary, process, run

CAUSE = "prefix_cache_hit_drop"
PER_CYCLE = 20
PROMPT = 2048.0
#: the first cycle after the change (hits fall, or prompts change): the last five cycles of twenty,
#: so at cycle 19 the recent seconds (5) hold the change and the earlier span none of it
SWITCH = 15


@dataclass(frozen=True)
class Phase:
    """What each request of a cycle looks like: its share of hits, its prompt length, its TTFT."""

    hit: float
    prompt: float = PROMPT
    ttft: float = 0.3
    #: the engine looks prompts up at all (False: prefix caching switched off, no lookup counted)
    lookups: bool = True


def cycles(before: Phase, after: Phase, count: int = 20, switch: int = SWITCH) -> list[list[Point]]:
    """``count`` cycles, ``before`` up to ``switch``, ``after`` from it on."""
    return timeline((switch, before), (count - switch, after))


def timeline(*spans: tuple[int, Phase]) -> list[list[Point]]:
    """One cycle per second, ``(cycles, phase)`` after each other; counters cumulative throughout."""
    out: list[list[Point]] = []
    queried = hits = prompts = 0.0
    ttfts: list[float] = []
    for phase in (phase for count, phase in spans for _ in range(count)):
        prompts += PER_CYCLE * phase.prompt
        if phase.lookups:
            queried += PER_CYCLE * phase.prompt
            hits += PER_CYCLE * phase.prompt * phase.hit
        ttfts += [phase.ttft] * PER_CYCLE
        out.append(
            [
                *healthy_gpu(),
                *engine(waiting=0, running=4, kv=0.4),
                *process(0.3),
                _s("llm_prefix_cache_queried_tokens_total", ENG, queried),
                _s("llm_prefix_cache_hit_tokens_total", ENG, hits),
                _s("llm_prompt_tokens_total", ENG, prompts),
                histogram("llm_request_ttft_seconds", ttfts),
            ]
        )
    return out


def role(v: Verdict, cause: str = CAUSE) -> str | None:
    return next((c.role for c in v.bottlenecks if c.cause == cause), None)


def test_a_fall_with_the_same_prompts_is_the_primary_behind_a_high_ttft() -> None:
    verdicts = run(cycles(Phase(0.62), Phase(0.04, ttft=3.0)))
    before = verdicts[SWITCH - 1]
    assert before.state == "healthy" and CAUSE not in before.holding
    last = verdicts[-1]
    assert last.state == "degraded" and primary(last) == CAUSE, (last.state, last.holding, primary(last))
    p = last.primary
    assert p is not None and p.layer == "memory" and p.explains == ("ttft_high",)
    assert "prefix-cache hits fell from 62 % to 4 % of prompt tokens while prompts stayed ~2,000 tokens" in p.chain
    assert p.chain.startswith("TTFT p95") and "←" in p.chain
    assert p.evidence[pc.HIT_EARLIER] == 0.62 and p.evidence[pc.HIT_RECENT] == 0.04
    assert "session affinity" in p.advice and "prefix caching is still enabled" in p.advice and "system prompt" in p.advice
    assert last.layers["memory"].status == "bottleneck"


def test_a_ratio_that_was_always_low_did_not_drop() -> None:
    """10 % to 4 %: the cache served too little of each prompt for its loss to be the story."""
    verdicts = run(cycles(Phase(0.10), Phase(0.04, ttft=3.0)))
    assert all(CAUSE not in v.holding for v in verdicts)
    assert verdicts[-1].state == "degraded" and primary(verdicts[-1]) != CAUSE
    assert verdicts[-1].signals[pc.HIT_EARLIER] == 0.1  # judged, not missing


def test_prompts_that_became_unique_are_a_workload_change_not_a_cache_fall() -> None:
    """The hits fall because the prompts changed (a quarter as long, nothing shared): not this cause."""
    verdicts = run(cycles(Phase(0.62), Phase(0.04, prompt=PROMPT / 4, ttft=3.0)))
    assert all(CAUSE not in v.holding for v in verdicts)
    signals = verdicts[-1].signals
    assert signals[pc.QUERIED_PER_REQUEST_EARLIER] > 1.5 * signals[pc.QUERIED_PER_REQUEST_RECENT]


def test_a_fall_while_ttft_is_within_the_slo_is_a_warning_only() -> None:
    verdicts = run(cycles(Phase(0.62), Phase(0.04, ttft=0.3)))
    last = verdicts[-1]
    assert CAUSE in last.holding and last.state == "healthy" and last.primary is None
    assert role(last) == "warning"


def test_a_fall_needs_a_comparison_and_requests_enough() -> None:
    """Too few requests in a span, or a window that does not reach past the recent seconds: not judged as a fall."""
    few = Thresholds(prefix_min_requests=PER_CYCLE * 6)  # more than the recent 5 s hold
    assert all(CAUSE not in v.holding for v in run(cycles(Phase(0.62), Phase(0.04, ttft=3.0)), few))
    early = run(cycles(Phase(0.62), Phase(0.04, ttft=3.0), count=5, switch=1))
    assert all(pc.HIT_EARLIER not in v.signals and CAUSE not in v.holding for v in early)


def test_the_loss_stays_the_cause_after_the_fall_leaves_the_window_and_clears_when_ttft_recovers() -> None:
    """40 s after the fall the window (20 s) holds only low ratios: the held cause stays while TTFT is
    over its SLO and the ratio stays under the release line, and goes once TTFT is back."""
    lost = cycles(Phase(0.62), Phase(0.04, ttft=3.0), count=40)
    verdicts = run(lost)
    last = verdicts[-1]
    assert last.signals[pc.HIT_EARLIER] == 0.04  # the fall itself is out of the window
    assert primary(last) == CAUSE, (last.holding, primary(last))
    assert last.primary is not None and "prefix-cache hits still at 4 % of prompt tokens" in last.primary.chain
    later = run(timeline((SWITCH, Phase(0.62)), (40 - SWITCH, Phase(0.04, ttft=3.0)), (30, Phase(0.04, ttft=0.3))))
    assert later[-1].state == "healthy" and CAUSE not in later[-1].holding


def test_a_server_that_never_queried_its_prefix_cache_is_not_judged() -> None:
    """No lookups at all (prefix caching off from the start): no ratio, the cause is not judged."""
    points = [[p for p in c if not p.name.startswith(pc.PREFIX)] for c in cycles(Phase(0.62), Phase(0.04, ttft=3.0))]
    last = run(points)[-1]
    assert pc.HIT_RECENT not in last.signals and CAUSE not in last.holding


def test_prefix_caching_switched_off_is_a_fall_to_nothing_behind_a_high_ttft() -> None:
    """The engine stops counting lookups (vLLM with --no-enable-prefix-caching, the simulator's
    ``{"enabled": false}``) while the same prompts keep coming: the recent ratio is 0, not absent."""
    last = run(cycles(Phase(0.62), Phase(0.0, ttft=3.0, lookups=False)))[-1]
    assert last.signals[pc.LOOKUPS_STOPPED] == 1.0 and last.signals[pc.HIT_RECENT] == 0.0
    assert primary(last) == CAUSE, (last.holding, primary(last))
    assert last.primary is not None
    assert "stopped looking prompts up in its prefix cache (hits were 62 % of prompt tokens)" in last.primary.chain
    assert "prefix caching is off" in last.primary.chain, last.primary.chain


def test_lookups_that_stop_with_the_prompts_changed_are_a_workload_change() -> None:
    last = run(cycles(Phase(0.62), Phase(0.0, prompt=PROMPT / 8, ttft=3.0, lookups=False)))[-1]
    assert last.signals[pc.LOOKUPS_STOPPED] == 1.0 and CAUSE not in last.holding


def test_lookups_that_stop_because_requests_stopped_are_not_a_fall() -> None:
    """No request in the recent seconds: nothing was asked, nothing stopped."""
    points = timeline((SWITCH, Phase(0.62)), (5, Phase(0.0, prompt=0.0, lookups=False)))
    served = points[SWITCH - 1][-1]  # the TTFT histogram (each cycle's last point) as the traffic stopped
    assert served.name == "llm_request_ttft_seconds"
    last = run(points[:SWITCH] + [cycle[:-1] + [served] for cycle in points[SWITCH:]])[-1]
    assert pc.LOOKUPS_STOPPED not in last.signals and pc.HIT_RECENT not in last.signals


def _said(points: list[list[Point]], on: str) -> list[list[Point]]:
    """Each cycle with the engine's config saying prefix caching is ``on`` ("true"/"false")."""
    return [[*c, _s("llm_engine_config_info", {**ENG, "prefix_caching": on}, 1.0)] for c in points]


def test_lookups_that_stop_while_the_engine_says_caching_is_on_are_a_stall_not_caching_off() -> None:
    """Admissions stalled behind a backlog: requests looked up earlier reach their first token, nothing new is
    looked up. The engine's config says prefix caching is on, so nothing claims it was switched off."""
    stalled = run(_said(cycles(Phase(0.62), Phase(0.0, ttft=3.0, lookups=False)), "true"))[-1]
    assert pc.LOOKUPS_STOPPED not in stalled.signals and CAUSE not in stalled.holding
    off = run(_said(cycles(Phase(0.62), Phase(0.0, ttft=3.0, lookups=False)), "false"))[-1]
    assert off.signals[pc.LOOKUPS_STOPPED] == 1.0 and primary(off) == CAUSE


def test_caching_switched_back_on_before_any_lookup_still_reads_the_switch_off() -> None:
    """The engine's config says on again in the last snapshot, but the recent seconds held it off and no
    lookup yet: the fall is still the switch-off's, not a stall (and not a ratio gone missing)."""
    points = _said(cycles(Phase(0.62), Phase(0.0, ttft=3.0, lookups=False)), "false")
    last = [p for p in points[-1] if p.name != "llm_engine_config_info"]
    points[-1] = [*last, _s("llm_engine_config_info", {**ENG, "prefix_caching": "true"}, 1.0)]
    v = run(points)[-1]
    assert v.signals[pc.LOOKUPS_STOPPED] == 1.0 and primary(v) == CAUSE
