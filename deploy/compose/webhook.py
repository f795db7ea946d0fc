#!/usr/bin/env python3
"""Alertmanager webhook sink for the docker-compose stack: prints one line per alert.

The shipped alerts/alertmanager.yml sends every receiver to http://127.0.0.1:9095/alerts.
The `webhook` service shares the Alertmanager container's network namespace, so that
address reaches this script unchanged; `docker compose logs -f webhook` shows the pages.
"""

from __future__ import annotations

import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def describe(payload: dict) -> list[str]:
    """One line per alert of an Alertmanager webhook payload (version 4)."""
    lines = []
    for alert in payload.get("alerts", []):
        labels = alert.get("labels", {})
        summary = alert.get("annotations", {}).get("summary", "")
        lines.append(
            f"{alert.get('status', payload.get('status', '?')).upper():8} {labels.get('alertname', '?')}"
            f" severity={labels.get('severity', '')} layer={labels.get('layer', '')}"
            f" instance={labels.get('instance', '')} receiver={payload.get('receiver', '')} {summary}".rstrip()
        )
    return lines


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            payload = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self.send_error(400, "expected a JSON body")
            return
        for line in describe(payload):
            print(line, flush=True)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return  # one line per alert is enough


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:9095", help="HOST:PORT (default 127.0.0.1:9095)")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    server = ThreadingHTTPServer((host or "127.0.0.1", int(port)), Handler)
    print(f"webhook: listening on {args.listen}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
