"""`llm-layer-exporter compare A B [--json]`: the verdict diff of two ramp or tune records (docs/tune.md).

A side is a ramp report (report.json or its directory) or a tune record with a
stage: ``tune.json`` (the baseline), ``tune.json#best``, ``tune.json#trial-N``.
Exit status: 0 the diff was printed, 2 a record that cannot be read or a bad SLO.
A tool command only by company: it imports nothing outside exporter/tune/.
"""

from __future__ import annotations

import argparse

from exporter.errors import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", metavar="A", help="ramp report.json, tune.json, or tune.json#baseline|best|trial-N")
    parser.add_argument("b", metavar="B", help="the other side, as A")
    parser.add_argument("--json", action="store_true", help="print the diff as JSON")
    parser.add_argument("--slo-ttft", metavar="D", help="TTFT p95 target (default: the tune record's; ramp records: none)")
    parser.add_argument("--slo-itl", metavar="D", help="ITL p95 target (default: the tune record's)")


def run(args: argparse.Namespace) -> int:
    from exporter import jsonsafe
    from exporter.tune.capacity import SLO, SLOError, parse_duration
    from exporter.tune.compare import CompareError, diff, load_side, render

    try:
        a, slo_a, label_a = load_side(args.a)
        b, slo_b, label_b = load_side(args.b)
        slo = slo_a or slo_b or SLO()
        if args.slo_ttft is not None or args.slo_itl is not None:
            slo = SLO(
                parse_duration(args.slo_ttft, "--slo-ttft") if args.slo_ttft else None,
                parse_duration(args.slo_itl, "--slo-itl") if args.slo_itl else None,
            )
    except (CompareError, SLOError) as err:
        raise UsageError(str(err)) from None
    if not a or not b:
        raise UsageError(f"{args.a if not a else args.b}: that stage holds no completed run")
    d = diff(a, b, slo)
    if args.json:
        print(jsonsafe.dumps({"a_label": label_a, "b_label": label_b, **d}, indent=2))
    else:
        print(f"{label_a} -> {label_b}" + (f" (SLO {slo.describe()})" if slo.describe() else ""))
        for line in render(d, "A", "B"):
            print("  " + line)
    return 0
