"""`llm-layer-exporter diagnose`: print a running exporter's seven-layer verdict.

A runtime command (it ships in the production image): what an on-call engineer
runs next to the exporter, so it needs nothing beyond ``requests`` and prints
plain text. The client lives in exporter/diagnosis/client.py.

Exit status: 0 a verdict, 1 the exporter cannot be reached or is not one,
3 the exporter answered but measured nothing (no engine reachable, no GPU source).
"""

from __future__ import annotations

import argparse
import json
import sys

DEFAULT_URL = "http://127.0.0.1:9750"
EXIT_UNREACHABLE = 1
#: the exporter answered but measured nothing (no engine reachable, no GPU source)
EXIT_NOTHING_MEASURED = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--exporter", default=DEFAULT_URL, metavar="URL", help=f"the exporter's base URL (default {DEFAULT_URL})")
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="a readable report (text, default) or the raw JSON"
    )
    parser.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS", help="HTTP timeout (default 5)")


def run(args: argparse.Namespace) -> int:
    from exporter.diagnosis.client import fetch, nothing_measured, render

    try:
        verdict = fetch(args.exporter, args.timeout)
    except RuntimeError as err:
        print(f"llm-layer-exporter diagnose: {err}", file=sys.stderr)
        return EXIT_UNREACHABLE
    code = EXIT_NOTHING_MEASURED if nothing_measured(verdict) else 0
    if args.format == "json":
        print(json.dumps(verdict, indent=2))
    else:
        render(verdict, sys.stdout)
    return code
