"""`llm-layer-exporter report`: write an incident snapshot of a running exporter's verdict.

DIR/report.html (self-contained), DIR/report.md, DIR/*.png (the key series per
layer) and DIR/diagnosis.json (the raw verdict, with the signals it judged).
The charts come from Prometheus (``--prometheus``: the last ``--minutes``) or,
without one, from polling the exporter for ``--sample-seconds``. An exporter
or a Prometheus that cannot be reached prints one line and exits 1, before
anything is written. Credentials come from files or the environment
(``--exporter-password-file``, ``LLM_EXPORTER_EXPORTER_PASSWORD``, ...; user info in a
URL is moved into a header): no output ever holds a password (exporter/httpget.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from exporter.errors import UsageError
from exporter.httpget import MAX_RESPONSE_BYTES, add_credential_arguments
from exporter.values import seconds_type

DEFAULT_URL = "http://127.0.0.1:9750"
EXIT_UNREACHABLE = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--exporter",
        default=DEFAULT_URL,
        metavar="URL",
        help=f"the exporter's base URL (default {DEFAULT_URL}; user info in it is sent as a header, never written)",
    )
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
        type=seconds_type(positive=False),
        default=30.0,
        metavar="S",
        help="without --prometheus: how long to poll the exporter for the charts (default 30)",
    )
    parser.add_argument(
        "--sample-interval",
        type=seconds_type(positive=False),
        default=1.0,
        metavar="S",
        help="without --prometheus: seconds between polls (default 1)",
    )
    parser.add_argument(
        "--timeout",
        type=seconds_type(positive=False),
        default=5.0,
        metavar="SECONDS",
        help=f"bound of each whole request, connect to last byte (default 5); answers over {MAX_RESPONSE_BYTES >> 20} MiB are refused",
    )
    add_credential_arguments(parser, "exporter")
    add_credential_arguments(parser, "prometheus")


def run(args: argparse.Namespace) -> int:
    # `not 0 < x <= max`: NaN fails every comparison, so it is refused too
    if not 0 < args.minutes <= 7 * 24 * 60:
        raise UsageError("--minutes must be > 0 (and at most a week)")
    if not 0 <= args.sample_seconds <= 3600:
        raise UsageError("--sample-seconds must be >= 0 (and at most 3600)")
    if not 0 < args.sample_interval <= 3600:
        raise UsageError("--sample-interval must be > 0 (and at most 3600)")
    if not 0 < args.timeout <= 3600:
        raise UsageError("--timeout must be > 0 (and at most 3600)")
    out_dir = Path(args.out)
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"--out {out_dir}: not a directory")

    from exporter.httpget import Client, target
    from exporter.report import Context, write_report
    from exporter.report.charts import draw_all
    from exporter.report.collect import fetch_verdict, query_prometheus, sample_exporter
    from exporter.report.operator import fetch_profiles
    from exporter.report.render import ChartRef
    from exporter.report.series import charts
    from exporter.report.traced import fetch_requests

    # URLs without user info from here on: nothing below can print or write a password
    exporter_target = target(args.exporter, "exporter", args)
    prometheus_target = target(args.prometheus, "prometheus", args) if args.prometheus else None
    exporter = exporter_target.url
    session = Client(exporter_target, "the exporter")
    specs = charts()
    try:
        verdict = fetch_verdict(session, exporter, args.timeout)
        if prometheus_target is not None:
            prometheus = Client(prometheus_target, "Prometheus")
            collected = query_prometheus(prometheus, prometheus_target.url, args.timeout, args.minutes, specs, verdict)
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
        profiles=fetch_profiles(session, exporter, args.timeout),  # the last POST /profile (docs/profile.md)
        requests=fetch_requests(session, exporter, args.timeout),  # the slowest traced requests (docs/tracing.md)
    )
    write_report(out_dir, collected.verdict, ctx)
    primary = collected.verdict.get("primary")
    what = f"primary {primary.get('layer')} / {primary.get('cause')}" if primary else "no primary"
    print(
        f"{out_dir / 'report.html'}: {collected.verdict.get('state', 'unknown')}, {what}; "
        f"report.md, diagnosis.json and {len(files)} charts ({collected.source}, {collected.span_s:.0f} s)"
    )
    return 0
