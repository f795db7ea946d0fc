"""`llm-layer-exporter compare A B [--json]`: the verdict diff of two ramp or tune records (docs/tune.md).

A side is a ramp report (report.json or its directory) or a tune record with a
stage: ``tune.json`` (the baseline), ``tune.json#best``, ``tune.json#trial-N``.
Where the two layouts differ (TP x PP x DP, the GPUs) it also prints them, each side's output
tokens/s and requests/s per GPU and tokens/s per user at the SLO, and the larger's scaling
efficiency against the smaller (exporter/capacity/layout.py).
Exit status: 0 the diff was printed, 2 a record that cannot be read or a bad SLO.
A tool command only by company: it imports nothing outside exporter/tune/ but the SLO flags'
parser it shares with ``tune`` (exporter/commands/tune.py, the one duration grammar of exporter/values.py).
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
    from exporter.commands.tune import slo_seconds
    from exporter.tune.capacity import SLO
    from exporter.tune.compare import CompareError, diff, load_stage, render

    try:
        a, slo_a, label_a, fingerprint_a = load_stage(args.a)
        b, slo_b, label_b, fingerprint_b = load_stage(args.b)
    except CompareError as err:
        raise UsageError(str(err)) from None
    slo = slo_a or slo_b or SLO()
    if args.slo_ttft is not None or args.slo_itl is not None:
        slo = SLO(slo_seconds(args.slo_ttft or None, "--slo-ttft"), slo_seconds(args.slo_itl or None, "--slo-itl"))
    if not a or not b:
        raise UsageError(f"{args.a if not a else args.b}: that stage holds no completed run")
    d = diff(a, b, slo, fingerprint_a, fingerprint_b)
    if args.json:
        print(jsonsafe.dumps({"a_label": label_a, "b_label": label_b, **d}, indent=2))
    else:
        print(f"{label_a} -> {label_b}" + (f" (SLO {slo.describe()})" if slo.describe() else ""))
        for line in render(d, "A", "B"):
            print("  " + line)
    return 0
