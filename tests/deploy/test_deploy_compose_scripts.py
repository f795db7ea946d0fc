"""The two helper scripts the compose stack runs: the load loop and the webhook sink,
run as real processes against real HTTP servers."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.deploy_helpers import ROOT

SCRIPTS = ROOT / "deploy" / "compose"


class FakeOpenAI:
    """An OpenAI-compatible server that records what it gets and how many overlap."""

    def __init__(self, models_fail: int = 0, completions_status: int = 200) -> None:
        self.lock = threading.Lock()
        self.bodies: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.models_fail = models_fail
        self.completions_status = completions_status
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                with fake.lock:
                    failing = fake.models_fail > 0
                    fake.models_fail -= 1
                if failing:
                    self._send(503, {"error": {"message": "loading"}})
                else:
                    self._send(200, {"object": "list", "data": [{"id": "sim-model", "object": "model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.bodies.append(body)
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                time.sleep(0.05)
                with fake.lock:
                    fake.in_flight -= 1
                if fake.completions_status != 200:
                    self._send(fake.completions_status, {"error": {"message": "overloaded"}})
                else:
                    self._send(200, {"choices": [{"text": "ok", "index": 0}], "usage": {"completion_tokens": 1}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI(models_fail=1)
    yield server
    server.close()


def _load(url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPTS / "load.py"), "--target", url + "/", "--duration", "3", "--report-seconds", "0.5", *extra],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_load_keeps_the_asked_concurrency_with_shared_prefixes(fake: FakeOpenAI) -> None:
    result = _load(fake.url, "--concurrency", "4", "--max-tokens", "16")
    assert result.returncode == 0, result.stderr
    assert "waiting for" in result.stderr, "it waits while /v1/models is not ready"
    assert len(fake.bodies) >= 20
    assert 2 <= fake.max_in_flight <= 4
    assert {b["model"] for b in fake.bodies} == {"sim-model"}
    assert all(1 <= b["max_tokens"] <= 16 for b in fake.bodies)
    prompts = [b["prompt"] for b in fake.bodies]
    assert len(set(prompts)) > 1 and len({p[:200] for p in prompts}) == 1, "varied prompts behind one shared prefix"
    last = [line for line in result.stdout.splitlines() if "completed" in line][-1]
    assert int(last.split()[1]) == len(fake.bodies) and last.endswith(" 0 errors")


def test_load_counts_errors_and_keeps_going() -> None:
    server = FakeOpenAI(completions_status=429)
    try:
        result = _load(server.url, "--concurrency", "2")
    finally:
        server.close()
    assert result.returncode == 0, result.stderr
    last = [line for line in result.stdout.splitlines() if "completed" in line][-1]
    assert last.startswith("load: 0 completed") and not last.endswith(" 0 errors")
    assert len(server.bodies) >= 2


def test_load_rejects_bad_arguments() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / "load.py"), "--target", "http://x", "--concurrency", "0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2 and "--concurrency" in result.stderr


def test_webhook_prints_one_line_per_alert(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-u", str(SCRIPTS / "webhook.py"), "--listen", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert "listening" in proc.stdout.readline()
        payload = {
            "version": "4",
            "status": "firing",
            "receiver": "team-serving",
            "alerts": [
                {
                    "status": "firing",
                    "labels": {
                        "alertname": "LLMKVCachePressure",
                        "severity": "critical",
                        "layer": "memory",
                        "instance": "exporter",
                    },
                    "annotations": {"summary": "KV cache is the limit"},
                },
                {
                    "status": "resolved",
                    "labels": {
                        "alertname": "LLMQueueBacklog",
                        "severity": "warning",
                        "layer": "scheduler",
                        "instance": "exporter",
                    },
                    "annotations": {},
                },
            ],
        }
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/alerts", data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.status == 200
        first, second = proc.stdout.readline(), proc.stdout.readline()
        assert (
            first.split()[:2] == ["FIRING", "LLMKVCachePressure"] and "layer=memory" in first and "KV cache is the limit" in first
        )
        assert second.split()[:2] == ["RESOLVED", "LLMQueueBacklog"]
        bad = urllib.request.Request(f"http://127.0.0.1:{port}/alerts", data=b"not json")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(bad, timeout=5)
        assert err.value.code == 400
    finally:
        proc.terminate()
        proc.wait(timeout=10)
