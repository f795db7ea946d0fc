"""``llm-layer-exporter simulate``: run a simulated inference server with a bottleneck scenario.

Every engine knob of :class:`exporter.simulator.settings.SimConfig` is a flag
(``--max-num-seqs``, ``--num-gpu-blocks``, ``--time-scale``, ...). A flag left
out takes the scenario's value; a flag given wins over the scenario, also
after a live ``POST /sim/scenario`` switch. Once listening, one line
``... listening on http://HOST:PORT`` goes to stdout (``--listen-address
127.0.0.1:0`` picks a free port, which that line names).

A tool command (the ``tools`` extra); the simulator itself is exporter/simulator/.
``python -m exporter.simulator`` runs ``main`` here.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import threading
from typing import Any

from exporter.errors import UsageError

#: the ready line's start; exporter/simulator/process.py waits for it in the child's stdout
READY_PREFIX = "llm-layer-exporter simulate: listening on "


def _bool(value: str) -> bool:
    text = value.strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def _scenario_names() -> tuple[str, ...]:
    from exporter.simulator.scenarios import NAMES

    return NAMES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from exporter.simulator.settings import DIALECTS, SimConfig

    parser.add_argument("--scenario", default="healthy", choices=_scenario_names(), help="bottleneck scenario (default healthy)")
    parser.add_argument("--dialect", default="vllm", choices=DIALECTS, help="whose /metrics names to speak (default vllm)")
    parser.add_argument(
        "--listen-address",
        default="127.0.0.1:8000",
        help="HOST:PORT to serve on; port 0 picks a free one (default 127.0.0.1:8000)",
    )
    parser.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"), help="uvicorn log level")
    parser.add_argument("--list-scenarios", action="store_true", help="print the scenarios and their signatures, then exit")
    knobs = parser.add_argument_group("engine knobs (default: the scenario's value)")
    for f in dataclasses.fields(SimConfig):
        kind = str(f.type)
        conv: Any = {"int": int, "float": float, "bool": _bool}.get(kind, str)
        metavar = {"int": "N", "float": "X", "bool": "BOOL"}.get(kind, "TEXT")
        knobs.add_argument(
            "--" + f.name.replace("_", "-"),
            *f.metadata.get("aliases", ()),  # vLLM's short spellings (-tp, -pp, -dp)
            dest=f"knob_{f.name}",
            type=conv,
            default=None,
            metavar=metavar,
            help=f"{f.metadata.get('help', '')} (default {f.default})",
        )


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The knobs given on the command line (those left out are absent)."""
    from exporter.simulator.settings import SimConfig

    out = {}
    for f in dataclasses.fields(SimConfig):
        value = getattr(args, f"knob_{f.name}", None)
        if value is not None:
            out[f.name] = value
    return out


def split_address(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--listen-address: expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def run(args: argparse.Namespace) -> int:
    from exporter.simulator import scenarios
    from exporter.simulator.instance import Simulator
    from exporter.simulator.server import SimulatorServer

    if args.list_scenarios:
        for s in scenarios.SCENARIOS.values():
            print(f"{s.name:24} {s.summary}\n{'':24} signature: {s.signature}")
        return 0
    try:
        host, port = split_address(args.listen_address)
        simulator = Simulator(args.scenario, args.dialect, overrides_from_args(args))
    except ValueError as err:
        raise UsageError(str(err)) from None
    # The scheduler thread shares the GIL with the HTTP thread; a short switch interval keeps it from
    # waiting up to 5 ms for the GIL after every sleep (this process is the simulator's alone).
    sys.setswitchinterval(0.0005)
    server = SimulatorServer(simulator, host, port, log_level=args.log_level)
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        try:
            server.start()
        except (RuntimeError, OSError) as err:
            print(f"llm-layer-exporter simulate: error: {err}", file=sys.stderr)
            return 1
        cfg = simulator.engine.config
        print(
            f"{READY_PREFIX}{server.base_url} (scenario={args.scenario} dialect={args.dialect} gpus={cfg.total_gpus} "
            f"time_scale={cfg.time_scale:g} pid={os.getpid()})",
            flush=True,
        )
        try:
            server.wait(stop)
        except KeyboardInterrupt:
            pass
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m exporter.simulator`` (same flags as ``llm-layer-exporter simulate``)."""
    parser = argparse.ArgumentParser(prog="python -m exporter.simulator", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except UsageError as err:
        print(f"simulate: error: {err}", file=sys.stderr)
        return 2
