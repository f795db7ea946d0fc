"""Derived source ``capacity``: how many requests the KV cache should hold at once, per server.

Why: "predicted vs real max concurrency" is the memory layer's sanity check. An
operator sizes ``max_num_seqs`` from the KV capacity and the typical request;
when the engine starts preempting or queueing at far fewer running requests
than predicted, the capacity is misjudged or fragmented. The prediction is
KV capacity (tokens) divided by the mean tokens a finished request held
(prompt plus output), both taken over a sliding window of snapshots.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from exporter.diagnosis.finite import ratio
from exporter.diagnosis.window import Window
from exporter.samples import Point, Sample, SampleResult
from exporter.store import Snapshot

CAPACITY = "llm_kv_cache_capacity_tokens"
PROMPT = "llm_prompt_tokens_total"
GENERATION = "llm_generation_tokens_total"
FINISHED = "llm_requests_finished_total"
PREDICTED = "llm_kv_cache_predicted_max_concurrency"
#: the only families this source reads from its window
_READS = frozenset({CAPACITY, PROMPT, GENERATION, FINISHED})


def predicted_max_concurrency(window: Window, server: str) -> float | None:
    """Capacity over the mean tokens per finished request, or None while unknown."""
    snap = window.latest
    if snap is None:
        return None
    capacity = snap.total(CAPACITY, server=server)
    if capacity is None or not capacity > 0:  # NaN compares false
        return None

    def of_server(labels: Mapping[str, str]) -> bool:
        return labels.get("server") == server

    finished = window.counter_delta(FINISHED, of_server)
    prompt = window.counter_delta(PROMPT, of_server)
    generated = window.counter_delta(GENERATION, of_server)
    if finished is None or prompt is None or generated is None:
        return None
    # an engine can export +Inf/NaN (tests/reliability/test_engine_nonfinite_diagnosis.py): an
    # infinite count of finished requests made the mean request 0 tokens and the division raise
    if not all(math.isfinite(v) for v in (capacity, finished, prompt, generated)) or finished <= 0:
        return None
    # finite counts can still overflow (1.7e308 prompt plus as many generated tokens): no mean, not a 0 one
    per_request = ratio(prompt + generated, finished)
    if per_request is None or per_request <= 0:
        return None
    return ratio(capacity, per_request)


class CapacityStep:
    """Derived source ``capacity`` (exporter/derive.py): the prediction for every server that reports its KV capacity."""

    name = "capacity"

    def __init__(self, window_seconds: float = 60.0) -> None:
        self.window = Window(window_seconds, keep=lambda name: name in _READS)

    def derive(self, snap: Snapshot) -> SampleResult:
        self.window.add(snap)
        servers = sorted({p.labels.get("server", "") for p in snap.samples(CAPACITY)})
        points: list[Point] = []
        for server in servers:
            value = predicted_max_concurrency(self.window, server)
            if value is not None:
                points.append(Sample(PREDICTED, {"server": server}, value))
        return SampleResult(points)

    def close(self) -> None:
        """Holds nothing."""
