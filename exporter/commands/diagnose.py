"""`llm-layer-exporter diagnose`: print a running exporter's seven-layer verdict.

A runtime command (it ships in the production image): what an on-call engineer
runs next to the exporter, so it needs nothing beyond ``requests`` and prints
plain text. The client lives in exporter/diagnosis/client.py.

Exit status: 0 a verdict, 1 the exporter cannot be reached or is not one,
3 the exporter answered but measured nothing (no engine reachable, no GPU source).
"""

from __future__ import annotations

import argparse
import sys

from exporter.errors import UsageError
from exporter.httpget import MAX_RESPONSE_BYTES, add_credential_arguments, target
from exporter.values import seconds_type

DEFAULT_URL = "http://127.0.0.1:9750"
EXIT_UNREACHABLE = 1
#: the exporter answered but measured nothing (no engine reachable, no GPU source)
EXIT_NOTHING_MEASURED = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--exporter",
        default=DEFAULT_URL,
        metavar="URL",
        help=f"the exporter's base URL (default {DEFAULT_URL}; user info in it is sent as a header, never printed)",
    )
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="a readable report (text, default) or the raw JSON"
    )
    parser.add_argument(
        "--timeout",
        type=seconds_type(positive=False),
        default=5.0,
        metavar="SECONDS",
        help=f"the whole request, connect to last byte (default 5); answers over {MAX_RESPONSE_BYTES >> 20} MiB are refused",
    )
    parser.add_argument(
        "--engine",
        metavar="NAME",
        help="one engine's verdict (/diagnosis?engine=NAME); default: the node's, led by its worst engine",
    )
    add_credential_arguments(parser, "exporter")


def run(args: argparse.Namespace) -> int:
    from exporter import jsonsafe
    from exporter.diagnosis.client import fetch, nothing_measured, render

    if not 0 < args.timeout <= 3600:
        raise UsageError("--timeout: expected 0 to 3600 seconds")
    exporter = target(args.exporter, "exporter", args)
    try:
        verdict = fetch(exporter.url, args.timeout, exporter.headers, engine=args.engine)
    except RuntimeError as err:
        print(f"llm-layer-exporter diagnose: {err}", file=sys.stderr)
        return EXIT_UNREACHABLE
    code = EXIT_NOTHING_MEASURED if nothing_measured(verdict) else 0
    if args.format == "json":
        print(jsonsafe.dumps(verdict, indent=2))
    else:
        render(verdict, sys.stdout)
    return code
