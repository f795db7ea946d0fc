"""Cold render cost of /metrics in-process: prometheus_client's generate_latest vs our direct renderer.

    python3 -m bench.render_cost

Why: a scrape that finds a new store version renders the whole exposition.
Through prometheus_client that builds families from the points and runs
``generate_latest``, which validates and escapes every label name of every
sample. ``exporter.collector.render_text`` writes the same bytes straight from
the points (checked here and in tests/core/test_collector.py). Set-up as the
latency benchmark: 8 replayed GPUs, 2 engines with a 55 KB vLLM exposition,
the derived sources.
"""

from __future__ import annotations

import time

from prometheus_client.exposition import generate_latest

from exporter.collector import _FamiliesCollector, families_from_points, render_text
from exporter.samples import Point


def run(renders: int = 200) -> dict[str, float]:
    from bench.harness import busy_node, percentile
    from exporter.collector import meta_points
    from exporter.commands.serve import build_sources
    from exporter.config import Config
    from exporter.engines.config import EngineConfig
    from exporter.runner import runner_for
    from exporter.store import SnapshotStore

    with busy_node(8) as (gpu, (e1, e2)):
        config = Config(gpu_source=gpu, engines=[EngineConfig(url=e1, name="e1"), EngineConfig(url=e2, name="e2")])
        store = SnapshotStore()
        sources, _ = build_sources(config, store)
        runners = [runner_for(s, store) for s in sources]
        for _ in range(3):
            for r in runners:
                r.sample_once()

        def points() -> list[Point]:
            snap = store.snapshot()
            return meta_points(snap.sources.values()) + snap.points

        def via_client() -> bytes:
            return generate_latest(_FamiliesCollector(families_from_points(points())))

        def direct() -> bytes:
            return render_text(points())

        current_body, direct_body = via_client(), direct()
        if current_body != direct_body:
            raise AssertionError("render_text output differs from prometheus_client's")

        def cold(fn) -> list[float]:  # type: ignore[no-untyped-def]
            times = []
            for _ in range(renders):
                runners[0].sample_once()  # a new store version: the next render is cold
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            return times

        current, proposed = cold(via_client), cold(direct)
        for s in sources:
            s.close()
    return {
        "bytes": float(len(current_body)),
        "current_p50_ms": percentile(current, 50) * 1e3,
        "current_p99_ms": percentile(current, 99) * 1e3,
        "direct_p50_ms": percentile(proposed, 50) * 1e3,
        "direct_p99_ms": percentile(proposed, 99) * 1e3,
    }


if __name__ == "__main__":
    fig = run()
    print(
        f"cold render of {fig['bytes'] / 1024:.0f} KiB, byte-identical: "
        f"prometheus_client p50 {fig['current_p50_ms']:.2f} ms p99 {fig['current_p99_ms']:.2f} ms; "
        f"direct p50 {fig['direct_p50_ms']:.2f} ms p99 {fig['direct_p99_ms']:.2f} ms"
    )
