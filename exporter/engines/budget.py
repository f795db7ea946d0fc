"""What one engine may publish: a series budget and a label-value length limit.

Why after normalisation: the cost that matters is what the exporter publishes
(what Prometheus stores), not what the engine serves. A mapping can turn one
input line into several series and a histogram publishes a series per bucket
plus ``_sum`` and ``_count``, so a cap on input lines says little about the
output (19 k lines in, 38 k series out). Why a budget rather than rejecting
the engine: a label that explodes (a request id, a LoRA adapter per user) must
not blank the core signals the diagnosis reads, so the most useful families
are kept first and only the rest is dropped, and counted.

Why cut label values: an engine that puts a prompt or a 1 MB model path in a
label would otherwise be republished verbatim on every scrape. A cut value
ends in a short hash of the whole value, so two long values that share a
prefix stay two series.

Why an input limit as well: the budget is applied to parsed points, so
parsing itself needs a bound; :func:`input_limit` is far above what the budget
publishes and only stops pathological bodies (``too_many_series``).

Why a share per family before both: a label explosion is nearly always one
family (a request id, a LoRA adapter per user). Refusing the whole body for it
blanked the KV-cache, queue and latency series the verdict needs; the parser
instead drops the one family over :func:`family_share` as it streams
(``textparse.parse``), counted as ``family_budget``, and the input limit then
bounds only what is kept.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from exporter.engines.textparse import family_of as family_name
from exporter.samples import HistogramSample, Point
from exporter.schema import SPECS

#: Longest label value republished; longer ones are cut (counted as ``label_too_long``).
MAX_LABEL_LENGTH = 256
#: The input-line safety limit is this many times the budget, and at least the floor.
INPUT_SERIES_FACTOR = 4
INPUT_SERIES_FLOOR = 50_000
#: One metric family may have as many sample lines as the whole published budget, and at
#: least this many: past that it is dropped unread (``family_budget``), the others kept.
FAMILY_SHARE_FLOOR = 10_000

#: Families kept first when over budget: what the diagnosis needs to say anything
#: (memory, scheduler and latency layers), then throughput, then the engine's
#: identity (after the core: one point per model, so a model label that rotates
#: must not crowd the core out); every other family follows in schema order.
PRIORITY: tuple[str, ...] = (
    "llm_kv_cache_usage_ratio",
    "llm_scheduler_requests_running",
    "llm_scheduler_requests_waiting",
    "llm_kv_cache_preemptions_total",
    "llm_request_ttft_seconds",
    "llm_request_inter_token_seconds",
    "llm_scheduler_queue_seconds",
    "llm_requests_finished_total",
    "llm_prompt_tokens_total",
    "llm_generation_tokens_total",
    "llm_engine_info",
)
_RANK: dict[str, int] = {name: i for i, name in enumerate(PRIORITY)}
for _name in SPECS:
    _RANK.setdefault(_name, len(_RANK))
_HASH_CHARS = 8


def rank_of(neutral: str) -> int:
    """Where ``neutral`` comes in the order families are kept in when over budget (0 first)."""
    return _RANK.get(neutral, len(_RANK))


@dataclass(frozen=True)
class LinePlace:
    """Where a wanted wire sample name stands when lines are budgeted before parsing."""

    #: rank of the neutral metric it feeds (:func:`rank_of`)
    rank: int
    #: its unit: a histogram's base name (``_bucket``/``_sum``/``_count`` kept or cut together), else itself
    unit: str
    #: wire names its row prefers to it: when one is served, this one is never read (an older name)
    preferred: tuple[str, ...] = ()


LineOrder = Mapping[str, LinePlace]


@dataclass
class LineQuotas:
    """What :func:`line_quotas` decided: lines to materialise per name, and names no row will read."""

    quotas: dict[str, int]
    #: names left unread that are not the budget's to count: a preferred source of their row is
    #: served, or their family is over its share (the parser counts those as ``family_budget``)
    unused: frozenset[str]


def line_quotas(lines: Mapping[str, int], order: LineOrder, budget: int, share: int | None = None) -> LineQuotas | None:
    """Lines to materialise per wanted sample name for ``budget`` series, or None when all fit.

    Why before parsing: a body whose wanted families hold three times the budget
    was parsed whole and then cut, so the parse cost three budgets of label dicts
    (48 MiB for 57 000 lines); the quotas let the parser build only what could be
    published. The same greedy as :func:`within_budget`, on line counts: units in
    :data:`PRIORITY` order, whole while they fit; the first gauge or counter that
    does not fit keeps its first lines (the engine's own order, stable from scrape
    to scrape, where :func:`within_budget` cuts in label order); the first histogram
    that does not fit is read whole (at most one family share) and cut exactly by
    :func:`within_budget`; every unit after the one that crossed is left unread. A
    line feeds at least one published series, so nothing that could be published
    is cut, except where a mapping merges series (replicas, partitions): there the
    quotas cut a little early. Each unread line counts once as ``budget`` in the
    dropped counter; names a row never reads because a preferred name is served do
    not count. Families over their ``share`` get no line at all (the parser drops and
    counts them; without the quota it built a share's worth of them first: 20 000
    label dicts of a 200 000-line flood).
    """
    shares: dict[str, int] = {}
    if share is not None:
        for name, n in lines.items():
            family = family_name(name)
            shares[family] = shares.get(family, 0) + n
    units: dict[tuple[int, str], list[str]] = {}
    unused: set[str] = set()
    flooded: set[str] = set()
    total = 0
    for name, n in lines.items():
        place = order.get(name)
        if place is None:
            continue
        if share is not None and shares[family_name(name)] > share:
            flooded.add(name)
        elif any(lines.get(p) for p in place.preferred):
            unused.add(name)
        else:
            units.setdefault((place.rank, place.unit), []).append(name)
            total += n
    if total <= budget:
        # a family over its share is never built, not even the share's worth before the parser sees it cross
        return LineQuotas(dict.fromkeys(flooded, 0), frozenset(flooded)) if flooded else None
    quotas = dict.fromkeys(unused | flooded, 0)
    left = budget
    for (_, unit), names in sorted(units.items()):
        size = sum(lines[n] for n in names)
        if size <= left:
            quotas.update((n, lines[n]) for n in names)
            left -= size
        elif left and len(names) == 1 and names[0] == unit:
            quotas[unit] = left
            left = 0
        elif left:
            quotas.update((n, lines[n]) for n in names)
            left = 0
        else:
            quotas.update(dict.fromkeys(names, 0))
    return LineQuotas(quotas, frozenset(unused | flooded))


def input_limit(max_series: int) -> int:
    """Input sample lines parsed at most for a budget of ``max_series`` published series."""
    return max(INPUT_SERIES_FLOOR, INPUT_SERIES_FACTOR * max_series)


def family_share(max_series: int) -> int:
    """Input sample lines one metric family may have for a budget of ``max_series`` published series.

    Why the whole budget: a family with more lines than the exporter may publish
    in all cannot be published whole, and parsing it would cost up to the input
    limit; a real engine's largest family (a histogram over 20 data-parallel
    ranks) has under a thousand lines.
    """
    return max(FAMILY_SHARE_FLOOR, max_series)


def series_cost(point: Point) -> int:
    """Series ``point`` publishes: 1, or a histogram's buckets plus ``_sum`` and ``_count``."""
    return len(point.buckets) + 2 if isinstance(point, HistogramSample) else 1


def cut_value(value: str, limit: int = MAX_LABEL_LENGTH) -> str:
    """``value`` cut to ``limit`` characters, ending in ``~`` and a hash of the whole value."""
    if len(value) <= limit:
        return value
    digest = hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=_HASH_CHARS // 2).hexdigest()
    return value[: max(0, limit - _HASH_CHARS - 1)] + "~" + digest


def cut_long_labels(points: list[Point], limit: int) -> tuple[list[Point], int]:
    """Points with every label value longer than ``limit`` cut, and the series so changed."""
    cut = 0
    out: list[Point] | None = None
    for i, point in enumerate(points):
        if max(map(len, point.labels.values()), default=0) <= limit:
            if out is not None:
                out.append(point)
            continue
        if out is None:
            out = points[:i]
        labels = {k: cut_value(v, limit) for k, v in point.labels.items()}
        out.append(replace(point, labels=labels))
        cut += series_cost(point)
    return (points if out is None else out), cut


def _label_order(point: Point) -> str:
    """A sort key for a point's labels: one string (a tuple of pairs costs ~3x the memory for 60k points)."""
    return "\x00".join(f"{k}\x01{v}" for k, v in sorted(point.labels.items()))


def within_budget(points: list[Point], budget: int) -> tuple[list[Point], int]:
    """The points to publish under ``budget`` series, and the series dropped.

    Families are taken in :data:`PRIORITY` order, whole while they fit; a
    family that does not fit is filled point by point in label order (the same
    points every scrape while the labels stay the same), and smaller families
    after it may still use what is left.
    """
    total = sum(series_cost(p) for p in points)
    if total <= budget:
        return points, 0
    families: dict[str, list[Point]] = {}
    for p in points:
        families.setdefault(p.name, []).append(p)
    kept: list[Point] = []
    left = budget
    for name in sorted(families, key=lambda n: _RANK.get(n, len(_RANK))):
        family = families[name]
        cost = sum(series_cost(p) for p in family)
        if cost <= left:
            kept.extend(family)
            left -= cost
            continue
        for p in sorted(family, key=_label_order):
            c = series_cost(p)
            if c <= left:
                kept.append(p)
                left -= c
    return kept, total - (budget - left)


def published_series(points: Iterable[Point]) -> int:
    """Series ``points`` publish on the wire."""
    return sum(series_cost(p) for p in points)
