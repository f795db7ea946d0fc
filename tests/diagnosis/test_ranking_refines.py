"""A specific cause that names why a generic one holds is the primary over it (``causality.REFINES``),
whatever their severities and ages; alone, the generic cause is still the primary.

Why by hand-made holdings: the two rules measure different things (the context reserved against
use; requests waiting against free memory), so which is "more severe" says nothing about which
names the fix. These cases pin the ranking itself: the generic one deeper and settled, the specific
one barely past its line and new, as a tune ramp sees them when the length quantiles fill late.
"""

from __future__ import annotations

import pytest

from exporter.diagnosis import causality
from exporter.diagnosis.engine import DiagnosisEngine, _Judged
from exporter.diagnosis.ranking import Holding, pick_primary, score
from exporter.diagnosis.rules import RULES
from exporter.diagnosis.thresholds import Thresholds

BY_CAUSE = {r.cause: r for r in RULES}


def _holding(cause: str, severity: float, cycles: int) -> Holding:
    return Holding(BY_CAUSE[cause], severity, {}, cycles)


@pytest.mark.parametrize(("specific", "generic"), sorted(causality.REFINES.items()))
def test_the_refinement_is_primary_over_a_deeper_older_generic_cause(specific: str, generic: str) -> None:
    t = Thresholds()
    observed = sorted(causality.EXPLAINS[generic])
    scored = score([_holding(generic, 0.95, 12), _holding(specific, 0.05, 1)], observed, t)
    explained = {h.rule.cause: e for h, e, _ in scored}
    assert explained[specific] == causality.EXPLAINS[specific] & frozenset(observed)
    assert explained[generic] == frozenset(observed) - explained[specific]
    chosen = pick_primary(scored, t)
    assert chosen is not None and chosen.rule.cause == specific


@pytest.mark.parametrize("generic", sorted(set(causality.REFINES.values())))
def test_the_generic_cause_alone_is_still_the_primary(generic: str) -> None:
    t = Thresholds()
    chosen = pick_primary(score([_holding(generic, 0.5, 3)], sorted(causality.EXPLAINS[generic]), t), t)
    assert chosen is not None and chosen.rule.cause == generic


def test_every_refinement_explains_what_its_generic_cause_does() -> None:
    """A refinement names the reason for the same effect: it must be able to explain every symptom the
    generic cause can, or removing those symptoms from the generic one would leave some unexplained."""
    for specific, generic in causality.REFINES.items():
        assert causality.EXPLAINS[generic] <= causality.EXPLAINS[specific], (specific, generic)


def test_last_cycles_primary_keeps_it_through_a_severity_swing_within_the_band() -> None:
    """The hysteresis band (``pick_primary``'s ``incumbent``): a full cache 0.2 deeper than the PCIe
    copies that fill it takes the primary from scratch, but not from the copies that held it last
    cycle; 0.4 deeper, it takes over even then."""
    t = Thresholds()
    observed = ["queueing", "throughput_saturated"]

    def pick(kv_severity: float, incumbent: str | None) -> str:
        holding = [_holding("pcie_transfer_bound", 0.6, 12), _holding("kv_cache_pressure", kv_severity, 12)]
        chosen = pick_primary(score(holding, observed, t), t, incumbent=incumbent)
        assert chosen is not None
        return chosen.rule.cause

    assert pick(0.8, None) == "kv_cache_pressure"
    assert pick(0.8, "pcie_transfer_bound") == "pcie_transfer_bound"
    assert pick(1.0, "pcie_transfer_bound") == "kv_cache_pressure"


def test_the_primary_follows_lasting_depth_not_one_cycles_sample() -> None:
    """``Holding.depth``: the PCIe copies held at 0.72 for five cycles and read 0.30 once (one low
    utilisation sample); the full cache behind them reads 0.80 throughout. The copies stay the
    primary, with or without the hysteresis band; when they read low for three of five cycles, the
    lasting picture has changed and the cache takes over."""
    t = Thresholds()
    observed = ["queueing", "throughput_saturated"]

    def pick(pcie_recent: tuple[float, ...], incumbent: str | None) -> str:
        pcie = Holding(BY_CAUSE["pcie_transfer_bound"], pcie_recent[-1], {}, 12, "", pcie_recent)
        kv = Holding(BY_CAUSE["kv_cache_pressure"], 0.8, {}, 12, "", (0.8,) * 5)
        chosen = pick_primary(score([pcie, kv], observed, t), t, incumbent=incumbent)
        assert chosen is not None
        return chosen.rule.cause

    for incumbent in (None, "pcie_transfer_bound"):
        assert pick((0.72, 0.72, 0.72, 0.72, 0.30), incumbent) == "pcie_transfer_bound"
    assert pick((0.72, 0.72, 0.30, 0.30, 0.30), None) == "kv_cache_pressure"


def test_the_engine_keeps_the_recent_severities_of_a_held_cause() -> None:
    """What ``depth`` reads: the engine's held cause carries its last ``confidence_settled_cycles``
    severities, newest last; a held-over cycle (its condition failed once) adds none."""
    engine = DiagnosisEngine()
    rule = BY_CAUSE["kv_cache_pressure"]
    settled = engine.thresholds.confidence_settled_cycles
    severities = [0.1 * (i + 1) for i in range(settled + 2)]
    for sev in severities:
        held = engine._persist(_Judged(rule, True, (sev, "", {}), None))
    assert held is not None and held.recent == tuple(severities[-settled:])
    over = engine._persist(_Judged(rule, True, None, None))
    assert over is not None and over.recent == held.recent and over.cycles == held.cycles + 1
    assert Holding(rule, 0.4, {}, 1).depth == 0.4
