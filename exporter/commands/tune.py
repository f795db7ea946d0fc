"""`llm-layer-exporter tune [options] -- ENGINE COMMAND...`: tuning guided by the diagnosed bottleneck (docs/tune.md).

Launch mode starts the engine command, ramps it with the ``ramp`` machinery and
its workload flags (same names), and restarts it with one candidate change at a
time, chosen by the primary cause at the knee; apply mode (``--apply 'CMD'``)
runs a template instead, for engines the tuner cannot start. Exit status: 0 the
search ran (a recommendation or none), 1 the baseline could not be measured, 2
bad flags (a missing ``--``, an SLO that cannot be parsed, an engine it cannot
identify, an ``--apply`` template exporter/tune/template.py refuses), 130
interrupted. Credentials in the engine command are redacted in everything
printed and written (exporter/tune/redact.py). A tool command: exporter/tune/
is imported in ``run``.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from exporter.errors import UsageError
from exporter.values import parse_duration, seconds_type

EXIT_FAILED = 1
EXIT_INTERRUPTED = 130
ENGINE_TYPES = ("vllm", "sglang", "tgi", "trtllm", "llamacpp", "simulator")


def _number(kind: type, text: str) -> Any:
    """``text`` as a finite ``kind`` (nan and inf are no length, count or duration)."""
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        value = _number(kind, text)
        if value <= 0:
            raise argparse.ArgumentTypeError("expected a positive number")
        return value

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from exporter.commands.ramp import _concurrency_list

    add = parser.add_argument
    add("--slo-ttft", metavar="D", help="TTFT p95 target, e.g. 500ms or 0.5s (at least one of --slo-ttft/--slo-itl)")
    add("--slo-itl", metavar="D", help="inter-token latency p95 target, e.g. 50ms")
    add(
        "--out", type=Path, default=Path("tune-report"), help="directory for tune.json, report.md/html, capacity.png, scaling.png"
    )
    add("--trials", type=_positive(int), default=8, help="most candidates to measure (default 8)")
    add("--repeats", type=_positive(int), default=2, help="measurements per configuration (default 2)")
    add("--budget", metavar="DURATION", help="wall-clock budget, e.g. 30m, 1h, 900s")
    add("--engine-url", help="the engine's root URL when the command's own --host/--port do not say it")
    add("--engine-type", choices=ENGINE_TYPES, help="the engine, when the command does not say it")
    add(
        "--apply",
        metavar="CMD",
        help="apply mode: a command template applying a candidate ({args}, {changes}, {env}; docs/tune.md)",
    )
    add("--keep-best", action="store_true", help="leave the recommended configuration running (default: the baseline)")
    add(
        "--gpus",
        type=_positive(int),
        default=None,
        metavar="N",
        help="the most GPUs a candidate may occupy, TP x PP x DP (default: the baseline's; docs/tune.md)",
    )
    add(
        "--quantized-model",
        metavar="PATH",
        default=None,
        help="a quantised build of the served model: compute- and bandwidth-bound moves may serve it (docs/tune.md)",
    )
    add("--demo", action="store_true", help="a whole tuning run on the simulator (kv_pressure) in a few minutes")
    add("--concurrency", type=_concurrency_list, default=[1, 2, 4, 8, 16], help="ramp steps (default 1,2,4,8,16)")
    add("--step-seconds", type=seconds_type(), default=20.0, help="length of each ramp step (default 20)")
    add(
        "--warmup-seconds",
        type=seconds_type(positive=False),
        default=None,
        help="unmeasured load at the highest concurrency before each configuration's first repeat (default: one step; 0: none)",
    )
    add("--prompt-tokens", type=_positive(int), default=512, help="prompt length in tokens (default 512)")
    add("--output-tokens", type=_positive(int), default=128, help="max_tokens of each request (default 128)")
    add("--shared-prefix-ratio", type=float, default=0.0, help="share of requests with a shared prefix (default 0)")
    add("--shared-prefix-tokens", type=int, default=None, help="length of that prefix (default: half the prompt)")
    add("--request-timeout", type=seconds_type(), default=60.0, help="per-request timeout in seconds (default 60)")
    add("--sample-interval", type=seconds_type(), default=1.0, help="seconds between exporter reads (default 1)")
    add("--start-timeout", type=seconds_type(), default=300.0, help="seconds an engine has to become healthy (default 300)")
    add("--no-progress", action="store_true", help="plain lines instead of live bars")
    add("engine_command", nargs=argparse.REMAINDER, help="-- then the engine command line")


def parse_budget(text: str | None) -> float | None:
    """``--budget`` in seconds (None: unbounded), in the one duration grammar (exporter/values.py)."""
    if text is None:
        return None
    return parse_duration(text, "--budget", expected="a duration such as 30m, 1h or 900s")


def slo_seconds(text: str | None, flag: str) -> float | None:
    """An SLO flag (``--slo-ttft``, ``--slo-itl``) in seconds, None when not given; the one grammar."""
    if text is None:
        return None
    return parse_duration(text, flag, expected="a positive duration such as 500ms or 0.5s")


def _demo_command() -> list[str]:
    """The simulator's kv_pressure with 24 KV blocks (two requests' worth) at half speed: a preemption storm from 4 clients."""
    from exporter.tune.launch import free_port

    knobs = ["--num-gpu-blocks", "24", "--time-scale", "0.5", "--listen-address", f"127.0.0.1:{free_port()}"]
    return [sys.executable, "-m", "exporter", "simulate", "--scenario", "kv_pressure", *knobs]


def _demo_defaults(args: argparse.Namespace) -> None:
    """--demo: short steps and an SLO the baseline misses where the KV cache gives out (tests/tune/test_tune_simulator.py)."""
    args.engine_command = ["--", *_demo_command()]
    args.slo_ttft = args.slo_ttft or "300ms"
    args.concurrency = [1, 2, 4, 8]
    args.step_seconds = 4.0
    args.prompt_tokens, args.output_tokens = 64, 128
    args.sample_interval = 0.5
    args.trials = min(args.trials, 3)


def settings_from(args: argparse.Namespace) -> tuple[Any, Any]:
    """(TuneSettings, the baseline EngineCommand), or UsageError with the one line to print."""
    from exporter.tune.argv import ArgvError, EngineCommand
    from exporter.tune.capacity import SLO
    from exporter.tune.session import TuneSettings

    if args.demo:
        _demo_defaults(args)
    tokens: list[str] = list(args.engine_command or [])
    if not tokens or tokens[0] != "--":
        raise UsageError("missing -- before the engine command: tune [options] -- ENGINE COMMAND...")
    if args.slo_ttft is None and args.slo_itl is None:
        raise UsageError("give an SLO: --slo-ttft D and/or --slo-itl D (p95, e.g. 500ms)")
    slo = SLO(slo_seconds(args.slo_ttft, "--slo-ttft"), slo_seconds(args.slo_itl, "--slo-itl"))
    try:
        cmd = EngineCommand.parse(tokens[1:], args.engine_type)
    except ArgvError as err:
        raise UsageError(str(err)) from None
    if args.apply is not None and not args.engine_url:
        raise UsageError("--apply needs --engine-url: where the applied engine answers")
    if args.apply is not None:
        from exporter.tune.template import TemplateError, check

        try:
            check(args.apply)
        except TemplateError as err:
            raise UsageError(str(err)) from None
    if not 0.0 <= args.shared_prefix_ratio <= 1.0:
        raise UsageError("--shared-prefix-ratio: expected a value from 0 to 1")
    prefix = args.prompt_tokens // 2 if args.shared_prefix_tokens is None else args.shared_prefix_tokens
    gpus = getattr(args, "gpus", None)
    if gpus is not None:
        from exporter.tune.layout import gpus_of

        using = gpus_of(cmd)
        if using is not None and gpus < using:
            raise UsageError(f"--gpus {gpus}: the baseline already occupies {using} GPUs (TP x PP x DP)")
    quantized = getattr(args, "quantized_model", None)
    if quantized is not None and not quantized.strip():
        raise UsageError("--quantized-model: expected the path or name of the quantised build")
    settings = TuneSettings(
        slo=slo,
        out=args.out,
        concurrency=tuple(args.concurrency),
        step_seconds=args.step_seconds,
        prompt_tokens=args.prompt_tokens,
        output_tokens=args.output_tokens,
        shared_prefix_ratio=args.shared_prefix_ratio,
        shared_prefix_tokens=prefix,
        trials=args.trials,
        repeats=args.repeats,
        budget_s=parse_budget(args.budget),
        engine_url=args.engine_url,
        apply=args.apply,
        keep_best=args.keep_best,
        start_timeout_s=args.start_timeout,
        request_timeout_s=args.request_timeout,
        sample_interval_s=args.sample_interval,
        warmup_s=args.warmup_seconds,
        gpus=gpus,
        quantized_model=quantized,
    )
    return settings, cmd


class _Hooks:
    """Bars per ramp step (or plain lines), one line per trial."""

    def __init__(self, console: Any, progress: bool) -> None:
        self.console, self.progress = console, progress

    def ramp_observer(self, label: str, repeat: int, steps: int) -> Any:
        from exporter.commands.ramp import _LineObserver
        from exporter.ramp.progress import RichObserver, step_line

        self.console.print(f"{label}, run {repeat + 1}:", highlight=False)
        if self.progress:
            return RichObserver(steps, self.console)
        return _LineObserver(self.console, step_line)

    def line(self, text: str) -> None:
        self.console.print(text, highlight=False, markup=False)


def run(args: argparse.Namespace) -> int:
    settings, cmd = settings_from(args)
    from rich.console import Console

    from exporter.tune import record, report
    from exporter.tune.session import Tuner

    console = Console(stderr=True)
    tuner = Tuner(settings, cmd, _Hooks(console, not args.no_progress))
    mode = "apply" if settings.apply else "launch"

    def save(result: Any) -> None:
        record.write(settings.out, record.build(result, settings.slo, cmd.engine, mode))

    result = tuner.run(on_trial=save)
    doc = record.build(result, settings.slo, cmd.engine, mode)
    record.write(settings.out, doc)
    report.write_all(settings.out, doc)
    _summary(console, doc, settings.out)
    if result.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_FAILED if result.baseline.failure else 0


def _summary(console: Any, doc: dict[str, Any], out: Path) -> None:
    """The closing paragraph: what to deploy, what to roll back to, what is running now."""
    rec, base = doc["recommendation"], doc["baseline"]
    from exporter.tune.redact import command_line

    rollback = command_line(doc["rollback"]["argv"])
    if rec is None:
        text = f"No change recommended: {doc['stop']}. Keep the baseline: {rollback}"
    else:
        changes = ", ".join(f"{c['flag']} {c['from'] or '(unset)'} -> {c['to'] or '(removed)'}" for c in rec["changes"])
        before, after = base["capacity"], rec["capacity"]
        gain = "" if rec["gain"] is None else f", x{rec['gain']:.2f}"
        text = (
            f"Recommended: {changes} (capacity at SLO {before['requests_per_second']:.2f} req/s at concurrency "
            f"{before['concurrency']} -> {after['requests_per_second']:.2f} req/s at concurrency {after['concurrency']}"
            f"{gain}). Deploy: {command_line(rec['argv'])}  Roll back to: {rollback}  (stopped: {doc['stop']})"
        )
    left = doc.get("left_running")
    if left and left.get("pid"):
        text += f"  Left running (pid {left['pid']}): {command_line(left['argv'])}"
    console.print(text, highlight=False, markup=False)
    console.print(
        f"tune record and report in {out}/ (tune.json, report.md, report.html, capacity.png, scaling.png)", highlight=False
    )
