"""The tuning loop: measure the baseline, let the verdict pick a move, measure it, keep it only if it wins.

Why one configuration = one engine start measured ``repeats`` times: the repeats
give the spread the accept rule needs (accept.py), and the ramp machinery
(exporter/ramp/) with the tuner's own exporter (launch.py's Watcher) names the
primary at the knee exactly as ``ramp`` does. Whatever happens (the end, a
failure, Ctrl-C) the baseline is left running in launch mode (the best with
``--keep-best``), or re-applied in apply mode. Every terminal line passes
through RedactingHooks: the engine command's credentials never reach it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from exporter.ramp.driver import RampOutcome, RampSettings, run_ramp
from exporter.ramp.knee import KneeCriteria
from exporter.ramp.load import LoadSettings, make_step_loader
from exporter.ramp.model import RampError
from exporter.ramp.preflight import check_target
from exporter.ramp.probe import ExporterProbe
from exporter.ramp.report import build_report
from exporter.tune import apply as apply_mode
from exporter.tune import redact
from exporter.tune.accept import judge
from exporter.tune.argv import EngineCommand, changes_between
from exporter.tune.capacity import SLO, Capacity, capacity_at_slo
from exporter.tune.decide import SLO_HOLDS, Decision, common_primary, decide
from exporter.tune.launch import EngineProcess, Watcher
from exporter.tune.layout import Deployment
from exporter.tune.warmup import WARMUP_SEED, warm_up


@dataclass(frozen=True)
class TuneSettings:
    slo: SLO
    out: Path
    concurrency: tuple[int, ...]
    step_seconds: float
    prompt_tokens: int
    output_tokens: int
    shared_prefix_ratio: float = 0.0
    shared_prefix_tokens: int = 0
    trials: int = 8
    repeats: int = 2
    budget_s: float | None = None
    engine_url: str | None = None
    apply: str | None = None
    keep_best: bool = False
    start_timeout_s: float = 300.0
    request_timeout_s: float = 60.0
    sample_interval_s: float = 1.0
    warmup_fraction: float = 0.25
    #: the unmeasured load before a configuration's first repeat (exporter/tune/warmup.py): None = one step, 0 = none
    warmup_s: float | None = None
    criteria: KneeCriteria = field(default_factory=KneeCriteria)
    seed: int = 0
    #: the most GPUs a candidate may occupy (``--gpus``; None: the baseline's TP x PP x DP, exporter/tune/layout.py)
    gpus: int | None = None
    #: the quantised build of the served model (``--quantized-model``): compute- and bandwidth-bound moves serve it
    quantized_model: str | None = None


@dataclass
class Measurement:
    """One configuration: its ramp records (one per repeat) or why it could not be measured."""

    label: str
    cmd: EngineCommand
    runs: list[dict[str, Any]] = field(default_factory=list)
    failure: str | None = None
    seconds: float = 0.0
    #: what the warm-up sent before the first repeat (WarmUp.as_dict), None when there was none
    warmup: dict[str, Any] | None = None

    def capacity(self, slo: SLO) -> Capacity:
        caps = [capacity_at_slo(r, slo) for r in self.runs]
        if not caps:
            return Capacity(0, 0.0, 0.0)
        n = len(caps)
        return Capacity(
            min(c.concurrency for c in caps),
            sum(c.requests_per_second for c in caps) / n,
            sum(c.tokens_per_second for c in caps) / n,
        )


class Hooks(Protocol):
    """What the terminal hears about (exporter/commands/tune.py prints it)."""

    def ramp_observer(self, label: str, repeat: int, steps: int) -> Any: ...

    def line(self, text: str) -> None: ...


class RedactingHooks:
    """Every line to the terminal with the engine command's credentials taken out (exporter/tune/redact.py)."""

    def __init__(self, inner: Hooks, secrets: list[str]) -> None:
        self.inner, self.secrets = inner, secrets

    def ramp_observer(self, label: str, repeat: int, steps: int) -> Any:
        return self.inner.ramp_observer(label, repeat, steps)

    def line(self, text: str) -> None:
        self.inner.line(redact.text(text, self.secrets))


class QuietHooks:
    """No terminal: the tests and library callers."""

    def ramp_observer(self, label: str, repeat: int, steps: int) -> Any:
        return None

    def line(self, text: str) -> None:
        pass


@dataclass
class Trial:
    number: int
    decision: Decision
    measurement: Measurement
    accepted: bool
    why: str
    gain: float | None


@dataclass
class TuneResult:
    baseline: Measurement
    trials: list[Trial] = field(default_factory=list)
    best: Measurement | None = None
    stop: str = ""
    interrupted: bool = False
    left_running: dict[str, Any] | None = None
    seconds: float = 0.0
    #: the GPUs every candidate stayed inside and the quantised build named (tune.json ``deployment``)
    deployment: Deployment | None = None


def _ramp_config(s: TuneSettings, target: str, exporter: str, model: str) -> dict[str, Any]:
    return {
        "target": target,
        "exporter": exporter,
        "model": model,
        "concurrency": list(s.concurrency),
        "step_seconds": s.step_seconds,
        "prompt_tokens": s.prompt_tokens,
        "output_tokens": s.output_tokens,
        "shared_prefix_ratio": s.shared_prefix_ratio,
        "shared_prefix_tokens": s.shared_prefix_tokens,
    }


class Tuner:
    def __init__(self, settings: TuneSettings, base: EngineCommand, hooks: Hooks | None = None) -> None:
        self.s = settings
        self.base = base
        self.hooks: Hooks = RedactingHooks(hooks or QuietHooks(), redact.values(base.full()))
        self.url = (settings.engine_url or base.url()).rstrip("/")
        self.gpu_source = f"sim:{self.url}" if base.engine == "simulator" else "auto"
        self.engine: EngineProcess | None = None
        #: the GPUs every candidate stays inside and the quantised build named (issue 33)
        self.deployment = Deployment.of(base, settings.gpus, settings.quantized_model)
        #: apply mode: the configuration applied last (at the start, the one the command after -- describes)
        self.deployed = base

    # ------------------------------------------------------------------ one ramp

    def _load(self, model: str, seed: int, seconds: float) -> LoadSettings:
        return LoadSettings(
            base_url=self.url,
            model=model,
            step_seconds=seconds,
            prompt_tokens=self.s.prompt_tokens,
            output_tokens=self.s.output_tokens,
            shared_prefix_ratio=self.s.shared_prefix_ratio,
            shared_prefix_tokens=self.s.shared_prefix_tokens,
            request_timeout_s=self.s.request_timeout_s,
            seed=seed,
        )

    def _ramp(self, exporter_url: str, label: str, repeat: int) -> dict[str, Any]:
        model = check_target(self.url, None, timeout=self.s.request_timeout_s)
        probe = ExporterProbe(exporter_url)
        fingerprint = None
        try:
            probe.check()
            fingerprint = probe.fingerprint
            loader = make_step_loader(self._load(model, self.s.seed + 1000 * repeat, self.s.step_seconds))
            settings = RampSettings(
                self.s.concurrency, self.s.step_seconds, self.s.sample_interval_s, self.s.warmup_fraction, self.s.criteria
            )
            observer = self.hooks.ramp_observer(label, repeat, len(self.s.concurrency))
            if observer is not None and hasattr(observer, "__enter__"):
                with observer:
                    outcome: RampOutcome = run_ramp(settings, loader, probe, observer)
            else:
                outcome = run_ramp(settings, loader, probe, observer)
        finally:
            probe.close()
        if outcome.interrupted:
            raise KeyboardInterrupt
        config = _ramp_config(self.s, self.url, exporter_url, model)
        return build_report(
            outcome.steps, outcome.knee, outcome.saturation, config, outcome.error, fingerprint=fingerprint, slo=self.s.slo
        )

    # ------------------------------------------------------------------ one configuration

    def _bring_up(self, cmd: EngineCommand, label: str, log: Path) -> str | None:
        """Launch mode: start ``cmd``; apply mode: apply it. None when the engine is healthy with it."""
        if self.s.apply is not None:
            if cmd is not self.deployed:  # the command after -- is what is deployed now: not applied again
                self.deployed = cmd
                why = apply_mode.run_apply(self.s.apply, cmd, changes_between(self.base, cmd), log, self.s.start_timeout_s)
                if why is not None:
                    return why
            why, note = apply_mode.confirm(self.url, cmd.engine, cmd, self.s.start_timeout_s)
            if note:
                self.hooks.line(f"  {label}: {note}")
            return why
        self.engine = EngineProcess(cmd, self.url, log)
        return self.engine.start(self.s.start_timeout_s)

    def _take_down(self) -> None:
        if self.engine is not None:
            self.engine.stop()
            self.engine = None

    def measure(self, cmd: EngineCommand, label: str) -> Measurement:
        t0 = time.monotonic()
        m = Measurement(label, cmd)
        log = self.s.out / f"engine-{label}.log"
        why = self._bring_up(cmd, label, log)
        if why is not None:
            m.failure = why
            self._take_down()
            m.seconds = time.monotonic() - t0
            return m
        pid = self.engine.pid if self.engine is not None else None
        watcher = Watcher(
            self.url,
            pid,
            self.gpu_source,
            self.s.out / f"exporter-{label}.log",
            self._window(),
            self._interval(),
            (self.s.slo.ttft_s, self.s.slo.itl_s),
        )
        try:
            why = watcher.start()
            if why is not None:
                m.failure = why
                return m
            why = self._warm_up(m)
            if why is not None:
                m.failure = why
                return m
            for repeat in range(self.s.repeats):
                try:
                    report = self._ramp(watcher.url, label, repeat)
                except RampError as err:
                    m.failure = self._gone() or str(err)
                    break
                m.runs.append(report)
                gone = self._gone()
                if gone is not None:
                    m.failure = f"{gone} under load"
                    break
                if report.get("error"):
                    m.failure = str(report["error"])
                    break
        finally:
            watcher.stop()
            self._take_down()
            m.seconds = time.monotonic() - t0
        return m

    def _warmup_seconds(self) -> float:
        return self.s.step_seconds if self.s.warmup_s is None else self.s.warmup_s

    def _warm_up(self, m: Measurement) -> str | None:
        """The unmeasured load before the first repeat (exporter/tune/warmup.py); why the configuration fails, or None."""
        seconds = self._warmup_seconds()
        if seconds <= 0:
            return None
        try:
            model = check_target(self.url, None, timeout=self.s.request_timeout_s)
        except RampError as err:
            return self._gone() or f"before the warm-up: {err}"
        top = max(self.s.concurrency)
        self.hooks.line(
            f"  {m.label}: warm-up at concurrency {top} for {seconds:g} s, then {self._window():g} s quiet (not measured)"
        )
        done = warm_up(self._load(model, self.s.seed + WARMUP_SEED, seconds), top, self._window())
        m.warmup = done.as_dict()
        gone = self._gone()
        if gone is not None:
            return f"{gone} during the warm-up"
        return done.failure()

    def _gone(self) -> str | None:
        return None if self.engine is None else self.engine.exit_reason()

    def _window(self) -> float:
        """The diagnosis window: one step, so a step's verdict is about that step (tests/ramp/ramp_stack.py)."""
        return max(2.0, min(60.0, self.s.step_seconds))

    def _interval(self) -> float:
        return max(0.2, min(1.0, self.s.sample_interval_s / 2))

    # ------------------------------------------------------------------ the search

    def run(self, on_trial: Callable[[TuneResult], None] | None = None) -> TuneResult:
        t0 = time.monotonic()
        self.s.out.mkdir(parents=True, exist_ok=True)
        self.hooks.line(f"tune: baseline {redact.command_line(self.base.full())}")
        result = TuneResult(baseline=Measurement("baseline", self.base), deployment=self.deployment)
        try:
            result.baseline = self.measure(self.base, "baseline")
            self._line_for("baseline", result.baseline, None)
            if result.baseline.failure:
                result.stop = f"the baseline could not be measured: {result.baseline.failure}"
                return result
            best = result.baseline
            tried: set[str] = {self.base.shell()}
            while True:
                if len(result.trials) >= self.s.trials:
                    result.stop = f"the trial budget ({self.s.trials}) is spent"
                    break
                spent = time.monotonic() - t0
                if self.s.budget_s is not None and spent + result.baseline.seconds > self.s.budget_s:
                    result.stop = f"the time budget ({self.s.budget_s:g} s) is spent"
                    break
                d = decide(self.base.engine, best.cmd, best.runs, self.s.slo, tried, self.deployment)
                if d.stop is not None:
                    result.stop = d.stop
                    break
                assert d.cmd is not None
                tried.add(d.key)
                n = len(result.trials) + 1
                shown = [redact.change(c.as_dict()) for c in d.changes]
                changes = ", ".join(f"{c['flag']} {c['from'] or '(unset)'} -> {c['to'] or '(removed)'}" for c in shown)
                self.hooks.line(f"trial {n} [{d.group}] {d.cause}: {changes}")
                if d.trade:
                    self.hooks.line(f"  trade: {d.trade}")
                m = self.measure(d.cmd, f"trial-{n}")
                j = judge(m.runs, best.runs, self.s.slo, m.failure)
                result.trials.append(Trial(n, d, m, j.accepted, j.why, j.gain))
                self._line_for(f"trial {n}", m, j.why)
                if j.accepted:
                    best = m
                if on_trial is not None:
                    on_trial(result)
            result.best = best
        except KeyboardInterrupt:
            result.interrupted = True
            result.stop = "interrupted"
            self._take_down()
        finally:
            result.seconds = time.monotonic() - t0
            result.left_running = self._leave_running(result)
        return result

    def _line_for(self, label: str, m: Measurement, why: str | None) -> None:
        if m.failure and not m.runs:
            self.hooks.line(f"{label}: {m.failure}" + (f" — {why}" if why else ""))
            return
        cap = m.capacity(self.s.slo)
        p = common_primary(m.runs, self.s.slo)
        knees = [r["knee"]["concurrency"] for r in m.runs if r.get("knee")]
        self.hooks.line(
            f"{label}: capacity at SLO {cap.requests_per_second:.2f} req/s, {cap.tokens_per_second:.0f} tok/s "
            f"(c={cap.concurrency}), knee {('c=' + str(min(knees))) if knees else 'none'}, "
            f"primary {p.name if p else 'none'}" + (f" — {why}" if why else "")
        )

    def _leave_running(self, result: TuneResult) -> dict[str, Any] | None:
        """Launch mode: start the baseline (or the best with --keep-best) and leave it; apply mode: re-apply it."""
        keep = result.best if self.s.keep_best and result.best is not None else result.baseline
        cmd = keep.cmd
        label = "final"
        try:
            if self.s.apply is not None:
                if cmd is not self.deployed:
                    why = self._bring_up(cmd, label, self.s.out / "engine-final.log")
                    if why is not None:
                        self.hooks.line(f"warning: re-applying the {'best' if cmd is not self.base else 'baseline'}: {why}")
                return {"argv": cmd.full(), "pid": None, "applied": True}
            engine = EngineProcess(cmd, self.url, self.s.out / "engine-final.log")
            why = engine.start(self.s.start_timeout_s)
            if why is not None:
                self.hooks.line(f"warning: could not leave the configuration running: {why}")
                return None
            return {"argv": cmd.full(), "pid": engine.detach(), "url": self.url}
        except KeyboardInterrupt:
            return None


__all__ = ["Hooks", "Measurement", "RedactingHooks", "Trial", "TuneResult", "TuneSettings", "Tuner", "SLO_HOLDS"]
