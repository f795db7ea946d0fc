"""The terminal view of a running ramp (rich): a bar per ramp and per step, one line per finished step.

Why updates ride on the exporter samples: the sampler already wakes every
``sample_interval`` on its own thread, so the bar advances and the live line
(KV usage, queue, service state, primary or worst layer) refreshes without another thread or any work on
the load generator's event loop.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from exporter.ramp.aggregate import Scrape
from exporter.ramp.model import STATUS_SEVERITY, Step


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.0f} ms"


def live_line(scrape: Scrape, diagnosis: Mapping[str, Any] | None) -> str:
    """KV usage, waiting requests and the worst layer right now, as one short line."""
    parts = []
    kv = [v for _, v in scrape.get("llm_kv_cache_usage_ratio", ())]
    if kv:
        parts.append(f"KV {max(kv):.0%}")
    waiting = [v for _, v in scrape.get("llm_scheduler_requests_waiting", ())]
    if waiting:
        parts.append(f"waiting {sum(waiting):.0f}")
    if diagnosis:
        state = diagnosis.get("state")
        if isinstance(state, str):
            parts.append(state)
        primary = diagnosis.get("primary")
        if isinstance(primary, Mapping) and primary.get("layer"):
            parts.append(f"primary {primary.get('layer')}/{primary.get('cause')}")
        else:
            layers = [(name, info) for name, info in (diagnosis.get("layers") or {}).items() if isinstance(info, Mapping)]
            if layers:
                name, info = max(
                    layers, key=lambda li: (STATUS_SEVERITY.get(str(li[1].get("status")), -1), li[1].get("score") or 0)
                )
                parts.append(f"worst {name}: {info.get('status')}")
    return "  ".join(parts)


def state_text(step: Step) -> str:
    """ "degraded 75 %, primary memory/kv_cache_pressure (6 readings)", or "healthy"."""
    d = step.diagnosis
    if not d.samples:
        return ""
    share = d.states.get(d.state)
    out = d.state if share is None or share >= 1.0 else f"{d.state} {share:.0%}"
    if d.primary is not None:
        out += f", primary {d.primary.layer}/{d.primary.cause} ({d.primary.readings} of {d.degraded_readings} degraded)"
    return out


def step_line(step: Step, knee: Step | None) -> str:
    """One finished step, as printed above the bars."""
    c = step.client
    worst = [(n, lf.status) for n, lf in step.diagnosis.layers.items() if lf.status in ("warning", "bottleneck")]
    scaling = "" if step.scaling is None else f"  scaling {step.scaling:.2f}"
    line = (
        f"[bold]c={step.concurrency:<4}[/] {c.output_tokens_per_s:8.1f} tok/s  {c.requests_per_s:6.2f} req/s{scaling}"
        f"  TTFT p95 {_ms(c.ttft_s.p95)}  ITL p95 {_ms(c.itl_s.p95)}  errors {c.errors} ({c.timeouts} timeouts)"
    )
    state = state_text(step)
    if state:
        colour = {"degraded": "red", "healthy": "green"}.get(step.diagnosis.state, "dim")
        line += f"  [{colour}]{state}[/]"
    if worst:
        line += "  [yellow]" + ", ".join(f"{n}:{s}" for n, s in worst) + "[/]"
    if knee is step:
        line += f"  [bold red]<- knee so far ({', '.join(step.flags)}); the next step confirms it[/]"
    elif knee is not None and knee.index == step.index - 1:
        line += f"  [bold red](confirms the knee at concurrency {knee.concurrency})[/]"
    if step.transient_flags:
        line += f"  [dim](transient: {', '.join(step.transient_flags)})[/]"
    return line


class RichObserver:
    """Bars and per-step lines on stderr; a context manager around the whole ramp."""

    def __init__(self, steps: int, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
        self._ramp = self.progress.add_task("ramp", total=steps)
        self._step = self.progress.add_task("step", total=1, visible=False)
        self._t0 = time.monotonic()
        self._seconds = 1.0
        self._label = ""

    def __enter__(self) -> RichObserver:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def step_started(self, index: int, concurrency: int, seconds: float) -> None:
        self._t0, self._seconds = time.monotonic(), seconds
        self._label = f"step {index + 1}: concurrency {concurrency}"
        self.progress.reset(self._step, total=seconds, description=self._label, visible=True)

    def sample(self, scrape: Scrape, diagnosis: Mapping[str, Any] | None) -> None:
        elapsed = min(time.monotonic() - self._t0, self._seconds)
        live = live_line(scrape, diagnosis)
        self.progress.update(self._step, completed=elapsed, description=f"{self._label}  {live}".rstrip())

    def step_finished(self, step: Step, knee: Step | None) -> None:
        self.progress.update(self._step, completed=self._seconds)
        self.progress.advance(self._ramp)
        self.progress.console.print(step_line(step, knee))
