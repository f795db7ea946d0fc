"""The vocabulary of the per-engine mapping tables in ``exporter/engines/mappings/``.

Why data, not code: each engine renames, re-units and re-labels its metrics between
versions. A table row that says "llm_kv_cache_usage_ratio comes from
``vllm:kv_cache_usage_perc``, else ``vllm:gpu_cache_usage_perc``" can be read,
reviewed and extended by a user without following control flow; one generic
normaliser (``normalize.py``) applies every table the same way.

Reading a row:

* ``Row(neutral, sources)``: ``neutral`` is a name from ``exporter/schema.py`` (its
  type there decides gauge / counter / histogram). ``sources`` are tried in order of
  preference; the first that yields any series wins (newest name first). Several
  rows with the same neutral name all contribute (e.g. TGI successes and failures
  both feed ``llm_requests_finished_total``).
* ``Series(name, match=..., scale=..., labels=..., rename=..., requires=...)``: one
  wire series family. For a histogram row ``name`` is the base name (``_bucket``,
  ``_sum``, ``_count`` are read); for counters it is the wire name (with ``_total``).
  ``match`` selects by label value (a tuple means any of). ``scale`` converts units
  (µs -> s: ``1e-6``; for histograms it scales bucket bounds and the sum, never
  counts). ``labels`` adds constant neutral labels (defaults: a mapped source label
  of the same name wins); ``rename`` maps source labels to neutral ones for this
  source only. ``requires`` names a series that must also be
  served, else the source yields nothing (so a meaning is never half-present).
  ``exclude`` drops series whose label has one of the given values (a series
  without the label is kept): "every failure but the admission ones".
* ``InfoLabel(name, label)``: a number read from a label of an info-style gauge
  (``vllm:cache_config_info{block_size="16"}``); non-numeric values ("None") are absent.
* ``Sum(a, b)`` / ``Product(a, b)``: per label set, only where every part is present;
  ``Quotient(a, b)``: a / b, also only where b is not 0.
* ``combine``: how series that map onto the same neutral labels are merged (labels
  the schema does not carry are dropped first): ``"sum"`` (partitions such as
  SGLang's ``cache_source`` or ``is_streaming``) or ``"max"`` (ratios).
  Histograms are merged bucket by bucket (identical bounds required).
* ``values``: neutral label -> ``Rewrite(raw -> value, default)``, for labels the
  schema gives a closed vocabulary (``MetricSpec.values``, e.g. the finish reasons
  of ``llm_requests_finished_total``). A raw value the rewrite does not name is
  kept when it already is a vocabulary word, else it becomes ``default`` (the
  schema's fallback, ``other``, when None); series that then share labels are
  merged with ``combine``. Without a rewrite a closed label still falls back,
  so an engine's raw value never reaches the wire.

Ranks: an ``EngineMapping`` names its ``rank_labels``; the first one a series
carries becomes the neutral ``rank`` label (ranks are kept, never summed away), the
others and ``replica_labels`` identify duplicate reporters of the same data and are
collapsed with ``max`` before ``combine`` runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

#: A label selector value: one exact value, or any of several.
Match = str | tuple[str, ...]


@dataclass(frozen=True)
class Series:
    """One wire series family, optionally filtered by label values."""

    name: str
    match: Mapping[str, Match] = field(default_factory=dict)
    scale: float = 1.0
    labels: Mapping[str, str] = field(default_factory=dict)
    rename: Mapping[str, str] = field(default_factory=dict)
    requires: str | None = None
    exclude: Mapping[str, Match] = field(default_factory=dict)


@dataclass(frozen=True)
class InfoLabel:
    """A numeric value carried in a label of an info-style gauge (value 1)."""

    name: str
    label: str


@dataclass(frozen=True)
class Sum:
    """The sum of several sources, only where all of them are present."""

    parts: tuple[Source, ...]


@dataclass(frozen=True)
class Product:
    """The product of several sources, only where all of them are present."""

    parts: tuple[Source, ...]


@dataclass(frozen=True)
class Quotient:
    """The first source divided by the second, only where both are present and the divisor is
    not 0: a ratio an engine publishes as its two parts (SGLang's host tokens used / total)."""

    parts: tuple[Source, ...]


Source = Series | InfoLabel | Sum | Product | Quotient


@dataclass(frozen=True)
class Rewrite:
    """An engine's raw values of one label -> the schema's closed vocabulary for it.

    Why per row: the same neutral reason comes from different words per engine
    (Triton ``CANCELED``, TGI ``dropped``, vLLM ``abort``), and a failure counter's
    unknown reason is still a failure (``default="error"``) while a success
    counter's is not (the schema's fallback).
    """

    values: Mapping[str, str]
    default: str | None = None


@dataclass(frozen=True)
class Row:
    """One neutral metric and where an engine keeps it, in order of preference."""

    neutral: str
    sources: tuple[Source, ...]
    combine: str = "sum"
    note: str = ""
    values: Mapping[str, Rewrite] = field(default_factory=dict)


@dataclass(frozen=True)
class ConfigField:
    """One label of ``llm_engine_config_info`` and where its value comes from.

    Sources are an info label (string value taken as is) or a gauge (its value
    printed as an integer when whole). ``values`` rewrites raw values
    (``"True"`` -> ``"true"``); a value mapped to ``""`` is treated as unknown.
    """

    label: str
    sources: tuple[InfoLabel | Series, ...]
    values: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Generation:
    """A rule naming a metric generation; the first rule that matches wins.

    ``any_of``: at least one of these names is served. ``none_of``: none is.
    ``label``: some wanted series of the family carries this label.
    ``prefixes``: some served name starts with one of these. A rule with no
    condition always matches (put it last as the fallback).
    """

    name: str
    any_of: tuple[str, ...] = ()
    none_of: tuple[str, ...] = ()
    label: str | None = None
    prefixes: tuple[str, ...] = ()


@dataclass(frozen=True)
class EngineMapping:
    """Everything needed to turn one engine family's exposition into the schema."""

    family: str
    #: name prefixes that identify the family (detection counts names per prefix)
    prefixes: tuple[str, ...]
    generations: tuple[Generation, ...]
    #: source label -> neutral label, for every source of the family
    label_map: Mapping[str, str]
    rows: tuple[Row, ...]
    config: tuple[ConfigField, ...] = ()
    rank_labels: tuple[str, ...] = ()
    replica_labels: tuple[str, ...] = ()
    #: (prefix, style) pairs for engines that serve one table under several
    #: prefixes (SGLang ``sglang:`` / ``sglang_``). The table is written with the
    #: first; the served one is chosen by name count, and its style is prepended
    #: to the generation (``colon-0.5.11+``).
    prefix_styles: tuple[tuple[str, str], ...] = ()
    #: label values that mean "unknown" for this engine (dropped, as if unlabeled)
    blank_values: tuple[str, ...] = ()

    def with_prefix(self, old: str, new: str) -> EngineMapping:
        """The same table with every source name's ``old`` prefix replaced by ``new``."""

        def ren(name: str) -> str:
            return new + name[len(old) :] if name.startswith(old) else name

        def leaf(s: Series | InfoLabel) -> Series | InfoLabel:
            if isinstance(s, Series):
                return replace(s, name=ren(s.name), requires=ren(s.requires) if s.requires else None)
            return replace(s, name=ren(s.name))

        def src(s: Source) -> Source:
            if isinstance(s, (Series, InfoLabel)):
                return leaf(s)
            return replace(s, parts=tuple(src(p) for p in s.parts))

        rows = tuple(replace(r, sources=tuple(src(s) for s in r.sources)) for r in self.rows)
        config = tuple(replace(c, sources=tuple(leaf(s) for s in c.sources)) for c in self.config)
        gens = tuple(
            replace(g, any_of=tuple(ren(n) for n in g.any_of), none_of=tuple(ren(n) for n in g.none_of)) for g in self.generations
        )
        return replace(self, rows=rows, config=config, generations=gens)
