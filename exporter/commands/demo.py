"""`llm-layer-exporter demo`: simulator + load + exporter on 127.0.0.1, with a live view.

A tool command (the ``tools`` extra: rich for the live view, httpx for the load);
the README's first command (scripts/run.sh installs the extra first). The demo
itself - the children it starts, the view, the tour - is the package exporter/demo/,
imported when the command is chosen.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from exporter.demo.plan import TOUR_GPUS, TOUR_SECONDS, TOUR_TIME_SCALE
    from exporter.demo.stack import DEFAULT_LISTEN
    from exporter.simulator.scenarios import NAMES
    from exporter.simulator.settings import DIALECTS
    from exporter.values import seconds_type

    add = parser.add_argument
    add(
        "--scenario",
        default=None,
        choices=NAMES,
        help="run one bottleneck scenario until Ctrl-C or --duration (default: the tour, every scenario in turn)",
    )
    add(
        "--tour-seconds",
        type=seconds_type(positive=False),
        default=TOUR_SECONDS,
        metavar="S",
        help=f"the tour: how long each scenario runs (default {TOUR_SECONDS:g})",
    )
    add(
        "--tour",
        default=None,
        metavar="SCENARIO[,...]",
        help="the tour: the scenarios to visit after healthy, comma-separated (default: every scenario with a cause)",
    )
    add("--dialect", default="vllm", choices=DIALECTS, help="engine whose /metrics the simulator speaks (default vllm)")
    add("--listen-address", default=DEFAULT_LISTEN, help=f"where the exporter serves (default {DEFAULT_LISTEN})")
    add(
        "--duration",
        type=seconds_type(positive=False),
        default=None,
        metavar="S",
        help="stop after S seconds (default: until Ctrl-C, or the tour's end)",
    )
    add("--no-tui", action="store_true", help="print plain lines instead of the live view (also when stdout is not a terminal)")
    add(
        "--interval",
        type=seconds_type(positive=False),
        default=1.0,
        metavar="S",
        help="refresh and sampling interval in seconds (default 1)",
    )
    add(
        "--time-scale",
        type=float,
        default=None,
        metavar="X",
        help=f"simulator speed-up (default 1; the tour {TOUR_TIME_SCALE:g})",
    )
    add("--gpus", type=int, default=None, metavar="N", help=f"simulated GPUs (default: the scenario's; the tour {TOUR_GPUS})")
    parser.epilog = (
        "exit status: 0 the demo ran (time up, tour done, Ctrl-C or SIGTERM), 1 the simulator or the "
        "exporter failed, 2 a bad flag, 4 cannot listen on --listen-address"
    )


def run(args: argparse.Namespace) -> int:
    from exporter.demo.main import run as run_demo

    return run_demo(args)
