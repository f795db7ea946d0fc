"""One runaway metric family is dropped alone: the engine's vital signs stay published.

A real vLLM-shaped exposition (tests/support/exposition.py) served by a real
HTTP server on 127.0.0.1 beside a family of 100 000 series (a label per
request: the issue's label explosion), scraped by the real runner into the
real store: the KV-cache, queue and latency series publish, the source stays
up, the family is counted in ``llm_exporter_series_dropped_total{family}``,
one warning names it, and the scrape's peak memory stays under what the memory
tests allow a failed scrape of the same size (tests/reliability/test_engine_hardening_memory.py).
"""

from __future__ import annotations

import logging
import tracemalloc
from collections.abc import Iterable

import pytest

from exporter.engines.budget import family_share
from exporter.engines.config import EngineConfig
from exporter.engines.source import EngineSource
from exporter.runner import SourceRunner
from exporter.samples import Point, Sample, SourceError
from exporter.schema import SERIES_DROP_FAMILIES
from exporter.store import SnapshotStore
from tests.support.exposition import vllm_exposition
from tests.support.fake_engine import FakeEngine

MB = 1024 * 1024
VLLM = vllm_exposition(2, created=False)
RUNAWAY = "vllm:request_tokens_by_id"
#: what the verdict reads: KV cache, queue, latency histograms
VITAL = (
    "llm_kv_cache_usage_ratio",
    "llm_scheduler_requests_waiting",
    "llm_scheduler_requests_running",
    "llm_request_ttft_seconds",
    "llm_request_inter_token_seconds",
    "llm_scheduler_queue_seconds",
)


def runaway(series: int, name: str = RUNAWAY) -> str:
    lines = [f"# TYPE {name} gauge"]
    lines += [f'{name}{{model_name="m",request_id="req-{i:08d}"}} {i % 97}' for i in range(series)]
    return "\n".join(lines) + "\n"


def source_for(url: str, **overrides: object) -> EngineSource:
    cfg = EngineConfig(url=url, name="eng1", timeout=5.0, interval=5.0, max_body_bytes=32 * MB)
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return EngineSource(cfg)


def dropped_by_family(points: Iterable[Point]) -> dict[str, float]:
    return {
        p.labels["family"]: p.value
        for p in points
        if p.name == "llm_exporter_series_dropped_total" and p.labels["reason"] == "family_budget" and isinstance(p, Sample)
    }


def test_a_100k_series_family_is_dropped_and_the_vital_series_stay(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="exporter.engines.source")
    body = (VLLM + runaway(100_000)).encode()
    store = SnapshotStore()
    with FakeEngine(body) as srv:
        source = source_for(srv.url)
        runner = SourceRunner(source, store)
        assert runner.sample_once(), store.states()[source.name].last_error
        assert runner.sample_once()
        alone = source_for(srv.url)
        srv.set(body=VLLM)
        baseline = alone.sample().points
    snap = store.snapshot()
    assert snap.source_up(source.name)
    for name in VITAL:
        want = sorted(repr(p) for p in baseline if p.name == name)
        assert want, f"the vLLM exposition has no {name}"
        assert sorted(repr(p) for p in snap.find(name)) == want, f"{name} was dropped or changed with the runaway family"
    counted = dropped_by_family(list(snap.samples("llm_exporter_series_dropped_total")))
    assert counted == {RUNAWAY: 2 * 100_000.0}  # two scrapes, every line of the family
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "family_budget" in r.getMessage()]
    assert len(warnings) == 1, warnings  # once, not every scrape
    assert RUNAWAY in warnings[0] and "100000 sample lines" in warnings[0] and f"share of {family_share(20_000)}" in warnings[0]
    assert not [r for r in caplog.records if r.exc_info]


def test_the_dropped_family_costs_no_more_memory_than_a_refused_body_of_its_size() -> None:
    # the same 100 000 lines spread over 1 000 families (each under its share) are refused as
    # too_many_series: the family drop must not need more memory than that refusal
    families = "".join(f'{RUNAWAY}_{i % 1_000:03d}{{model_name="m",request_id="req-{i:08d}"}} {i % 97}\n' for i in range(100_000))
    dropped, refused = (VLLM + runaway(100_000)).encode(), (VLLM + families).encode()
    peaks: dict[str, int] = {}
    with FakeEngine(dropped) as srv:
        for case, body in (("dropped", dropped), ("refused", refused)):
            srv.set(body=body)
            source = source_for(srv.url)
            tracemalloc.start()
            try:
                base = tracemalloc.get_traced_memory()[0]
                try:
                    source.sample()
                except SourceError as err:
                    assert case == "refused" and err.reason == "too_many_series", err
                else:
                    assert case == "dropped"
                peaks[case] = tracemalloc.get_traced_memory()[1] - base
            finally:
                tracemalloc.stop()
    per_byte = {"dropped": peaks["dropped"] / len(dropped), "refused": peaks["refused"] / len(refused)}
    print(f"peak traced memory per body byte: dropped family {per_byte['dropped']:.2f}, refused {per_byte['refused']:.2f}")
    assert peaks["dropped"] < 3 * len(dropped), peaks  # the body, its text and little more
    assert per_byte["dropped"] <= 1.25 * per_byte["refused"], per_byte


def test_a_runaway_family_the_mapping_reads_is_dropped_alone() -> None:
    # the exploding family is one the mapping reads (a running gauge per request): it is over its
    # share and dropped; the other families, KV cache and latency included, stay
    name = "vllm:num_requests_running"
    body = VLLM + "".join(f'{name}{{engine="{i}",model_name="m"}} 1\n' for i in range(family_share(1_000) + 1))
    with FakeEngine(body) as srv:
        result = source_for(srv.url, max_series=1_000).sample()
    names = {p.name for p in result.points}
    assert "llm_scheduler_requests_running" not in names
    assert {"llm_kv_cache_usage_ratio", "llm_request_ttft_seconds"} <= names
    assert dropped_by_family(result.points) == {name: float(family_share(1_000) + 1 + 2)}  # its own 2 lines too


def test_nothing_left_to_keep_fails_the_scrape_as_too_many_series() -> None:
    body = "".join(f'vllm:num_requests_running{{engine="{i}",model_name="m"}} 1\n' for i in range(family_share(100) + 1))
    with FakeEngine(body) as srv:
        with pytest.raises(SourceError) as caught:
            source_for(srv.url, max_series=100).sample()
    assert caught.value.reason == "too_many_series"
    assert "vllm:num_requests_running" in caught.value.message


def test_the_family_label_is_bounded_to_the_first_families_and_other() -> None:
    share = family_share(100)
    runaways = "".join(runaway(share + 1, f"runaway_{k:02d}") for k in range(SERIES_DROP_FAMILIES + 3))
    with FakeEngine(VLLM + runaways) as srv:
        result = source_for(srv.url, max_series=100).sample()
    counted = dropped_by_family(result.points)
    assert len(counted) == SERIES_DROP_FAMILIES + 1 and counted["other"] == 3 * (share + 1)
    assert sum(counted.values()) == (SERIES_DROP_FAMILIES + 3) * (share + 1)
    assert any(p.name == "llm_kv_cache_usage_ratio" for p in result.points)
