"""The demo from its parsed flags to its exit status: check, start the children, run the loop, stop them all.

Why the checks come first: a bad flag (exit 2) or a port the exporter cannot listen on
(exit 4) must be said before a simulator starts; and whatever ends the demo (its time,
the tour's end, Ctrl-C, SIGTERM, a child dying) passes through one ``finally`` that
stops every child.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from exporter.demo.plan import TOUR_GPUS, TOUR_TIME_SCALE, TOUR_WINDOW_SECONDS, tour_names
from exporter.demo.session import Session
from exporter.demo.stack import EXIT_CANNOT_LISTEN, EXIT_CHILD_FAILED, ChildFailed, check_listen, start_exporter, stop_process
from exporter.demo.summary import Conclusion, summary_lines
from exporter.demo.tour import visit
from exporter.errors import UsageError
from exporter.simulator import scenarios
from exporter.simulator.process import SimulatorProcess


def run(args: argparse.Namespace) -> int:
    """Run the demo the flags describe; its exit status (a bad flag raises UsageError)."""
    if args.duration is not None and not args.duration > 0:
        raise UsageError("--duration: expected a positive number of seconds")
    tour = args.scenario is None
    if args.time_scale is None:
        args.time_scale = TOUR_TIME_SCALE if tour else 1.0
    if not args.interval > 0 or not args.time_scale > 0:
        raise UsageError("--interval and --time-scale: expected positive numbers")
    if not args.tour_seconds > 0:
        raise UsageError("--tour-seconds: expected a positive number of seconds")
    if args.tour is not None and not tour:
        raise UsageError("--tour: only without --scenario (the tour visits several scenarios)")
    args.tour_names = tour_names(args) if tour else []
    _, sep, port = args.listen_address.rpartition(":")
    if not sep or not port.isdigit():
        raise UsageError(f"--listen-address: expected HOST:PORT, got {args.listen_address!r}")
    if int(port) == 0:
        raise UsageError("--listen-address: the demo reads its exporter there, so it needs a port other than 0")
    try:
        check_listen(args.listen_address)
    except ChildFailed as err:
        print(f"llm-layer-exporter demo: error: {err}", file=sys.stderr, flush=True)
        return EXIT_CANNOT_LISTEN
    settings: dict[str, Any] = {"time_scale": args.time_scale}
    gpus = args.gpus if args.gpus is not None else (TOUR_GPUS if tour else None)
    if gpus is not None:
        settings["gpus"] = gpus
    first = "healthy" if tour else args.scenario
    sim = SimulatorProcess(first, args.dialect, settings)
    exporter: subprocess.Popen[bytes] | None = None
    results: list[Conclusion] = []

    def on_sigterm(*_: object) -> None:
        raise KeyboardInterrupt  # unwinds into the finally below, which stops the children

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    status = 0
    with tempfile.TemporaryDirectory(prefix="llm-demo-") as tmp:
        try:
            sim.start()
            print(
                f"simulator ({first}, {args.dialect}) on {sim.base_url}, pid {sim.pid}, "
                f"{gpus or 'the scenario’s'} GPU(s), time scale {args.time_scale:g}",
                flush=True,
            )
            config = None
            if tour:  # the window the scenario proofs use: each scenario's data drains in seconds
                config = Path(tmp) / "exporter.yaml"
                config.write_text(f"diagnosis:\n  window_seconds: {TOUR_WINDOW_SECONDS}\n")
            exporter, failure = start_exporter(
                args.listen_address, sim.base_url, sim.pid, args.interval, Path(tmp) / "exporter.log", 30.0, config
            )
            if failure is not None:
                print(f"llm-layer-exporter demo: error: {failure.message}", file=sys.stderr, flush=True)
                return failure.status
            exporter_url = f"http://{args.listen_address}"
            print(f"exporter on {exporter_url}/metrics (verdict at {exporter_url}/diagnosis)", flush=True)
            if not tour:
                print(
                    f"scenario {args.scenario}: {scenarios.get(args.scenario).summary}; other scenarios: "
                    f"--scenario NAME (`simulate --list-scenarios`), or no --scenario for the tour",
                    flush=True,
                )
            session = Session(args, sim.base_url, exporter_url, exporter, results)
            asyncio.run(session.run(visit if tour else Session.forever))
        except KeyboardInterrupt:
            if tour and results:
                print("\n".join(["", "tour stopped early"] + summary_lines(results)), flush=True)
        except (RuntimeError, ChildFailed) as err:
            print(f"llm-layer-exporter demo: error: {err}", file=sys.stderr, flush=True)
            status = EXIT_CHILD_FAILED
        finally:
            signal.signal(signal.SIGTERM, previous)
            stop_process(exporter)
            sim.stop()
    return status
