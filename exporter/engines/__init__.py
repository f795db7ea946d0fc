"""Engine adapters: scrape an inference server's own /metrics, publish the neutral schema.

Why: every engine (vLLM, SGLang, TGI, TensorRT-LLM, llama.cpp) names, units and
labels the same concepts differently and renames them between versions; one
dashboard and one rule set can only work on one engine-neutral vocabulary, the
names in ``exporter/schema.py``.

Layout (find a thing by name):

* ``textparse.py``   fast selective Prometheus/OpenMetrics text parser
* ``detect.py``      family, served prefix and generation from the names served
* ``table.py``       the vocabulary of mapping tables (``Row``, ``Series``, ...)
* ``mappings/<family>.py``  one declarative table per engine family
* ``normalize.py``   applies a table to a parsed exposition
* ``budget.py``      series budget, label-value length limit, input safety limit
* ``urls.py``        URLs without userinfo (labels, logs), same-origin checks
* ``fetch.py``       one bounded HTTP GET: one deadline, byte cap, redirects
* ``source.py``      ``EngineSource``: HTTP scrape with limits, the Source protocol

Stable public API (used by tests/integration and the ``schema`` command):

``normalize_exposition(text, server, engine_type="auto", *, max_series=None, max_input_series=None, max_label_length=256, max_family_series=None) -> NormalizedResult``
    Pure: exposition text in, neutral points out. ``NormalizedResult`` has
    ``points`` (``Sample`` / ``HistogramSample`` with schema names and labels
    ``server``, ``engine`` (= family), ``model``, ``rank``, ...), ``family``,
    ``generation`` (e.g. ``v1``, ``colon-0.5.11+``, ``triton``, ``new``),
    ``problems`` (per-series faults that did not fail the whole exposition, e.g. a
    histogram without ``+Inf`` or with decreasing counts; the series is left
    out), ``series`` (sample lines served) and ``dropped`` (published series
    left out or changed, by reason: ``budget``, ``label_too_long``,
    ``bad_histogram``, ``family_budget``) and ``dropped_families`` (family ->
    sample lines, for the families over their share). ``max_series`` is the
    budget of *published* series (see ``budget.py``: the most useful families
    are kept first); label values longer than ``max_label_length`` are cut; a
    metric family with more than ``max_family_series`` sample lines (by default
    ``budget.family_share(max_series)``) is dropped as it is parsed, the others
    kept. Raises ``ParseError`` on invalid or truncated text, or when no known
    engine is recognised (or the configured type's names are missing), and
    ``SeriesLimitError`` past the input safety limit (``max_input_series``, by
    default ``budget.input_limit(max_series)``, counting the families kept) or
    when every family the mappings read is over its share.
    ``engine_type`` is ``auto`` or one of ``FAMILIES``.
``coverage() -> dict[str, set[str]]``
    family -> neutral names its table can provide (absent = not exposed).
``value_rewrites() -> dict[str, dict[str, dict[str, str]]]``
    metric -> family -> {raw value (as docs show it): vocabulary value}, for the
    labels the schema closes (docs/metrics.md "Label values").
``EngineSource(cfg: exporter.config.EngineConfig)``
    The Source for ``engine:<cfg.name>`` (import from ``exporter.engines.source``).
``ParseError``, ``SeriesLimitError``, ``FAMILIES``.

Meanings are identical on every engine: ``llm_prompt_tokens_total`` includes
prefix-cache hits, ratios are 0-1, times are seconds, counters pass through as
cumulative values, histograms keep native buckets (bounds converted to seconds),
and a concept an engine does not expose is absent, never 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

from exporter.engines.budget import (
    MAX_LABEL_LENGTH,
    LineOrder,
    LinePlace,
    cut_long_labels,
    family_share,
    input_limit,
    line_quotas,
    rank_of,
    within_budget,
)
from exporter.engines.detect import detect_family, detect_generation, family_counts, served_variant
from exporter.engines.mappings import FAMILIES, MAPPINGS
from exporter.engines.normalize import apply, provided, wanted_names
from exporter.engines.table import EngineMapping, InfoLabel, Series, Source
from exporter.engines.textparse import ParseError, SeriesLimitError, lines_by_name, parse
from exporter.samples import Point
from exporter.schema import SPECS

__all__ = [
    "FAMILIES",
    "NormalizedResult",
    "ParseError",
    "SeriesLimitError",
    "coverage",
    "normalize_exposition",
    "value_rewrites",
]


@dataclass
class NormalizedResult:
    """The neutral view of one exposition (see the module docstring)."""

    points: list[Point]
    family: str
    generation: str
    problems: list[str] = field(default_factory=list)
    series: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    #: families over their share of input lines, dropped unread: family -> its sample lines
    dropped_families: dict[str, int] = field(default_factory=dict)


@cache
def _wanted(family: str) -> frozenset[str]:
    """Names the parser keeps for ``family`` (every served-prefix variant), or all families."""
    return frozenset(name for mapping in _mappings(family) for name in wanted_names(mapping))


def _mappings(family: str) -> list[EngineMapping]:
    """The tables of ``family`` (all families for auto), every served-prefix variant included."""
    out = []
    for fam in FAMILIES if family == "auto" else (family,):
        mapping = MAPPINGS[fam]
        out.append(mapping)
        out.extend(mapping.with_prefix(mapping.prefix_styles[0][0], prefix) for prefix, _ in mapping.prefix_styles[1:])
    return out


@cache
def _line_order(family: str) -> LineOrder:
    """Every wanted wire name -> its :class:`LinePlace`, for the budget's quotas."""
    order: dict[str, LinePlace] = {}

    def add(name: str, place: LinePlace) -> None:
        if name not in order or place.rank < order[name].rank:
            order[name] = place

    def leaves(src: Source, histogram: bool) -> list[tuple[str, str]]:
        """(wire name, unit) of every name ``src`` reads."""
        if isinstance(src, Series) and histogram:
            return [(src.name + suffix, src.name) for suffix in ("_bucket", "_sum", "_count")]
        if isinstance(src, (Series, InfoLabel)):
            return [(src.name, src.name)]
        return [leaf for part in src.parts for leaf in leaves(part, histogram)]

    for mapping in _mappings(family):
        for row in mapping.rows:
            rank, histogram = rank_of(row.neutral), SPECS[row.neutral].type == "histogram"
            before: list[str] = []
            for src in row.sources:
                read = leaves(src, histogram)
                for name, unit in read:
                    add(name, LinePlace(rank, unit, tuple(before)))
                before += [name for name, _ in read]
        for cf in mapping.config:
            for leaf in cf.sources:
                for name, unit in leaves(leaf, False):
                    add(name, LinePlace(rank_of("llm_engine_config_info"), unit))
    return order


def normalize_exposition(
    text: str,
    server: str,
    engine_type: str = "auto",
    *,
    max_series: int | None = None,
    max_input_series: int | None = None,
    max_label_length: int | None = MAX_LABEL_LENGTH,
    max_family_series: int | None = None,
) -> NormalizedResult:
    """Parse one exposition and map it onto the neutral schema (pure, no I/O)."""
    if engine_type != "auto" and engine_type not in MAPPINGS:
        raise ValueError(f"unknown engine type {engine_type!r}; expected auto or one of {', '.join(FAMILIES)}")
    if max_input_series is None and max_series is not None:
        max_input_series = input_limit(max_series)
    if max_family_series is None and max_series is not None:
        max_family_series = family_share(max_series)
    wanted = _wanted(engine_type)
    quotas = None
    if max_series is not None and text.count("\n") > max_series:  # a cheap bound on the sample lines first
        quotas = line_quotas(lines_by_name(text), _line_order(engine_type), max_series, max_family_series)
    exp = parse(text, wanted, max_input_series, max_family_series, quotas.quotas if quotas else None)
    unread = sum(n for name, n in exp.cut.items() if quotas is None or name not in quotas.unused)
    if exp.dropped_families and not exp.samples:
        # every family a mapping reads is over its share (or absent): nothing worth publishing is left
        worst = max(exp.dropped_families, key=exp.dropped_families.__getitem__)
        raise SeriesLimitError(
            max_family_series or 0,
            f"no metric family the mappings read is left under its share of {max_family_series} sample lines"
            f" ({worst[:80]}: {exp.dropped_families[worst]} lines)",
        )
    if engine_type == "auto":
        family = detect_family(exp.names)
        if family is None:
            raise ParseError(0, f"no metric of a known engine ({', '.join(FAMILIES)}) in the exposition")
    else:
        family = engine_type
        if family_counts(exp.names)[family] == 0:
            prefixes = ", ".join(MAPPINGS[family].prefixes)
            raise ParseError(0, f"configured type {family}, but no metric name starts with {prefixes}")
    mapping, style = served_variant(MAPPINGS[family], exp.names)
    generation = detect_generation(mapping, exp)
    if style is not None:
        generation = f"{style}-{generation}"
    points, problems = apply(mapping, exp, server, generation)
    dropped = dict(problems.dropped)
    if max_label_length is not None:
        points, cut = cut_long_labels(points, max_label_length)
        if cut:
            dropped["label_too_long"] = cut
    if max_series is not None:
        points, over = within_budget(points, max_series)
        if over + unread:
            dropped["budget"] = over + unread
    if exp.dropped_families:
        dropped["family_budget"] = sum(exp.dropped_families.values())
    return NormalizedResult(
        points=points,
        family=family,
        generation=generation,
        problems=list(problems),
        series=exp.series,
        dropped=dropped,
        dropped_families=exp.dropped_families,
    )


def coverage() -> dict[str, set[str]]:
    """family -> the neutral names its mapping table can provide."""
    return {family: provided(mapping) for family, mapping in MAPPINGS.items()}


def value_rewrites() -> dict[str, dict[str, dict[str, str]]]:
    """metric -> family -> {raw: value} for every closed label an engine table fills (for docs).

    Keys read as docs show them: a raw value in backticks, a constant as
    "no reason (`series`)", a row's default as "any other (`series`)".
    """
    from exporter.schema import FINISH_REASON_FALLBACK, SPECS

    out: dict[str, dict[str, dict[str, str]]] = {}
    for family, mapping in MAPPINGS.items():
        for row in mapping.rows:
            spec = SPECS[row.neutral]
            for label, _allowed in spec.values:
                table = out.setdefault(row.neutral, {}).setdefault(family, {})
                rewrite = row.values.get(label)
                series = [src for src in row.sources if isinstance(src, Series)]
                for src in series:
                    if label in src.labels:
                        table[f"no {label} (`{src.name}`)"] = src.labels[label]
                if rewrite is None:  # only constants: no raw value to rewrite
                    continue
                for raw, value in rewrite.values.items():
                    table[f"`{raw}`"] = value
                names = ", ".join(f"`{src.name}`" for src in series)
                table[f"any other ({names})"] = rewrite.default or FINISH_REASON_FALLBACK
    for families in out.values():
        for family in MAPPINGS:
            families.setdefault(family, {})
    return out
