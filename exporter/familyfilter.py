"""``--metrics.include`` / ``--metrics.exclude``: which metric families ``/metrics`` publishes.

Why: operators cut what a node publishes (cost per series, a family nobody reads, a
dashboard of their own), as dcgm-exporter's counters file lets them. The settings are
comma-separated globs (``fnmatch``, case-sensitive) of family names as docs/metrics.md
lists them, given as flags > ``LLM_EXPORTER_METRICS_{INCLUDE,EXCLUDE}`` > the config file's
``metrics: {include: [...], exclude: [...]}`` (a list or a comma string), like every other
setting (exporter/config.py). A family is published when it matches ``include`` (empty: all)
and matches no ``exclude``.

Why only publishing: the diagnosis judges from the store, which keeps reading every family;
the collector (exporter/collector.py) never builds a family left out. So a filter changes
what is published, never the verdict.

Why the health families are never left out (``schema.HEALTH_FAMILIES``): an exporter that
publishes less must still say whether its sources are up and what it left out
(``llm_exporter_metric_family_excluded{family}``).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from exporter.errors import UsageError
from exporter.schema import HEALTH_FAMILIES, SPECS
from exporter.values import ENV_PREFIX, parsed, section_keys, shown

#: the config file's section and its keys
SECTION = "metrics"
KEYS: tuple[str, ...] = ("include", "exclude")
#: bounds of one list: a glob per family of the schema is already far fewer
MAX_PATTERNS = 256
MAX_PATTERN_CHARS = 200
#: a family glob: name characters, ``*`` and ``?``, and ``[...]`` classes of name characters and ranges
_GLOB = re.compile(r"(?:[A-Za-z0-9_:*?]|\[!?[A-Za-z0-9_:-]+\])+")
_EXAMPLE = "e.g. llm_gpu_throttle_*,llm_gpu_energy_joules_total"


def family_globs(value: Any) -> tuple[str, ...]:
    """A comma-separated string or a list of family globs -> the globs, each once, in order.

    An empty pattern (``a,,b``, a trailing comma, ``""``) is refused rather than skipped: it is
    a typo, and an include list that silently lost its only pattern would publish everything.
    """
    if isinstance(value, str):
        if not value.strip():
            raise ValueError(f"expected a comma-separated list of metric family globs ({_EXAMPLE}), got {shown(value)}")
        items = [v.strip() for v in value.split(",")]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value]
    else:
        raise ValueError(f"expected a comma-separated list of metric family globs ({_EXAMPLE}), got {shown(value)}")
    if len(items) > MAX_PATTERNS:
        raise ValueError(f"at most {MAX_PATTERNS} patterns, got {len(items)}")
    out: list[str] = []
    for item in items:
        if not item:
            raise ValueError(f"an empty pattern in {shown(value)}: one glob between every two commas")
        if len(item) > MAX_PATTERN_CHARS or not _GLOB.fullmatch(item):
            raise ValueError(
                f"{shown(item)} is not a metric family glob: letters, digits, _ and :, with *, ? and [...] ({_EXAMPLE})"
            )
        if item not in out:
            out.append(item)
    return tuple(out)


def _matching(patterns: tuple[str, ...], names: list[str]) -> dict[str, list[str]]:
    return {p: [n for n in names if fnmatchcase(n, p)] for p in patterns}


@dataclass(frozen=True)
class FamilyFilter:
    """The include and exclude globs, and where each list was set (for the start-up warnings)."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    #: (include's origin, exclude's origin): the flag, environment name or ``FILE: metrics.KEY``
    origin: tuple[str, str] = field(default=("--metrics.include", "--metrics.exclude"), compare=False)

    @property
    def active(self) -> bool:
        return bool(self.include or self.exclude)

    def published(self, name: str) -> bool:
        """Whether family ``name`` is published: a health family always, else as the globs say."""
        if name in HEALTH_FAMILIES:
            return True
        if self.include and not any(fnmatchcase(name, p) for p in self.include):
            return False
        return not any(fnmatchcase(name, p) for p in self.exclude)

    def excluded(self) -> tuple[str, ...]:
        """The schema's families left out, in schema order (what the collector never builds)."""
        return tuple(name for name in SPECS if not self.published(name))

    def warnings(self) -> list[str]:
        """One line per pattern that matches no family of the schema, and per exclude pattern that
        would remove a health family (kept). Not errors: an engine's family may match later."""
        names = list(SPECS)
        lines: list[str] = []
        for where, patterns in zip(self.origin, (self.include, self.exclude)):
            for pattern, hits in _matching(patterns, names).items():
                if not hits:
                    lines.append(f"{where}: {pattern!r} matches no metric family of the schema (docs/metrics.md)")
        for pattern, hits in _matching(self.exclude, sorted(HEALTH_FAMILIES)).items():
            if hits:
                lines.append(
                    f"{self.origin[1]}: {pattern!r} would exclude {', '.join(hits)}: the exporter's own health "
                    "families are always published; kept"
                )
        return lines


def _dest(key: str) -> str:
    return f"metrics_{key}"


def _flag(key: str) -> str:
    return f"--metrics.{key}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "metric families (docs/configuration.md)",
        f"comma-separated globs of family names (docs/metrics.md); also {ENV_PREFIX}METRICS_INCLUDE / _EXCLUDE and "
        "the config file's `metrics: {include: [...], exclude: [...]}`; the llm_exporter_* health families are always published",
    )
    group.add_argument(
        _flag("include"),
        dest=_dest("include"),
        default=None,
        metavar="GLOBS",
        help="publish only the families matching one of these globs (default: all)",
    )
    group.add_argument(
        _flag("exclude"),
        dest=_dest("exclude"),
        default=None,
        metavar="GLOBS",
        help="leave out the families matching one of these globs; they are still read by the diagnosis (default: none)",
    )


def load(args: argparse.Namespace, env: Mapping[str, str], raw: Any, where: str | None) -> FamilyFilter:
    """The filter from flags > environment > the ``metrics:`` section; UsageError names the bad setting."""
    values: dict[str, tuple[str, ...]] = {}
    origin = {key: _flag(key) for key in KEYS}
    if raw is not None:
        if not isinstance(raw, dict):
            raise UsageError(f"{where}: {SECTION}: expected a mapping with include and exclude")
        for key, value in section_keys(raw, set(KEYS), f"{where}: {SECTION}").items():
            origin[key] = f"{where}: {SECTION}.{key}"
            values[key] = parsed(family_globs, value, origin[key])
    for key in KEYS:
        env_name = ENV_PREFIX + _dest(key).upper()
        if env.get(env_name):
            origin[key] = env_name
            values[key] = parsed(family_globs, env[env_name], env_name)
        value = getattr(args, _dest(key), None)
        if value is not None:
            origin[key] = _flag(key)
            values[key] = parsed(family_globs, value, _flag(key))
    return FamilyFilter(values.get("include", ()), values.get("exclude", ()), (origin["include"], origin["exclude"]))


__all__ = ["KEYS", "SECTION", "FamilyFilter", "add_arguments", "family_globs", "load"]
