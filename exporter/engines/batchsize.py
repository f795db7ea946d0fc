"""The running batch size as a distribution, sampled by the exporter: ``llm_scheduler_batch_size``.

Why sampled: whether the captured CUDA graphs cover the decode (the largest
captured batch against the batches that run) needs the batch size per step, and
no engine publishes one as a histogram (vLLM, SGLang, trtllm-serve and llama.cpp
serve only the running-requests gauge; TGI's ``tgi_batch_next_size`` is the size
of each new prefill batch, not the running one). Each scrape that sees requests
running adds one observation of the gauge, per engine rank, into fixed buckets;
a scrape with none running is not a step and is not counted. Memory is bounded:
fixed buckets and at most ``MAX_SERIES`` label sets per source (a further rank is
not sampled); what is published stays inside the source's series budget.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from exporter.samples import HistogramSample, Point, Sample

NAME = "llm_scheduler_batch_size"
#: upper bounds of the buckets (requests), +Inf last
BOUNDS: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, math.inf)
#: the most label sets (engine ranks) one source keeps
MAX_SERIES = 64
#: series one histogram publishes: its buckets plus _sum and _count (exporter/engines/budget.py series_cost)
SERIES_COST = len(BOUNDS) + 2

_Key = tuple[tuple[str, str], ...]


class BatchSizeSampler:
    """Cumulative bucket counts of the running batch size, per label set, for one engine source."""

    def __init__(self) -> None:
        self._counts: dict[_Key, list[float]] = {}
        self._sums: dict[_Key, float] = {}

    def observe(self, points: Iterable[Point], limit: int = MAX_SERIES) -> list[HistogramSample]:
        """Add this scrape's running gauges; return the kept series as they stand now, at most ``limit``
        of them (what fits in the source's series budget), the first seen first."""
        for p in points:
            if p.name != "llm_scheduler_requests_running" or not isinstance(p, Sample):
                continue
            if not math.isfinite(p.value) or p.value < 1:
                continue
            key: _Key = tuple(sorted(p.labels.items()))
            counts = self._counts.get(key)
            if counts is None:
                if len(self._counts) >= MAX_SERIES:
                    continue
                counts = self._counts[key] = [0.0] * len(BOUNDS)
                self._sums[key] = 0.0
            for i, bound in enumerate(BOUNDS):
                if p.value <= bound:
                    counts[i] += 1.0
            self._sums[key] += p.value
        return [
            HistogramSample(NAME, dict(key), tuple(zip(BOUNDS, counts, strict=True)), self._sums[key], counts[-1])
            for key, counts in list(self._counts.items())[: max(0, limit)]
        ]
