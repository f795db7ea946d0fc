"""Each dialect's /metrics: valid Prometheus text, the engine's real names and wire habits,
and — read through the engine adapters (exporter.engines) — neutral values equal to /sim/state.
"""

from __future__ import annotations

import asyncio
import functools
import math
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.engines import normalize_exposition
from exporter.loadgen import LoadSpec, run_load
from exporter.samples import HistogramSample, Sample
from exporter.simulator.settings import DIALECTS
from tests.simulator.sim_helpers import sim_server

#: A few names per dialect that must be on the wire exactly so (family name, as prometheus_client reports it, and type).
EXPECTED: dict[str, dict[str, str]] = {
    "vllm": {
        "vllm:num_requests_running": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:num_preemptions": "counter",
        "vllm:prefix_cache_hits": "counter",
        "vllm:request_success": "counter",
        "vllm:iteration_tokens_total": "histogram",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:inter_token_latency_seconds": "histogram",
        "vllm:cache_config_info": "gauge",
        "vllm:spec_decode_num_accepted_tokens_per_pos": "counter",
    },
    "vllm-legacy": {
        "vllm:gpu_cache_usage_perc": "gauge",
        "vllm:gpu_prefix_cache_queries": "counter",
        "vllm:time_per_output_token_seconds": "histogram",
        "vllm:num_preemptions": "counter",
    },
    "sglang": {
        "sglang:num_running_reqs": "gauge",
        "sglang:num_queue_reqs": "gauge",
        "sglang:token_usage": "gauge",
        "sglang:num_retracted_requests": "counter",
        "sglang:cached_tokens": "counter",
        "sglang:time_to_first_token_seconds": "histogram",
        "sglang:page_size": "gauge",
        "sglang:scheduler_process_cpu_seconds": "counter",
        "sglang:spec_accept_rate": "gauge",
    },
    "tgi": {
        "tgi_request_count": "counter",
        "tgi_queue_size": "gauge",
        "tgi_batch_current_size": "gauge",
        "tgi_request_duration": "histogram",
        "tgi_request_skipped_tokens": "summary",
        "tgi_batch_next_size": "histogram",
    },
    "trtllm": {
        "nv_trt_llm_request_metrics": "gauge",
        "nv_trt_llm_kv_cache_block_metrics": "gauge",
        "nv_inference_request_success": "counter",
        "nv_inference_request_duration_us": "counter",
        "nv_inference_first_response_histogram_ms": "histogram",
    },
    "llamacpp": {
        "llamacpp:prompt_tokens": "counter",
        "llamacpp:n_tokens_max": "counter",
        "llamacpp:requests_processing": "gauge",
        "llamacpp:spec_decode_num_drafts": "counter",
    },
}


@functools.cache
def _served(dialect: str) -> dict[str, Any]:
    """Run a small finished load against ``dialect``; return the exposition, headers and /sim/state."""
    with sim_server("healthy", dialect, time_scale=10.0, spec_tokens=2, spec_acceptance=0.6) as srv:
        spec = LoadSpec(
            srv.base_url,
            concurrency=6,
            max_requests=18,
            duration_s=60,
            prompt_tokens=((80, 1.0),),
            max_tokens=((12, 1.0),),
            shared_prefix_ratio=0.5,
            shared_prefix_tokens=48,
            seed=3,
        )
        result = asyncio.run(run_load(spec))
        assert result.summary.ok == 18
        resp = httpx.get(srv.base_url + "/metrics", timeout=10)
        state = httpx.get(srv.base_url + "/sim/state", timeout=10).json()
    return {"text": resp.text, "headers": resp.headers, "state": state, "dialect": dialect}


@pytest.fixture(params=DIALECTS)
def served(request: pytest.FixtureRequest) -> dict[str, Any]:
    """One finished run per dialect, shared by the tests of this module."""
    return _served(request.param)


def test_exposition_parses_and_has_the_engine_names(served: dict[str, Any]) -> None:
    families = {f.name: f for f in text_string_to_metric_families(served["text"])}
    for name, type_ in EXPECTED[served["dialect"]].items():
        assert name in families, f"{name} missing from {served['dialect']}"
        assert families[name].type == type_, name
    assert served["headers"]["content-type"].startswith("text/plain; version=0.0.4")
    for fam in families.values():
        if fam.type != "histogram":
            continue
        by_series: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
        totals: dict[tuple[tuple[str, str], ...], float] = {}
        for s in fam.samples:
            key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
            if s.name.endswith("_bucket"):
                by_series.setdefault(key, []).append((float(s.labels["le"]), s.value))
            elif s.name.endswith("_count"):
                totals[key] = s.value
        for key, buckets in by_series.items():
            bounds = [b for b, _ in buckets]
            counts = [c for _, c in buckets]
            assert bounds == sorted(bounds) and math.isinf(bounds[-1]), fam.name
            assert counts == sorted(counts), f"{fam.name}: buckets not cumulative"
            assert counts[-1] == totals[key], f"{fam.name}: +Inf bucket != _count"


def _neutral(text: str) -> dict[str, float]:
    res = normalize_exposition(text, "sim")
    assert res.problems == []
    out: dict[str, float] = {}
    for p in res.points:
        if isinstance(p, Sample):
            out[p.name] = out.get(p.name, 0.0) + p.value
        elif isinstance(p, HistogramSample):
            out[p.name + ":count"] = out.get(p.name + ":count", 0.0) + p.count
    out["_family"] = res.family  # type: ignore[assignment]
    return out


def test_engine_adapters_read_values_equal_to_internal_state(served: dict[str, Any]) -> None:
    d, st = served["dialect"], served["state"]
    neutral = _neutral(served["text"])
    family = {"vllm-legacy": "vllm"}.get(d, d)
    assert neutral["_family"] == family
    tokens, finished = st["tokens"], sum(st["requests"]["finished"].values())
    assert neutral["llm_prompt_tokens_total"] == tokens["prompt"]
    assert neutral["llm_generation_tokens_total"] == tokens["generation"]
    assert neutral["llm_scheduler_requests_running"] == st["running"] == 0
    assert neutral["llm_scheduler_requests_waiting"] == st["waiting"] == 0
    if d != "llamacpp":
        assert neutral["llm_requests_finished_total"] == finished
        assert neutral["llm_kv_cache_capacity_tokens"] == st["kv"]["capacity_tokens"]
    if d not in ("tgi", "llamacpp"):
        assert neutral["llm_kv_cache_usage_ratio"] == pytest.approx(st["kv"]["usage"])
    if d in ("vllm", "sglang", "llamacpp"):
        assert neutral["llm_prefix_cache_hit_tokens_total"] == st["prefix_cache"]["hit_tokens"] > 0
    if d in ("vllm", "vllm-legacy", "llamacpp"):
        assert neutral["llm_spec_decode_draft_tokens_total"] == st["spec"]["draft_tokens"] > 0
        assert neutral["llm_spec_decode_accepted_tokens_total"] == st["spec"]["accepted_tokens"]
        assert neutral["llm_spec_decode_drafts_total"] == st["spec"]["drafts"]
    if d in ("vllm", "vllm-legacy", "sglang"):
        assert neutral["llm_request_ttft_seconds:count"] == st["histograms"]["ttft"]["count"] == 18
        assert neutral["llm_request_inter_token_seconds:count"] == st["histograms"]["itl"]["count"]
        assert neutral["llm_kv_cache_preemptions_total"] == st["preemptions"]
    if d == "tgi":
        # TGI counts tokens emitted beyond the first per step: accepted drafts, less those cut by max_tokens
        assert 0 < neutral["llm_spec_decode_accepted_tokens_total"] <= st["spec"]["accepted_tokens"]


def test_tgi_wire_habits() -> None:
    text = _served("tgi")["text"]
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    assert "tgi_request_count" in names and "tgi_request_success" in names
    assert not [n for n in names if n.endswith("_total")]
    assert "\n\n# " in text  # blank line between families
    assert "# TYPE tgi_request_failure counter" in text and "# HELP tgi_request_failure" not in text
    assert 'tgi_request_duration_bucket{le="0.00015000000000000001"}' in text  # 1e-4 * 1.5, as Rust prints it
    assert 'tgi_request_skipped_tokens{quantile="0.999"}' in text


def test_triton_units() -> None:
    served = _served("trtllm")
    text, st = served["text"], served["state"]
    assert 'nv_inference_first_response_histogram_ms_bucket{model="tensorrt_llm",version="1",le="100"}' in text
    duration_us = next(
        float(line.split()[-1]) for line in text.splitlines() if line.startswith("nv_inference_request_duration_us{")
    )
    assert duration_us == pytest.approx(st["histograms"]["e2e"]["sum"] * 1e6, rel=1e-6, abs=1)
    assert 'kv_cache_block_type="tokens_per"' in text


def test_llamacpp_quirks() -> None:
    served = _served("llamacpp")
    text, st = served["text"], served["state"]
    assert "# TYPE llamacpp:prompt_tokens_total counter" in text
    assert "# TYPE llamacpp:n_tokens_max counter" in text
    assert "kv_cache" not in text
    assert int(served["headers"]["process-start-time-unix"]) > 0
    prompt = next(float(line.split()[-1]) for line in text.splitlines() if line.startswith("llamacpp:prompt_tokens_total "))
    assert prompt == st["tokens"]["prompt"] - st["tokens"]["prompt_cached"]  # excludes cached tokens


def test_vllm_versions_differ_where_vllm_did() -> None:
    current, legacy = _served("vllm"), _served("vllm-legacy")
    assert 'engine="0"' in current["text"] and "vllm:gpu_cache_usage_perc" not in current["text"]
    assert 'finished_reason="repetition"' in current["text"]
    text = legacy["text"]
    assert "vllm:kv_cache_usage_perc" not in text and "vllm:inter_token_latency_seconds" not in text
    hits = next(float(line.split()[-1]) for line in text.splitlines() if line.startswith("vllm:gpu_prefix_cache_hits_total{"))
    assert hits == legacy["state"]["prefix_cache"]["hit_tokens"] / 16  # blocks, not tokens
