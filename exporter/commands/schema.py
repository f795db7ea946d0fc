"""`llm-layer-exporter schema`: print the metric schema as JSON or Markdown.

docs/metrics.md is this command's Markdown output; a test fails when it is stale.
"""

from __future__ import annotations

import argparse

from exporter import schema


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("json", "markdown"), default="json", help="output format (default json)")


def render(fmt: str) -> str:
    if fmt == "json":
        return schema.to_json() + "\n"
    from exporter.engines import coverage, value_rewrites

    return schema.to_markdown(coverage(), value_rewrites())


def run(args: argparse.Namespace) -> int:
    print(render(args.format), end="")
    return 0
