"""Checks a generated dashboard must pass before it is written or shipped.

Why separate from the builders: the builders make the conventions easy, these
checks make them impossible to skip — unknown metric names (a rename leaving a
panel dark), lifetime counters without rate(), histogram_quantile without
``sum by (le, ...)``, fixed rate windows instead of ``$__rate_interval``,
hard-coded datasource uids, panels without a description; and, since the verdict is one per
engine (issue 20), a verdict query that is not filtered by ``$engine``, folds engines together
or draws a legend that does not name the engine.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from alerts.promql import engine_problems, metric_names, problems
from alerts.recording import ENGINE
from exporter import schema

REQUIRED_VARIABLES = ("datasource", "instance", "server", "model", "gpu")
_LABEL_VALUES = re.compile(r"label_values\((.*),\s*\w+\)\s*$")


def _counter_series() -> set[str]:
    """Series that only make sense inside rate()/increase(): counters and histogram parts."""
    out = set()
    for spec in schema.SPECS.values():
        if spec.type == "counter":
            out.add(spec.name)
        elif spec.type == "histogram":
            out |= {f"{spec.name}_bucket", f"{spec.name}_sum", f"{spec.name}_count"}
    return out


def expr_problems(expr: str, known: set[str]) -> list[str]:
    """Problems of one panel query (PromQL with Grafana variables)."""
    out = problems(expr, known)
    for name in _counter_series():
        for m in re.finditer(rf"(?<![\w:]){re.escape(name)}(?![\w:])", expr):
            if not re.search(r"\b(rate|increase|irate)\(\s*$", expr[: m.start()]):
                out.append(f"counter {name} read without rate()/increase(): a lifetime value")
    for m in re.finditer(r"histogram_quantile\(", expr):
        if not re.match(r"histogram_quantile\(\s*[0-9.]+\s*,\s*sum\s+by\s*\(\s*le\b", expr[m.start() :]):
            out.append("histogram_quantile without sum by (le, ...)")
    for m in re.finditer(r"\[([^\]]+)\]", expr):
        if m.group(1) != "$__rate_interval" and ":" not in m.group(1):
            out.append(f"range [{m.group(1)}]: use [$__rate_interval]")
    return out


def verdict_problems(expr: str, verdict: set[str], legend: str | None) -> list[str]:
    """Problems of a query reading the per-engine verdict (``verdict``: its series names).

    Each verdict selector must carry ``engine=~"$engine"`` (the board's engine variable), every
    aggregation of it must keep ``engine``, and a drawn series (``legend`` not None: not a table,
    whose columns show the labels) must name its engine. Engine series are not verdict series:
    their ``engine`` label is the family (vllm), so they must never be filtered by it.
    """
    read = metric_names(expr) & verdict
    if not read:
        return []
    out = engine_problems(expr, verdict, ENGINE, always=True)
    for name in sorted(read):
        for m in re.finditer(rf"(?<![\w:]){re.escape(name)}(?![\w:])(\{{[^}}]*\}})?", expr):
            if f'{ENGINE}=~"$engine"' not in (m.group(1) or ""):
                out.append(f'{name} read without {ENGINE}=~"$engine": the verdict is one per engine')
    if legend is not None and "{{" + ENGINE + "}}" not in legend:
        out.append(f"legend {legend!r} of a per-engine verdict does not name {{{{{ENGINE}}}}}")
    return out


def targets(dashboard: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for panel in dashboard.get("panels", []):
        for target in panel.get("targets", []):
            yield panel, target


def dashboard_problems(d: dict[str, Any], known: set[str], verdict: set[str] | None = None) -> list[str]:
    """Everything wrong with one dashboard; ``verdict``: the per-engine verdict's series (default: the shipped rules')."""
    if verdict is None:
        from alerts.generate import verdict_series
        from alerts.settings import load

        verdict = verdict_series(load())
    where = d.get("uid", "?")
    out: list[str] = []
    if not str(d.get("title", "")).startswith("LLM / "):
        out.append(f"{where}: title must start with 'LLM / '")
    if int(d.get("schemaVersion", 0)) < 39:
        out.append(f"{where}: schemaVersion below 39")
    if d.get("graphTooltip") != 1:
        out.append(f"{where}: graphTooltip must be 1 (shared crosshair)")
    names = [v.get("name") for v in d.get("templating", {}).get("list", [])]
    out += [f"{where}: missing variable {v}" for v in REQUIRED_VARIABLES if v not in names]
    if "$engine" in str(d.get("panels")) and ENGINE not in names:
        out.append(f"{where}: queries read $engine but the board has no {ENGINE} variable")
    for v in d.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            m = _LABEL_VALUES.match(str(v.get("definition", "")))
            if not m:
                out.append(f"{where}: variable {v['name']} is not a label_values() query")
            else:
                out += [f"{where}: variable {v['name']}: {p}" for p in problems(m.group(1), known)]
    for panel in d.get("panels", []):
        if panel.get("type") == "row":
            continue
        title = f"{where}/{panel.get('title')}"
        if len(str(panel.get("description", ""))) < 60:
            out.append(f"{title}: a description must say what a bad value means and what to check next")
        if panel.get("datasource", {}).get("uid") != "${datasource}":
            out.append(f"{title}: panel datasource must be ${{datasource}}")
        if not panel.get("targets") and panel.get("type") != "text":
            out.append(f"{title}: no query")
        for target in panel.get("targets", []):
            if target.get("datasource", {}).get("uid") != "${datasource}":
                out.append(f"{title}: query datasource must be ${{datasource}}")
            out += [f"{title}: {p}" for p in expr_problems(str(target.get("expr", "")), known)]
            legend = None if panel.get("type") == "table" else str(target.get("legendFormat", ""))
            out += [f"{title}: {p}" for p in verdict_problems(str(target.get("expr", "")), verdict, legend)]
    return out


def panel_titles(dashboards: list[dict[str, Any]]) -> set[str]:
    return {p["title"] for d in dashboards for p in d.get("panels", []) if p.get("type") != "row"}


def runbook_problems(runbooks: str, dashboards: list[dict[str, Any]]) -> list[str]:
    """Every "quoted" panel named in a runbook's **Confirm** paragraph must exist.

    Quotes inside `code spans` (a label matcher such as reason="timeout") are not panel names.
    """
    titles = panel_titles(dashboards) | {d["title"] for d in dashboards}
    out = []
    for para in re.findall(r"\*\*Confirm\*\*:(.*?)(?:\n\n|\Z)", runbooks, flags=re.DOTALL):
        para = re.sub(r"`[^`]*`", " ", para)
        for quoted in (" ".join(q.split()) for q in re.findall(r'"([^"]+)"', para)):
            if quoted not in titles:
                out.append(f"alerts/runbooks.md names panel {quoted!r}, which no dashboard has")
    return out
