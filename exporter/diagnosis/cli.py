"""`llm-layer-exporter diagnose`: print a running exporter's seven-layer verdict.

Why a client of /diagnosis and not a local evaluation: the verdict needs the
exporter's window of snapshots (rates, quantiles, persistence); asking the
running exporter gives the same answer as its page and its metrics.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

DEFAULT_URL = "http://127.0.0.1:9750"
EXIT_UNREACHABLE = 1
#: the exporter answered but measured nothing (no engine reachable, no GPU source)
EXIT_NOTHING_MEASURED = 3
_COLOURS = {"ok": "green", "warning": "yellow", "bottleneck": "red", "unknown": "grey50"}
_STATE_COLOURS = {"degraded": "red", "healthy": "green", "unknown": "yellow"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--exporter", default=DEFAULT_URL, metavar="URL", help=f"the exporter's base URL (default {DEFAULT_URL})")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="a readable report (text, default) or the raw JSON")
    parser.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS", help="HTTP timeout (default 5)")


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


def render(verdict: dict[str, Any], console: Any) -> None:
    """State and primary with its chain first, then symptoms, the layers with their headroom,
    the other causes, and what is missing."""
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    state = str(verdict.get("state", "unknown"))
    when = verdict.get("timestamp")
    stamp = f" at {_clock(when)}" if isinstance(when, (int, float)) else ""
    console.print(Text(f"Service {state.upper()}{stamp}", style=f"bold {_STATE_COLOURS.get(state, 'white')}"))
    primary = verdict.get("primary")
    if primary:
        body = Table.grid(padding=(0, 0, 1, 0))
        body.add_row(Text(str(primary.get("chain", "")), style="bold"))
        body.add_row(Text(str(primary.get("advice", ""))))
        body.add_row(_evidence_table(primary.get("evidence", {})))
        title = (f"primary: {primary['layer']} / {primary['cause']}  confidence {primary.get('confidence', 0):.2f}"
                 f"  score {primary.get('score', 0):.2f}")
        console.print(Panel(body, title=title, title_align="left", border_style="red"))
    elif state == "healthy":
        console.print(Text("No symptom: TTFT, ITL, queue and failures are within bounds. Headroom per layer below.",
                           style="green"))
    for sym in verdict.get("symptoms") or []:
        console.print(Text(f"  symptom {sym.get('id')}: {sym.get('text', '')}", style="yellow"))
    layers = Table(title="seven layers", show_header=True, header_style="bold")
    for col, justify in (("layer", "left"), ("status", "left"), ("score", "right"), ("headroom", "right"),
                         ("nearest limit", "left")):
        layers.add_column(col, justify=justify, overflow="fold")
    for name, info in verdict["layers"].items():
        status = str(info.get("status", "unknown"))
        score, room = info.get("score"), info.get("headroom")
        layers.add_row(name, Text(status, style=f"bold {_COLOURS.get(status, 'white')}"),
                       "-" if score is None else f"{score:.2f}", "-" if room is None else f"{100 * room:.0f} %",
                       str(info.get("limit", "")))
    console.print(layers)
    others = [c for c in verdict.get("bottlenecks", []) if c.get("role", "warning") != "primary"]
    for c in others:
        role = c.get("role", "warning")
        body = Table.grid(padding=(0, 0, 1, 0))
        if c.get("summary"):
            body.add_row(Text(str(c["summary"])))
        body.add_row(Text(str(c.get("advice", ""))))
        body.add_row(_evidence_table(c.get("evidence", {})))
        console.print(
            Panel(body, title=f"{role}: {c['layer']} / {c['cause']}  score {c['score']:.2f}", title_align="left",
                  border_style=_COLOURS.get(verdict["layers"].get(c["layer"], {}).get("status", "warning"), "yellow"))
        )
    for note in verdict.get("notices") or []:
        console.print(Text(f"note: {note}", style="grey50"))
    if not primary and not others and state == "unknown":
        console.print(Text("Nothing can be concluded: " + _missing(verdict), style="bold yellow"))


def _evidence_table(evidence: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
    for metric, value in evidence.items():
        table.add_row(metric, _num(value))
    return table


def _missing(verdict: dict[str, Any]) -> str:
    notes = [n for n in verdict.get("notices") or [] if "no " in n or "down" in n]
    return "; ".join(notes) if notes else "no layer could be judged"


def nothing_measured(verdict: dict[str, Any]) -> bool:
    """Every layer unknown: the exporter has no input to judge by."""
    layers = verdict.get("layers") or {}
    return bool(layers) and all(info.get("status") == "unknown" for info in layers.values())


def _num(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return str(value)
    if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
        return f"{value:.3e}"
    return f"{value:.4g}"


def _clock(ts: float) -> str:
    import time

    return time.strftime("%H:%M:%S", time.localtime(ts))


def run(args: argparse.Namespace) -> int:
    try:
        verdict = fetch(args.exporter, args.timeout)
    except RuntimeError as err:
        print(f"llm-layer-exporter diagnose: {err}", file=sys.stderr)
        return EXIT_UNREACHABLE
    code = EXIT_NOTHING_MEASURED if nothing_measured(verdict) else 0
    if args.format == "json":
        print(json.dumps(verdict, indent=2))
        return code
    from rich.console import Console

    render(verdict, Console())
    return code
