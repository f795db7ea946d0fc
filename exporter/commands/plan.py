"""`llm-layer-exporter plan`: replicas for the peak and the trough, from a Prometheus' history and the measured capacity.

Exit status: 0 when the plan was written, 1 when Prometheus could not be read
(down, refused the query, answered something else) or held no demand for any
model, 2 for bad flags. A tool command (matplotlib draws plan.png); the work
is exporter/plan/, imported when the command runs. Decisions: docs/plan.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from exporter.errors import UsageError
from exporter.values import parse_duration, seconds_type

EXIT_FAILED = 1
#: spans above capacity printed per model (all of them are in plan.md and plan.json)
_SPANS_SHOWN = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from exporter.httpget import add_credential_arguments

    p = parser
    p.add_argument("--prometheus", required=True, help="Prometheus server root, e.g. http://127.0.0.1:9090")
    add_credential_arguments(p, "prometheus")
    p.add_argument("--since", default="7d", help="how far back to read, e.g. 1h, 2d, 7d (default 7d)")
    p.add_argument("--step", default="5m", help="query resolution, e.g. 1m, 5m, 1h (default 5m)")
    p.add_argument(
        "--headroom", type=float, default=0.2, help="share of the measured capacity kept free (default 0.2: plan to 80%%)"
    )
    p.add_argument(
        "--profile",
        action="append",
        default=[],
        metavar="[MODEL=]FILE",
        help="tune.json or ramp report.json giving one replica's capacity where Prometheus has no capacity gauges (repeatable)",
    )
    p.add_argument("--model", action="append", default=[], help="plan only this model (repeatable; default: every model)")
    p.add_argument(
        "--out", type=Path, default=Path("plan"), help="directory for plan.md, plan.html, plan.png, plan.json (default ./plan)"
    )
    p.add_argument(
        "--timeout", type=seconds_type(positive=False), default=30.0, help="seconds for each Prometheus query (default 30)"
    )


def _span(text: str, flag: str) -> float:
    """``--since`` / ``--step`` in seconds: the one duration grammar (exporter/values.py), PromQL's units included."""
    return parse_duration(text, flag, expected="a duration such as 90s, 5m, 1h, 2d or 1w")


def _window(args: argparse.Namespace, now: float) -> tuple[float, float, float]:
    since = _span(args.since, "--since")
    step = _span(args.step, "--step")
    if step > since:
        raise UsageError("--step: expected a step no longer than --since")
    if not 0.0 <= args.headroom < 1.0:
        raise UsageError("--headroom: expected a value from 0 up to (not including) 1")
    if not args.timeout > 0:
        raise UsageError("--timeout: expected a positive number of seconds")
    from exporter.plan.prometheus import MAX_POINTS

    if since / step + 1 > MAX_POINTS:
        raise UsageError(
            f"--step: {args.since} at {args.step} is over {MAX_POINTS} points per series (Prometheus' limit): use a larger step"
        )
    end = (now // step) * step  # aligned: the same flags give the same grid
    return end - since, end, step


def run(args: argparse.Namespace) -> int:
    from exporter.httpget import target
    from exporter.plan import chart, queries, render
    from exporter.plan.compute import Inputs, plan_all
    from exporter.plan.profiles import load_profile
    from exporter.plan.prometheus import PlanError, Prometheus, Window

    start, end, step = _window(args, time.time())
    profiles = [load_profile(spec) for spec in args.profile]
    prom_target = target(args.prometheus, "prometheus", args)
    prom = Prometheus(prom_target, timeout=args.timeout)
    window = Window(start, end, step)
    try:
        demand = prom.range_query(queries.demand_rate(step), window)
        in_flight = prom.range_query(queries.in_flight(step), window)
        replicas = prom.range_query(queries.replicas(), window)
        gauges = {key: prom.range_query(queries.capacity(name), window) for key, name in queries.CAPACITY_GAUGES.items()}
    except PlanError as err:
        print(f"llm-layer-exporter plan: error: {err}", file=sys.stderr)
        return EXIT_FAILED
    inputs = Inputs(
        demand={s.labels.get("model", ""): s for s in demand},
        in_flight={s.labels.get("model", ""): s for s in in_flight},
        replicas=replicas,
        gauges=gauges,
    )
    plans = plan_all(inputs, window, args.headroom, profiles, only=args.model)
    if not plans:
        which = f" for model {', '.join(args.model)}" if args.model else ""
        print(
            f"llm-layer-exporter plan: error: Prometheus at {prom_target.url} holds no llm_requests_finished_total "
            f"or llm_engine_info{which} in the last {args.since}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    args.out.mkdir(parents=True, exist_ok=True)
    png = chart.write_png(args.out / "plan.png", plans)
    doc = render.build(plans, render.Meta(prom_target.url, start, end, step, args.headroom))
    render.write_all(args.out, doc, png)
    for line in render.summary_lines(doc):
        print(line)
    for model in doc["models"]:
        spans = model["above_capacity"]["spans"]
        for span in spans[:_SPANS_SHOWN]:
            print(f"  above capacity {span['start']} to {span['end']} (demand {span['worst_ratio']}x capacity at worst)")
        if len(spans) > _SPANS_SHOWN:
            print(f"  ... and {len(spans) - _SPANS_SHOWN} more spans in plan.md")
    print(f"plan written to {args.out}/ (plan.md, plan.html, plan.png, plan.json)")
    return 0
