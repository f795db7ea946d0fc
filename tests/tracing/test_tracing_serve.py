"""``serve`` with its OTLP receivers on: spans sent over OTLP/HTTP and OTLP/gRPC come back from
``GET /requests`` joined with the diagnosis over their life, the phase histograms carry exemplars,
and a receiver address in use is one line and exit 4 (exporter/tracing/build.py, commands/serve.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import requests
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub

from tests.support.fake_engine import FakeEngine
from tests.support.ports import free_port
from tests.support.processes import Child, exporter_argv
from tests.tracing.spans import trace_hex, vllm_request_span

ROOT = Path(__file__).resolve().parents[2]
VLLM = (ROOT / "tests" / "engines" / "fixtures" / "vllm-0.33-v1-2dp.prom").read_text()


class Serve:
    def __init__(self, engine_url: str) -> None:
        self.port, self.grpc_port, self.http_port = free_port(), free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLM_EXPORTER_")}
        argv = exporter_argv(
            "serve",
            "--gpu-source", "none",
            "--engine", engine_url,
            "--engine-interval", "0.5",
            "--diagnosis-interval", "0.5",
            "--listen-address", f"127.0.0.1:{self.port}",
            "--otlp-grpc-listen-address", f"127.0.0.1:{self.grpc_port}",
            "--otlp-http-listen-address", f"127.0.0.1:{self.http_port}",
        )  # fmt: skip
        self.child = Child(argv, "serve-tracing", env=env, inherit_env=False)
        self.url = f"http://127.0.0.1:{self.port}"


@pytest.fixture
def serve() -> Iterator[Serve]:
    with FakeEngine(VLLM) as engine:
        s = Serve(engine.url)
        with s.child:
            s.child.wait_http(s.url + "/readyz", 30)
            yield s


def _requests(s: Serve, **params: str) -> list[dict[str, object]]:
    found: list[dict[str, object]] = requests.get(s.url + "/requests", params=params, timeout=5).json()["requests"]
    return found


def test_spans_over_both_protocols_come_back_explained(serve: Serve) -> None:
    # the diagnosis has judged a few cycles before the requests arrive: their lives are recorded
    serve.child.wait_ready(
        lambda: requests.get(serve.url + "/diagnosis", timeout=5).json()["age_seconds"] is not None, 30, "a verdict"
    )
    now = time.time()
    over_http = vllm_request_span(trace_hex(1), now - 1.5, 0.9, 0.2, 0.3, 1.1, 1.4, 512, 16, "req-http")
    over_grpc = vllm_request_span(trace_hex(2), now - 1.0, 0.1, 0.1, 0.6, 0.2, 0.8, 64, 32, "req-grpc")
    answer = requests.post(
        f"http://127.0.0.1:{serve.http_port}/v1/traces",
        data=over_http.SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"},
        timeout=5,
    )
    assert answer.status_code == 200
    with grpc.insecure_channel(f"127.0.0.1:{serve.grpc_port}") as channel:
        TraceServiceStub(channel).Export(over_grpc, timeout=5)  # type: ignore[no-untyped-call]

    def both() -> list[dict[str, object]] | None:
        found = _requests(serve, slowest="10")
        return found if len(found) == 2 else None

    got = serve.child.wait_ready(both, 30, "two requests")
    assert got is not None
    assert [r["trace_id"] for r in got] == [trace_hex(1), trace_hex(2)]  # slowest first
    slow = got[0]
    assert slow["request_id"] == "req-http" and slow["queue_seconds"] == pytest.approx(0.9) and slow["engine"]
    assert str(slow["sentence"]).startswith("TTFT 1.1 s of 1.4 s: 900 ms in the queue")
    assert "no diagnosis cycle recorded" not in str(slow["sentence"])
    assert _requests(serve, trace_id=trace_hex(2))[0]["request_id"] == "req-grpc"

    # the phase histograms, with exemplars, once the tracing source has published
    def exposed() -> str | None:
        text = requests.get(serve.url + "/metrics", headers={"Accept": "application/openmetrics-text"}, timeout=5).text
        return text if 'llm_trace_spans_received_total{protocol="grpc"} 1.0' in text else None

    text = serve.child.wait_ready(exposed, 30, "the tracing series")
    assert text is not None
    assert f'# {{trace_id="{trace_hex(1)}"}} 0.9' in text
    assert 'llm_trace_spans_received_total{protocol="http"} 1.0' in text


def test_a_receiver_address_in_use_is_one_line_and_exit_4() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = subprocess.run(
            exporter_argv(
                "serve",
                "--gpu-source",
                "none",
                "--listen-address",
                f"127.0.0.1:{free_port()}",
                "--otlp-http-listen-address",
                f"127.0.0.1:{port}",
            ),
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            env={k: v for k, v in os.environ.items() if not k.startswith("LLM_EXPORTER_")},
        )
    assert run.returncode == 4, run.stderr
    assert f"127.0.0.1:{port}" in run.stderr and "Traceback" not in run.stderr
