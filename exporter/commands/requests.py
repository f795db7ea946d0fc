"""`llm-layer-exporter requests`: why were the slow requests slow? (a running exporter's ``/requests``).

A runtime command like ``diagnose`` (plain text, ``requests`` only): an on-call engineer handed
one slow request asks for its trace id; without one, the slowest requests the exporter holds.
Each line: engine, trace id, where the time went and what the layers were doing meanwhile, the
cause the diagnosis named over the request's life (docs/tracing.md).

Exit status: 0 requests printed, 1 the exporter cannot be reached or is not one (or answered an
error), 3 it answered with no request (none traced yet, the receiver is off, or the trace id is
not held).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from exporter.errors import UsageError
from exporter.httpget import MAX_RESPONSE_BYTES, add_credential_arguments, target
from exporter.values import seconds_type

DEFAULT_URL = "http://127.0.0.1:9750"
EXIT_UNREACHABLE = 1
EXIT_NONE = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--exporter", default=DEFAULT_URL, metavar="URL", help=f"the exporter's base URL (default {DEFAULT_URL})")
    parser.add_argument(
        "--slowest", type=int, default=10, metavar="N", help="the N slowest requests held (default 10, at most 1000)"
    )
    parser.add_argument("--trace-id", metavar="ID", help="the request(s) of one trace (32 hex digits) instead of the slowest")
    parser.add_argument("--engine", metavar="NAME", help="one engine's requests")
    parser.add_argument("--json", action="store_true", help="the raw JSON of /requests")
    parser.add_argument(
        "--timeout",
        type=seconds_type(positive=False),
        default=5.0,
        metavar="SECONDS",
        help=f"the whole request (default 5); answers over {MAX_RESPONSE_BYTES >> 20} MiB are refused",
    )
    add_credential_arguments(parser, "exporter")


def run(args: argparse.Namespace) -> int:
    from urllib.parse import urlencode

    from exporter import jsonsafe
    from exporter.httpget import get

    if not 0 < args.timeout <= 3600:
        raise UsageError("--timeout: expected 0 to 3600 seconds")
    if not 1 <= args.slowest <= 1000:
        raise UsageError("--slowest: expected 1 to 1000")
    exporter = target(args.exporter, "exporter", args)
    params: dict[str, str] = {"trace_id": args.trace_id} if args.trace_id else {"slowest": str(args.slowest)}
    if args.engine:
        params["engine"] = args.engine
    url = exporter.url.rstrip("/") + "/requests?" + urlencode(params)
    try:
        response = get(url, args.timeout, headers=exporter.headers, what="the exporter")
        body = _body(url, response)
    except RuntimeError as err:
        print(f"llm-layer-exporter requests: {err}", file=sys.stderr)
        return EXIT_UNREACHABLE
    if args.json:
        print(jsonsafe.dumps(body, indent=2))
    else:
        render(body, sys.stdout)
    return 0 if body["requests"] else EXIT_NONE


def _body(url: str, response: Any) -> dict[str, Any]:
    """The /requests body, or RuntimeError with one readable line."""
    try:
        body = response.json()
    except (ValueError, RecursionError):
        raise RuntimeError(f"{url} did not return JSON (is this an llm-layer-exporter?)") from None
    if response.status_code == 400 and isinstance(body, dict) and isinstance(body.get("error"), str):
        raise RuntimeError(f"the exporter refused the query: {body['error'][:300]}")
    if response.status_code == 404:
        raise RuntimeError(f"{url}: no /requests (an exporter older than request tracing?)")
    if response.status_code != 200 or not isinstance(body, dict) or not isinstance(body.get("requests"), list):
        raise RuntimeError(f"{url} answered HTTP {response.status_code} without a requests list")
    if not all(isinstance(r, dict) for r in body["requests"]):
        raise RuntimeError(f"{url}: a request of the wrong shape")
    return body


def _s(x: object) -> str:
    return f"{x:.3f}" if isinstance(x, (int, float)) and not isinstance(x, bool) else "-"


def render(body: dict[str, Any], out: TextIO) -> None:
    """Plain lines: one header per request, its sentence under it."""
    found = body["requests"]
    if not found:
        why = (
            "" if body.get("receiving", True) else " (no OTLP receiver: --otlp-grpc-listen-address / --otlp-http-listen-address)"
        )
        out.write(f"no traced request held{why}\n")
        return
    out.write(
        f"{'engine':<16} {'trace_id':<32} {'ttft_s':>8} {'queue_s':>8} {'prefill_s':>9} {'decode_s':>8} {'e2e_s':>8}  primary\n"
    )
    for r in found:
        primary = r.get("primary")
        named = f"{primary.get('layer')}/{primary.get('cause')}" if isinstance(primary, dict) else "-"
        out.write(
            f"{str(r.get('engine', ''))[:16]:<16} {str(r.get('trace_id', ''))[:32]:<32} {_s(r.get('ttft_seconds')):>8} "
            f"{_s(r.get('queue_seconds')):>8} {_s(r.get('prefill_seconds')):>9} {_s(r.get('decode_seconds')):>8} "
            f"{_s(r.get('e2e_seconds')):>8}  {named}\n"
        )
        if r.get("sentence"):
            out.write(f"    {str(r['sentence'])[:400]}\n")
