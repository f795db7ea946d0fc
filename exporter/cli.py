"""The `llm-layer-exporter` command line: one sub-command per module of exporter/commands/.

Each command module exposes ``add_arguments(parser)`` and ``run(args) -> int``;
only the chosen command's module is imported, and command modules keep heavy
imports (FastAPI, matplotlib, rich) inside ``run``. Runtime commands (``serve``,
``diagnose``, ``schema``) need only the package's own dependencies; tool commands
need the ``tools`` extra and say so in one line (exit status 2) when it is missing
(exporter/commands/tools.py).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NamedTuple

from exporter import __version__
from exporter.errors import EXIT_USAGE, UsageError


class Command(NamedTuple):
    module: str
    help: str
    #: needs the tools extra (rich, httpx, matplotlib)
    tool: bool = False


COMMANDS: dict[str, Command] = {
    "serve": Command("exporter.commands.serve", "run the exporter (GPU, engines, diagnosis) on /metrics"),
    "diagnose": Command("exporter.commands.diagnose", "print the seven-layer verdict of a running exporter"),
    "schema": Command("exporter.commands.schema", "print the metric schema (json or markdown)"),
    "requests": Command(
        "exporter.commands.requests", "print why a running exporter's slowest (or one traced) requests were slow"
    ),
    "simulate": Command("exporter.commands.simulate", "run a simulated inference server with a bottleneck scenario", tool=True),
    "demo": Command("exporter.commands.demo", "simulator + load + exporter on 127.0.0.1, with a live view", tool=True),
    "ramp": Command("exporter.commands.ramp", "ramp concurrency, find the knee and the layer that saturates first", tool=True),
    "report": Command(
        "exporter.commands.report", "write an incident snapshot (HTML, Markdown, PNG charts, JSON) of the verdict", tool=True
    ),
    "tune": Command(
        "exporter.commands.tune", "tune an engine's flags guided by the bottleneck at the knee, measured per change", tool=True
    ),
    "compare": Command("exporter.commands.compare", "verdict diff of two ramp or tune records", tool=True),
    "plan": Command(
        "exporter.commands.plan", "replicas for peak and trough from Prometheus' demand and the measured capacity", tool=True
    ),
}

__all__ = ["COMMANDS", "EXIT_USAGE", "UsageError", "build_parser", "main"]


def _chosen(argv: list[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    """Only the chosen command's module is imported: the others cost nothing."""
    chosen = _chosen(argv)
    parser = argparse.ArgumentParser(
        prog="llm-layer-exporter",
        description="Find which layer of an LLM inference service is the bottleneck.",
        epilog="tools: commands marked [tools] need pip install 'llm-layer-exporter[tools]'",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, command in COMMANDS.items():
        help_text = f"[tools] {command.help}" if command.tool else command.help
        p = sub.add_parser(name, help=help_text, description=command.help)
        if name == chosen:
            module = importlib.import_module(command.module)
            module.add_arguments(p)
            p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    chosen = _chosen(argv)
    if chosen in COMMANDS and COMMANDS[chosen].tool:
        from exporter.commands import tools

        absent = tools.missing()
        if absent:  # before its module is imported: the simulator, ramp and demo import the tools
            print(f"llm-layer-exporter {chosen}: {tools.HINT} ({', '.join(absent)} not installed)", file=sys.stderr)
            return EXIT_USAGE
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
