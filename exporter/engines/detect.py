"""Which engine family, which served prefix and which metric generation an exposition is.

Why from the names served: an exporter pointed at a URL cannot ask the engine
what it is, and engines rename metrics between versions; the names present (and a
telltale label such as vLLM V1's ``engine``) say both the family and the
generation. The rules are data in each mapping table (``Generation`` rows); this
module only evaluates them. A configured ``type`` overrides family detection.
"""

from __future__ import annotations

from collections.abc import Set
from functools import cache

from exporter.engines.mappings import MAPPINGS
from exporter.engines.table import EngineMapping, Generation
from exporter.engines.textparse import Exposition


def family_counts(names: Set[str]) -> dict[str, int]:
    """Number of served names that carry each family's prefixes."""
    counts = {family: 0 for family in MAPPINGS}
    for name in names:
        for family, mapping in MAPPINGS.items():
            if name.startswith(mapping.prefixes):
                counts[family] += 1
                break
    return counts


def detect_family(names: Set[str]) -> str | None:
    """The family with the most names served, or None when no family matches.

    Ties go to the earlier family in ``MAPPINGS`` (a deterministic answer).
    """
    counts = family_counts(names)
    best = max(counts.values(), default=0)
    if best == 0:
        return None
    return next(f for f, c in counts.items() if c == best)


@cache
def _variant(family: str, prefix: str) -> EngineMapping:
    base = MAPPINGS[family]
    written = base.prefix_styles[0][0]
    return base if prefix == written else base.with_prefix(written, prefix)


def served_variant(mapping: EngineMapping, names: Set[str]) -> tuple[EngineMapping, str | None]:
    """The table read with the prefix the endpoint serves, and that prefix's style name.

    For families with one prefix this is ``(mapping, None)``.
    """
    if not mapping.prefix_styles:
        return mapping, None
    best_prefix, best_style, best_count = mapping.prefix_styles[0][0], mapping.prefix_styles[0][1], -1
    for prefix, style in mapping.prefix_styles:
        count = sum(1 for n in names if n.startswith(prefix))
        if count > best_count:
            best_prefix, best_style, best_count = prefix, style, count
    return _variant(mapping.family, best_prefix), best_style


def _matches(rule: Generation, mapping: EngineMapping, exp: Exposition) -> bool:
    if rule.any_of and not any(n in exp.names for n in rule.any_of):
        return False
    if any(n in exp.names for n in rule.none_of):
        return False
    if rule.prefixes and not any(n.startswith(rule.prefixes) for n in exp.names):
        return False
    if rule.label is not None:
        label = rule.label
        found = any(
            label in labels for name, rows in exp.samples.items() if name.startswith(mapping.prefixes) for labels, _ in rows
        )
        if not found:
            return False
    return True


def detect_generation(mapping: EngineMapping, exp: Exposition) -> str:
    """The first generation rule of ``mapping`` that matches; "unknown" if none does."""
    for rule in mapping.generations:
        if _matches(rule, mapping, exp):
            return rule.name
    return "unknown"
