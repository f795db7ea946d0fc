"""A client of a running exporter's ``/diagnosis``: fetch the verdict, check it, print it as text.

Why a client and not a local evaluation: the verdict needs the exporter's window of
snapshots (rates, quantiles, persistence); asking the running exporter gives the
same answer as its page and its metrics. Why ``requests`` and plain text: the
``diagnose`` command (exporter/commands/diagnose.py) runs next to the exporter in
the production image, which carries the runtime only (no rich, no httpx); plain
lines also survive ``| grep``, a pager and a ticket.
"""

from __future__ import annotations

import math
import textwrap
import time
from collections.abc import Mapping
from typing import Any, TextIO

#: width advice and summaries are wrapped to (chains and metric names are never broken)
WIDTH = 100
#: the latest verdict time believed (year 3000): time.gmtime(1e300) raises
MAX_TIMESTAMP = 32_503_680_000.0


def fetch(base_url: str, timeout: float, headers: Mapping[str, str] | None = None, engine: str | None = None) -> dict[str, Any]:
    """GET BASE/diagnosis (``?engine=NAME`` for one engine's verdict); raises RuntimeError with one
    readable line on any failure, an engine the exporter does not judge included.

    ``base_url`` carries no user info (exporter/httpget.py: target() moved it into ``headers``);
    the request is bounded by one deadline and MAX_RESPONSE_BYTES.
    """
    from urllib.parse import quote

    from exporter.httpget import get

    url = base_url.rstrip("/") + "/diagnosis"
    if engine is not None:
        url += "?engine=" + quote(engine, safe="")
    response = get(url, timeout, headers=headers, what="the exporter")
    if engine is not None and response.status_code == 404:
        raise RuntimeError(f"the exporter judges no engine named {engine!r}{_known_engines(response)}")
    return verdict_of(url, response)


def _known_engines(response: Any) -> str:
    """ ", it judges: a, b" from a 404 answer's ``engines`` list, or "" when it has none."""
    try:
        names = response.json().get("engines")
    except (ValueError, RecursionError, AttributeError):
        return ""
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return ""
    return ", it judges: " + ", ".join(names[:20]) if names else ""


def verdict_of(url: str, response: Any) -> dict[str, Any]:
    """The verdict in a /diagnosis answer; RuntimeError with one readable line when it is not one
    (shared by ``diagnose`` and ``report``)."""
    if response.status_code != 200:
        raise RuntimeError(f"{url} answered HTTP {response.status_code}")
    try:
        body = response.json()
    except (ValueError, RecursionError) as err:
        reason = f" ({err})" if "nested" in str(err) or "is not JSON" in str(err) or "over" in str(err) else ""
        raise RuntimeError(f"{url} did not return JSON{reason} (is this an llm-layer-exporter?)") from None
    if not isinstance(body, dict) or "layers" not in body or "bottlenecks" not in body:
        raise RuntimeError(f"{url} returned JSON without layers/bottlenecks (is this an llm-layer-exporter?)")
    try:
        check_verdict(body)
    except ValueError as err:
        raise RuntimeError(f"{url} returned a verdict of the wrong shape: {err}") from None
    return body


# --------------------------------------------------------------------------- the verdict's shape


class _Shape(ValueError):
    """Where in the verdict, and what was expected there."""


def _kind(value: Any) -> str:
    return (
        "null"
        if value is None
        else {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(type(value), "a number")
    )


def _number(value: Any, where: str, *, null: bool = False) -> None:
    if value is None and null:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Shape(f"{where}: expected a number{' or null' if null else ''}, got {_kind(value)}")
    try:
        ok = math.isfinite(float(value))
    except OverflowError:
        ok = False
    if not ok:
        raise _Shape(f"{where}: expected a finite number, got {value!r:.40}")


def _text(value: Any, where: str, *, null: bool = True) -> None:
    if not (isinstance(value, str) or (null and value is None)):
        raise _Shape(f"{where}: expected a string, got {_kind(value)}")


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Shape(f"{where}: expected an object, got {_kind(value)}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Shape(f"{where}: expected a list, got {_kind(value)}")
    return value


def _evidence(value: Any, where: str) -> None:
    if value is None:
        return
    for key, v in _object(value, where).items():
        if v is not None and not isinstance(v, (str, bool)):
            _number(v, f"{where}[{key!r:.60}]")


def _cause(value: Any, where: str) -> None:
    c = _object(value, where)
    for key in ("layer", "cause"):
        _text(c.get(key), f"{where}.{key}", null=False)
    _number(c.get("score"), f"{where}.score", null=True)  # null: a non-finite value, written as null
    _number(c.get("confidence"), f"{where}.confidence", null=True)
    for key in ("role", "summary", "advice", "chain"):
        _text(c.get(key), f"{where}.{key}")
    for i, item in enumerate(_list(c.get("explains"), f"{where}.explains")):
        _text(item, f"{where}.explains[{i}]", null=False)
    _evidence(c.get("evidence"), f"{where}.evidence")


def check_verdict(body: dict[str, Any]) -> None:
    """ValueError naming the first field of the wrong shape: what the printers and the report read.

    Why check at all: a hostile or broken exporter answering ``layers: []``,
    ``primary: "x"`` or ``timestamp: 1e300`` ended ``diagnose`` and ``report`` in a
    traceback (24 such shapes were found); a wrong shape is now one line, exit status 1.
    """
    _text(body.get("state"), "state")
    ts = body.get("timestamp")
    _number(ts, "timestamp", null=True)
    if ts is not None and not 0 <= ts <= MAX_TIMESTAMP:
        raise _Shape(f"timestamp: expected seconds since 1970 before the year 3000, got {ts!r:.40}")
    if not isinstance(body.get("schema_version"), (int, str, type(None))) or isinstance(body.get("schema_version"), bool):
        raise _Shape(f"schema_version: expected a number or a string, got {_kind(body.get('schema_version'))}")
    for name, info in _object(body["layers"], "layers").items():
        layer = _object(info, f"layers.{name}")
        _text(layer.get("status"), f"layers.{name}.status")
        _number(layer.get("score"), f"layers.{name}.score", null=True)
        _number(layer.get("headroom"), f"layers.{name}.headroom", null=True)
        _text(layer.get("limit"), f"layers.{name}.limit")
    for key in ("bottlenecks", "contributing"):
        for i, c in enumerate(_list(body.get(key), key)):
            _cause(c, f"{key}[{i}]")
    if body.get("primary") is not None:
        _cause(body["primary"], "primary")
    for i, sym in enumerate(_list(body.get("symptoms"), "symptoms")):
        s = _object(sym, f"symptoms[{i}]")
        _text(s.get("id"), f"symptoms[{i}].id", null=False)
        _text(s.get("text"), f"symptoms[{i}].text")
        _evidence(s.get("evidence"), f"symptoms[{i}].evidence")
    for key in ("notices", "holding"):
        for i, item in enumerate(_list(body.get(key), key)):
            _text(item, f"{key}[{i}]", null=False)
    if body.get("signals") is not None:
        _object(body["signals"], "signals")


def nothing_measured(verdict: dict[str, Any]) -> bool:
    """Every layer unknown: the exporter has no input to judge by."""
    layers = verdict.get("layers") or {}
    return bool(layers) and all(info.get("status") == "unknown" for info in layers.values())


def render(verdict: dict[str, Any], out: TextIO) -> None:
    """State and primary with its chain first, then symptoms, the layers with their headroom,
    the other causes, and what is missing."""
    lines: list[str] = []
    state = str(verdict.get("state", "unknown"))
    when = verdict.get("timestamp")
    stamp = f" at {_clock(when)}" if isinstance(when, (int, float)) else ""
    lines.append(f"Service {state.upper()}{stamp}")
    lines += _engine_rows(verdict.get("engines"))
    primary = verdict.get("primary")
    if primary:
        title = (
            f"primary: {primary['layer']} / {primary['cause']}  confidence {_ratio(primary.get('confidence'))}"
            f"  score {_ratio(primary.get('score'))}"
        )
        lines += ["", _rule(title), "  " + str(primary.get("chain", "")), ""]
        lines += _wrapped(str(primary.get("advice", "")))
        lines += _evidence_rows(primary.get("evidence") or {})
    elif state == "healthy":
        lines.append("No symptom: TTFT, ITL, queue and failures are within bounds. Headroom per layer below.")
    capacity = verdict.get("capacity")
    if isinstance(capacity, dict) and capacity.get("text"):
        lines.append(f"Capacity: {capacity['text']}.")
    symptoms = verdict.get("symptoms") or []
    if symptoms and lines[-1]:
        lines.append("")
    lines += [f"  symptom {sym.get('id')}: {sym.get('text') or ''}" for sym in symptoms]
    lines += ["", "seven layers"]
    rows: list[tuple[str, ...]] = [("layer", "status", "score", "headroom", "nearest limit")]
    for name, info in verdict["layers"].items():  # the shape is checked: check_verdict()
        score, room = info.get("score"), info.get("headroom")
        rows.append(
            (
                str(name),
                str(info.get("status", "unknown")),
                "-" if score is None else f"{score:.2f}",
                "-" if room is None else f"{100 * room:.0f} %",
                str(info.get("limit", "")),
            )
        )
    lines += _table(rows, right=(2, 3))
    others = [c for c in verdict.get("bottlenecks", []) if c.get("role", "warning") != "primary"]
    for c in others:
        lines += ["", _rule(f"{c.get('role') or 'warning'}: {c['layer']} / {c['cause']}  score {_ratio(c.get('score'))}")]
        if c.get("summary"):
            lines += _wrapped(str(c["summary"]))
        lines += _wrapped(str(c.get("advice", "")))
        lines += _evidence_rows(c.get("evidence") or {})
    notes = verdict.get("notices") or []
    if notes:
        lines.append("")
    lines += [f"note: {note}" for note in notes]
    if not primary and not others and state == "unknown":
        lines.append("Nothing can be concluded: " + _missing(verdict))
    out.write("\n".join(lines) + "\n")


def _engine_rows(engines: Any) -> list[str]:
    """One line per engine when the exporter judges several (the body above is the worst one's):
    on a DaemonSet node, which pod is in trouble comes first."""
    if not isinstance(engines, dict) or len(engines) < 2:
        return []
    rows: list[tuple[str, ...]] = [("engine", "state", "primary")]
    for name, one in engines.items():
        if not isinstance(one, dict):
            continue
        primary = one.get("primary")
        named = f"{primary.get('layer')} / {primary.get('cause')}" if isinstance(primary, dict) else "-"
        rows.append((str(name), str(one.get("state", "unknown")), named))
    return ["", *_table(rows), "  (the verdict below is the worst engine's; --engine NAME shows another)"]


def _rule(title: str) -> str:
    return f"== {title} " + "=" * max(3, WIDTH - len(title) - 4)


def _wrapped(text: str) -> list[str]:
    if not text:
        return []
    return textwrap.wrap(
        text, WIDTH, initial_indent="  ", subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
    ) + [""]


def _evidence_rows(evidence: dict[str, Any]) -> list[str]:
    return _table([(str(metric), _num(value)) for metric, value in evidence.items()], indent="    ")


def _table(rows: list[tuple[str, ...]], right: tuple[int, ...] = (), indent: str = "  ") -> list[str]:
    if not rows:
        return []
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = []
    for row in rows:
        cells = [cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        out.append((indent + "  ".join(cells)).rstrip())
    return out


def _missing(verdict: dict[str, Any]) -> str:
    notes = [n for n in verdict.get("notices") or [] if "no " in n or "down" in n]
    return "; ".join(notes) if notes else "no layer could be judged"


def _ratio(value: Any) -> str:
    """A score or confidence with two decimals; "n/a" for null (the verdict has no value)."""
    return "n/a" if value is None else f"{value:.2f}"


def _num(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return str(value)
    if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
        return f"{value:.3e}"
    return f"{value:.4g}"


def _clock(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))


__all__ = ["check_verdict", "fetch", "nothing_measured", "render", "verdict_of"]
