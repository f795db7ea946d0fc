"""The distributions the engine sees: prompt and output lengths per request (the engines' own
histograms) and the running batch size per scrape (sampled by the exporter, bounded).

Lengths are checked against an independent reading of the same fixture (prometheus_client),
bucket by bucket: the real TGI DataDog capture (its prefix has no output-length histogram: the
written TGI 3.x fixture has one) and the Triton TRT-LLM ensemble fixture.
The batch-size sampler runs inside a real ``EngineSource`` against a real HTTP server whose
running gauge changes between scrapes.
"""

from __future__ import annotations

import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from exporter.engines import batchsize
from exporter.engines.config import EngineConfig
from exporter.engines.source import EngineSource
from exporter.samples import HistogramSample, Sample
from tests.engines.engine_helpers import find, fixture, normalize
from tests.engines.test_engine_fixtures import raw_histogram


@pytest.mark.parametrize(
    ("name", "neutral", "raw", "labels"),
    [
        ("real-tgi-datadog-fixture-payload-prefix.prom", "llm_request_prompt_tokens", "tgi_request_input_length", {}),
        ("tgi-3.x-failures.prom", "llm_request_generation_tokens", "tgi_request_generated_tokens", {}),
        (
            "trtllm-triton-current-ensemble.prom",
            "llm_request_prompt_tokens",
            "nv_llm_input_token_len",
            {"model": "tensorrt_llm"},
        ),
    ],
)
def test_request_length_histograms_are_the_engine_s_own(name: str, neutral: str, raw: str, labels: dict[str, str]) -> None:
    result = normalize(name)
    points = find(result, neutral, **labels)
    assert len(points) == 1, points
    point = points[0]
    assert isinstance(point, HistogramSample)
    buckets, total, count = raw_histogram(fixture(name), raw, **labels)
    assert list(point.buckets) == buckets and point.sum == total and point.count == count
    assert count > 0


def test_engines_without_a_length_histogram_publish_none() -> None:
    result = normalize("llamacpp-new.prom")
    assert not find(result, "llm_request_prompt_tokens") and not find(result, "llm_request_generation_tokens")


class _Gauge(BaseHTTPRequestHandler):
    running: list[float] = []

    def do_GET(self) -> None:
        value = self.running.pop(0) if self.running else 0.0
        body = (
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{engine="0",model_name="m"}} {value}\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            'vllm:num_requests_waiting{engine="0",model_name="m"} 0.0\n'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_running_batch_size_is_sampled_per_scrape_into_fixed_buckets() -> None:
    handler = type("H", (_Gauge,), {"running": [0.0, 3.0, 9.0, 3.0, 2000.0]})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        source = EngineSource(EngineConfig(url=f"http://127.0.0.1:{server.server_address[1]}/metrics", name="v", type="vllm"))
        first = source.sample()
        assert not [p for p in first.points if p.name == batchsize.NAME]  # idle: no step, nothing observed
        last = None
        for _ in range(4):
            last = source.sample()
    finally:
        server.shutdown()
        server.server_close()
    assert last is not None
    hist = [p for p in last.points if p.name == batchsize.NAME]
    assert len(hist) == 1 and isinstance(hist[0], HistogramSample)
    h = hist[0]
    assert h.labels["rank"] == "0" and h.labels["server"] == "v"
    assert h.count == 4 and h.sum == 3 + 9 + 3 + 2000
    cumulative = dict(h.buckets)
    assert cumulative[2] == 0 and cumulative[4] == 2 and cumulative[16] == 3 and cumulative[1024] == 3
    assert cumulative[math.inf] == 4


def test_the_sampler_keeps_a_bounded_number_of_series() -> None:
    sampler = batchsize.BatchSizeSampler()
    points = [Sample("llm_scheduler_requests_running", {"rank": str(i)}, 2.0) for i in range(batchsize.MAX_SERIES + 50)]
    out = sampler.observe(points)
    assert len(out) == batchsize.MAX_SERIES
    assert sampler.observe([Sample("llm_scheduler_requests_running", {"rank": "0"}, float("nan"))])[0].count == 1
    # what the source's series budget leaves: the first-seen ranks, none when nothing is left
    assert [h.labels["rank"] for h in sampler.observe([], limit=2)] == ["0", "1"]
    assert sampler.observe([], limit=0) == []
