"""50 concurrent scrapers for 30 s against a real `serve` with 8 replayed GPUs and 2 engines.

Proven: every scrape answers 200 with a complete exposition (no error, no
truncated body, no timeout) while the sources keep sampling underneath.
Latency p50/p99 and throughput are printed, not asserted: speed is the
benchmark's job (python -m bench), and this machine is shared.
"""

from __future__ import annotations

import threading
import time

import requests

from bench.harness import busy_node, engine_flags, percentile
from tests.reliability.rel_helpers import Serve

SCRAPERS = 50
DURATION_S = 30.0
REQUEST_TIMEOUT_S = 10.0  # an error bound, not a speed target


def test_fifty_concurrent_scrapers_for_thirty_seconds() -> None:
    with busy_node(8) as (gpu_source, engines):
        args = ["--gpu-source", gpu_source, "--gpu-interval", "1", *engine_flags(engines), "--engine-interval", "5"]
        with Serve(args) as serve:
            ready = serve.wait_metrics(
                lambda m: m.up("gpu") == 1 and len(m.find("llm_gpu_up")) == 8 and len(m.find("llm_engine_info")) == 2,
                60,
                "8 GPUs and 2 engines reported",
            )
            sources = [lab["source"] for lab, _ in ready.find("llm_exporter_source_up")]
            assert {"gpu", "diagnosis"} <= set(sources) and sum(s.startswith("engine:") for s in sources) == 2
            seen0 = {s: ready.last_success(s) for s in sources}
            url = serve.base + "/metrics"
            latencies: list[list[float]] = [[] for _ in range(SCRAPERS)]
            errors: list[str] = []
            start = threading.Barrier(SCRAPERS + 1)
            deadline = [0.0]

            def scraper(mine: list[float]) -> None:
                session = requests.Session()
                session.trust_env = False
                start.wait(30)
                while time.monotonic() < deadline[0] and len(errors) < 20:
                    t0 = time.perf_counter()
                    try:
                        r = session.get(url, timeout=REQUEST_TIMEOUT_S)
                        body = r.content
                    except requests.RequestException as exc:
                        errors.append(f"{type(exc).__name__}: {exc}")
                        continue
                    mine.append(time.perf_counter() - t0)
                    if r.status_code != 200:
                        errors.append(f"HTTP {r.status_code}")
                    elif not body.endswith(b"\n") or b"llm_engine_info{" not in body or b'llm_gpu_up{gpu="7"' not in body:
                        errors.append(f"incomplete exposition ({len(body)} bytes)")
                session.close()

            threads = [threading.Thread(target=scraper, args=(latencies[i],), daemon=True) for i in range(SCRAPERS)]
            for t in threads:
                t.start()
            deadline[0] = time.monotonic() + DURATION_S
            start.wait(30)
            for t in threads:
                t.join(DURATION_S + REQUEST_TIMEOUT_S + 30)
            assert not any(t.is_alive() for t in threads), "a scraper thread did not finish"
            after = serve.metrics(timeout=5)
            serve.check_clean()

    flat = [x for mine in latencies for x in mine]
    print(
        f"\n{SCRAPERS} scrapers x {DURATION_S:.0f} s: {len(flat)} scrapes ({len(flat) / DURATION_S:.0f}/s), "
        f"p50 {percentile(flat, 50) * 1e3:.1f} ms, p99 {percentile(flat, 99) * 1e3:.1f} ms, "
        f"max {max(flat, default=0) * 1e3:.1f} ms, errors {len(errors)}"
    )
    assert not errors, errors[:5]
    assert all(mine for mine in latencies), "a scraper got no answer at all"
    stalled = [s for s in seen0 if not (after.last_success(s) > seen0[s] and after.up(s) == 1)]
    assert not stalled, f"sources stopped sampling under scrape load: {stalled}"
