"""Derived source ``capacity``: how many requests the KV cache should hold at once, per server.

Why: "predicted vs real max concurrency" is the memory layer's sanity check. An
operator sizes ``max_num_seqs`` from the KV capacity and the typical request;
when the engine starts preempting or queueing at far fewer running requests
than predicted, the capacity is misjudged or fragmented. The prediction is
KV capacity (tokens) divided by the mean tokens a finished request held
(prompt plus output), both taken over a sliding window of snapshots.
"""

from __future__ import annotations

from collections.abc import Mapping

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
    if not capacity:
        return None

    def of_server(labels: Mapping[str, str]) -> bool:
        return labels.get("server") == server

    finished = window.counter_delta(FINISHED, of_server)
    prompt = window.counter_delta(PROMPT, of_server)
    generated = window.counter_delta(GENERATION, of_server)
    if not finished or prompt is None or generated is None or prompt + generated <= 0:
        return None
    return capacity / ((prompt + generated) / finished)


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
