"""/metrics latency: the exporter vs prometheus_client's own server on the same series.

Set-up (issue 9): 8 GPUs replayed from the recorded H200 trace at 1 s plus two
engines each serving a 55 KB vLLM exposition at 5 s. The reference is
`prometheus_client.start_http_server` serving a registry that yields exactly
the families the exporter served, rendered to text on every scrape
(the families themselves are built once, the cheapest a registry can be). Target: exporter p99 within 2x of the reference p99.
"""

from __future__ import annotations

import time

import requests
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from bench.exposition import vllm_exposition
from bench.harness import exporter, free_port, percentile, replay_copies, static_engine, time_scrapes


class _FamiliesCollector:
    """Yields pre-built families: the cheapest a prometheus_client registry can be."""

    def __init__(self, text: str) -> None:
        self.families = list(text_string_to_metric_families(text))

    def collect(self):  # type: ignore[no-untyped-def]
        return iter(self.families)


def run(scrapes: int = 500) -> dict[str, float]:
    engine_text = vllm_exposition(1)
    with replay_copies(8) as gpu_source, static_engine(engine_text) as e1, static_engine(engine_text) as e2:
        args = ["--gpu-source", gpu_source, "--gpu-interval", "1", "--engine", e1, "--engine", e2, "--engine-interval", "5"]
        with exporter(args, ready_sources=3) as (_, base):
            time.sleep(1.5)
            exporter_text = requests.get(base + "/metrics", timeout=5).text
            ours = time_scrapes(base + "/metrics", scrapes)
    registry = CollectorRegistry()
    registry.register(_FamiliesCollector(exporter_text))  # type: ignore[arg-type]
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        reference = time_scrapes(f"http://127.0.0.1:{port}/metrics", scrapes)
    finally:
        server.shutdown()
        thread.join(5)
    return {
        "series_lines": float(sum(1 for line in exporter_text.splitlines() if line and not line.startswith("#"))),
        "exposition_kib": len(exporter_text) / 1024,
        "exporter_p50_ms": percentile(ours, 50) * 1e3,
        "exporter_p99_ms": percentile(ours, 99) * 1e3,
        "reference_p50_ms": percentile(reference, 50) * 1e3,
        "reference_p99_ms": percentile(reference, 99) * 1e3,
        "p99_ratio": percentile(ours, 99) / percentile(reference, 99),
    }
