"""The next candidate: the primary cause at the knee picks the knob table entry, and its first untried move.

Why the verdict and not a grid: the layer that gave out at the knee says which
group to touch (resource → strategy → optimisation, docs/tune.md); a cause with no
knob (the GPU at its compute or bandwidth limit, plain capacity) ends the search
with the sentence that says so, instead of trying flags that cannot help.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter.tune.argv import Change, EngineCommand, apply_move, engine_default
from exporter.tune.capacity import SLO, slo_holds_everywhere, step_meets
from exporter.tune.knobs import SLOTS_FULL, STOPS, Move, group_rank, lookup

SLO_HOLDS = "the SLO holds at the highest tested concurrency: nothing to tune at this load"


@dataclass(frozen=True)
class Primary:
    layer: str
    cause: str
    chain: str = ""

    @property
    def name(self) -> str:
        return f"{self.layer}/{self.cause}"


@dataclass
class Decision:
    """Either a candidate (``cmd`` set) or a stop (``stop`` set)."""

    cause: str | None
    group: str | None = None
    reason: str = ""
    cmd: EngineCommand | None = None
    changes: list[Change] = field(default_factory=list)
    move: Move | None = None
    stop: str | None = None

    @property
    def stage(self) -> int:
        return group_rank(self.group or "") + 1

    @property
    def key(self) -> str:
        """The candidate's command line: a configuration is measured once."""
        return "" if self.cmd is None else self.cmd.shell()


def _verdict_step(report: dict[str, Any], slo: SLO | None) -> tuple[Primary | None, dict[str, Any] | None]:
    """The primary a run names and the step it was read at: the knee's (report.json's saturation); without
    a knee, that of the first step missing the SLO."""
    sat = report.get("saturation") or {}
    if report.get("cause") and report.get("first_saturated_layer"):
        knee = report.get("knee")
        primary = Primary(str(report["first_saturated_layer"]), str(report["cause"]), str(sat.get("chain") or ""))
        return primary, knee if isinstance(knee, dict) else None
    for step in report.get("steps") or []:
        if slo is not None and step_meets(step, slo):
            continue
        p = (step.get("diagnosis") or {}).get("primary")
        if p:
            return Primary(str(p["layer"]), str(p["cause"]), str(p.get("chain") or "")), step
    return None, None


def primary_of(report: dict[str, Any], slo: SLO | None = None) -> Primary | None:
    """The primary at the knee (report.json's saturation); without a knee, that of the first step missing the SLO."""
    return _verdict_step(report, slo)[0]


def _reading_shares(primary: Primary, step: dict[str, Any] | None) -> dict[str, tuple[float, Primary]]:
    """Each primary the step's readings named, with the share of its degraded readings that named it
    (exporter/ramp/aggregate.py ``primaries``); a step that lists none gives the run's primary all of it."""
    out: dict[str, tuple[float, Primary]] = {}
    for entry in ((step or {}).get("diagnosis") or {}).get("primaries") or []:
        if not isinstance(entry, dict) or not entry.get("cause") or not isinstance(entry.get("share"), (int, float)):
            continue
        cause = str(entry["cause"])
        named = primary if cause == primary.cause else Primary(str(entry.get("layer")), cause, str(entry.get("chain") or ""))
        out[cause] = (float(entry["share"]), named)
    if primary.cause not in out:
        out[primary.cause] = (1.0, primary)
    return out


def common_primary(runs: Sequence[dict[str, Any]], slo: SLO | None = None) -> Primary | None:
    """The primary the repeats' readings at the knee named most: each run's shares of readings, summed.

    Why shares and not one vote per run: two repeats that disagree are a tie, and a tie
    broken by run order lets a run whose readings split 5 to 4 (the SLO breach named alone
    in five) outvote a run whose readings named the cause 12 of 12. Summed, that is 0.56 against 1.44. Ties left: the cause more runs
    named as their primary, then the first run's.
    """
    score: dict[str, float] = {}
    votes: Counter[str] = Counter()
    order: dict[str, int] = {}
    named: dict[str, Primary] = {}  # as a run named it (its saturation chain), else as a step listed it
    for report in runs:
        primary, step = _verdict_step(report, slo)
        if primary is None:
            continue
        if not votes[primary.cause]:
            named[primary.cause] = primary
        votes[primary.cause] += 1
        for cause, (share, who) in _reading_shares(primary, step).items():
            score[cause] = score.get(cause, 0.0) + share
            order.setdefault(cause, len(order))
            named.setdefault(cause, who)
    if not votes:
        return None
    best = max(score, key=lambda cause: (round(score[cause], 9), votes[cause], -order[cause]))
    return named[best]


def _knee_step(report: dict[str, Any]) -> dict[str, Any] | None:
    knee = report.get("knee")
    if knee:
        return dict(knee)
    steps = report.get("steps") or []
    return steps[-1] if steps else None


def slots_full(runs: Sequence[dict[str, Any]], cmd: EngineCommand, move: Move) -> bool:
    """The running requests reached the slot count at the knee (unknown: assumed, so the move is tried)."""
    value = cmd.get(move.flag) if cmd.has(move.flag) else engine_default(cmd, move)
    try:
        slots = float(value) if value is not None else None
    except ValueError:
        slots = None
    seen = []
    for r in runs:
        step = _knee_step(r)
        gauge = (((step or {}).get("exporter") or {}).get("gauges") or {}).get("requests_running")
        if gauge and gauge.get("max") is not None:
            seen.append(float(gauge["max"]))
    if slots is None or not seen:
        return True
    return max(seen) >= 0.9 * slots


def decide(engine: str, cmd: EngineCommand, runs: Sequence[dict[str, Any]], slo: SLO, tried: set[str]) -> Decision:
    """The next candidate from the best configuration's runs, or why the search stops.

    ``tried`` holds the command lines measured already: after an accepted move the same move
    may apply again from the new best (48 -> 96 KV blocks); a rejected one is not re-measured.
    """
    if runs and all(slo_holds_everywhere(r, slo) for r in runs):
        return Decision(None, stop=SLO_HOLDS)
    primary = common_primary(runs, slo)
    if primary is None:
        return Decision(
            None,
            stop="the SLO is missed but the diagnosis named no cause at the knee: no knob is tried blindly "
            "(the runs in tune.json show each step's verdict)",
        )
    entry = lookup(engine, primary.cause).knob
    if entry.limit is not None:
        return Decision(primary.cause, entry.group, entry.reason, stop=f"{primary.name}: {STOPS[entry.limit]}")
    for move in entry.moves:
        if move.when == SLOTS_FULL and not slots_full(runs, cmd, move):
            continue
        applied = apply_move(cmd, move)
        if applied is None:
            continue
        new, changes = applied
        if new.shell() in tried:  # measured already (rejected, or the best itself)
            continue
        return Decision(primary.cause, entry.group, entry.reason, new, changes, move)
    return Decision(
        primary.cause, entry.group, entry.reason, stop=f"{primary.name}: every {engine} move for it was tried or is at its bound"
    )


__all__ = ["SLO_HOLDS", "Decision", "Primary", "common_primary", "decide", "primary_of", "slots_full"]
