"""The `llm-layer-exporter` command line: one sub-command per module.

Each command module exposes ``add_arguments(parser)`` and ``run(args) -> int``;
only the chosen command's module is imported, and command modules keep heavy
imports (FastAPI, matplotlib, rich) inside ``run``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from exporter import __version__

#: sub-command -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("exporter.commands.serve", "run the exporter (GPU, engines, diagnosis) on /metrics"),
    "schema": ("exporter.commands.schema", "print the metric schema (json or markdown)"),
    "simulate": ("exporter.simulator.cli", "run a simulated inference server with a bottleneck scenario"),
    "demo": ("exporter.demo", "simulator + load + exporter on 127.0.0.1, with a live view"),
    "diagnose": ("exporter.diagnosis.cli", "print the seven-layer verdict of a running exporter"),
    "ramp": ("exporter.ramp.cli", "ramp concurrency, find the knee and the layer that saturates first"),
    "report": ("exporter.commands.report", "write an incident snapshot (HTML, Markdown, PNG charts, JSON) of the verdict"),
}

EXIT_USAGE = 2


class UsageError(Exception):
    """A bad flag or config value: the CLI prints one line and exits with status 2."""


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    """Only the chosen command's module is imported: the others cost nothing."""
    chosen = next((a for a in argv if not a.startswith("-")), None)
    parser = argparse.ArgumentParser(
        prog="llm-layer-exporter",
        description="Find which layer of an LLM inference service is the bottleneck.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args._module.run(args) or 0)
    except UsageError as err:
        print(f"llm-layer-exporter {args.command}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
