"""Family / generation detection, the configured-type override, and coverage()."""

from __future__ import annotations

import pytest

from exporter.engines import FAMILIES, ParseError, coverage, normalize_exposition
from exporter.engines.mappings import MAPPINGS
from exporter.engines.normalize import wanted_names
from exporter.samples import Sample
from exporter.schema import SPECS
from tests.engines.engine_helpers import fixture

DETECTED = [
    ("real-vllm-v0-aibrix-runtime-docs-truncated.prom", "vllm", "v0"),
    ("vllm-0.8-v1-legacy-2dp.prom", "vllm", "v1-legacy"),
    ("vllm-0.10-both-names-2dp.prom", "vllm", "v1-legacy"),
    ("vllm-0.33-v1-2dp.prom", "vllm", "v1"),
    ("real-sglang-docs-production_metrics-example.prom", "sglang", "colon-0.3-0.4"),
    ("sglang-0.5.10-underscore.prom", "sglang", "underscore-0.5.9-0.5.10"),
    ("sglang-0.5.23-colon-2dp.prom", "sglang", "colon-0.5.11+"),
    ("real-tgi-datadog-fixture-payload-prefix.prom", "tgi", "v3"),
    ("real-trtllm-triton-backend-readme-ifb.prom", "trtllm", "triton"),
    ("real-triton-core-trtllm-backend-readme-pre2312.prom", "trtllm", "triton"),
    ("trtllm-serve.prom", "trtllm", "serve"),
    ("llamacpp-old.prom", "llamacpp", "old"),
    ("llamacpp-new.prom", "llamacpp", "new"),
]


@pytest.mark.parametrize(("name", "family", "generation"), DETECTED)
def test_detects_family_and_generation(name: str, family: str, generation: str) -> None:
    result = normalize_exposition(fixture(name), "srv")
    assert (result.family, result.generation) == (family, generation)
    (info,) = [p for p in result.points if p.name == "llm_engine_info"][:1]
    assert info.labels["generation"] == generation and info.labels["engine"] == family


def test_llm_d_simulator_style_vllm_without_engine_label_is_v1() -> None:
    text = 'vllm:kv_cache_usage_perc{model_name="m"} 0.5\nvllm:num_requests_running{model_name="m"} 1\n'
    assert normalize_exposition(text, "srv").generation == "v1"


def test_configured_type_overrides_detection() -> None:
    # a gateway re-exporting both: auto picks the family with more names, the type decides
    text = fixture("llamacpp-new.prom") + 'vllm:num_requests_running{engine="0",model_name="m"} 4\n'
    assert normalize_exposition(text, "srv").family == "llamacpp"
    forced = normalize_exposition(text, "srv", "vllm")
    assert forced.family == "vllm"
    assert [p.value for p in forced.points if p.name == "llm_scheduler_requests_running" and isinstance(p, Sample)] == [4]


def test_configured_type_with_none_of_its_names_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="configured type sglang"):
        normalize_exposition(fixture("llamacpp-new.prom"), "srv", "sglang")


def test_unknown_exposition_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="no metric of a known engine"):
        normalize_exposition("process_cpu_seconds_total 1.5\n", "srv")
    with pytest.raises(ValueError, match="unknown engine type"):
        normalize_exposition("", "srv", "ollama")


def test_coverage_lists_only_schema_names_and_what_each_family_lacks() -> None:
    cov = coverage()
    assert set(cov) == set(FAMILIES) == {"vllm", "sglang", "tgi", "trtllm", "llamacpp"}
    for provided in cov.values():
        assert provided <= set(SPECS)
        assert "llm_engine_info" in provided
    assert "llm_kv_cache_usage_ratio" not in cov["tgi"]
    assert "llm_request_ttft_seconds" not in cov["llamacpp"]
    assert "llm_spec_decode_drafts_total" in cov["vllm"]


def test_every_table_row_names_a_schema_metric_of_an_engine_layer() -> None:
    for mapping in MAPPINGS.values():
        for row in mapping.rows:
            spec = SPECS[row.neutral]
            assert spec.origin == "engine", row.neutral
            assert row.combine in ("sum", "max")
        assert wanted_names(mapping)
