"""report.md and report.html from a /diagnosis body and the charts drawn beside it.

Why one model for both: the Markdown (for a ticket's text) and the HTML (for a
browser, self-contained: the PNGs are embedded as data URIs, no script, no
external asset) say the same things in the same order: the state, the primary
with its chain, advice and evidence, the symptoms, the seven layers, the other
causes and warnings, what is missing (the notices), then the charts.

A value that exists is always shown (``0`` is ``0.00`` or ``0 %``); only a value
the verdict does not have reads ``n/a`` or ``not measured``, never ``-``.
Headroom is a percentage; every other ratio (scores, confidences, skews,
utilisations in the evidence) stays a ratio.
"""

from __future__ import annotations

import base64
import html
import math
import re
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exporter.report.operator import share_rows, split_sentences
from exporter.report.traced import seconds
from exporter.schema import LAYERS, OPERATOR_KINDS

NOT_AVAILABLE = "n/a"
NOT_MEASURED = "not measured"
_STATE_COLOURS = {"degraded": "#c62828", "healthy": "#2e7d32", "unknown": "#f9a825"}
_STATUS_COLOURS = {"ok": "#e8f5e9", "warning": "#fff8e1", "bottleneck": "#ffebee", "unknown": "#eeeeee"}
_WRAP = 100


@dataclass(frozen=True)
class ChartRef:
    """A PNG in DIR and what it shows."""

    file: str
    title: str
    layer: str
    #: panel titles that had no data
    empty: tuple[str, ...] = ()


@dataclass
class Context:
    """Everything the report says besides the verdict itself."""

    exporter_url: str
    #: "prometheus", "exporter" or "" (no charts)
    source: str = ""
    source_url: str = ""
    start: float | None = None
    end: float | None = None
    generated: float = field(default_factory=time.time)
    charts: list[ChartRef] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: where the PNGs lie (for embedding them in the HTML); None: reference them relatively
    out_dir: Path | None = None
    #: engine -> its last on-demand operator profile (GET /profile; exporter/report/operator.py)
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the slowest traced requests and why (GET /requests; exporter/report/traced.py)
    requests: list[dict[str, Any]] = field(default_factory=list)

    def source_sentence(self) -> str:
        if not self.source:
            return "No charts: no series were collected."
        span = max(0.0, (self.end or 0.0) - (self.start or 0.0))
        frame = f"from {utc(self.start)} to {utc(self.end)} UTC" if self.start and self.end else ""
        if self.source == "prometheus":
            return (
                f"Charts come from Prometheus at {self.source_url} (/api/v1/query_range), "
                f"the last {span / 60:.0f} minutes, {frame}."
            )
        return (
            f"Charts come from sampling the exporter at {self.source_url} (/metrics and /diagnosis?signals=1) "
            f"for {span:.0f} s, {frame}; no Prometheus was given (--prometheus), so there is no longer history."
        )


# --- formatting --------------------------------------------------------------------------


def utc(ts: Any) -> str:
    if not isinstance(ts, (int, float)) or math.isnan(ts):
        return NOT_AVAILABLE
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts))


def num(value: Any) -> str:
    """A number as ``diagnose`` shows it (4 significant digits, exponent when huge or tiny)."""
    if value is None:
        return NOT_AVAILABLE
    if isinstance(value, bool):
        return str(value).lower()
    if not isinstance(value, (int, float)):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
        return f"{value:.3e}"
    return f"{value:.4g}"


def ratio(value: Any) -> str:
    """Scores and confidences: 0-1 ratios with two decimals."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return NOT_AVAILABLE if value is None else str(value)
    if math.isnan(value):
        return "NaN"
    text = f"{value:.2f}"
    if text in ("0.00", "1.00", "-0.00") and value not in (0, 1):  # 0.997 is not certainty, 0.003 not nothing
        text = f"{value:.3g}" if abs(value) < 0.001 else f"{value:.3f}"
    return text


def percent(value: Any) -> str:
    """Headroom: a 0-1 ratio shown as a percentage."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return NOT_MEASURED if value is None else str(value)
    if math.isnan(value):
        return "NaN"
    pct = 100.0 * value
    if 0 < abs(pct) < 1:
        return f"{pct:.1f} %"
    return f"{pct:.0f} %"


def evidence_value(name: str, value: Any) -> str:
    """An evidence value as a number, with a readable unit where the signal's name says it."""
    text = num(value)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value) or math.isinf(value):
        return text
    if "bytes_per_second" in name:
        return f"{text} B/s ({value / 1e9:.1f} GB/s)"
    if "_seconds" in name and "timestamp" not in name:
        return f"{text} s"
    if "_bytes" in name:
        return f"{text} B ({value / 2**30:.1f} GiB)"
    return text


def wrap(text: str, width: int = _WRAP) -> str:
    """Wrapped on spaces only: joining the lines with spaces gives the text back whole."""
    return "\n".join(
        textwrap.fill(para, width, break_long_words=False, break_on_hyphens=False) if para.strip() else ""
        for para in str(text).split("\n")
    )


# --- the model both renderers walk ---------------------------------------------------------


def others(verdict: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(contributing causes, warnings and the rest) besides the primary."""
    contributing = list(verdict.get("contributing") or [])
    keys = {(c.get("layer"), c.get("cause")) for c in contributing}
    primary = verdict.get("primary") or {}
    pkey = (primary.get("layer"), primary.get("cause"))
    rest = []
    for c in verdict.get("bottlenecks") or []:
        key = (c.get("layer"), c.get("cause"))
        if c.get("role") == "primary" or key == pkey or key in keys:
            continue
        if c.get("role") == "contributing":
            contributing.append(c)
            keys.add(key)
        else:
            rest.append(c)
    return contributing, rest


def layer_rows(verdict: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The seven layers in the map's order (any other layer the verdict names after them)."""
    layers = verdict.get("layers") or {}
    names = [n for n in LAYERS if n in layers] + [n for n in layers if n not in LAYERS]
    missing = [n for n in LAYERS if n not in layers]
    rows = [(n, layers[n]) for n in names]
    rows += [(n, {"score": None, "status": "unknown", "headroom": None, "limit": "not in the verdict"}) for n in missing]
    return rows


def missing_sentence(verdict: dict[str, Any]) -> str:
    notes = [n for n in verdict.get("notices") or [] if "no " in n or "down" in n]
    return "; ".join(notes) if notes else "no layer could be judged"


def headline(verdict: dict[str, Any]) -> str:
    state = str(verdict.get("state") or "unknown")
    primary = verdict.get("primary")
    if primary:
        return (
            f"{state.upper()}: primary {primary.get('layer')} / {primary.get('cause')} "
            f"(confidence {ratio(primary.get('confidence'))})"
        )
    if state == "healthy":
        return "HEALTHY: no symptom; TTFT, ITL, queue and failures are within bounds"
    if state == "degraded":
        return "DEGRADED: a symptom holds but no primary cause was named"
    return "UNKNOWN: nothing can be concluded: " + missing_sentence(verdict)


# --- Markdown --------------------------------------------------------------------------------


#: characters that make Markdown of inline text: code, emphasis, links and images, HTML and
#: autolinks, table cells, strikethrough; `_` only where it can open or close emphasis (not in
#: kv_cache_pressure); `&` only where it would start an entity
_MD_INLINE = re.compile(r"[\\`*\[\]<|~]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])|&(?=#?[0-9A-Za-z]+;)")
#: what makes a block of a line's start: headings, quotes, lists, rules, setext underlines
_MD_LINE_START = re.compile(r"^([#>+=-]|\d+(?=[.)]))")


def md(text: Any) -> str:
    """Text from the verdict (advice, limits, notices, names) as literal inline Markdown, on one line.

    Why: the verdict's strings come from the exporter (and, through evidence and notices, from
    engines); copied raw into report.md, a ``*``, ``[x](y)``, ``<img>`` or ``|`` rewrote the
    ticket's text. Every character that makes Markdown is backslash-escaped (CommonMark and
    GFM read ``\\*`` as ``*``), so the rendered text is the verdict's text.
    """
    one = " ".join(str(text).replace("\r", "\n").split("\n"))
    return _MD_INLINE.sub(lambda m: "\\" + m.group(0), one)


def md_block(text: Any) -> str:
    """Wrapped verdict text as literal Markdown paragraphs: md() on each line, and no line that
    starts a heading, a quote, a list, a rule or an indented code block."""
    lines = []
    for line in wrap(str(text)).split("\n"):
        escaped = md(line.lstrip())
        m = _MD_LINE_START.match(escaped)
        if m and m.group(1).isdigit():  # "1." or "2)" would start an ordered list
            escaped = m.group(1) + "\\" + escaped[len(m.group(1)) :]
        elif m:
            escaped = "\\" + escaped
        lines.append(escaped)
    return "\n".join(lines)


def _cell(text: Any) -> str:
    return md(text)


def _code(text: Any) -> str:
    """A code span that no backtick in the text can close early (CommonMark: a longer fence)."""
    body = str(text).replace("\r", " ").replace("\n", " ").replace("|", "\\|")
    runs = [len(r) for r in re.findall(r"`+", body)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def _md_evidence(evidence: dict[str, Any]) -> list[str]:
    if not evidence:
        return ["(no evidence recorded)", ""]
    out = ["| signal | value |", "|---|---|"]
    out += [f"| {_code(k)} | {_cell(evidence_value(k, v))} |" for k, v in evidence.items()]
    return out + [""]


def _md_cause(c: dict[str, Any]) -> list[str]:
    out = [
        f"### {md(c.get('role') or 'warning')}: {md(c.get('layer'))} / {md(c.get('cause'))}",
        "",
        f"score {ratio(c.get('score'))}, confidence {ratio(c.get('confidence'))}"
        + (f", explains {', '.join(map(md, c['explains']))}" if c.get("explains") else ""),
        "",
    ]
    if c.get("summary"):
        out += [md_block(c["summary"]), ""]
    if c.get("advice"):
        out += ["Advice:", "", md_block(c["advice"]), ""]
    return out + _md_evidence(c.get("evidence") or {})


def _md_profiles(ctx: Context) -> list[str]:
    """The last operator profile of each engine: where its GPU kernel time went (none: no section)."""
    if not ctx.profiles:
        return []
    out = ["## Operator profile (last POST /profile)", "", "| engine | ended (UTC) | " + " | ".join(OPERATOR_KINDS) + " |"]
    out.append("|---|---|" + "---:|" * len(OPERATOR_KINDS))
    for engine, ended, values in share_rows(ctx.profiles):
        out.append(f"| {md(engine)} | {utc(ended)} | " + " | ".join(percent(v) for v in values) + " |")
    return out + [""] + [f"- {md(engine)}: {md(text)}" for engine, text in split_sentences(ctx.profiles)] + [""]


_REQUEST_COLUMNS = ("ttft_seconds", "queue_seconds", "prefill_seconds", "decode_seconds", "e2e_seconds")


def _md_requests(ctx: Context) -> list[str]:
    """The slowest traced requests, where their time went and why (none: no section)."""
    if not ctx.requests:
        return []
    out = ["## Slowest traced requests (GET /requests)", ""]
    out += [
        "| engine | trace id | TTFT s | queue s | prefill s | decode s | e2e s | primary |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in ctx.requests:
        cells = " | ".join(seconds(r[k]) for k in _REQUEST_COLUMNS)
        out.append(f"| {md(r['engine'])} | {md(r['trace_id'])} | {cells} | {md(r['primary'] or '–')} |")
    return out + [""] + [f"- {md(r['trace_id'])}: {md(r['sentence'])}" for r in ctx.requests if r["sentence"]] + [""]


def render_markdown(verdict: dict[str, Any], ctx: Context) -> str:
    state = str(verdict.get("state") or "unknown")
    primary = verdict.get("primary")
    out = [
        f"# Incident snapshot: {md(state.upper())}",
        "",
        f"**{md(headline(verdict))}**",
        "",
        f"- state: **{md(state)}**",
        f"- verdict of: {utc(verdict.get('timestamp'))} UTC (schema_version {md(verdict.get('schema_version', NOT_AVAILABLE))})",
        f"- exporter: {md(ctx.exporter_url)}",
        f"- report generated: {utc(ctx.generated)} UTC",
        "- raw verdict: [diagnosis.json](diagnosis.json)",
        "",
        "## Primary",
        "",
    ]
    if primary:
        out += [
            f"**{md(primary.get('layer'))} / {md(primary.get('cause'))}**, confidence {ratio(primary.get('confidence'))}, "
            f"score {ratio(primary.get('score'))}"
            + (f", explains {', '.join(map(md, primary['explains']))}" if primary.get("explains") else ""),
            "",
            "Chain (symptom ← cause):",
            "",
            "> " + md_block(primary.get("chain") or primary.get("summary") or NOT_AVAILABLE).replace("\n", "\n> "),
            "",
        ]
        if primary.get("summary"):
            out += [f"Summary: {md_block(primary['summary'])}", ""]
        out += ["Advice:", "", md_block(primary.get("advice") or NOT_AVAILABLE), ""]
    elif state == "healthy":
        out += ["No primary: the service is healthy (no symptom holds). Headroom per layer below.", ""]
    else:
        out += [f"No primary. Nothing can be concluded: {md(missing_sentence(verdict))}.", ""]
    out += ["## Evidence of the primary", ""]
    out += _md_evidence(primary.get("evidence") or {}) if primary else ["no primary", ""]
    if verdict.get("holding"):
        out += ["Causes holding (reported or not): " + ", ".join(map(md, verdict["holding"])), ""]
    out += ["## Symptoms", ""]
    symptoms = verdict.get("symptoms") or []
    if symptoms:
        for s in symptoms:
            ev = ", ".join(f"{_code(k)} = {_cell(evidence_value(k, v))}" for k, v in (s.get("evidence") or {}).items())
            out.append(f"- **{md(s.get('id'))}**: {md(s.get('text') or '')}" + (f" ({ev})" if ev else ""))
    else:
        out.append("- none")
    out += ["", "## Layers", "", "| layer | status | score | headroom | nearest limit |", "|---|---|---:|---:|---|"]
    for name, info in layer_rows(verdict):
        out.append(
            f"| {md(name)} | {md(info.get('status') or 'unknown')} | {ratio(info.get('score'))} | "
            f"{percent(info.get('headroom'))} | {_cell(info.get('limit') or '')} |"
        )
    out.append("")
    out += _md_profiles(ctx)
    out += _md_requests(ctx)
    contributing, rest = others(verdict)
    out += ["## Contributing causes", ""]
    if contributing:
        for c in contributing:
            out += _md_cause(c)
    else:
        out += ["none", ""]
    out += ["## Warnings and other causes", ""]
    if rest:
        for c in rest:
            out += _md_cause(c)
    else:
        out += ["none", ""]
    out += ["## Notices (what is missing)", ""]
    out += [f"- {md(n)}" for n in verdict.get("notices") or []] or ["- none"]
    out.append("")
    out += ["## The key series per layer", "", md(ctx.source_sentence()), ""]
    for chart in ctx.charts:
        out += [f"### {md(chart.title)}", "", f"![{md(chart.title)}]({chart.file})", ""]
        if chart.empty:
            out += ["No data for: " + "; ".join(map(md, chart.empty)), ""]
    if ctx.notes:
        out += ["## Collection notes", ""] + [f"- {md(n)}" for n in ctx.notes] + [""]
    return "\n".join(out).rstrip() + "\n"


# --- HTML -----------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1100px;color:#212121;padding:0 16px}
h1{margin:0 0 4px}h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}
.state{padding:14px 18px;border-radius:6px;color:#fff;font-size:1.5em;font-weight:700}
.meta{color:#555;font-size:.9em;margin:8px 0}
.primary{font-size:1.25em;font-weight:700;margin:6px 0}
.chain{font-size:1.1em;font-weight:600;background:#fafafa;border-left:4px solid #c62828;padding:8px 12px;margin:8px 0}
.advice,.summary,.text{white-space:pre-wrap;overflow-wrap:anywhere;word-break:normal}
table{border-collapse:collapse;margin:8px 0}th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
td.value{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.limit,td.signal{overflow-wrap:anywhere}
code{font-size:.9em}
article.cause{border:1px solid #ddd;border-radius:6px;padding:8px 12px;margin:10px 0}
figure{margin:14px 0}figure img{max-width:100%;border:1px solid #eee}figcaption{font-weight:600}
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _html_evidence(evidence: dict[str, Any], table_id: str) -> str:
    if not evidence:
        return "<p>(no evidence recorded)</p>"
    rows = "".join(
        f'<tr><td class="signal"><code>{_e(k)}</code></td><td class="value" data-key="{_e(k)}">{_e(evidence_value(k, v))}</td></tr>'
        for k, v in evidence.items()
    )
    return f'<table class="evidence" id="{_e(table_id)}"><tr><th>signal</th><th>value</th></tr>{rows}</table>'


def _html_cause(c: dict[str, Any], i: int) -> str:
    role = c.get("role", "warning")
    parts = [
        f'<article class="cause {_e(role)}" data-layer="{_e(c.get("layer"))}" data-cause="{_e(c.get("cause"))}">',
        f"<h3>{_e(role)}: {_e(c.get('layer'))} / {_e(c.get('cause'))}</h3>",
        f'<p>score <span class="num">{_e(ratio(c.get("score")))}</span>, confidence '
        f'<span class="num">{_e(ratio(c.get("confidence")))}</span>'
        + (f", explains {_e(', '.join(map(str, c['explains'])))}" if c.get("explains") else "")
        + "</p>",
    ]
    if c.get("summary"):
        parts.append(f'<p class="summary">{_e(c["summary"])}</p>')
    if c.get("advice"):
        parts.append(f'<p class="advice"><b>Advice:</b> {_e(c["advice"])}</p>')
    parts.append(_html_evidence(c.get("evidence") or {}, f"evidence-{i}"))
    return "".join(parts) + "</article>"


def _img(chart: ChartRef, out_dir: Path | None) -> str:
    if out_dir is not None and (out_dir / chart.file).is_file():
        data = base64.b64encode((out_dir / chart.file).read_bytes()).decode("ascii")
        return f'<img alt="{_e(chart.title)}" src="data:image/png;base64,{data}">'
    return f'<img alt="{_e(chart.title)}" src="{_e(chart.file)}">'


def _html_profiles(ctx: Context) -> str:
    """The operator profile table (empty string without a profile)."""
    if not ctx.profiles:
        return ""
    head = "".join(f"<th>{_e(k)}</th>" for k in OPERATOR_KINDS)
    rows = "".join(
        f"<tr><td>{_e(engine)}</td><td>{_e(utc(ended))}</td>"
        + "".join(f'<td class="value">{_e(percent(v))}</td>' for v in values)
        + "</tr>"
        for engine, ended, values in share_rows(ctx.profiles)
    )
    return (
        '<section id="operator-profile"><h2>Operator profile (last POST /profile)</h2>'
        f'<table id="operator-shares"><tr><th>engine</th><th>ended (UTC)</th>{head}</tr>{rows}</table>'
        + "".join(f'<p class="operator-split">{_e(engine)}: {_e(text)}</p>' for engine, text in split_sentences(ctx.profiles))
        + "</section>"
    )


def _html_requests(ctx: Context) -> str:
    """The slowest traced requests (empty string without any)."""
    if not ctx.requests:
        return ""
    rows = "".join(
        f"<tr><td>{_e(r['engine'])}</td><td>{_e(r['trace_id'])}</td>"
        + "".join(f'<td class="value">{_e(seconds(r[k]))}</td>' for k in _REQUEST_COLUMNS)
        + f"<td>{_e(r['primary'] or '–')}</td></tr>"
        for r in ctx.requests
    )
    head = "<tr><th>engine</th><th>trace id</th><th>TTFT s</th><th>queue s</th><th>prefill s</th><th>decode s</th><th>e2e s</th><th>primary</th></tr>"
    return (
        '<section id="traced-requests"><h2>Slowest traced requests (GET /requests)</h2>'
        f'<table id="requests">{head}{rows}</table>'
        + "".join(
            f'<p class="request-sentence">{_e(r["trace_id"])}: {_e(r["sentence"])}</p>' for r in ctx.requests if r["sentence"]
        )
        + "</section>"
    )


def render_html(verdict: dict[str, Any], ctx: Context) -> str:
    state = str(verdict.get("state") or "unknown")
    primary = verdict.get("primary")
    p: list[str] = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Incident snapshot: {_e(state)} - {_e(utc(verdict.get('timestamp')))} UTC</title>",
        f"<style>{_CSS}</style></head><body>",
        f'<section id="verdict" data-state="{_e(state)}">',
        f'<div class="state" id="state" style="background:{_STATE_COLOURS.get(state, "#616161")}">{_e(headline(verdict))}</div>',
        f'<p class="meta">state <b>{_e(state)}</b>; verdict of {_e(utc(verdict.get("timestamp")))} UTC '
        f"(schema_version {_e(verdict.get('schema_version', NOT_AVAILABLE))}); exporter {_e(ctx.exporter_url)}; "
        f"report generated {_e(utc(ctx.generated))} UTC; raw verdict: diagnosis.json</p>",
        "<h2>Primary</h2>",
    ]
    if primary:
        p += [
            f'<div class="primary" id="primary" data-layer="{_e(primary.get("layer"))}" data-cause="{_e(primary.get("cause"))}">'
            f"Primary: {_e(primary.get('layer'))} / {_e(primary.get('cause'))} (confidence "
            f"{_e(ratio(primary.get('confidence')))}, score {_e(ratio(primary.get('score')))})</div>",
            f'<div class="chain" id="chain">{_e(primary.get("chain") or primary.get("summary") or NOT_AVAILABLE)}</div>',
        ]
        if primary.get("explains"):
            p.append(f"<p>explains: {_e(', '.join(map(str, primary['explains'])))}</p>")
        if primary.get("summary"):
            p.append(f'<p class="summary" id="summary">{_e(primary["summary"])}</p>')
        p.append(f'<p class="advice" id="advice"><b>Advice:</b> {_e(primary.get("advice") or NOT_AVAILABLE)}</p>')
    elif state == "healthy":
        p.append('<p id="primary-none">No primary: the service is healthy (no symptom holds). Headroom per layer below.</p>')
    else:
        p.append(f'<p id="primary-none">No primary. Nothing can be concluded: {_e(missing_sentence(verdict))}.</p>')
    p.append("</section>")
    p.append('<section id="primary-evidence"><h2>Evidence of the primary</h2>')
    p.append(_html_evidence(primary.get("evidence") or {}, "evidence-primary") if primary else "<p>no primary</p>")
    if verdict.get("holding"):
        p.append(f"<p>Causes holding (reported or not): {_e(', '.join(map(str, verdict['holding'])))}</p>")
    p.append("</section>")
    p.append('<section id="symptoms"><h2>Symptoms</h2><ul>')
    symptoms = verdict.get("symptoms") or []
    for s in symptoms:
        ev = ", ".join(f"{k} = {evidence_value(k, v)}" for k, v in (s.get("evidence") or {}).items())
        p.append(
            f'<li class="symptom" data-symptom="{_e(s.get("id"))}"><b>{_e(s.get("id"))}</b>: '
            f'<span class="text">{_e(s.get("text", ""))}</span>' + (f" <small>({_e(ev)})</small>" if ev else "") + "</li>"
        )
    if not symptoms:
        p.append("<li>none</li>")
    p.append("</ul></section>")
    p.append(
        '<section id="layer-map"><h2>Layers</h2><table id="layers">'
        "<tr><th>layer</th><th>status</th><th>score</th><th>headroom</th><th>nearest limit</th></tr>"
    )
    for name, info in layer_rows(verdict):
        status = str(info.get("status", "unknown"))
        p.append(
            f'<tr data-layer="{_e(name)}" data-status="{_e(status)}" style="background:{_STATUS_COLOURS.get(status, "#fff")}">'
            f"<td>{_e(name)}</td><td><b>{_e(status)}</b></td>"
            f'<td class="value score">{_e(ratio(info.get("score")))}</td>'
            f'<td class="value headroom">{_e(percent(info.get("headroom")))}</td>'
            f'<td class="limit">{_e(info.get("limit") or "")}</td></tr>'
        )
    p.append("</table></section>")
    p.append(_html_profiles(ctx))
    p.append(_html_requests(ctx))
    contributing, rest = others(verdict)
    p.append('<section id="contributing"><h2>Contributing causes</h2>')
    p += [_html_cause(c, i) for i, c in enumerate(contributing)] or ["<p>none</p>"]
    p.append('</section><section id="warnings"><h2>Warnings and other causes</h2>')
    p += [_html_cause(c, len(contributing) + i) for i, c in enumerate(rest)] or ["<p>none</p>"]
    p.append('</section><section id="notices"><h2>Notices (what is missing)</h2><ul>')
    p += [f'<li class="notice">{_e(n)}</li>' for n in verdict.get("notices") or []] or ["<li>none</li>"]
    p.append("</ul></section>")
    p.append('<section id="charts"><h2>The key series per layer</h2>')
    p.append(f'<p id="chart-source" data-source="{_e(ctx.source or "none")}">{_e(ctx.source_sentence())}</p>')
    for chart in ctx.charts:
        p.append(f'<figure data-layer="{_e(chart.layer)}"><figcaption>{_e(chart.title)}</figcaption>{_img(chart, ctx.out_dir)}')
        if chart.empty:
            p.append(f"<p><small>No data for: {_e('; '.join(chart.empty))}</small></p>")
        p.append("</figure>")
    p.append("</section>")
    if ctx.notes:
        p.append('<section id="collection-notes"><h2>Collection notes</h2><ul>')
        p += [f"<li>{_e(n)}</li>" for n in ctx.notes]
        p.append("</ul></section>")
    p.append("</body></html>")
    return "\n".join(p) + "\n"
