"""The next candidate: the primary cause at the knee picks the knob table entry, and its first untried move.

Why the verdict and not a grid: the layer that gave out at the knee says which
group to touch (resource → strategy → optimisation, docs/tune.md); a cause with no
knob (the GPU at its compute or bandwidth limit, plain capacity) ends the search
with the sentence that says so, instead of trying flags that cannot help; a cause
the engine has no move for ends it quoting what the diagnosis advises instead.

Why the draft length follows the measured acceptance (issue 32): fewer draft tokens
help only where the ones cut were mostly rejected. The records carry the draft and
accepted token counts at the knee; a draft token is kept only while every one before
it was, so an acceptance rate over ``k`` drafted tokens gives a per-token acceptance
``a`` (rate = (a + a² + … + a^k) / k), and position ``i`` is accepted with
probability a^i. The move keeps the positions accepted at least as often as the
diagnosis's line for low acceptance (0.5: kept more often than thrown away); where
that keeps all of them, or the counts are too few to judge (the diagnosis's own
minimum), no speculative setting is proposed and the stop says why.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter.diagnosis.thresholds import Thresholds
from exporter.tune.argv import Change, EngineCommand, apply_move, running_value
from exporter.tune.capacity import SLO, slo_holds_everywhere, step_meets
from exporter.tune.knobs import (
    BATCH_ROOM,
    DATA_PARALLEL,
    DRAFT,
    DRAFT_MORE,
    EXPERT_PARALLEL,
    KV_NOT_FULL,
    LARGER_CAPTURE,
    LAYOUT,
    QUANTISED,
    SLOTS_FULL,
    Knob,
    Move,
    group_rank,
    lookup,
    no_move_stop,
    stop_sentence,
)
from exporter.tune.layout import Deployment, apply_layout, apply_quantised, data_parallel, expert_parallel, gpus_of

SLO_HOLDS = "the SLO holds at the highest tested concurrency: nothing to tune at this load"
#: the KV cache at or beyond the knee at least this full: full (a layout holding less of it would preempt)
KV_FULL = 0.9
#: ... at most this full: room for twice the running sequences (a larger batch on a memory-bound decode)
KV_ROOM_FOR_DOUBLE = 0.5


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
    #: the trade the move makes, throughput per GPU against latency per user (knobs.py TRADE_*; "" where none is named)
    trade: str = ""

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


def _from_the_knee(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The knee step and every step after it (more load than the knee's)."""
    knee = _knee_step(report)
    if knee is None:
        return []
    steps = [s for s in report.get("steps") or [] if s.get("index", -1) >= knee.get("index", 0)]
    return steps or [knee]


def slots_full(runs: Sequence[dict[str, Any]], cmd: EngineCommand, move: Move) -> bool:
    """The running requests reached the slot count at or beyond the knee (unknown: assumed, so the move
    is tried).

    Why the steps beyond the knee count too: a step's gauges are a few samples, and on a
    loaded host one of them can land in the instant a finished request hands its slot on
    (a one-slot engine read "0 running, 1 waiting"); the steps after the knee carry more
    load, so slots they fill were the limit at the knee as well."""
    value = running_value(cmd, move)
    try:
        slots = float(value) if value is not None else None
    except ValueError:
        slots = None
    seen = []
    for r in runs:
        for step in _from_the_knee(r):
            gauge = ((step.get("exporter") or {}).get("gauges") or {}).get("requests_running")
            if gauge and gauge.get("max") is not None:
                seen.append(float(gauge["max"]))
    if slots is None or not seen:
        return True
    return max(seen) >= 0.9 * slots


def _gauge_max(runs: Sequence[dict[str, Any]], name: str) -> float | None:
    """The highest ``name`` gauge at or beyond the knee over the runs (None: never measured)."""
    seen = [
        float(g["max"])
        for r in runs
        for step in _from_the_knee(r)
        if (g := ((step.get("exporter") or {}).get("gauges") or {}).get(name)) and g.get("max") is not None
    ]
    return max(seen) if seen else None


def slots_measured_full(runs: Sequence[dict[str, Any]], cmd: EngineCommand, move: Move) -> bool:
    """The running requests were *measured* reaching the slot count at or beyond the knee (unknown: no)."""
    value = running_value(cmd, move)
    try:
        slots = float(value) if value is not None else None
    except ValueError:
        slots = None
    running = _gauge_max(runs, "requests_running")
    return slots is not None and running is not None and running >= 0.9 * slots


def kv_usage(runs: Sequence[dict[str, Any]]) -> float | None:
    """The fullest the KV cache was at or beyond the knee (0-1; None: not measured)."""
    return _gauge_max(runs, "kv_cache_usage_ratio")


def _largest(value: float | str | None) -> int | None:
    """The largest of a list of batch sizes (``1,2,4`` or ``1 2 4``); None when it is not one."""
    try:
        sizes = [int(v) for v in str(value).replace(",", " ").split()] if value is not None else []
    except ValueError:
        return None
    return max(sizes) if sizes else None


def captures_larger(cmd: EngineCommand, move: Move) -> bool:
    """The move's list of captured batch sizes reaches past the one the engine runs with: a list the operator
    wrote is never shrunk (TGI --cuda-graphs); an unreadable one is left alone."""
    current = running_value(cmd, move)
    now, new = _largest(current), _largest(move.by)
    return now is not None and new is not None and new > now


# ---------------------------------------------------------------------- speculative decoding


@dataclass(frozen=True)
class Acceptance:
    """Draft and accepted tokens at the step each run's verdict was read at, summed over the runs."""

    drafted: float = 0.0
    accepted: float = 0.0

    @property
    def rate(self) -> float:
        return self.accepted / self.drafted if self.drafted > 0 else 0.0


def measured_acceptance(runs: Sequence[dict[str, Any]], slo: SLO | None) -> Acceptance:
    """The acceptance the runs measured where their verdict was read (the knee; else the first step missing the SLO)."""
    drafted = accepted = 0.0
    for report in runs:
        step = _verdict_step(report, slo)[1]
        counters = ((step or {}).get("exporter") or {}).get("counters") or {}
        d, a = counters.get("spec_decode_draft_tokens"), counters.get("spec_decode_accepted_tokens")
        if isinstance(d, (int, float)) and isinstance(a, (int, float)):
            drafted, accepted = drafted + d, accepted + a
    return Acceptance(drafted, accepted)


def _prefix_rate(alpha: float, k: int) -> float:
    return sum(alpha**i for i in range(1, k + 1)) / k


def per_token_acceptance(rate: float, k: int) -> float:
    """The per-token acceptance ``a`` whose prefix rule gives ``rate`` over ``k`` drafted tokens (bisection:
    the rate rises with ``a``)."""
    if rate <= 0 or k < 1:
        return 0.0
    if rate >= 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _prefix_rate(mid, k) < rate else (lo, mid)
    return (lo + hi) / 2


def paying_length(alpha: float, k: int, line: float) -> int:
    """How many leading draft positions (of ``k``) are accepted at least as often as ``line``: a^i >= line."""
    n = 0
    while n < k and alpha ** (n + 1) >= line:
        n += 1
    return n


def _whole(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _json_object(text: str | None) -> dict[str, Any] | None:
    try:
        found = json.loads(text) if text is not None else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def draft_length(cmd: EngineCommand, move: Move) -> int | None:
    """The draft length ``move`` edits as the command sets it (inside the flag's JSON where ``key`` is set);
    None when it is not set or not a whole number (the tuner does not guess an engine's default)."""
    if move.key is not None:
        found = _json_object(cmd.get(move.flag)) if cmd.has(move.flag) else None
        return None if found is None else _whole(found.get(move.key))
    return _whole(running_value(cmd, move))


def _with_draft_length(cmd: EngineCommand, move: Move, n: int) -> tuple[EngineCommand, list[Change]]:
    value = str(n)
    if move.key is not None:
        found = _json_object(cmd.get(move.flag)) or {}
        value = json.dumps({**found, move.key: n}, separators=(",", ":"))
    out = cmd.copy()
    out.set(move.flag, value)
    return out, [Change(move.flag, cmd.get(move.flag), value)]


@dataclass(frozen=True)
class DraftMove:
    """The draft length the measured acceptance pays for, applied to the command."""

    move: Move
    length: int
    cmd: EngineCommand
    changes: list[Change]


def draft_move(cmd: EngineCommand, moves: Sequence[Move], acceptance: Acceptance) -> DraftMove | str:
    """The first move whose draft length is on the command line, set to the positions that pay; else why none."""
    t = Thresholds()
    if acceptance.drafted < t.spec_min_draft_tokens:
        return (
            f"{acceptance.drafted:.0f} draft tokens measured at the knee, fewer than the "
            f"{t.spec_min_draft_tokens:.0f} acceptance is judged on: no speculative setting is changed blind"
        )
    for move in moves:
        k = draft_length(cmd, move)
        if k is None:
            continue
        if k < 1:
            return "the configuration drafts no tokens"
        alpha = per_token_acceptance(acceptance.rate, k)
        pays = paying_length(alpha, k, t.spec_acceptance_min)
        keep = max(pays, int(move.low or 0))
        if keep < k:
            return DraftMove(move, keep, *_with_draft_length(cmd, move, keep))
        if pays >= k:
            return f"the measured acceptance, {alpha:.2f} per draft token, pays for all {k} draft tokens configured"
        return (
            f"the measured acceptance, {alpha:.2f} per draft token, pays for {pays} of the {k} draft tokens configured "
            f"and {keep} is the fewest the tuner sets on this engine"
        )
    spelled = ", ".join(m.flag if m.key is None else f"{m.flag} {m.key}" for m in moves)
    return f"the command line sets no draft length the tuner can read ({spelled})"


def longer_draft(cmd: EngineCommand, move: Move, acceptance: Acceptance) -> DraftMove | str | None:
    """The draft lengthened to the positions the measured acceptance pays for (a memory-bound decode: more
    tokens per weight read), at most ``move.high``; why not; None when the command sets no draft length on
    this flag (drafting on, and its draft model, are the operator's)."""
    k = draft_length(cmd, move)
    if k is None:
        return None
    if k < 1:
        return "the configuration drafts no tokens: drafting on, and its draft model, are the operator's"
    t = Thresholds()
    if acceptance.drafted < t.spec_min_draft_tokens:
        return (
            f"{acceptance.drafted:.0f} draft tokens measured at the knee, fewer than the {t.spec_min_draft_tokens:.0f} "
            "acceptance is judged on: no draft is lengthened blind"
        )
    alpha = per_token_acceptance(acceptance.rate, k)
    pays = paying_length(alpha, max(k, int(move.high or k)), t.spec_acceptance_min)
    if pays <= k:
        return f"the measured acceptance, {alpha:.2f} per draft token, pays for no more than the {k} draft tokens configured"
    return DraftMove(move, pays, *_with_draft_length(cmd, move, pays))


def _draft_decision(engine: str, primary: Primary, entry: Knob, d: DraftMove | str, tried: set[str]) -> Decision:
    """A speculative setting is proposed only when the measured acceptance says it pays; else the no-move stop."""
    if not isinstance(d, str):
        if d.cmd.shell() not in tried:
            return Decision(primary.cause, entry.group, entry.reason, d.cmd, d.changes, d.move)
        d = f"the draft length the measured acceptance pays for, {d.length}, was measured already"
    return Decision(primary.cause, entry.group, entry.reason, stop=f"{primary.name}: {no_move_stop(engine, entry.advice, d)}")


def _condition(cmd: EngineCommand, runs: Sequence[dict[str, Any]], move: Move) -> str | None:
    """Why the move's condition does not hold (slots full at the knee, a larger capture list, room for a larger
    batch, ...); None when it holds or the move has none."""
    if move.when == SLOTS_FULL:
        return None if slots_full(runs, cmd, move) else f"{move.flag}: the running requests did not fill the slots"
    if move.when == LARGER_CAPTURE:
        return None if captures_larger(cmd, move) else f"{move.flag}: captures no larger batches"
    if move.when == BATCH_ROOM:
        if not slots_measured_full(runs, cmd, move):
            return f"{move.flag}: the running batch was not measured filling its slots at the knee"
        usage = kv_usage(runs)
        if usage is not None and usage > KV_ROOM_FOR_DOUBLE:
            return f"{move.flag}: the KV cache was {usage:.0%} full at the knee, no room for twice the sequences"
        return None
    if move.when == KV_NOT_FULL:
        usage = kv_usage(runs)
        if usage is not None and usage >= KV_FULL:
            return (
                f"the KV cache was {usage:.0%} full at the knee: more replicas hold more copies of the weights and less KV in all"
            )
        return None
    if move.when == EXPERT_PARALLEL:
        return None if expert_parallel(cmd) else f"{move.flag}: the command runs no expert parallelism"
    if move.when == DATA_PARALLEL:
        return None if data_parallel(cmd) else f"{move.flag}: the command runs one data-parallel replica"
    return None


def _candidate(
    cmd: EngineCommand, runs: Sequence[dict[str, Any]], slo: SLO, move: Move, deployment: Deployment
) -> tuple[EngineCommand, list[Change]] | str | None:
    """``cmd`` with ``move`` applied; why not (a reason worth saying); None when it does not apply silently."""
    if move.op == LAYOUT:
        return apply_layout(cmd, move)
    if move.op == QUANTISED:
        return apply_quantised(cmd, deployment)
    if move.op == DRAFT_MORE:
        d = longer_draft(cmd, move, measured_acceptance(runs, slo))
        return d if d is None or isinstance(d, str) else (d.cmd, d.changes)
    return apply_move(cmd, move)


def _first_move(
    primary: Primary,
    entry: Knob,
    cmd: EngineCommand,
    runs: Sequence[dict[str, Any]],
    slo: SLO,
    tried: set[str],
    deployment: Deployment,
) -> Decision | str:
    """The first of ``entry``'s moves that applies, inside the deployment's GPUs and not measured yet; else why
    none was proposed (the reasons worth saying, joined)."""
    notes: list[str] = []
    for move in entry.moves:
        why = _condition(cmd, runs, move)
        found = _candidate(cmd, runs, slo, move, deployment) if why is None else why
        if found is None:
            continue
        if isinstance(found, str):
            notes.append(found)
            continue
        new, changes = found
        shown = ", ".join(f"{c.flag} {c.new}" for c in changes)
        gpus = gpus_of(new)
        if deployment.gpus is not None and gpus is not None and gpus > deployment.gpus:
            notes.append(f"{shown}: {gpus} GPUs, more than the {deployment.describe()}")
            continue
        if new.shell() in tried:  # measured already (rejected, or the best itself)
            notes.append(f"{shown}: measured already")
            continue
        return Decision(primary.cause, entry.group, entry.reason, new, changes, move, trade=move.trade)
    return "; ".join(dict.fromkeys(notes))


def decide(
    engine: str,
    cmd: EngineCommand,
    runs: Sequence[dict[str, Any]],
    slo: SLO,
    tried: set[str],
    deployment: Deployment | None = None,
) -> Decision:
    """The next candidate from the best configuration's runs, or why the search stops.

    ``tried`` holds the command lines measured already: after an accepted move the same move
    may apply again from the new best (48 -> 96 KV blocks); a rejected one is not re-measured.
    ``deployment``: the GPUs a candidate may occupy and the quantised build named (default: ``cmd``'s
    own GPUs, none named); no candidate occupies more GPUs than it allows.
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
    dep = deployment if deployment is not None else Deployment.of(cmd)
    if entry.limit is not None:
        why = ""
        if entry.before is not None:  # the moves tried before the stop (issue 33)
            found = _first_move(primary, entry.before, cmd, runs, slo, tried, dep)
            if isinstance(found, Decision):
                return found
            why = found
        return Decision(primary.cause, entry.group, entry.reason, stop=f"{primary.name}: {stop_sentence(engine, entry, why)}")
    if entry.moves and all(m.op == DRAFT for m in entry.moves):
        return _draft_decision(engine, primary, entry, draft_move(cmd, entry.moves, measured_acceptance(runs, slo)), tried)
    found = _first_move(primary, entry, cmd, runs, slo, tried, dep)
    if isinstance(found, Decision):
        return found
    return Decision(
        primary.cause, entry.group, entry.reason, stop=f"{primary.name}: every {engine} move for it was tried or is at its bound"
    )


__all__ = [
    "SLO_HOLDS",
    "Acceptance",
    "Decision",
    "DraftMove",
    "Primary",
    "captures_larger",
    "common_primary",
    "decide",
    "draft_length",
    "draft_move",
    "kv_usage",
    "longer_draft",
    "measured_acceptance",
    "paying_length",
    "per_token_acceptance",
    "slots_full",
    "slots_measured_full",
]
