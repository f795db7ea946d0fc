"""Small PromQL helpers shared by the rule and dashboard generators.

Why here and not a PromQL parser: the only question the generators' ``--check``
asks is "which metric names does this expression read?". A lexer that drops
strings, label matchers, range selectors and grouping clauses answers it for
the PromQL we write (Prometheus 2.42), with no dependency to install. It is
deliberately strict: anything that looks like a bare identifier and is not a
keyword or a function call counts as a metric name, so an unknown name is
reported rather than silently ignored.
"""

from __future__ import annotations

import re

#: Words PromQL uses as operators or modifiers; never metric names.
KEYWORDS = frozenset(
    {
        "and",
        "or",
        "unless",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "offset",
        "bool",
        "inf",
        "nan",
        "atan2",
        "start",
        "end",
    }
)

#: Functions newer than Prometheus 2.42 (Debian bookworm), which must not appear.
TOO_NEW_FUNCTIONS = frozenset(
    {"limitk", "limit_ratio", "sort_by_label", "sort_by_label_desc", "info", "double_exponential_smoothing"}
)

_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w:.])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?")
_CALL = re.compile(r"\b([a-z_][a-z0-9_]*)\s*\(")


def _strip(expr: str) -> str:
    expr = _STRING.sub('""', expr)
    expr = _MATCHERS.sub(" ", expr)
    expr = _RANGE.sub(" ", expr)
    return _GROUPING.sub(" ", expr)


def metric_names(expr: str) -> set[str]:
    """Metric names an expression selects (function names and keywords excluded)."""
    names: set[str] = set()
    for match in _IDENT.finditer(_strip(expr)):
        word, call = match.group(1), match.group(2)
        if call or word.lower() in KEYWORDS:
            continue
        names.add(word)
    return names


def functions(expr: str) -> set[str]:
    """Function (and aggregation) names an expression calls."""
    return {m.group(1) for m in _CALL.finditer(_strip(expr)) if m.group(1) not in KEYWORDS}


def problems(expr: str, known: set[str]) -> list[str]:
    """Why an expression would break on our Prometheus: unknown names, newer functions, bitwise tricks."""
    out = [f"unknown metric {name!r}" for name in sorted(metric_names(expr) - known)]
    out += [f"function {name}() needs Prometheus newer than 2.42" for name in sorted(functions(expr) & TOO_NEW_FUNCTIONS)]
    stripped = _strip(expr)
    if re.search(r"\b(and|or|unless)\s+[0-9.e+x]+\s*(\)|$|[!=<>])", stripped):
        out.append("set operator with a number: PromQL has no bitwise operators")
    if re.search(r"[&|]|<<|>>", stripped):
        out.append("bitwise operator: PromQL has none")
    return out


_CLAUSE = re.compile(r"\b(by|on)\s*\(([^()]*)\)")


def _argument(expr: str, start: int) -> str:
    """The balanced parenthesised text opening at or after ``start`` (an aggregation's argument)."""
    i = start
    while i < len(expr) and expr[i].isspace():
        i += 1
    if i >= len(expr) or expr[i] != "(":
        return ""
    depth = 0
    for j in range(i, len(expr)):
        if expr[j] == "(":
            depth += 1
        elif expr[j] == ")":
            depth -= 1
            if depth == 0:
                return expr[i + 1 : j]
    return expr[i + 1 :]


def grouping(expr: str) -> list[tuple[str, tuple[str, ...], str]]:
    """Every ``by (...)`` and ``on (...)`` clause: (keyword, labels, what it groups).

    What it groups: for ``by``, the aggregation's argument (we always write ``agg by (...) (arg)``);
    for ``on``, the whole expression (a join's operands are not worth a parser here).
    """
    stripped = _STRING.sub('""', expr)
    out = []
    for m in _CLAUSE.finditer(stripped):
        labels = tuple(x.strip() for x in m.group(2).split(",") if x.strip())
        operand = _argument(stripped, m.end()) if m.group(1) == "by" else stripped
        out.append((m.group(1), labels, operand))
    return out


def engine_problems(expr: str, verdict: set[str], engine: str, always: bool = False) -> list[str]:
    """Groupings of the per-engine verdict that would merge two engines of one exporter.

    Why: the diagnosis judges each engine on its own (issue 20); a rule that keeps ``instance``
    but drops ``engine`` folds engine B's verdict into engine A's (one page for both, or a
    many-to-many join error). ``always``: every grouping of the verdict must keep ``engine``
    (dashboards, which draw one line per engine), not only those keeping ``instance``.
    """
    out = []
    for keyword, labels, operand in grouping(expr):
        if engine in labels or not metric_names(operand) & verdict:
            continue
        if always or "instance" in labels:
            out.append(f"{keyword} ({', '.join(labels)}) of the per-engine verdict drops label {engine!r}")
    return out


def le_matcher(seconds: float) -> str:
    """A regex for the ``le`` label of one bucket boundary, whatever float spelling the engine used.

    Why: Prometheus 2.42 compares ``le`` as a string, and client libraries write
    1 second as "1" (Go) or "1.0" (Python). Matching all spellings keeps the SLO ratio alive
    across engines and client versions.
    """
    value = float(seconds)
    spellings = {repr(value), f"{value:g}"}
    return "|".join(re.escape(s).replace("\\", "\\\\") for s in sorted(spellings))
