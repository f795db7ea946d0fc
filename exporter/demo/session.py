"""The refresh loop: each interval read the exporter, show it (live view or plain lines), check the children.

Why one loop for both modes: ``--scenario`` runs it until stopped, the tour
(exporter/demo/tour.py) drives it scenario by scenario; either way a refresh is the same
read and the same view, and a dead exporter or a failed load ends it the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from rich.console import Console
from rich.live import Live

from exporter.demo.live import render
from exporter.demo.loads import Loads, LoadStats
from exporter.demo.readings import Reading, read_exporter
from exporter.demo.stack import ChildFailed
from exporter.demo.summary import Conclusion, summary_lines
from exporter.demo.transcript import plain_line, wrapped
from exporter.demo.verdicts import verdict_text

#: the tour's plain transcript prints a progress line this often (the scenario mode: every interval)
TOUR_TICK_SECONDS = 5.0


class TimeUp(Exception):
    """``--duration`` has passed, or the load ended by itself: the demo stops without an error."""


class Session:
    """The view loop: reads the exporter each interval, shows it, and (the tour) drives the scenarios."""

    def __init__(
        self,
        args: argparse.Namespace,
        sim_url: str,
        exporter_url: str,
        exporter: subprocess.Popen[bytes] | None,
        results: list[Conclusion],
    ) -> None:
        self.args, self.sim_url, self.exporter_url, self.exporter = args, sim_url, exporter_url, exporter
        self.results = results
        self.tour = args.scenario is None
        self.plain = args.no_tui or not sys.stdout.isatty()
        self.stats = LoadStats()
        self.loads = Loads(sim_url, args.time_scale, self.stats)
        self.start = time.monotonic()
        self.before: Reading | None = None
        self.last = self.start
        self.last_tick_line = -math.inf
        self.live: Any = None
        self.scenario = args.scenario or "healthy"
        self.tour_text = ""
        self.client: Any = None

    # ------------------------------------------------------------------ output

    def say(self, text: str = "") -> None:
        """A transcript line (above the live view on a terminal)."""
        if self.live is not None:
            self.live.console.print(text, markup=False, highlight=False)
        else:
            print(text, flush=True)

    def say_wrapped(self, text: str, indent: str = "   ") -> None:
        if self.live is not None:
            self.say(indent + text)  # rich wraps it
        else:
            for line in wrapped(text, indent):
                self.say(line)

    def finish(self, lines: list[str]) -> None:
        """The closing lines, after the live view (so they are the last thing on the screen)."""
        if self.live is not None:
            self.live.stop()
            self.live = None
        print("\n".join([""] + lines), flush=True)

    # ------------------------------------------------------------------ one refresh

    async def tick(self) -> dict[str, Any] | None:
        """Wait one interval, read the exporter, show it; the verdict it read (None when none)."""
        await asyncio.sleep(self.args.interval)
        elapsed = time.monotonic() - self.start
        if self.args.duration is not None and elapsed >= self.args.duration:
            raise TimeUp
        if self.exporter is not None and self.exporter.poll() is not None:
            raise ChildFailed(f"the exporter stopped (exit status {self.exporter.returncode})")
        if not self.loads.check():
            raise TimeUp
        now_t = time.monotonic()
        load_text = self.stats.take(now_t - self.last)
        self.last = now_t
        now, diagnosis, note = await read_exporter(self.client, self.exporter_url)
        signals = (diagnosis or {}).get("signals")
        if self.plain:
            every = TOUR_TICK_SECONDS if self.tour else 0.0
            if elapsed - self.last_tick_line >= every - 1e-6:
                self.last_tick_line = elapsed
                line = plain_line(elapsed, self.scenario, now, self.before, verdict_text(diagnosis), load_text, signals)
                print(line + (f" [{note}]" if note else ""), flush=True)
        elif self.live is not None:
            self.live.update(
                render(
                    self.args,
                    elapsed,
                    now,
                    self.before,
                    diagnosis,
                    load_text,
                    note,
                    scenario=self.scenario,
                    tour=self.tour_text,
                    results=self.results,
                )
            )
        self.before = now
        return diagnosis

    async def forever(self) -> None:
        """``--scenario``: refresh until the time is up (or Ctrl-C)."""
        while True:
            await self.tick()

    async def run(self, drive: Callable[[Session], Awaitable[None]]) -> None:
        """Start the first load (and the live view), let ``drive`` refresh, stop both however it ends."""
        self.loads.start(self.scenario)
        if not self.plain:
            self.live = Live(console=Console(), refresh_per_second=4, transient=False)
            self.live.start()
        try:
            async with httpx.AsyncClient(timeout=max(2.0, self.args.interval)) as client:
                self.client = client
                try:
                    await drive(self)
                except TimeUp:
                    if self.tour:
                        self.finish([f"tour stopped at --duration {self.args.duration:g} s"] + summary_lines(self.results))
        finally:
            await self.loads.close()
            if self.live is not None:
                self.live.stop()
                self.live = None
