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
_COLOURS = {"ok": "green", "warning": "yellow", "bottleneck": "red", "unknown": "grey50"}


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
    """The layers map, then each cause with its evidence and advice."""
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    when = verdict.get("timestamp")
    title = "seven-layer verdict" + (f" at {_clock(when)}" if isinstance(when, (int, float)) else "")
    layers = Table(title=title, show_header=True, header_style="bold")
    layers.add_column("layer")
    layers.add_column("status")
    layers.add_column("score", justify="right")
    for name, info in verdict["layers"].items():
        status = str(info.get("status", "unknown"))
        score = info.get("score")
        layers.add_row(name, Text(status, style=f"bold {_COLOURS.get(status, 'white')}"), "-" if score is None else f"{score:.2f}")
    console.print(layers)
    causes = verdict["bottlenecks"]
    if not causes:
        console.print(Text("No cause holds: no layer is a bottleneck now.", style="bold green"))
        return
    for c in causes:
        evidence = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
        for metric, value in c.get("evidence", {}).items():
            evidence.add_row(metric, _num(value))
        status = verdict["layers"].get(c["layer"], {}).get("status", "warning")
        body = Table.grid(padding=(0, 0, 1, 0))
        body.add_row(Text(str(c.get("advice", ""))))
        body.add_row(evidence)
        console.print(
            Panel(body, title=f"{c['layer']} / {c['cause']}  score {c['score']:.2f}", title_align="left",
                  border_style=_COLOURS.get(status, "yellow"))
        )


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
    if args.format == "json":
        print(json.dumps(verdict, indent=2))
        return 0
    from rich.console import Console

    render(verdict, Console())
    return 0
