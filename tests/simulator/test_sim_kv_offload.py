"""The host KV tier (``kv_offload_blocks``): the GPU's evictions go to host memory instead of being
dropped, a later hit on them is a host-tier hit loaded back over PCIe, and the dialects publish it
under the engines' own names, which the exporter reads into ``llm_kv_cache_tier_*`` (issue 36)."""

from __future__ import annotations

import asyncio

import pytest

from exporter.collector import render_text
from exporter.engines import normalize_exposition
from exporter.engines.config import EngineConfig
from exporter.engines.source import EngineSource
from exporter.exposition import read_metrics
from exporter.loadgen import LoadSpec, run_load
from exporter.samples import Sample
from exporter.simulator.dialects import sglang, vllm
from exporter.simulator.engine import Engine
from exporter.simulator.kvcache import BlockPool
from exporter.simulator.scheduler import Scheduler
from exporter.simulator.settings import SimConfig
from exporter.simulator.stats import EngineStats
from tests.simulator.sim_helpers import sim_server
from tests.simulator.test_sim_scheduler import req, run_until_idle

#: two prompts of 4 full blocks each that share nothing, on a GPU cache of 5 blocks: the second
#: one's allocation evicts the first one's cached blocks
CFG = SimConfig(num_gpu_blocks=5, block_size=16, kv_watermark=0.0, max_num_batched_tokens=2048)


def _drain(cfg: SimConfig) -> tuple[Scheduler, list[int], list[int]]:
    """A, then B (evicts A's blocks), then A again: what the third request found where."""
    s = Scheduler(cfg, EngineStats())
    a = req(64, max_tokens=1, tag="a")
    b = req(64, max_tokens=1, tag="b")
    again = req(64, max_tokens=1, tag="again", prefix=a.prompt_ids)
    for r in (a, b, again):
        s.submit(r)
        run_until_idle(s)
    return s, [again.cached_tokens, again.external_tokens], [a.external_tokens, b.external_tokens]


def test_pool_hands_every_evicted_cached_block_to_its_hook() -> None:
    pool = BlockPool(2)
    evicted: list[bytes] = []
    pool.on_evict = evicted.append
    first = pool.allocate(2)
    pool.register(first[0], b"h0")
    pool.register(first[1], b"h1")
    pool.release(first)
    pool.allocate(1)  # takes the oldest free block: its content is evicted
    assert evicted == [b"h0"]
    pool.allocate(1)
    assert evicted == [b"h0", b"h1"]


def test_without_a_host_tier_an_evicted_prefix_is_recomputed() -> None:
    s, (gpu_hit, host_hit), _ = _drain(CFG)
    assert (gpu_hit, host_hit) == (0, 0)
    frozen = s.stats.freeze()
    assert frozen.counter("offload_stored_blocks") == 0 and frozen.counter("prompt_tokens_external") == 0


def test_evicted_blocks_go_to_the_host_tier_and_come_back_as_host_hits() -> None:
    cfg = SimConfig(**{**CFG.as_dict(), "kv_offload_blocks": 16})
    s, (gpu_hit, host_hit), (a_host, b_host) = _drain(cfg)
    # A's 4 full blocks were evicted to host memory by B; the third request's prompt is A's: the
    # last block is never a hit (one token is always computed), so 3 blocks come back from host
    assert gpu_hit == 0 and host_hit == 3 * 16
    assert (a_host, b_host) == (0, 0)
    frozen = s.stats.freeze()
    assert frozen.counter("offload_stored_blocks") >= 4
    assert frozen.counter("offload_loaded_blocks") == 3
    assert frozen.counter("prompt_tokens_external") == 3 * 16
    assert frozen.counter("external_hits") == 3 * 16
    assert 0 < s.offload.used <= 16


def test_the_host_tier_keeps_only_its_size() -> None:
    cfg = SimConfig(**{**CFG.as_dict(), "kv_offload_blocks": 2})
    s, (_, host_hit), _ = _drain(cfg)
    assert s.offload.used == 2
    assert host_hit == 0  # A's first blocks were pushed out of the 2-block tier by the rest


def test_the_knob_is_off_by_default_and_exclusive_with_kv_offload() -> None:
    assert SimConfig().kv_offload_blocks == 0
    with pytest.raises(ValueError, match="kv_offload_blocks"):
        SimConfig(kv_offload_blocks=8, kv_offload=True).validate()
    with pytest.raises(ValueError, match="kv_offload_blocks"):
        SimConfig(kv_offload_blocks=-1).validate()


def test_dialects_publish_the_host_tier_under_the_engines_names() -> None:
    cfg = SimConfig(**{**CFG.as_dict(), "kv_offload_blocks": 16})
    engine = Engine(cfg)
    s, _, _ = _drain(cfg)
    engine.scheduler = s  # the drained scheduler's state, rendered as the engine would
    engine.stats = s.stats
    snap = engine.snapshot()
    vtext = vllm.render(snap)
    assert 'vllm:prompt_tokens_cached_by_source_total{model_name="sim-llama-8b",engine="0",source="host"} 48.0' in vtext
    assert "vllm:kv_offload_cpu_cache_usage_perc{" in vtext
    points = {
        (p.name, p.labels.get("tier", "")): p.value
        for p in normalize_exposition(vtext, "sim").points
        if isinstance(p, Sample) and p.name.startswith("llm_kv_cache_")
    }
    assert points[("llm_kv_cache_tier_hit_tokens_total", "host")] == 48.0
    assert points[("llm_kv_cache_host_usage_ratio", "")] == pytest.approx(s.offload.used / 16)
    stext = sglang.render(snap)
    sg = {
        (p.name, p.labels.get("tier", "")): p.value
        for p in normalize_exposition(stext, "sim").points
        if isinstance(p, Sample) and p.name.startswith("llm_kv_cache_")
    }
    assert sg[("llm_kv_cache_tier_hit_tokens_total", "host")] == 48.0
    assert sg[("llm_kv_cache_host_usage_ratio", "")] == pytest.approx(s.offload.used / 16)


def test_host_tier_hits_come_through_the_exporter_to_its_exposition() -> None:
    """simulator (HTTP) -> the exporter's engine source -> its /metrics text -> parsed back."""
    with sim_server("healthy", "vllm", time_scale=20.0, num_gpu_blocks=64, kv_offload_blocks=256) as srv:
        spec = LoadSpec(
            srv.base_url,
            concurrency=4,
            max_requests=24,
            duration_s=60,
            prompt_tokens=((400, 1.0),),
            max_tokens=((4, 1.0),),
            shared_prefix_ratio=1.0,
            shared_prefix_tokens=320,
            prefix_groups=6,
            seed=5,
        )
        result = asyncio.run(run_load(spec))
        assert result.summary.ok == 24
        source = EngineSource(EngineConfig(name="sim", url=srv.base_url + "/metrics", type="vllm", timeout=5.0))
        try:
            sampled = source.sample()
        finally:
            source.close()
    text = render_text(sampled.points).decode()
    metrics = read_metrics(text)
    hits = {labels["tier"]: value for labels, value in metrics.samples["llm_kv_cache_tier_hit_tokens_total"]}
    assert hits["host"] > 0 and hits["gpu"] >= 0
    (_, usage), *_ = metrics.samples["llm_kv_cache_host_usage_ratio"]
    assert 0 < usage <= 1
    moved = {labels["direction"]: value for labels, value in metrics.samples["llm_kv_cache_tier_transfer_bytes_total"]}
    block_bytes = 16 * SimConfig().geometry.kv_bytes_per_token  # the default block size, the default model
    # the GPU's evictions went to host memory and some came back for hits, whole blocks each way
    assert moved["offload"] > 0 and moved["load"] > 0, moved
    assert moved["offload"] % block_bytes == 0 and moved["load"] % block_bytes == 0, moved
