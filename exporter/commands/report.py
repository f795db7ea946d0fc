"""`llm-layer-exporter report`: write an incident snapshot of a running exporter's verdict.

DIR/report.html (self-contained), DIR/report.md, DIR/*.png (the key series per
layer) and DIR/diagnosis.json (the raw verdict, with the signals it judged).
The charts come from Prometheus (``--prometheus``: the last ``--minutes``) or,
without one, from polling the exporter for ``--sample-seconds``. An exporter
or a Prometheus that cannot be reached prints one line and exits 1, before
anything is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from exporter.errors import UsageError

DEFAULT_URL = "http://127.0.0.1:9750"
EXIT_UNREACHABLE = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--exporter", default=DEFAULT_URL, metavar="URL", help=f"the exporter's base URL (default {DEFAULT_URL})")
    parser.add_argument(
        "--prometheus",
        default=None,
        metavar="URL",
        help="Prometheus' base URL: chart the last --minutes from it (default: sample the exporter)",
    )
    parser.add_argument(
        "--out", required=True, metavar="DIR", help="directory to write report.html, report.md, *.png, diagnosis.json"
    )
    parser.add_argument("--minutes", type=float, default=15.0, metavar="N", help="span of the Prometheus charts (default 15)")
    parser.add_argument(
        "--sample-seconds",
        type=float,
        default=30.0,
        metavar="S",
        help="without --prometheus: how long to poll the exporter for the charts (default 30)",
    )
    parser.add_argument(
        "--sample-interval", type=float, default=1.0, metavar="S", help="without --prometheus: seconds between polls (default 1)"
    )
    parser.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS", help="HTTP timeout per request (default 5)")


def run(args: argparse.Namespace) -> int:
    if args.minutes <= 0:
        raise UsageError("--minutes must be > 0")
    if args.sample_seconds < 0:
        raise UsageError("--sample-seconds must be >= 0")
    if args.sample_interval <= 0:
        raise UsageError("--sample-interval must be > 0")
    if args.timeout <= 0:
        raise UsageError("--timeout must be > 0")
    out_dir = Path(args.out)
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"--out {out_dir}: not a directory")

    import requests

    from exporter.report import Context, write_report
    from exporter.report.charts import draw_all
    from exporter.report.collect import base_url, fetch_verdict, query_prometheus, sample_exporter
    from exporter.report.render import ChartRef
    from exporter.report.series import charts

    exporter = base_url(args.exporter)
    specs = charts()
    with requests.Session() as session:
        try:
            verdict = fetch_verdict(session, exporter, args.timeout)
            if args.prometheus:
                collected = query_prometheus(session, base_url(args.prometheus), args.timeout, args.minutes, specs, verdict)
            else:
                collected = sample_exporter(
                    exporter, args.timeout, args.sample_seconds, args.sample_interval, specs, verdict, session
                )
        except RuntimeError as err:
            print(f"llm-layer-exporter report: {err}", file=sys.stderr)
            return EXIT_UNREACHABLE
    files = draw_all(out_dir, specs, collected)
    ctx = Context(
        exporter_url=exporter,
        source=collected.source,
        source_url=collected.source_url,
        start=collected.start,
        end=collected.end,
        charts=[ChartRef(f.file, f.title, f.layer, f.empty) for f in files],
        notes=collected.notes,
    )
    write_report(out_dir, collected.verdict, ctx)
    primary = collected.verdict.get("primary")
    what = f"primary {primary.get('layer')} / {primary.get('cause')}" if primary else "no primary"
    print(
        f"{out_dir / 'report.html'}: {collected.verdict.get('state', 'unknown')}, {what}; "
        f"report.md, diagnosis.json and {len(files)} charts ({collected.source}, {collected.span_s:.0f} s)"
    )
    return 0
