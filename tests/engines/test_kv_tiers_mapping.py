"""KV below the GPU and the draft's cost, per engine (issue 36): each mapping on exposition text in
the engine's documented shape (docs/reference/engine-metrics.md), and absent where an engine
documents nothing."""

from __future__ import annotations

import pytest

from exporter.engines import NormalizedResult, normalize_exposition
from exporter.samples import Sample
from exporter.schema import KV_CACHE_TIERS, SPECS

VLLM_033 = """\
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
# HELP vllm:prompt_tokens_cached_by_source_total Number of cached prompt tokens by source.
# TYPE vllm:prompt_tokens_cached_by_source_total counter
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="m",source="device"} 100.0
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="m",source="host"} 48.0
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="m",source="disk"} 16.0
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="m",source="p2p"} 8.0
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="m",source="external_unspecified"} 4.0
vllm:prompt_tokens_cached_by_source_total{engine="1",model_name="m",source="host"} 2.0
# HELP vllm:kv_offload_cpu_cache_usage_perc CPU KV-offload cache usage.
# TYPE vllm:kv_offload_cpu_cache_usage_perc gauge
vllm:kv_offload_cpu_cache_usage_perc{engine="0",model_name="m"} 0.75
"""

#: V0: the swap space's usage under the old name
VLLM_V0 = """\
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.9
# TYPE vllm:cpu_cache_usage_perc gauge
vllm:cpu_cache_usage_perc{model_name="m"} 0.125
"""

SGLANG = """\
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.5
# HELP sglang:page_size The page size of the KV cache.
# TYPE sglang:page_size gauge
sglang:page_size{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 64.0
# HELP sglang:cached_tokens_total Number of cached prompt tokens.
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{cache_source="device",engine_type="unified",model_name="m"} 300.0
sglang:cached_tokens_total{cache_source="host",engine_type="unified",model_name="m"} 120.0
sglang:cached_tokens_total{cache_source="storage",engine_type="unified",model_name="m"} 30.0
# HELP sglang:hicache_host_used_tokens Tokens held in the HiCache host pool.
# TYPE sglang:hicache_host_used_tokens gauge
sglang:hicache_host_used_tokens{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 2048.0
# HELP sglang:hicache_host_total_tokens Capacity of the HiCache host pool in tokens.
# TYPE sglang:hicache_host_total_tokens gauge
sglang:hicache_host_total_tokens{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 8192.0
# HELP sglang:kv_transfer_latency_ms KV transfer latency.
# TYPE sglang:kv_transfer_latency_ms histogram
sglang:kv_transfer_latency_ms_bucket{engine_type="prefill",le="10.0",model_name="m"} 3.0
sglang:kv_transfer_latency_ms_bucket{engine_type="prefill",le="+Inf",model_name="m"} 4.0
sglang:kv_transfer_latency_ms_sum{engine_type="prefill",model_name="m"} 250.0
sglang:kv_transfer_latency_ms_count{engine_type="prefill",model_name="m"} 4.0
# HELP sglang:spec_num_steps The number of speculative draft steps.
# TYPE sglang:spec_num_steps gauge
sglang:spec_num_steps{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 3.0
"""

#: a build without the per-source split: cache_source="total" names no tier
SGLANG_TOTAL = """\
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{cache_source="total",engine_type="unified",model_name="m"} 450.0
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="m",tp_rank="0"} 0.5
"""

TRTLLM_SERVE = """\
# HELP trtllm_kv_cache_utilization KV cache utilization.
# TYPE trtllm_kv_cache_utilization gauge
trtllm_kv_cache_utilization{engine_type="undefined",model_name="undefined"} 0.5
# HELP trtllm_kv_cache_offload_bytes_total Bytes offloaded from GPU to host.
# TYPE trtllm_kv_cache_offload_bytes_total counter
trtllm_kv_cache_offload_bytes_total{engine_type="undefined",model_name="undefined"} 3.0e+09
# HELP trtllm_kv_cache_onboard_bytes_total Bytes onboarded from host to GPU.
# TYPE trtllm_kv_cache_onboard_bytes_total counter
trtllm_kv_cache_onboard_bytes_total{engine_type="undefined",model_name="undefined"} 1.0e+09
# HELP trtllm_kv_cache_intra_device_copy_bytes_total Bytes copied within the device.
# TYPE trtllm_kv_cache_intra_device_copy_bytes_total counter
trtllm_kv_cache_intra_device_copy_bytes_total{engine_type="undefined",model_name="undefined"} 7.0e+09
# HELP trtllm_kv_cache_host_utilization Host KV cache utilization.
# TYPE trtllm_kv_cache_host_utilization gauge
trtllm_kv_cache_host_utilization{engine_type="undefined",model_name="undefined"} 0.4
# HELP trtllm_spec_decode_draft_overhead Draft overhead.
# TYPE trtllm_spec_decode_draft_overhead gauge
trtllm_spec_decode_draft_overhead{engine_type="undefined",model_name="undefined"} 0.2
"""

TRITON = """\
# HELP nv_trt_llm_kv_cache_block_metrics TRT LLM KV cache block metrics
# TYPE nv_trt_llm_kv_cache_block_metrics gauge
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="tensorrt_llm",version="1"} 0.5
# HELP nv_trt_llm_disaggregated_serving_metrics TRT LLM disaggregated serving metrics
# TYPE nv_trt_llm_disaggregated_serving_metrics counter
nv_trt_llm_disaggregated_serving_metrics{disaggregated_serving_type="kv_cache_transfer_ms",model="tensorrt_llm",version="1"} 1500
nv_trt_llm_disaggregated_serving_metrics{disaggregated_serving_type="request_count",model="tensorrt_llm",version="1"} 6
"""

LLAMACPP = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 100
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache.
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 40
# HELP llamacpp:n_tokens_max Largest observed n_tokens.
# TYPE llamacpp:n_tokens_max counter
llamacpp:n_tokens_max 512
"""

TGI = """\
# TYPE tgi_queue_size gauge
tgi_queue_size 0
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 2
"""

TIER_FAMILIES = {
    "llm_kv_cache_tier_hit_tokens_total",
    "llm_kv_cache_tier_transfer_bytes_total",
    "llm_kv_cache_host_usage_ratio",
    "llm_kv_cache_instance_transfer_seconds_total",
    "llm_kv_cache_instance_transfers_total",
}


def _points(text: str) -> NormalizedResult:
    result = normalize_exposition(text, "srv")
    assert result.problems == []
    return result


def _values(result: NormalizedResult, name: str, label: str = "") -> dict[str, float]:
    """``name``'s values by ``label`` ("" for the unlabelled one), summed over ranks."""
    out: dict[str, float] = {}
    for p in result.points:
        if p.name == name and isinstance(p, Sample):
            key = p.labels.get(label, "") if label else ""
            out[key] = out.get(key, 0.0) + p.value
    return out


def test_vllm_cached_tokens_by_source_become_tiers_and_the_offload_usage_is_read() -> None:
    r = _points(VLLM_033)
    assert r.family == "vllm"
    assert _values(r, "llm_kv_cache_tier_hit_tokens_total", "tier") == {
        "gpu": 100.0,
        "host": 50.0,  # both data-parallel engines
        "storage": 16.0,
        "peer": 8.0,
        "other": 4.0,
    }
    ranks = {p.labels["rank"] for p in r.points if p.name == "llm_kv_cache_tier_hit_tokens_total"}
    assert ranks == {"0", "1"}  # the engine index stays the rank
    assert _values(r, "llm_kv_cache_host_usage_ratio") == {"": 0.75}
    assert not TIER_FAMILIES - {"llm_kv_cache_tier_hit_tokens_total", "llm_kv_cache_host_usage_ratio"} & {
        p.name for p in r.points
    }


#: the OffloadingConnector's transfer counters: the label-split name (two spellings across
#: releases) and the load/store names that replace it
VLLM_OFFLOAD_LABELLED = """\
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
# TYPE vllm:kv_offload_total_bytes_total counter
vllm:kv_offload_total_bytes_total{engine="0",model_name="m",transfer_type="GPU_to_CPU"} 1.18e+10
vllm:kv_offload_total_bytes_total{engine="0",model_name="m",transfer_type="CPU_to_GPU"} 2.5e+09
vllm:kv_offload_total_bytes_total{engine="1",model_name="m",transfer_type="gpu_to_cpu"} 1.0e+09
"""
VLLM_OFFLOAD_SPLIT = """\
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
# TYPE vllm:kv_offload_store_bytes_total counter
vllm:kv_offload_store_bytes_total{engine="0",model_name="m"} 4.0e+09
# TYPE vllm:kv_offload_load_bytes_total counter
vllm:kv_offload_load_bytes_total{engine="0",model_name="m"} 3.0e+09
# TYPE vllm:kv_offload_total_bytes_total counter
vllm:kv_offload_total_bytes_total{engine="0",model_name="m",transfer_type="GPU_to_CPU"} 4.0e+09
vllm:kv_offload_total_bytes_total{engine="0",model_name="m",transfer_type="CPU_to_GPU"} 3.0e+09
"""


def test_vllm_offloading_connector_bytes_are_the_tier_transfers_in_both_spellings() -> None:
    r = _points(VLLM_OFFLOAD_LABELLED)
    assert _values(r, "llm_kv_cache_tier_transfer_bytes_total", "direction") == {"offload": 1.28e10, "load": 2.5e9}
    # the newer load/store names win where a release serves both (the old one kept for compatibility)
    split = _points(VLLM_OFFLOAD_SPLIT)
    assert _values(split, "llm_kv_cache_tier_transfer_bytes_total", "direction") == {"offload": 4e9, "load": 3e9}


def test_vllm_v0_swap_space_usage_is_the_host_tier_usage() -> None:
    r = _points(VLLM_V0)
    assert _values(r, "llm_kv_cache_host_usage_ratio") == {"": 0.125}
    assert _values(r, "llm_kv_cache_usage_ratio") == {"": 0.9}


def test_vllm_unknown_source_word_is_the_bounded_other_tier() -> None:
    text = 'vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="m",source="brand_new"} 7\n'
    r = _points(text)
    assert _values(r, "llm_kv_cache_tier_hit_tokens_total", "tier") == {"other": 7.0}


def test_sglang_hicache_tiers_host_usage_and_pd_transfers() -> None:
    r = _points(SGLANG)
    assert r.family == "sglang"
    assert _values(r, "llm_kv_cache_tier_hit_tokens_total", "tier") == {"gpu": 300.0, "host": 120.0, "storage": 30.0}
    assert _values(r, "llm_prefix_cache_hit_tokens_total") == {"": 450.0}  # the sum over tiers, as before
    assert _values(r, "llm_kv_cache_host_usage_ratio") == {"": 0.25}
    assert _values(r, "llm_kv_cache_instance_transfer_seconds_total") == {"": pytest.approx(0.25)}  # ms -> s
    assert _values(r, "llm_kv_cache_instance_transfers_total") == {"": 4.0}


def test_sglang_without_the_split_publishes_no_tier() -> None:
    r = _points(SGLANG_TOTAL)
    assert "llm_kv_cache_tier_hit_tokens_total" not in {p.name for p in r.points}
    assert _values(r, "llm_prefix_cache_hit_tokens_total") == {"": 450.0}  # the hits are still hits


def test_sglang_underscore_prefix_maps_the_same_tiers() -> None:
    r = _points(SGLANG.replace("sglang:", "sglang_"))
    assert _values(r, "llm_kv_cache_tier_hit_tokens_total", "tier")["host"] == 120.0
    assert _values(r, "llm_kv_cache_host_usage_ratio") == {"": 0.25}


def test_trtllm_serve_bytes_offloaded_and_onboarded_host_usage_and_draft_time() -> None:
    r = _points(TRTLLM_SERVE)
    assert r.family == "trtllm"
    assert _values(r, "llm_kv_cache_tier_transfer_bytes_total", "direction") == {"offload": 3e9, "load": 1e9}
    assert _values(r, "llm_kv_cache_host_usage_ratio") == {"": 0.4}
    assert _values(r, "llm_spec_decode_draft_time_ratio") == {"": 0.2}
    # KV copied inside the GPU is no tier transfer
    assert sum(_values(r, "llm_kv_cache_tier_transfer_bytes_total", "direction").values()) == 4e9


def test_triton_disaggregated_kv_transfer_time_in_seconds() -> None:
    r = _points(TRITON)
    assert _values(r, "llm_kv_cache_instance_transfer_seconds_total") == {"": 1.5}
    assert _values(r, "llm_kv_cache_instance_transfers_total") == {"": 6.0}


@pytest.mark.parametrize("text", [LLAMACPP, TGI], ids=["llamacpp", "tgi"])
def test_engines_that_document_no_kv_tier_publish_none(text: str) -> None:
    r = _points(text)
    assert not TIER_FAMILIES & {p.name for p in r.points}
    assert "llm_spec_decode_draft_time_ratio" not in {p.name for p in r.points}


def test_the_tier_vocabulary_is_the_schemas() -> None:
    assert SPECS["llm_kv_cache_tier_hit_tokens_total"].closed_values("tier") == tuple(KV_CACHE_TIERS)
    assert SPECS["llm_kv_cache_tier_transfer_bytes_total"].closed_values("direction") == ("offload", "load")
