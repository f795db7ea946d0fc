"""The ramp loop: one concurrency at a time, the exporter sampled alongside, the knee re-judged after each step.

Why the load is injected (``load_step``): the loop's stop rules, aggregation and
partial reports are tested with any callable, and the CLI passes the one backed
by exporter.loadgen, so there is exactly one load generator in the project.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from exporter.ramp.aggregate import Scrape, diagnosis_figures, exporter_figures
from exporter.ramp.knee import KneeCriteria, Saturation, find_knee, first_saturated_layer
from exporter.ramp.model import ClientFigures, RampError, Step
from exporter.ramp.probe import ExporterProbe, StepSampler
from exporter.ramp.traced import traced_figures

#: runs one bounded step at the given concurrency and returns what the client measured
StepLoader = Callable[[int], ClientFigures]


@dataclass(frozen=True)
class RampSettings:
    concurrency: Sequence[int]
    step_seconds: float
    #: seconds between two exporter samples during a step
    sample_interval: float = 1.0
    #: share of each step treated as warm-up: its samples count only for counters
    settle_fraction: float = 0.25
    criteria: KneeCriteria = field(default_factory=KneeCriteria)


class RampObserver(Protocol):
    """What the terminal view hears about; every method must return quickly."""

    def step_started(self, index: int, concurrency: int, seconds: float) -> None: ...

    def sample(self, scrape: Scrape, diagnosis: Mapping[str, Any] | None) -> None: ...

    def step_finished(self, step: Step, knee: Step | None) -> None: ...


class NullObserver:
    def step_started(self, index: int, concurrency: int, seconds: float) -> None:
        pass

    def sample(self, scrape: Scrape, diagnosis: Mapping[str, Any] | None) -> None:
        pass

    def step_finished(self, step: Step, knee: Step | None) -> None:
        pass


@dataclass
class RampOutcome:
    steps: list[Step] = field(default_factory=list)
    knee: Step | None = None
    saturation: Saturation | None = None
    #: why the ramp stopped early (None when every step ran)
    error: str | None = None
    interrupted: bool = False


def step_failure(step: Step, exporter_errors: int, last_exporter_error: str) -> str | None:
    """Why the ramp cannot go on after this step, or None."""
    c = step.client
    where = f"step {step.index + 1} (concurrency {step.concurrency})"
    if c.requests == 0:
        if c.errors == 0:
            return f"{where}: no request completed within the step; raise --step-seconds or lower --output-tokens"
        why = "; ".join(c.error_messages[:3]) or "no error message"
        return f"{where}: all {c.errors} requests failed ({c.timeouts} timeouts): {why}"
    if step.exporter.samples == 0:
        return f"{where}: the exporter could not be read during the step ({exporter_errors} failures: {last_exporter_error})"
    return None


def run_ramp(
    settings: RampSettings,
    load_step: StepLoader,
    probe: ExporterProbe,
    observer: RampObserver | None = None,
    on_step: Callable[[RampOutcome], None] | None = None,
) -> RampOutcome:
    """Run every step (or stop at the first failing one); ``on_step`` sees the outcome so far after each."""
    observer = observer or NullObserver()
    out = RampOutcome()
    for index, conc in enumerate(settings.concurrency):
        observer.step_started(index, conc, settings.step_seconds)
        sampler = StepSampler(
            probe, settings.sample_interval, settings.step_seconds * settings.settle_fraction, on_sample=observer.sample
        ).start()
        started = time.time()
        try:
            client = load_step(conc)
        except KeyboardInterrupt:
            sampler.stop()
            out.error, out.interrupted = f"interrupted during step {index + 1} (concurrency {conc})", True
            break
        except RampError as err:
            sampler.stop()
            out.error = f"step {index + 1} (concurrency {conc}): {err}"
            break
        samples = sampler.stop()
        step = Step(index=index, concurrency=conc, client=client)
        step.exporter = exporter_figures(samples.scrapes, samples.settled_scrapes)
        step.exporter.errors = samples.errors
        step.diagnosis = diagnosis_figures(samples.settled_diagnoses)
        held = probe.requests()  # the engine's spans of the step's requests, when it sends them
        step.traced = traced_figures(held, started, time.time()) if held is not None else None
        out.steps.append(step)
        out.knee = find_knee(out.steps, settings.criteria)
        out.saturation = first_saturated_layer(out.steps, out.knee)
        out.error = step_failure(step, samples.errors, samples.last_error)
        observer.step_finished(step, out.knee)
        if on_step is not None:
            on_step(out)
        if out.error is not None:
            break
    return out
