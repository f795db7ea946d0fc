"""Every engine family and generation, from fixture text to neutral values.

Fixtures named ``real-*`` are upstream captures (fixtures/SOURCES.md); the others
are written from the documented names in docs/reference/engine-metrics.md.
Each test checks units, ranks, absent-stays-absent and histogram counts.
"""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.engines import normalize_exposition
from exporter.samples import HistogramSample, Sample
from exporter.schema import SPECS
from tests.engines.engine_helpers import FIXTURES, find, fixture, histogram, names, normalize, value
from tests.support.exposition import engine_values, histogram_counts, vllm_exposition

QWEN = "Qwen/Qwen2.5-1.5B-Instruct"


def raw_histogram(text: str, family: str, **labels: str) -> tuple[list[tuple[float, float]], float, float]:
    """(bounds with cumulative counts, sum, count) of one histogram, read by prometheus_client."""
    buckets, total, count = [], math.nan, math.nan
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if not all(s.labels.get(k) == v for k, v in labels.items()):
                continue
            if s.name == family + "_bucket":
                buckets.append((float(s.labels["le"]), s.value))
            elif s.name == family + "_sum":
                total = s.value
            elif s.name == family + "_count":
                count = s.value
    return sorted(buckets), total, count


ALL_FIXTURES = sorted(p.name for p in FIXTURES.glob("*.prom") if p.name != "real-vllm-docs-usage-metrics-fragment.prom")


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_every_point_is_a_schema_metric_with_schema_labels(name: str) -> None:
    result = normalize(name)
    assert any(p.name == "llm_engine_info" for p in result.points)
    for p in result.points:
        spec = SPECS[p.name]
        assert set(p.labels) <= set(spec.labels), (p.name, p.labels)
        assert isinstance(p, HistogramSample) == (spec.type == "histogram")
        if isinstance(p, Sample) and spec.unit == "ratio":
            assert 0.0 <= p.value <= 1.0
        if isinstance(p, HistogramSample):
            assert p.count == p.buckets[-1][1]


# --------------------------------------------------------------------------- vLLM


def test_vllm_033_v1_two_dp_engines_keep_their_ranks() -> None:
    r = normalize("vllm-0.33-v1-2dp.prom")
    assert (r.family, r.generation) == ("vllm", "v1")
    assert value(r, "llm_scheduler_requests_running", rank="0", model=QWEN) == 3
    assert value(r, "llm_scheduler_requests_running", rank="1") == 5
    assert value(r, "llm_scheduler_requests_waiting", rank="1") == 2
    assert value(r, "llm_kv_cache_usage_ratio", rank="0") == 0.125
    assert value(r, "llm_kv_cache_usage_ratio", rank="1") == 0.4375
    # capacity from kv_cache_size_tokens, per engine; block size from the info label
    assert value(r, "llm_kv_cache_capacity_tokens", rank="0") == 32768
    assert value(r, "llm_kv_cache_capacity_tokens", rank="1") == 33792
    assert value(r, "llm_kv_cache_block_size_tokens", rank="1") == 16
    assert value(r, "llm_kv_cache_preemptions_total", rank="1") == 7
    assert value(r, "llm_prefix_cache_queried_tokens_total", rank="1") == 9216
    assert value(r, "llm_prefix_cache_hit_tokens_total", rank="1") == 6144
    assert value(r, "llm_prompt_tokens_total", rank="0") == 6400
    assert value(r, "llm_requests_finished_total", rank="1", reason="stop") == 40
    # repetition detection is a stop condition: merged into stop, never published raw
    assert value(r, "llm_requests_finished_total", rank="0", reason="stop") == 20 + 0
    assert not find(r, "llm_requests_finished_total", reason="repetition")
    assert value(r, "llm_requests_rejected_total", reason="max_num_queued_reqs", model=QWEN) == 4
    assert value(r, "llm_spec_decode_drafts_total", rank="1") == 1200
    assert value(r, "llm_spec_decode_draft_tokens_total", rank="1") == 3600
    assert value(r, "llm_spec_decode_accepted_tokens_total", rank="0") == 1350
    (cfg,) = find(r, "llm_engine_config_info", rank="0")
    assert {k: cfg.labels[k] for k in ("block_size", "kv_cache_dtype", "prefix_caching", "model")} == {
        "block_size": "16",
        "kv_cache_dtype": "fp8_e4m3",
        "prefix_caching": "true",
        "model": QWEN,
    }
    assert "attention_backend" not in cfg.labels  # vLLM does not expose it: unknown, not invented
    text = fixture("vllm-0.33-v1-2dp.prom")
    for neutral, raw in (
        ("llm_request_ttft_seconds", "vllm:time_to_first_token_seconds"),
        ("llm_request_inter_token_seconds", "vllm:inter_token_latency_seconds"),
        ("llm_scheduler_queue_seconds", "vllm:request_queue_time_seconds"),
        ("llm_request_prefill_seconds", "vllm:request_prefill_time_seconds"),
        ("llm_request_decode_seconds", "vllm:request_decode_time_seconds"),
        ("llm_request_e2e_seconds", "vllm:e2e_request_latency_seconds"),
    ):
        for rank in ("0", "1"):
            h = histogram(r, neutral, rank=rank)
            buckets, total, count = raw_histogram(text, raw, engine=rank)
            assert list(h.buckets) == buckets and (h.sum, h.count) == (total, count)
    (info,) = find(r, "llm_engine_info")
    assert info.labels == {"server": "srv", "engine": "vllm", "model": QWEN, "generation": "v1"}


def test_vllm_010_serves_both_names_and_the_new_one_wins() -> None:
    r = normalize("vllm-0.10-both-names-2dp.prom")
    assert r.generation == "v1-legacy"
    # make the deprecated series disagree: the result must still follow the new name
    text = fixture("vllm-0.10-both-names-2dp.prom")
    skewed = (
        "\n".join(
            line.rsplit(" ", 1)[0] + " 0.99"
            if line.startswith(("vllm:gpu_cache_usage_perc{", "vllm:gpu_prefix_cache_"))
            else line
            for line in text.splitlines()
        )
        + "\n"
    )
    s = normalize_exposition(skewed, "srv")
    assert value(s, "llm_kv_cache_usage_ratio", rank="0") == 0.125
    assert value(s, "llm_kv_cache_usage_ratio", rank="1") == 0.4375
    assert value(s, "llm_prefix_cache_hit_tokens_total", rank="0") == 2048
    # ITL still comes from time_per_output_token_seconds before 0.11
    h = histogram(r, "llm_request_inter_token_seconds", rank="1")
    assert h.count == raw_histogram(text, "vllm:time_per_output_token_seconds", engine="1")[2] == 5200


def test_vllm_08_v1_legacy_block_counted_prefix_cache_stays_absent() -> None:
    r = normalize("vllm-0.8-v1-legacy-2dp.prom")
    assert r.generation == "v1-legacy"
    assert value(r, "llm_kv_cache_usage_ratio", rank="1") == 0.4375  # from gpu_cache_usage_perc
    # gpu_prefix_cache_* counted blocks in 0.8: not the neutral token counters
    assert not find(r, "llm_prefix_cache_queried_tokens_total")
    assert not find(r, "llm_prefix_cache_hit_tokens_total")
    assert not find(r, "llm_spec_decode_drafts_total")  # no speculative config: absent, not 0
    assert value(r, "llm_kv_cache_capacity_tokens") == 16 * 2048  # block_size x num_gpu_blocks


def test_vllm_v0_real_capture() -> None:
    r = normalize("real-vllm-v0-aibrix-runtime-docs-truncated.prom")
    model = "Qwen/Qwen2.5-Coder-1.5B-Instruct"
    assert (r.family, r.generation) == ("vllm", "v0")
    assert value(r, "llm_kv_cache_capacity_tokens", model=model) == 16 * 81767
    assert value(r, "llm_kv_cache_block_size_tokens") == 16
    assert value(r, "llm_prompt_tokens_total") == 148
    assert value(r, "llm_generation_tokens_total") == 955
    assert value(r, "llm_requests_finished_total", reason="stop") == 4
    (cfg,) = find(r, "llm_engine_config_info")
    assert (cfg.labels["prefix_caching"], cfg.labels["kv_cache_dtype"]) == ("false", "auto")
    assert all("rank" not in p.labels for p in r.points)  # V0 has no engine index
    # the V0 windowed hit-rate gauge (-1.0 here) is not a counter: no prefix-cache points
    assert not find(r, "llm_prefix_cache_hit_tokens_total")


def test_vllm_twenty_dp_engines() -> None:
    r = normalize_exposition(vllm_exposition(20, created=False), "srv")
    for i in range(20):
        want = engine_values(i)
        rank = str(i)
        assert value(r, "llm_scheduler_requests_running", rank=rank) == want["vllm:num_requests_running"]
        assert value(r, "llm_kv_cache_usage_ratio", rank=rank) == want["vllm:kv_cache_usage_perc"]
        assert value(r, "llm_prompt_tokens_total", rank=rank) == want["vllm:prompt_tokens_total"]
        h = histogram(r, "llm_request_ttft_seconds", rank=rank)
        assert [c for _, c in h.buckets] == histogram_counts(i, len(h.buckets) - 1)


# --------------------------------------------------------------------------- SGLang


def test_sglang_0523_dp_ranks_replicas_and_partitions() -> None:
    r = normalize("sglang-0.5.23-colon-2dp.prom")
    assert (r.family, r.generation) == ("sglang", "colon-0.5.11+")
    assert value(r, "llm_scheduler_requests_running", rank="0") == 12  # dp_rank, not tp_rank="4"
    assert value(r, "llm_scheduler_requests_running", rank="1") == 9
    assert value(r, "llm_kv_cache_usage_ratio", rank="1") == 0.375
    assert value(r, "llm_kv_cache_capacity_tokens", rank="0") == 82000
    assert value(r, "llm_kv_cache_block_size_tokens", rank="0") == 64
    assert value(r, "llm_kv_cache_preemptions_total", rank="1") == 11
    assert value(r, "llm_prefix_cache_hit_tokens_total", rank="0") == 30000 + 2000  # device + host
    assert value(r, "llm_prompt_tokens_total") == 60000 + 20004  # streaming + non-streaming
    assert value(r, "llm_prefix_cache_queried_tokens_total") == 80004
    assert value(r, "llm_requests_finished_total", reason="unknown") == 100
    assert value(r, "llm_spec_decode_drafts_total") == 7400
    ttft = histogram(r, "llm_request_ttft_seconds")  # two is_streaming series merged bucket by bucket
    text = fixture("sglang-0.5.23-colon-2dp.prom")
    a = raw_histogram(text, "sglang:time_to_first_token_seconds", is_streaming="true")
    b = raw_histogram(text, "sglang:time_to_first_token_seconds", is_streaming="false")
    assert list(ttft.buckets) == [(x, ca + cb) for (x, ca), (_, cb) in zip(a[0], b[0])]
    assert (ttft.sum, ttft.count) == (a[1] + b[1], a[2] + b[2])
    assert histogram(r, "llm_scheduler_queue_seconds", rank="1").count == 50
    # SGLang has no draft/accepted token counters and no prefill/decode histograms
    absent = {
        "llm_spec_decode_draft_tokens_total",
        "llm_spec_decode_accepted_tokens_total",
        "llm_request_prefill_seconds",
        "llm_request_decode_seconds",
    }
    assert not names(r) & absent


def test_sglang_tensor_parallel_replicas_are_not_double_counted() -> None:
    text = "".join(f'sglang:num_running_reqs{{dp_rank="0",model_name="m",pp_rank="0",tp_rank="{tp}"}} 5\n' for tp in range(4))
    r = normalize_exposition(text, "srv")
    assert value(r, "llm_scheduler_requests_running", rank="0") == 5


def test_sglang_underscore_prefix_0510() -> None:
    r = normalize("sglang-0.5.10-underscore.prom")
    assert (r.family, r.generation) == ("sglang", "underscore-0.5.9-0.5.10")
    assert value(r, "llm_kv_cache_block_size_tokens") == 1  # sglang_cache_config_info{page_size}
    assert value(r, "llm_kv_cache_usage_ratio", rank="0") == 0.8125
    assert value(r, "llm_scheduler_requests_running", rank="0") == 7
    assert value(r, "llm_prefix_cache_hit_tokens_total", rank="0") == 4096
    assert histogram(r, "llm_request_ttft_seconds").count == 40
    assert not find(r, "llm_kv_cache_preemptions_total")  # only the old gauge: absent


def test_sglang_docs_real_capture_old_names() -> None:
    r = normalize("real-sglang-docs-production_metrics-example.prom")
    assert r.generation == "colon-0.3-0.4"
    assert value(r, "llm_kv_cache_usage_ratio") == 0.28
    assert value(r, "llm_scheduler_requests_waiting") == 2826
    itl = histogram(r, "llm_request_inter_token_seconds")  # old per-token time_per_output_token
    assert itl.count == 7400757
    assert histogram(r, "llm_request_ttft_seconds").count == 11008
    assert not find(r, "llm_prefix_cache_hit_tokens_total")  # only the windowed cache_hit_rate


# --------------------------------------------------------------------------- TGI


def test_tgi_real_capture() -> None:
    r = normalize("real-tgi-datadog-fixture-payload-prefix.prom")
    assert (r.family, r.generation) == ("tgi", "v3")
    text = fixture("real-tgi-datadog-fixture-payload-prefix.prom")
    for neutral, raw in (
        ("llm_request_e2e_seconds", "tgi_request_duration"),
        ("llm_scheduler_queue_seconds", "tgi_request_queue_duration"),
    ):
        h = histogram(r, neutral)
        buckets, total, count = raw_histogram(text, raw)
        assert list(h.buckets) == buckets and (h.sum, h.count) == (total, count) and count == 109
    assert value(r, "llm_prompt_tokens_total") == 662  # tgi_request_input_length_sum
    assert value(r, "llm_requests_finished_total", reason="success") == 109
    assert value(r, "llm_requests_rejected_total", reason="validation") == 2
    assert value(r, "llm_spec_decode_drafts_total") == 3423  # summary _count
    assert value(r, "llm_spec_decode_accepted_tokens_total") == 0
    absent = {
        "llm_kv_cache_usage_ratio",
        "llm_request_ttft_seconds",
        "llm_prefix_cache_hit_tokens_total",
        "llm_kv_cache_preemptions_total",
        "llm_request_inter_token_seconds",
    }
    assert not names(r) & absent
    assert all("model" not in p.labels for p in r.points)


# --------------------------------------------------------------------------- TensorRT-LLM


def test_triton_trtllm_backend_current_units_and_selectors() -> None:
    r = normalize("trtllm-triton-current-ensemble.prom")
    assert (r.family, r.generation) == ("trtllm", "triton")
    ttft = histogram(r, "llm_request_ttft_seconds", model="tensorrt_llm")
    assert [b for b, _ in ttft.buckets] == [0.1, 0.5, 2.0, 5.0, math.inf]  # ms bounds / 1000
    assert [c for _, c in ttft.buckets] == [60, 360, 490, 500, 500]
    assert ttft.sum == pytest.approx(187.5) and ttft.count == 500
    assert value(r, "llm_kv_cache_usage_ratio") == 0.625  # kv_cache_block_type="fraction"
    assert value(r, "llm_kv_cache_block_size_tokens") == 32
    assert value(r, "llm_kv_cache_capacity_tokens") == 32 * 4000  # tokens_per x max
    assert value(r, "llm_scheduler_requests_running") == 16  # request_type="scheduled"
    assert value(r, "llm_scheduler_requests_waiting") == 4
    assert value(r, "llm_prompt_tokens_total") == 212000
    assert value(r, "llm_requests_finished_total", model="tensorrt_llm", reason="abort") == 1  # CANCELED
    assert value(r, "llm_requests_finished_total", model="tensorrt_llm", reason="error") == 0  # BACKEND + OTHER
    assert value(r, "llm_requests_rejected_total", model="tensorrt_llm") == 0
    assert value(r, "llm_requests_finished_total", model="ensemble", reason="success") == 500
    # Triton's latency counters (µs sums) are not histograms: no queue / e2e histograms
    assert not names(r) & {"llm_scheduler_queue_seconds", "llm_request_e2e_seconds", "llm_kv_cache_preemptions_total"}


def test_triton_real_readme_samples() -> None:
    r = normalize("real-trtllm-triton-backend-readme-ifb.prom")
    assert value(r, "llm_kv_cache_usage_ratio", model="tensorrt_llm") == 0.4875
    assert value(r, "llm_kv_cache_capacity_tokens") == 64 * 6239
    assert value(r, "llm_scheduler_requests_running") == 1
    old = normalize("real-triton-core-trtllm-backend-readme-pre2312.prom")
    assert value(old, "llm_scheduler_requests_waiting") == 0  # nv_inference_pending_request_count
    assert value(old, "llm_requests_finished_total", reason="error") == 0  # failure without reasons


def test_triton_docs_histogram_without_bucket_suffix_is_a_problem_not_garbage() -> None:
    r = normalize("real-triton-core-docs-first-response-histogram.prom")
    assert not find(r, "llm_request_ttft_seconds")
    assert r.problems and "no _bucket" in r.problems[0]


def test_trtllm_serve() -> None:
    r = normalize("trtllm-serve.prom")
    assert (r.family, r.generation) == ("trtllm", "serve")
    assert all("model" not in p.labels for p in r.points)  # model_name="undefined" is unknown
    assert value(r, "llm_kv_cache_usage_ratio") == 0.71875
    assert value(r, "llm_kv_cache_capacity_tokens") == 32 * 8192
    assert value(r, "llm_prefix_cache_hit_tokens_total") == 96000
    assert value(r, "llm_prefix_cache_queried_tokens_total") == 256000
    assert value(r, "llm_requests_finished_total", reason="length") == 20
    assert value(r, "llm_spec_decode_accepted_tokens_total") == 21000
    text = fixture("trtllm-serve.prom")
    h = histogram(r, "llm_request_prefill_seconds")
    assert (list(h.buckets), h.sum, h.count) == tuple(raw_histogram(text, "trtllm_request_prefill_time_seconds"))
    assert not names(r) & {"llm_request_inter_token_seconds", "llm_spec_decode_drafts_total"}


# --------------------------------------------------------------------------- llama.cpp


def test_llamacpp_new_prompt_tokens_include_cached() -> None:
    r = normalize("llamacpp-new.prom")
    assert (r.family, r.generation) == ("llamacpp", "new")
    assert value(r, "llm_prompt_tokens_total") == 7168 + 3072
    assert value(r, "llm_prefix_cache_queried_tokens_total") == 7168 + 3072
    assert value(r, "llm_prefix_cache_hit_tokens_total") == 3072
    assert value(r, "llm_spec_decode_drafts_total") == 1500
    assert value(r, "llm_scheduler_requests_running") == 2
    assert not find(r, "llm_kv_cache_usage_ratio")  # removed upstream: absent, never 0


def test_llamacpp_old_has_kv_usage_but_no_comparable_prompt_counter() -> None:
    r = normalize("llamacpp-old.prom")
    assert r.generation == "old"
    assert value(r, "llm_kv_cache_usage_ratio") == 0.6875
    assert value(r, "llm_scheduler_requests_waiting") == 3
    assert value(r, "llm_generation_tokens_total") == 8000
    assert not find(r, "llm_prompt_tokens_total")  # excludes cached tokens and nothing to add
