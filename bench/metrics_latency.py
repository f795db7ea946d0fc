"""/metrics latency: the exporter vs prometheus_client's own server on the same series.

Set-up (issue 9): 8 GPUs replayed from the recorded H200 trace at 1 s plus two
engines each serving a 55 KB vLLM exposition at 5 s. The reference is
`prometheus_client.start_http_server` serving a registry that yields exactly
the families the exporter served, rendered to text on every scrape (the
families themselves are built once, the cheapest a registry can be). Target:
exporter p99 within 2x of the reference p99.

Two phases, each interleaving one exporter scrape with one reference scrape so
both see the same machine (this benchmark runs on shared machines whose load
moves by the second):

* ``back-to-back``: scrapes one after another over a keep-alive connection.
  The exporter renders once per store version, so most of these scrapes reuse
  the cached bytes; this is what many concurrent scrapers (or a burst) see.
* ``cold``: one scrape every ``spacing`` seconds; only the scrapes whose body
  changed since the previous one count (the exporter rendered them afresh, as
  for a Prometheus scraping every 15 s), each paired with one reference
  scrape. ``cold_attempts`` is how many scrapes it took to collect them.
"""

from __future__ import annotations

import time

import requests
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from bench.harness import busy_node, engine_flags, exporter, percentile
from tests.support.ports import free_port


class _FamiliesCollector:
    """Yields pre-built families: the cheapest a prometheus_client registry can be."""

    def __init__(self, text: str) -> None:
        self.families = list(text_string_to_metric_families(text))

    def collect(self):  # type: ignore[no-untyped-def]
        return iter(self.families)


def _timed_get(session: requests.Session, url: str) -> tuple[float, bytes]:
    t0 = time.perf_counter()
    r = session.get(url, timeout=5)
    body = r.content  # read the body fully
    elapsed = time.perf_counter() - t0
    if r.status_code != 200:
        raise RuntimeError(f"{url} answered {r.status_code}")
    return elapsed, body


def run(scrapes: int = 500, cold_scrapes: int = 500, spacing: float = 0.35) -> dict[str, float]:
    with busy_node(8) as (gpu_source, engines):
        args = ["--gpu-source", gpu_source, "--gpu-interval", "1", *engine_flags(engines), "--engine-interval", "5"]
        with exporter(args, ready_sources=3) as (_, base):
            time.sleep(1.5)
            exporter_text = requests.get(base + "/metrics", timeout=5).text
            registry = CollectorRegistry()
            registry.register(_FamiliesCollector(exporter_text))
            port = free_port()
            server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
            ours_url, ref_url = base + "/metrics", f"http://127.0.0.1:{port}/metrics"
            ours_s, ref_s = requests.Session(), requests.Session()
            try:
                _timed_get(ours_s, ours_url), _timed_get(ref_s, ref_url)  # warm-up: connections, first render
                ours, reference = [], []
                for _ in range(scrapes):
                    ours.append(_timed_get(ours_s, ours_url)[0])
                    reference.append(_timed_get(ref_s, ref_url)[0])
                ours_cold: list[float] = []
                ref_cold: list[float] = []
                previous, attempts = _timed_get(ours_s, ours_url)[1], 0
                give_up = time.monotonic() + cold_scrapes * 4 * max(spacing, 0.25)
                while len(ours_cold) < cold_scrapes and time.monotonic() < give_up:
                    time.sleep(spacing)
                    elapsed, body = _timed_get(ours_s, ours_url)
                    attempts += 1
                    if body == previous:  # served from the cache: not a cold scrape
                        continue
                    previous = body
                    ours_cold.append(elapsed)
                    ref_cold.append(_timed_get(ref_s, ref_url)[0])
            finally:
                ours_s.close()
                ref_s.close()
                server.shutdown()
                thread.join(5)
    figures = {
        "series_lines": float(sum(1 for line in exporter_text.splitlines() if line and not line.startswith("#"))),
        "exposition_kib": len(exporter_text) / 1024,
        "scrapes": float(scrapes),
        "exporter_p50_ms": percentile(ours, 50) * 1e3,
        "exporter_p99_ms": percentile(ours, 99) * 1e3,
        "reference_p50_ms": percentile(reference, 50) * 1e3,
        "reference_p99_ms": percentile(reference, 99) * 1e3,
        "p99_ratio": percentile(ours, 99) / percentile(reference, 99),
        "cold_scrapes": float(len(ours_cold)),
        "cold_spacing_s": spacing,
        "cold_attempts": float(attempts),
        "cold_exporter_p50_ms": percentile(ours_cold, 50) * 1e3,
        "cold_exporter_p99_ms": percentile(ours_cold, 99) * 1e3,
        "cold_reference_p50_ms": percentile(ref_cold, 50) * 1e3,
        "cold_reference_p99_ms": percentile(ref_cold, 99) * 1e3,
    }
    figures["cold_p99_ratio"] = figures["cold_exporter_p99_ms"] / figures["cold_reference_p99_ms"]
    return figures
