"""Apply one engine's mapping table to a parsed exposition: the neutral points.

Why one generic interpreter: every engine's table (``mappings/<family>.py``) is
data; this module is the only place that knows how a preference list, a label
selector, a unit scale, rank collapsing, ``Sum``/``Product`` and info labels turn
into :class:`~exporter.samples.Sample` / :class:`~exporter.samples.HistogramSample`.
Faults limited to one histogram (missing ``+Inf``, no buckets, cumulative
counts that decrease) do not fail the scrape: they are returned as ``problems``
and that series is left out. A histogram whose cumulative counts decrease is
not republished because every quantile computed from it would be wrong; it is
also counted in ``problems.dropped["bad_histogram"]`` (in published series).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from exporter.engines.table import (
    ConfigField,
    EngineMapping,
    InfoLabel,
    Match,
    Product,
    Quotient,
    Rewrite,
    Row,
    Series,
    Source,
    Sum,
)
from exporter.engines.textparse import Exposition, Labels
from exporter.samples import HistogramSample, Point, Sample
from exporter.schema import FINISH_REASON_FALLBACK, SPECS

#: A neutral label set, as sorted (name, value) pairs: hashable and order-free.
Key = tuple[tuple[str, str], ...]
_FIXED = ("server", "engine")
_UNKNOWN_VALUES = frozenset({"", "None", "none", "null"})


@dataclass
class Hist:
    """A histogram series in base units: cumulative (bound, count) pairs ending at +Inf."""

    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float


Value = float | Hist


class Problems(list[str]):
    """Per-series faults met while applying a table (their text), plus series dropped by reason.

    A list so every caller that reads ``problems`` as a list of strings keeps
    working; ``dropped`` counts published series left out (a histogram costs its
    buckets plus ``_sum`` and ``_count``), keyed by a ``SERIES_DROP_REASONS`` value.
    """

    def __init__(self) -> None:
        super().__init__()
        self.dropped: dict[str, int] = {}

    def drop(self, reason: str, series: int, text: str) -> None:
        self.append(text)
        self.dropped[reason] = self.dropped.get(reason, 0) + series


# --------------------------------------------------------------------------- wanted names


def wanted_names(mapping: EngineMapping) -> set[str]:
    """Every sample name the table reads (histograms: ``_bucket``, ``_sum``, ``_count``)."""
    names: set[str] = set()

    def add(src: Source, kind: str) -> None:
        if isinstance(src, Series):
            if kind == "histogram":
                names.update((src.name + "_bucket", src.name + "_sum", src.name + "_count"))
            else:
                names.add(src.name)
        elif isinstance(src, InfoLabel):
            names.add(src.name)
        else:
            for part in src.parts:
                add(part, kind)

    for row in mapping.rows:
        for src in row.sources:
            add(src, SPECS[row.neutral].type)
    for cf in mapping.config:
        for src in cf.sources:
            add(src, "gauge")
    return names


# --------------------------------------------------------------------------- reading series


def _selected(labels: Labels, match: Mapping[str, Match]) -> bool:
    for k, want in match.items():
        got = labels.get(k)
        if isinstance(want, tuple):
            if got not in want:
                return False
        elif got != want:
            return False
    return True


def _excluded(labels: Labels, exclude: Mapping[str, Match]) -> bool:
    """Whether a label carries one of the excluded values (a missing label never does)."""
    for k, drop in exclude.items():
        got = labels.get(k)
        if got is not None and (got in drop if isinstance(drop, tuple) else got == drop):
            return True
    return False


def _histograms(exp: Exposition, base: str, scale: float, problems: Problems) -> list[tuple[Labels, Value]]:
    """Assemble ``base``'s histogram series from its bucket, sum and count lines."""
    groups: dict[Key, tuple[Labels, list[tuple[str, float]]]] = {}
    for labels, value in exp.samples.get(base + "_bucket", ()):
        le = labels.get("le")
        rest = {k: v for k, v in labels.items() if k != "le"}
        key = tuple(sorted(rest.items()))
        group = groups.get(key)
        if group is None:
            group = groups[key] = (rest, [])
        group[1].append((le if le is not None else "", value))
    sums = {tuple(sorted(labels.items())): v for labels, v in exp.samples.get(base + "_sum", ())}
    counts = {tuple(sorted(labels.items())): v for labels, v in exp.samples.get(base + "_count", ())}
    for key in (sums.keys() | counts.keys()) - groups.keys():
        problems.append(f"{base}{_show(key)}: histogram has _sum/_count but no _bucket lines")
    out: list[tuple[Labels, Value]] = []
    for key, (labels, raw) in groups.items():
        where = f"{base}{_show(key)}"
        try:
            pairs = sorted((float(le), count) for le, count in raw)
        except ValueError:
            problems.append(f"{where}: bucket with a missing or non-numeric le")
            continue
        bounds = [b for b, _ in pairs]
        if any(math.isnan(b) for b in bounds) or len(set(bounds)) != len(bounds):
            problems.append(f"{where}: NaN or repeated bucket bound")
            continue
        if not pairs or not math.isinf(bounds[-1]) or bounds[-1] < 0:
            problems.append(f"{where}: histogram without a +Inf bucket")
            continue
        total = sums.get(key)
        if total is None:
            problems.append(f"{where}: histogram without _sum")
            continue
        if not _monotone(pairs):
            problems.drop("bad_histogram", len(pairs) + 2, f"{where}: cumulative bucket counts decrease (or are NaN)")
            continue
        count = counts.get(key, pairs[-1][1])
        buckets = tuple((b * scale, c) for b, c in pairs) if scale != 1.0 else tuple(pairs)
        out.append((labels, Hist(buckets, total * scale, count)))
    return out


def _monotone(pairs: list[tuple[float, float]]) -> bool:
    """Cumulative counts never decrease from one bound to the next (NaN counts fail)."""
    last = -math.inf
    for _, count in pairs:
        if not count >= last:  # also False for NaN
            return False
        last = count
    return True


def _show(key: Key) -> str:
    """A label set for a problem's text; long values are cut (a message must stay short)."""
    return "{" + ",".join(f'{k}="{v if len(v) <= 40 else v[:40] + "..."}"' for k, v in key) + "}" if key else ""


def _raw(exp: Exposition, src: Series, kind: str, problems: Problems) -> list[tuple[Labels, Value]]:
    if src.requires and src.requires not in exp.names:
        return []
    if kind == "histogram":
        rows = _histograms(exp, src.name, src.scale, problems)
    else:
        rows = [(labels, value * src.scale) for labels, value in exp.samples.get(src.name, ())]
    if src.match:
        rows = [(labels, v) for labels, v in rows if _selected(labels, src.match)]
    if src.exclude:
        rows = [(labels, v) for labels, v in rows if not _excluded(labels, src.exclude)]
    return rows


# --------------------------------------------------------------------------- label mapping and combining


def _combine_values(a: Value, b: Value, how: str, problems: Problems, name: str) -> Value:
    if isinstance(a, Hist) and isinstance(b, Hist):
        if how == "max":
            return a if a.count >= b.count else b
        if [x for x, _ in a.buckets] != [x for x, _ in b.buckets]:
            problems.append(f"{name}: cannot merge histograms with different buckets; kept one")
            return a
        return Hist(
            tuple((x, ca + cb) for (x, ca), (_, cb) in zip(a.buckets, b.buckets, strict=True)), a.sum + b.sum, a.count + b.count
        )
    if isinstance(a, Hist) or isinstance(b, Hist):  # pragma: no cover - a table mixing kinds is a bug
        raise TypeError(f"{name}: cannot combine a histogram with a number")
    return max(a, b) if how == "max" else a + b


def _neutral(
    mapping: EngineMapping,
    spec_labels: frozenset[str],
    rows: list[tuple[Labels, Value]],
    src: Series | InfoLabel,
    how: str,
    problems: Problems,
    name: str,
) -> dict[Key, Value]:
    """Map source labels to neutral ones: replicas by max, then partitions by ``how``."""
    rank_label = next((r for r in mapping.rank_labels if any(r in labels for labels, _ in rows)), None)
    replicas = {r for r in mapping.rank_labels if r != rank_label} | set(mapping.replica_labels)
    stage: dict[Key, Value] = {}
    for labels, value in rows:
        key = tuple(sorted((k, v) for k, v in labels.items() if k not in replicas))
        old = stage.get(key)
        stage[key] = value if old is None else _combine_values(old, value, "max", problems, name)
    consts = src.labels if isinstance(src, Series) else {}
    rename = src.rename if isinstance(src, Series) else {}
    out: dict[Key, Value] = {}
    for key, value in stage.items():
        neutral = {k: v for k, v in consts.items() if k in spec_labels}
        for k, v in key:
            if k == rank_label:
                target: str | None = "rank"
            else:
                target = rename.get(k) or mapping.label_map.get(k)
            if target is not None and target in spec_labels and v not in mapping.blank_values:
                neutral[target] = v
        nkey = tuple(sorted(neutral.items()))
        old = out.get(nkey)
        out[nkey] = value if old is None else _combine_values(old, value, how, problems, name)
    return out


def _info_values(exp: Exposition, src: InfoLabel) -> list[tuple[Labels, str]]:
    return [(labels, labels[src.label]) for labels, _ in exp.samples.get(src.name, ()) if src.label in labels]


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _evaluate(
    mapping: EngineMapping,
    spec_labels: frozenset[str],
    kind: str,
    src: Source,
    how: str,
    exp: Exposition,
    problems: Problems,
    name: str,
) -> dict[Key, Value]:
    if isinstance(src, Series):
        return _neutral(mapping, spec_labels, _raw(exp, src, kind, problems), src, how, problems, name)
    if isinstance(src, InfoLabel):
        rows: list[tuple[Labels, Value]] = []
        for labels, text in _info_values(exp, src):
            number = _number(text)
            if number is not None:
                rows.append((labels, number))
        return _neutral(mapping, spec_labels, rows, src, how, problems, name)
    parts = [_evaluate(mapping, spec_labels, kind, p, how, exp, problems, name) for p in src.parts]
    op = _OPS[type(src)]
    out: dict[Key, Value] = {}
    for key in parts[0]:
        if all(key in p for p in parts):
            acc: Value | None = parts[0][key]
            for p in parts[1:]:
                value = p[key]
                if isinstance(acc, Hist) or isinstance(value, Hist):  # pragma: no cover - a table bug
                    raise TypeError(f"{name}: Sum, Product and Quotient combine numbers, not histograms")
                acc = None if acc is None else op(acc, value)
            if acc is not None:
                out[key] = acc
    return out


def _quotient(a: float, b: float) -> float | None:
    """a / b; None (the label set is left out) where b is 0: a tier of no size has no usage."""
    return a / b if b else None


#: how each composite source folds its parts (None: this label set has no value)
_OPS: dict[type, Callable[[float, float], float | None]] = {
    Sum: lambda a, b: a + b,
    Product: lambda a, b: a * b,
    Quotient: _quotient,
}


def _row(mapping: EngineMapping, row: Row, exp: Exposition, problems: Problems) -> dict[Key, Value]:
    spec = SPECS[row.neutral]
    spec_labels = frozenset(spec.labels) - set(_FIXED)
    for src in row.sources:
        found = _evaluate(mapping, spec_labels, spec.type, src, row.combine, exp, problems, row.neutral)
        if found:
            return _closed(row, found, problems) if spec.values else found
    return {}


def rewrite_value(allowed: tuple[str, ...], rewrite: Rewrite | None, raw: str | None) -> str:
    """One raw label value in a closed vocabulary: the row's rewrite, a vocabulary word as
    is, else the row's default or the schema's bounded fallback (never the raw value)."""
    if rewrite is not None and raw is not None and raw in rewrite.values:
        return rewrite.values[raw]
    if raw is not None and raw in allowed:
        return raw
    if rewrite is not None and rewrite.default is not None:
        return rewrite.default
    return FINISH_REASON_FALLBACK


def _closed(row: Row, found: dict[Key, Value], problems: Problems) -> dict[Key, Value]:
    """``found`` with every closed label rewritten into its vocabulary, merged by ``combine``."""
    spec = SPECS[row.neutral]
    out: dict[Key, Value] = {}
    for key, value in found.items():
        labels = dict(key)
        for label, allowed in spec.values:
            labels[label] = rewrite_value(allowed, row.values.get(label), labels.get(label))
        nkey = tuple(sorted(labels.items()))
        old = out.get(nkey)
        out[nkey] = value if old is None else _combine_values(old, value, row.combine, problems, row.neutral)
    return out


# --------------------------------------------------------------------------- config info


def _config(mapping: EngineMapping, exp: Exposition) -> dict[Key, dict[str, str]]:
    spec_labels = frozenset(SPECS["llm_engine_config_info"].labels) - set(_FIXED)
    key_labels = spec_labels & {"model", "rank"}
    merged: dict[Key, dict[str, str]] = {}
    for cf in mapping.config:
        for key, text in _config_field(mapping, key_labels, cf, exp).items():
            merged.setdefault(key, {})[cf.label] = text
    return merged


def _config_field(mapping: EngineMapping, key_labels: frozenset[str], cf: ConfigField, exp: Exposition) -> dict[Key, str]:
    for src in cf.sources:
        found: dict[Key, str] = {}
        if isinstance(src, InfoLabel):
            for labels, text in _info_values(exp, src):
                text = cf.values.get(text, text)
                if text not in _UNKNOWN_VALUES:
                    found[_key_of(mapping, key_labels, labels)] = text
        else:
            for labels, value in exp.samples.get(src.name, ()):
                if math.isfinite(value):
                    text = str(int(value)) if value == int(value) else repr(value)
                    found[_key_of(mapping, key_labels, labels)] = text
        if found:
            return found
    return {}


def _key_of(mapping: EngineMapping, key_labels: frozenset[str], labels: Labels) -> Key:
    neutral: dict[str, str] = {}
    rank = next((r for r in mapping.rank_labels if r in labels), None)
    if rank is not None and "rank" in key_labels:
        neutral["rank"] = labels[rank]
    for k, v in labels.items():
        target = mapping.label_map.get(k)
        if target is not None and target in key_labels and v not in mapping.blank_values:
            neutral[target] = v
    return tuple(sorted(neutral.items()))


# --------------------------------------------------------------------------- points


def apply(mapping: EngineMapping, exp: Exposition, server: str, generation: str) -> tuple[list[Point], Problems]:
    """All neutral points of one exposition, plus the per-series problems met."""
    problems = Problems()
    found: list[tuple[str, dict[Key, Value]]] = []
    merged: dict[str, dict[Key, Value]] = {}
    for row in mapping.rows:
        values = _row(mapping, row, exp, problems)
        if not values:
            continue
        target = merged.get(row.neutral)
        if target is None:
            merged[row.neutral] = values
            found.append((row.neutral, values))
        else:
            for key, value in values.items():
                old = target.get(key)
                target[key] = value if old is None else _combine_values(old, value, row.combine, problems, row.neutral)
    config = _config(mapping, exp)

    models = {v for _, values in found for key in values for k, v in key if k == "model" and v}
    models |= {v for key in config for k, v in key if k == "model" and v}
    only_model = next(iter(models)) if len(models) == 1 else None
    base = {"server": server, "engine": mapping.family}

    def labels_of(name: str, key: Key) -> dict[str, str]:
        labels = dict(base)
        labels.update(key)
        if only_model is not None and "model" not in labels and "model" in SPECS[name].labels:
            labels["model"] = only_model
        return labels

    points: list[Point] = []
    for name, values in found:
        for key, value in values.items():
            if isinstance(value, Hist):
                points.append(HistogramSample(name, labels_of(name, key), value.buckets, value.sum, value.count))
            else:
                points.append(Sample(name, labels_of(name, key), value))
    for key, fields in config.items():
        labels = labels_of("llm_engine_config_info", key)
        labels.update(fields)
        points.append(Sample("llm_engine_config_info", labels, 1.0))
    for model in sorted(models) or [""]:
        info = dict(base, generation=generation)
        if model:
            info["model"] = model
        points.append(Sample("llm_engine_info", info, 1.0))
    return points, problems


def provided(mapping: EngineMapping) -> set[str]:
    """Neutral names this table can publish (``coverage()`` reads it)."""
    names: set[str] = {"llm_engine_info"} | {row.neutral for row in mapping.rows}
    if mapping.config:
        names.add("llm_engine_config_info")
    return names
