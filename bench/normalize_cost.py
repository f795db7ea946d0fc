"""Normalisation cost: parse + normalise a 20-engine vLLM exposition vs prometheus_client's parser alone.

Why it matters: at a 5 s interval, a parser at 2 MB/s spends 8 % of a core on
one big engine. Target: our parse + normalise at least 5x faster than
`text_string_to_metric_families` alone on the same text.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.support.exposition import sample_count, vllm_exposition


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _measure(text: str, repeat: int) -> dict[str, float]:
    from exporter.engines import normalize_exposition

    result = normalize_exposition(text, "bench")
    ours = median_seconds(lambda: normalize_exposition(text, "bench"), repeat)
    reference = median_seconds(lambda: list(text_string_to_metric_families(text)), max(3, repeat // 2))
    return {
        "exposition_kib": len(text) / 1024,
        "samples": float(sample_count(text)),
        "neutral_points": float(len(result.points)),
        "ours_ms": ours * 1e3,
        "prometheus_client_parser_ms": reference * 1e3,
        "speedup": reference / ours,
        "ours_mb_per_s": len(text) / ours / 1e6,
    }


def run(repeat: int = 7) -> dict[str, Any]:
    """The 20-engine text as a single-process vLLM serves it (with ``_created``
    series), and as multiprocess mode serves it (no ``_created``: nothing cheap
    to skip, the harder case for a selective parser)."""
    figures: dict[str, Any] = dict(_measure(vllm_exposition(20), repeat))
    figures["no_created"] = _measure(vllm_exposition(20, created=False), repeat)
    return figures
