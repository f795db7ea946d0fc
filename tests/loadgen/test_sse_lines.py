"""The load generator splits a stream at CR/LF only: a token holding U+2028 or U+0085 is one event, not an error.

A real HTTP server on 127.0.0.1 streams completions whose text carries those characters
unescaped, as JSON allows and llama.cpp sends them (found when a random model's tokens
were counted as protocol errors by tune: exporter/loadgen/client.py's ``_sse_lines``).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from exporter.loadgen import LoadSpec, run_load

TEXTS = ["a\u2028b", "c\x85d", "e\u2029f", "plain"]


class _Stream(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for text in TEXTS:
            event = json.dumps({"choices": [{"text": text, "finish_reason": None}]}, ensure_ascii=False)
            self.wfile.write(f"data: {event}\r\n\r\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def _server() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Stream)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(5)


def test_unicode_line_separators_inside_an_event_do_not_break_it() -> None:
    with _server() as url:
        spec = LoadSpec(url, model="m", concurrency=1, max_requests=2, duration_s=30, timeout_s=10)
        result = asyncio.run(run_load(spec))
    assert [r.status for r in result.records] == ["ok", "ok"], [r.error for r in result.records]
    assert result.summary.errors == 0
