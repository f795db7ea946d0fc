"""`llm-layer-exporter ramp`: baseline, ramp concurrency, find the knee and the layer that gives out first.

Exit status: 0 when every step ran (knee or not), 1 when the ramp could not
start or stopped early (unreachable target or exporter, a model the server
rejects, a step with only errors) - the report of the steps done so far is
still written -, 2 for bad flags, 130 when interrupted.

A tool command (the ``tools`` extra: rich for the live bars, httpx for the load);
the ramp itself is exporter/ramp/, imported when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from exporter.errors import UsageError
from exporter.values import seconds_type

if TYPE_CHECKING:
    from exporter.ramp.knee import KneeCriteria

EXIT_FAILED = 1
EXIT_INTERRUPTED = 130


def _concurrency_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("expected positive integers")
    if any(b <= a for a, b in zip(values, values[1:])):
        raise argparse.ArgumentTypeError("expected strictly increasing values, e.g. 1,2,4,8")
    return values


class _Rule(NamedTuple):
    #: (value, all args) -> valid?
    valid: Callable[[Any, argparse.Namespace], bool]
    expected: str


class _Option(NamedTuple):
    """One flag of the command: how it parses and what a valid value is."""

    flag: str
    type: Callable[[str], Any]
    default: Any
    help: str
    rule: _Rule | None = None  # None: anything that parses

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")


#: a flag in seconds: the one duration grammar ("30", "1m30s"); its rule says above 0
_SECONDS = seconds_type(positive=False)
_POSITIVE = _Rule(lambda v, _: v > 0, "expected a positive number")
_AT_LEAST_1 = _Rule(lambda v, _: v >= 1, "expected at least 1")
_SHARE = _Rule(lambda v, _: 0.0 <= v <= 1.0, "expected a value from 0 to 1")
_SHARE_BELOW_1 = _Rule(lambda v, _: 0.0 <= v < 1.0, "expected a value from 0 up to (not including) 1")

#: the flags after --concurrency, in --help order; ``_validate`` checks them in this order too
_OPTIONS = (
    _Option("--step-seconds", _SECONDS, 30.0, "length of each step (default 30)", _POSITIVE),
    _Option("--prompt-tokens", int, 512, "prompt length in tokens (default 512)", _AT_LEAST_1),
    _Option("--output-tokens", int, 128, "max_tokens of each request (default 128)", _AT_LEAST_1),
    _Option(
        "--shared-prefix-ratio", float, 0.0, "share of requests whose prompt starts with a shared prefix (default 0.0)", _SHARE
    ),
    _Option(
        "--shared-prefix-tokens",
        int,
        None,
        "length of that shared prefix (default: half the prompt)",
        _Rule(lambda v, args: v is None or 0 <= v <= args.prompt_tokens, "expected 0 to --prompt-tokens"),
    ),
    _Option("--report", Path, Path("ramp-report"), "directory for report.json, report.md, report.png (default ./ramp-report)"),
    _Option("--request-timeout", _SECONDS, 60.0, "per-request timeout in seconds (default 60)", _POSITIVE),
    _Option("--max-requests-per-step", int, 100_000, "upper bound on the requests of one step (default 100000)", _AT_LEAST_1),
    _Option("--sample-interval", _SECONDS, 1.0, "seconds between two reads of the exporter during a step (default 1)", _POSITIVE),
    _Option(
        "--warmup-fraction",
        float,
        0.25,
        "share of each step whose exporter samples count only for counters (default 0.25)",
        _SHARE_BELOW_1,
    ),
    _Option(
        "--knee-scaling",
        float,
        0.5,
        "knee when relative throughput gain / relative concurrency gain falls below this (default 0.5)",
        _POSITIVE,
    ),
    _Option(
        "--ttft-jump",
        float,
        2.0,
        "knee when TTFT p95 grows by at least this factor over the previous step (default 2)",
        _Rule(lambda v, _: v > 1, "expected a factor above 1"),
    ),
    _Option(
        "--ttft-jump-min-ms",
        float,
        50.0,
        "... and by at least this many milliseconds (default 50)",
        _Rule(lambda v, _: v >= 0, "expected 0 or more"),
    ),
    _Option(
        "--max-error-share",
        float,
        0.05,
        "knee when more than this share of a step's requests fail (default 0.05)",
        _SHARE_BELOW_1,
    ),
    _Option("--seed", int, 0, "prompt generator seed (default 0)"),
)

#: report config keys that are LoadSettings fields of the same name
_LOAD_KEYS = (
    "step_seconds",
    "prompt_tokens",
    "output_tokens",
    "shared_prefix_ratio",
    "shared_prefix_tokens",
    "request_timeout_s",
    "max_requests_per_step",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    p = parser
    p.add_argument("--target", required=True, help="OpenAI-compatible server root, e.g. http://127.0.0.1:8000")
    p.add_argument("--exporter", required=True, help="the exporter watching that server, e.g. http://127.0.0.1:9750")
    p.add_argument("--model", help="model name (default: the first one /v1/models lists)")
    p.add_argument(
        "--concurrency",
        type=_concurrency_list,
        default=[1, 2, 4, 8, 16, 32],
        help="concurrency of each step, strictly increasing (default 1,2,4,8,16,32)",
    )
    for opt in _OPTIONS:
        p.add_argument(opt.flag, type=opt.type, default=opt.default, help=opt.help)
    p.add_argument("--no-progress", action="store_true", help="print one line per step instead of live bars")


def _validate(args: argparse.Namespace) -> None:
    for opt in _OPTIONS:
        if opt.rule is not None and not opt.rule.valid(getattr(args, opt.dest), args):
            raise UsageError(f"{opt.flag}: {opt.rule.expected}")


def _criteria(args: argparse.Namespace) -> KneeCriteria:
    from exporter.ramp.knee import KneeCriteria

    return KneeCriteria(args.knee_scaling, args.ttft_jump, args.ttft_jump_min_ms / 1000.0, args.max_error_share)


def _config(args: argparse.Namespace, target: str, exporter: str, model: str | None) -> dict[str, Any]:
    return {
        "target": target,
        "exporter": exporter,
        "model": model,
        "concurrency": list(args.concurrency),
        "step_seconds": args.step_seconds,
        "prompt_tokens": args.prompt_tokens,
        "output_tokens": args.output_tokens,
        "shared_prefix_ratio": args.shared_prefix_ratio,
        "shared_prefix_tokens": _prefix_tokens(args),
        "request_timeout_s": args.request_timeout,
        "max_requests_per_step": args.max_requests_per_step,
        "sample_interval_s": args.sample_interval,
        "warmup_fraction": args.warmup_fraction,
        "knee": asdict(_criteria(args)),
    }


def _prefix_tokens(args: argparse.Namespace) -> int:
    tokens: int = args.prompt_tokens // 2 if args.shared_prefix_tokens is None else args.shared_prefix_tokens
    return tokens


def run(args: argparse.Namespace) -> int:
    _validate(args)
    from rich.console import Console

    from exporter.ramp.driver import RampOutcome, RampSettings, run_ramp
    from exporter.ramp.load import LoadSettings, make_step_loader
    from exporter.ramp.model import RampError
    from exporter.ramp.preflight import check_target, target_base
    from exporter.ramp.probe import ExporterProbe
    from exporter.ramp.progress import RichObserver, step_line
    from exporter.ramp.report import build_report, write_all, write_json

    console = Console(stderr=True)
    target = target_base(args.target)
    probe = ExporterProbe(args.exporter)
    config = _config(args, target, probe.url, args.model)
    report_dir: Path = args.report

    def save(outcome: RampOutcome, final: bool) -> None:
        report = build_report(
            outcome.steps, outcome.knee, outcome.saturation, config, outcome.error, complete=final, fingerprint=probe.fingerprint
        )
        if final:
            write_all(report_dir, report, outcome.steps, outcome.knee, outcome.saturation)
        else:
            write_json(report_dir, report)

    outcome = RampOutcome()
    try:
        try:
            model = check_target(target, args.model, timeout=args.request_timeout)
            config["model"] = model
            for warning in probe.check():
                console.print(f"[yellow]warning:[/] {warning}")
        except RampError as err:
            outcome.error = str(err)
            save(outcome, final=True)
            console.print(f"[bold red]ramp: error:[/] {err}\nreport (no steps) written to {report_dir}/")
            return EXIT_FAILED
        loader = make_step_loader(
            LoadSettings(base_url=target, model=model, seed=args.seed, **{k: config[k] for k in _LOAD_KEYS})
        )
        settings = RampSettings(
            concurrency=args.concurrency,
            step_seconds=args.step_seconds,
            sample_interval=args.sample_interval,
            settle_fraction=args.warmup_fraction,
            criteria=_criteria(args),
        )
        console.print(
            f"ramp: {target} model {model!r}, exporter {probe.url}, concurrency {','.join(map(str, args.concurrency))}, "
            f"{args.step_seconds:g} s per step"
        )
        if args.no_progress:
            outcome = run_ramp(settings, loader, probe, _LineObserver(console, step_line), on_step=lambda o: save(o, final=False))
        else:
            with RichObserver(len(args.concurrency), console) as observer:
                outcome = run_ramp(settings, loader, probe, observer, on_step=lambda o: save(o, final=False))
    finally:
        probe.close()
    save(outcome, final=True)
    _print_verdict(console, outcome, report_dir)
    if outcome.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_FAILED if outcome.error else 0


class _LineObserver:
    """--no-progress: one plain line per finished step."""

    def __init__(self, console: Any, render: Any) -> None:
        self.console, self.render = console, render

    def step_started(self, index: int, concurrency: int, seconds: float) -> None:
        self.console.print(f"step {index + 1}: concurrency {concurrency} for {seconds:g} s")

    def sample(self, scrape: Any, diagnosis: Any) -> None:
        pass

    def step_finished(self, step: Any, knee: Any) -> None:
        self.console.print(self.render(step, knee))


def _print_verdict(console: Any, outcome: Any, report_dir: Path) -> None:
    from exporter.ramp.knee import SOURCE_PRIMARY, fallback_note

    if outcome.error:
        console.print(f"[bold red]ramp: error:[/] {outcome.error}")
    if outcome.knee is None:
        console.print("[green]no knee[/] within the tested concurrencies")
    else:
        console.print(f"[bold]knee at concurrency {outcome.knee.concurrency}[/] ({', '.join(outcome.knee.flags)})")
    if outcome.steps:
        base = outcome.steps[0]
        console.print(f"baseline (concurrency {base.concurrency}): [bold]{base.diagnosis.state}[/]", highlight=False)
    sat = outcome.saturation
    if sat is not None and sat.source == SOURCE_PRIMARY:
        console.print(
            f"gave out first: [bold]{sat.layer}[/] at concurrency {sat.concurrency}, primary cause {sat.cause} "
            f"({sat.readings} of {sat.degraded_readings} degraded readings, confidence {sat.confidence or 0.0:.2f})",
            highlight=False,
        )
        if sat.chain:
            console.print(f"  chain: {sat.chain}", highlight=False, markup=False)
    elif sat is not None:
        console.print(
            f"first saturated layer: [bold]{sat.layer}[/] ({sat.status}) at concurrency {sat.concurrency}, "
            f"cause {sat.cause or 'unnamed'}"
        )
    if sat is not None:
        if sat.note:
            console.print(f"  note: {sat.note}", highlight=False, markup=False)
        for name, value in list(sat.evidence.items())[:6]:
            console.print(f"  {name} = {value}", markup=False)
    elif outcome.knee is not None:
        console.print(f"no layer named: {fallback_note(outcome.steps, outcome.knee, sat)}", highlight=False)
    console.print(f"report written to {report_dir}/ (report.json, report.md, report.png)", highlight=False)
    sys.stderr.flush()
