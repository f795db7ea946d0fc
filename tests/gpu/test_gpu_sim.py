"""sim:BASE_URL source against a real local HTTP server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from exporter.gpu import build_gpu_source
from exporter.gpu.sim import MAX_BODY_BYTES, SimSource
from exporter.samples import SourceError
from tests.gpu.gpu_helpers import PROFILING_METRICS, names, reasons, value


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that gave up (timeout test) breaks the pipe: expected


class SimGpuServer:
    """Serves ``body`` (bytes) with ``status`` on /sim/gpu; records request paths."""

    def __init__(self, port: int = 0) -> None:
        self.status = 200
        self.body = b"{}"
        self.sleep = 0.0
        self.paths: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.paths.append(self.path)
                time.sleep(owner.sleep)
                if self.path != "/sim/gpu":
                    self.send_error(404)
                    return
                self.send_response(owner.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(owner.body)))
                self.end_headers()
                self.wfile.write(owner.body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = _QuietServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def serve(self, obj: object) -> None:
        self.body = json.dumps(obj).encode()

    def start(self) -> SimGpuServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture
def server() -> Iterator[SimGpuServer]:
    srv = SimGpuServer().start()
    yield srv
    if srv.thread.is_alive():
        srv.stop()


@pytest.fixture
def source(server: SimGpuServer) -> Iterator[SimSource]:
    src = build_gpu_source(f"sim:{server.url}/", 0.2, 2.0)
    assert isinstance(src, SimSource)
    yield src
    src.close()


H200 = {
    "gpu_name": "NVIDIA H200",
    "uuid": "GPU-sim-0",
    "nvml_gpu_util": 83,
    "sm_util": 62.7,
    "sm_occupancy": 9,
    "tensor_util": 11,
    "dram_bw_util": 71.5,
    "fb_used_mib": 80000,
    "fb_total_mib": 143771,
    "power_w": 537.0,
    "sm_clock_mhz": 1980,
    "throttle_reasons": "0x0",
    "phase": "decode",
}


def fault(src: SimSource) -> SourceError:
    with pytest.raises(SourceError) as info:
        src.sample()
    return info.value


def test_gpus_are_read_by_list_index_in_csv_units(server: SimGpuServer, source: SimSource) -> None:
    a100 = {"gpu_name": "NVIDIA A100", "uuid": "GPU-sim-1", "nvml_gpu_util": 40, "power_w": None, "throttle_reasons": 1}
    server.serve({"gpus": [H200, a100]})
    result = source.sample()
    pts = result.points
    assert server.paths == ["/sim/gpu"]
    assert result.partial_errors == []
    assert value(pts, "llm_gpu_info", gpu="0", uuid="GPU-sim-0", name="NVIDIA H200", source="sim") == 1
    assert value(pts, "llm_gpu_sm_active_ratio", gpu="0") == 0.627
    assert value(pts, "llm_gpu_dram_active_ratio", gpu="0") == 0.715
    assert value(pts, "llm_gpu_memory_used_bytes", gpu="0") == 80000 * 2**20
    assert value(pts, "llm_gpu_sm_clock_hertz", gpu="0") == 1980e6
    assert value(pts, "llm_gpu_profiling_available", gpu="1") == 0
    assert not names(pts, gpu="1") & PROFILING_METRICS
    assert value(pts, "llm_gpu_power_watts", gpu="1") is None  # null: absent
    assert reasons(pts, gpu="1")["gpu_idle"] == 1


def test_gpu_marked_down_reports_up_zero_and_gpu_lost(server: SimGpuServer, source: SimSource) -> None:
    server.serve({"gpus": [H200, {**H200, "uuid": "GPU-sim-1", "up": False}]})
    result = source.sample()
    assert value(result.points, "llm_gpu_up", gpu="1", uuid="GPU-sim-1") == 0
    assert value(result.points, "llm_gpu_up", gpu="0") == 1
    assert [e.reason for e in result.partial_errors] == ["gpu_lost"]


@pytest.mark.parametrize(
    "body",
    [b"not json", b'{"gpus": {}}', b"[]", b'{"gpus": [1]}', b'{"gpus": [{"power_w": "hot"}]}', b'{"gpus": [{"up": "no"}]}'],
)
def test_bad_bodies_are_malformed(server: SimGpuServer, source: SimSource, body: bytes) -> None:
    server.body = body
    assert fault(source).reason == "malformed"


def test_http_error_status(server: SimGpuServer, source: SimSource) -> None:
    server.status = 503
    err = fault(source)
    assert err.reason == "http_status" and "503" in err.message


def test_no_answer_within_the_source_timeout_is_timeout(server: SimGpuServer) -> None:
    server.serve({"gpus": [H200]})
    server.sleep = 1.0
    src = SimSource(server.url, 0.2, 0.2)
    try:
        assert fault(src).reason == "timeout"
    finally:
        src.close()


def test_oversized_body_is_too_large(server: SimGpuServer, source: SimSource) -> None:
    server.body = b" " * (MAX_BODY_BYTES + 10)
    assert fault(source).reason == "too_large"


def test_connection_refused_then_recovers_when_the_simulator_is_back(server: SimGpuServer) -> None:
    server.serve({"gpus": [H200]})
    port = server.httpd.server_address[1]
    src = SimSource(f"http://127.0.0.1:{port}", 0.2, 2.0)
    try:
        assert value(src.sample().points, "llm_gpu_up", gpu="0") == 1
        server.stop()
        assert fault(src).reason == "connection"
        again = SimGpuServer(port).start()  # the simulator restarts on the same port
        try:
            again.serve({"gpus": [H200]})
            assert value(src.sample().points, "llm_gpu_up", gpu="0") == 1
        finally:
            again.stop()
    finally:
        src.close()
