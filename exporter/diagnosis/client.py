"""A client of a running exporter's ``/diagnosis``: fetch the verdict, check it, print it as text.

Why a client and not a local evaluation: the verdict needs the exporter's window of
snapshots (rates, quantiles, persistence); asking the running exporter gives the
same answer as its page and its metrics. Why ``requests`` and plain text: the
``diagnose`` command (exporter/commands/diagnose.py) runs next to the exporter in
the production image, which carries the runtime only (no rich, no httpx); plain
lines also survive ``| grep``, a pager and a ticket.
"""

from __future__ import annotations

import textwrap
import time
from typing import Any, TextIO

#: width advice and summaries are wrapped to (chains and metric names are never broken)
WIDTH = 100


def fetch(base_url: str, timeout: float) -> dict[str, Any]:
    """GET BASE/diagnosis; raises RuntimeError with one readable line on any failure."""
    import requests

    url = base_url.rstrip("/") + "/diagnosis"
    try:
        response = requests.get(url, timeout=timeout)
    except requests.RequestException as err:
        raise RuntimeError(f"cannot reach the exporter at {url}: {type(err).__name__}") from None
    return verdict_of(url, response)


def verdict_of(url: str, response: Any) -> dict[str, Any]:
    """The verdict in a /diagnosis answer; RuntimeError with one readable line when it is not one
    (shared by ``diagnose`` and ``report``)."""
    if response.status_code != 200:
        raise RuntimeError(f"{url} answered HTTP {response.status_code}")
    try:
        body = response.json()
    except ValueError:
        raise RuntimeError(f"{url} did not return JSON (is this an llm-layer-exporter?)") from None
    if not isinstance(body, dict) or "layers" not in body or "bottlenecks" not in body:
        raise RuntimeError(f"{url} returned JSON without layers/bottlenecks (is this an llm-layer-exporter?)")
    return body


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
    primary = verdict.get("primary")
    if primary:
        title = (
            f"primary: {primary['layer']} / {primary['cause']}  confidence {primary.get('confidence', 0):.2f}"
            f"  score {primary.get('score', 0):.2f}"
        )
        lines += ["", _rule(title), "  " + str(primary.get("chain", "")), ""]
        lines += _wrapped(str(primary.get("advice", "")))
        lines += _evidence(primary.get("evidence", {}))
    elif state == "healthy":
        lines.append("No symptom: TTFT, ITL, queue and failures are within bounds. Headroom per layer below.")
    symptoms = verdict.get("symptoms") or []
    if symptoms and lines[-1]:
        lines.append("")
    lines += [f"  symptom {sym.get('id')}: {sym.get('text', '')}" for sym in symptoms]
    lines += ["", "seven layers"]
    rows: list[tuple[str, ...]] = [("layer", "status", "score", "headroom", "nearest limit")]
    for name, info in verdict["layers"].items():
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
        lines += ["", _rule(f"{c.get('role', 'warning')}: {c['layer']} / {c['cause']}  score {c['score']:.2f}")]
        if c.get("summary"):
            lines += _wrapped(str(c["summary"]))
        lines += _wrapped(str(c.get("advice", "")))
        lines += _evidence(c.get("evidence", {}))
    notes = verdict.get("notices") or []
    if notes:
        lines.append("")
    lines += [f"note: {note}" for note in notes]
    if not primary and not others and state == "unknown":
        lines.append("Nothing can be concluded: " + _missing(verdict))
    out.write("\n".join(lines) + "\n")


def _rule(title: str) -> str:
    return f"== {title} " + "=" * max(3, WIDTH - len(title) - 4)


def _wrapped(text: str) -> list[str]:
    if not text:
        return []
    return textwrap.wrap(
        text, WIDTH, initial_indent="  ", subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
    ) + [""]


def _evidence(evidence: dict[str, Any]) -> list[str]:
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


def _num(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return str(value)
    if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
        return f"{value:.3e}"
    return f"{value:.4g}"


def _clock(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))


__all__ = ["fetch", "nothing_measured", "render", "verdict_of"]
