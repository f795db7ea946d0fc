"""Plain-dict builders for Grafana dashboard JSON (schemaVersion 39, Grafana 10.4+ / 11 / 12).

Why plain dicts and not grafana-foundation-sdk: the dashboards need a handful of
panel kinds, and dicts keep the generator dependency-free and the JSON diff
obvious in review. Conventions every builder enforces: the ``${datasource}``
variable on every panel and query (no hard-coded uids), a description on every
panel, a stable ``refId`` order, and a flowing 24-column grid layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 39
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
TAG = "llm-layer-exporter"

#: Query filters shared by all dashboards (Grafana formats multi-values as regex alternations).
ENGINE = 'instance=~"$instance", server=~"$server", model=~"$model"'
GPU = 'instance=~"$instance", gpu=~"$gpu"'
SERVER = 'instance=~"$instance", server=~"$server"'
INSTANCE = 'instance=~"$instance"'
#: The verdict is one per engine (issue 20): its series carry ``engine``, the engine's name (the
#: ``server`` of its own series, whose ``engine`` label is the family, so never filter those by it).
VERDICT = 'instance=~"$instance", engine=~"$engine"'


@dataclass
class Target:
    expr: str
    legend: str = ""
    instant: bool = False


@dataclass
class Panel:
    """One panel; ``width``/``height`` in grid units, placed by Dashboard in reading order."""

    title: str
    description: str
    targets: list[Target]
    kind: str = "timeseries"
    unit: str = "short"
    width: int = 12
    height: int = 8
    min: float | None = None
    max: float | None = None
    #: (value, colour) steps after the base green; e.g. [(0.5, "orange"), (0.8, "red")]
    thresholds: list[tuple[float, str]] = field(default_factory=list)
    #: draw thresholds as dashed lines on time series
    threshold_lines: bool = False
    #: legend names (regex) whose series go on the right axis with this unit
    right_axis: tuple[str, str] | None = None
    value_mappings: list[dict[str, Any]] = field(default_factory=list)
    links: list[dict[str, Any]] = field(default_factory=list)
    stack: bool = False
    #: colour below the first threshold step (red for "low is bad", e.g. headroom)
    base_color: str = "green"
    #: markdown of a ``kind="text"`` panel (Grafana substitutes dashboard variables in it)
    content: str = ""
    #: Grafana transformations, e.g. hiding and renaming table columns
    transformations: list[dict[str, Any]] = field(default_factory=list)
    #: extra fieldConfig overrides, e.g. a unit or value mapping for one table column
    field_overrides: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Row:
    title: str


def dashed_lines(pattern: str) -> dict[str, Any]:
    """A field override drawing the series whose name matches ``pattern`` dashed and thicker
    (reference lines: a capacity, a fleet median, a projection, over what they bound)."""
    return {
        "matcher": {"id": "byRegexp", "options": pattern},
        "properties": [
            {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
            {"id": "custom.lineWidth", "value": 2},
        ],
    }


def column(name: str, *props: tuple[str, Any]) -> dict[str, Any]:
    """A field override setting ``props`` (id, value) on the table column ``name``."""
    return {"matcher": {"id": "byName", "options": name}, "properties": [{"id": k, "value": v} for k, v in props]}


def _thresholds(steps: list[tuple[float, str]], base: str = "green") -> dict[str, Any]:
    return {"mode": "absolute", "steps": [{"color": base, "value": None}] + [{"color": c, "value": v} for v, c in steps]}


def _targets(p: Panel) -> list[dict[str, Any]]:
    out = []
    for i, t in enumerate(p.targets):
        target: dict[str, Any] = {
            "datasource": DATASOURCE,
            "expr": t.expr,
            "legendFormat": t.legend or "__auto",
            "range": not t.instant,
            "instant": t.instant,
            "refId": chr(ord("A") + i),
        }
        if p.kind == "table":
            target["format"] = "table"
        out.append(target)
    return out


def panel_json(p: Panel, pid: int, x: int, y: int) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": p.unit, "thresholds": _thresholds(p.thresholds, p.base_color)}
    if p.min is not None:
        defaults["min"] = p.min
    if p.max is not None:
        defaults["max"] = p.max
    if p.value_mappings:
        defaults["mappings"] = p.value_mappings
    overrides: list[dict[str, Any]] = []
    options: dict[str, Any] = {
        "tooltip": {"mode": "multi", "sort": "desc"},
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
    }
    if p.kind == "timeseries":
        defaults["custom"] = {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 10 if p.stack else 0,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"mode": "normal" if p.stack else "none", "group": "A"},
            "thresholdsStyle": {"mode": "dashed" if p.threshold_lines else "off"},
        }
        if p.right_axis:
            pattern, unit = p.right_axis
            overrides.append(
                {
                    "matcher": {"id": "byRegexp", "options": pattern},
                    "properties": [
                        {"id": "custom.axisPlacement", "value": "right"},
                        {"id": "unit", "value": unit},
                        {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
                    ],
                }
            )
    elif p.kind == "stat":
        options = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "background",
            "graphMode": "none",
            "textMode": "value_and_name",
            "orientation": "auto",
        }
    elif p.kind == "state-timeline":
        options = {
            "showValue": "never",
            "mergeValues": True,
            "rowHeight": 0.8,
            "alignValue": "left",
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "single", "sort": "none"},
        }
        defaults["custom"] = {"fillOpacity": 80, "lineWidth": 0}
        defaults["color"] = {"mode": "thresholds"}
    elif p.kind == "table":
        options = {"showHeader": True, "cellHeight": "sm"}
    elif p.kind == "bargauge":
        options = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "orientation": "horizontal",
            "displayMode": "gradient",
            "valueMode": "color",
            "namePlacement": "left",
            "showUnfilled": True,
            "sizing": "auto",
            "minVizWidth": 8,
            "minVizHeight": 16,
        }
        defaults["color"] = {"mode": "thresholds"}
    elif p.kind == "text":
        options = {
            "mode": "markdown",
            "content": p.content,
            "code": {"language": "plaintext", "showLineNumbers": False, "showMiniMap": False},
        }
    if p.links:
        defaults["links"] = p.links
    overrides += p.field_overrides
    out = {
        "id": pid,
        "type": p.kind,
        "title": p.title,
        "description": p.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": p.height, "w": p.width, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": overrides},
        "options": options,
        "targets": _targets(p),
    }
    if p.transformations:
        out["transformations"] = p.transformations
    return out


def _query_variable(name: str, label: str, query: str, refresh: int = 2) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"{name}-values", "qryType": 1},
        "definition": query,
        "refresh": refresh,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 1,
        "hide": 0,
        "regex": "",
        "options": [],
    }


def variables(engine: bool = False) -> list[dict[str, Any]]:
    """datasource -> instance (exporter) -> server -> model, and instance -> gpu; ``engine``: instance -> engine.

    Why ``engine`` only where asked: it filters the per-engine verdict (``VERDICT``), and a board
    that draws no verdict would show a selector that changes nothing.
    """
    out = [
        {
            "name": "datasource",
            "label": "Data source",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "hide": 0,
            "includeAll": False,
            "multi": False,
            "regex": "",
            "options": [],
            "refresh": 1,
        },
        _query_variable("instance", "Exporter", "label_values(llm_exporter_build_info, instance)"),
        _query_variable("server", "Server", 'label_values(llm_engine_info{instance=~"$instance"}, server)'),
        _query_variable("model", "Model", 'label_values(llm_engine_info{instance=~"$instance", server=~"$server"}, model)'),
        _query_variable("gpu", "GPU", 'label_values(llm_gpu_info{instance=~"$instance"}, gpu)'),
    ]
    if engine:
        # the engines the diagnosis judges, by name (llm_engine_info's server values, judged)
        out.insert(
            2, _query_variable("engine", "Engine (verdict)", 'label_values(llm_service_state{instance=~"$instance"}, engine)')
        )
    return out


def dashboard_link(uid: str, title: str, engine: bool = False) -> dict[str, Any]:
    """A link that keeps the time range and every variable (``engine``: between two boards that both have it)."""
    carried = "&${engine:queryparam}" if engine else ""
    return {
        "title": title,
        "type": "link",
        "url": f"/d/{uid}?${{__url_time_range}}&${{datasource:queryparam}}&${{instance:queryparam}}{carried}&${{server:queryparam}}&${{model:queryparam}}&${{gpu:queryparam}}",
        "targetBlank": False,
        "icon": "dashboard",
        "tooltip": f"Open {title}",
        "asDropdown": False,
        "includeVars": False,
        "keepTime": False,
        "tags": [],
    }


@dataclass
class Dashboard:
    uid: str
    title: str
    description: str
    items: list[Panel | Row]
    links: list[dict[str, Any]] = field(default_factory=list)

    def panels(self) -> list[Panel]:
        return [p for p in self.items if isinstance(p, Panel)]

    def uses_engine(self) -> bool:
        """Whether a query or a text panel reads the ``engine`` variable (then the board gets it)."""
        return any("$engine" in t.expr for p in self.panels() for t in p.targets) or any(
            "${engine}" in p.content for p in self.panels()
        )

    def to_json(self) -> dict[str, Any]:
        out: list[dict[str, Any]] = []
        x = y = row_h = 0
        pid = 1
        for item in self.items:
            if isinstance(item, Row):
                if x:
                    y, x, row_h = y + row_h, 0, 0
                out.append(
                    {
                        "id": pid,
                        "type": "row",
                        "title": item.title,
                        "collapsed": False,
                        "panels": [],
                        "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                    }
                )
                y += 1
            else:
                if x + item.width > 24:
                    y, x, row_h = y + row_h, 0, 0
                out.append(panel_json(item, pid, x, y))
                x += item.width
                row_h = max(row_h, item.height)
            pid += 1
        tag_links = {
            "title": "LLM dashboards",
            "type": "dashboards",
            "tags": [TAG],
            "asDropdown": True,
            "includeVars": True,
            "keepTime": True,
            "targetBlank": False,
            "icon": "external link",
            "tooltip": "",
            "url": "",
        }
        return {
            "uid": self.uid,
            "title": self.title,
            "description": self.description,
            "tags": [TAG],
            "editable": True,
            "graphTooltip": 1,
            "schemaVersion": SCHEMA_VERSION,
            "version": 1,
            "refresh": "30s",
            "time": {"from": "now-1h", "to": "now"},
            "timepicker": {},
            "timezone": "browser",
            "fiscalYearStartMonth": 0,
            "liveNow": False,
            "weekStart": "",
            "annotations": {"list": []},
            "links": self.links + [tag_links],
            "templating": {"list": variables(self.uses_engine())},
            "panels": out,
        }
