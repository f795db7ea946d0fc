"""Issue 23's setting causes: their lines are ``diagnosis:`` thresholds, every operator and memory
finding names the attention backend, and long prompts on a backend the engine documents as slower
get a notice (exporter/diagnosis/backends.py).

Inputs are built from schema names, as in test_decision_table.py (whose builders are reused).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import pytest

from exporter.diagnosis import backends
from exporter.diagnosis import signals as s
from exporter.diagnosis.engine import Verdict
from exporter.diagnosis.rules import RULES
from exporter.diagnosis.thresholds import Thresholds
from exporter.samples import Point
from tests.diagnosis.diag_points import engine, gpu, primary, run
from tests.diagnosis.test_decision_table import BUSY, config, latency, lengths, setting


def _long_prompts(i: int, backend: str, family_prompt: float = 12000, budget: float = 16384) -> list[Point]:
    """A busy vLLM serving ~12k-token prompts under a step budget that fits them, on ``backend``."""
    return (
        gpu(**BUSY)
        + engine(waiting=0, running=4, kv=0.4)
        + [config(attention_backend=backend), setting("max_num_batched_tokens", budget)]
        + lengths(i, prompt=family_prompt, output=200)
        + latency(i, ttft=0.3, itl=0.03)
    )


def _verdict(build: object, thresholds: Thresholds | None = None, cycles: int = 8) -> Verdict:
    assert callable(build)
    return run([build(i) for i in range(cycles)], thresholds=thresholds)[-1]


def _backend_notices(v: Verdict) -> list[str]:
    return [n for n in v.notices if "long-context requests" in n]


def test_long_prompts_on_a_documented_slower_backend_get_a_notice_citing_the_engine_docs() -> None:
    v = _verdict(lambda i: _long_prompts(i, "FLEX_ATTENTION"))
    found = _backend_notices(v)
    assert len(found) == 1, v.notices
    assert "FLEX_ATTENTION" in found[0] and "https://docs.vllm.ai/" in found[0] and "FLASH_ATTN" in found[0], found


@pytest.mark.parametrize(
    ("backend", "prompt", "thresholds"),
    [
        ("FLASH_ATTN", 12000, None),  # not on the table
        ("FLEX_ATTENTION", 600, None),  # short prompts
        ("FLEX_ATTENTION", 12000, Thresholds(long_context_prompt_p90_tokens=20000)),  # the line moved
    ],
    ids=["fast-backend", "short-prompts", "threshold-raised"],
)
def test_no_backend_notice_without_both_long_prompts_and_a_listed_backend(
    backend: str, prompt: float, thresholds: Thresholds | None
) -> None:
    v = _verdict(lambda i: _long_prompts(i, backend, family_prompt=prompt), thresholds)
    assert _backend_notices(v) == [], v.notices


def test_the_table_cites_an_engine_doc_for_every_row_and_looks_up_case_insensitively() -> None:
    for row in backends.SLOW_FOR_LONG_CONTEXT:
        assert row.source.startswith("https://"), row
    assert backends.slow_backend("vllm", "flex_attention") is not None
    assert backends.slow_backend("llamacpp", "default") is not None  # llama.cpp -fa off
    assert backends.slow_backend("vllm", "FLASHINFER") is None


def test_the_prefill_chunk_line_is_a_threshold() -> None:
    """12k-token prompts over a 512-token budget are 24 chunks: a count of chunks at the default
    line (4), not at a line of 30."""

    def build(i: int) -> list[Point]:
        return (
            gpu(**BUSY)
            + engine(waiting=0, running=4, kv=0.4)
            + [setting("max_num_batched_tokens", 512)]
            + lengths(i, prompt=12000, output=200)
            + latency(i, ttft=3.0, itl=0.03)
        )

    assert primary(_verdict(build)) == "prefill_chunk_too_small"
    moved = Thresholds.from_mapping({"prefill_chunks_min": 30})
    assert "prefill_chunk_too_small" not in _verdict(build, moved).holding


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"prefill_chunks_min": 0.5}, "diagnosis.prefill_chunks_min: expected a factor >= 1"),
        ({"reserved-over-p99-min": "x"}, "diagnosis.reserved_over_p99_min: expected a number"),
        ({"graphs_sm_active_max": 1.5}, "diagnosis.graphs_sm_active_max: expected a ratio"),
        ({"long_context_prompt_p90_tokens": 0}, "diagnosis.long_context_prompt_p90_tokens: expected a positive"),
    ],
)
def test_the_new_thresholds_refuse_bad_values_naming_the_key(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.", 1)):
        Thresholds.from_mapping(raw)


class _Everything(Mapping[str, float]):
    """A view where every signal reads 1 and the attention backend is XYZ_ATTN: enough for any describe."""

    def __init__(self) -> None:
        self._backend = s.ATTENTION_BACKEND_PREFIX + 'XYZ_ATTN"}'

    def __getitem__(self, key: str) -> float:
        return 1.0

    def __contains__(self, key: object) -> bool:
        return True

    def __iter__(self) -> Iterator[str]:
        return iter([self._backend])

    def __len__(self) -> int:
        return 1


def test_every_operator_and_memory_finding_names_the_attention_backend() -> None:
    rows = [r for r in RULES if r.layer in ("operator", "memory")]
    assert len(rows) >= 6
    for r in rows:
        assert r.describe is not None
        assert r.describe(_Everything(), Thresholds()).endswith("(attention backend XYZ_ATTN)"), r.cause
    others = [r.describe for r in RULES if r.layer not in ("operator", "memory") and r.describe is not None]
    assert not any("attention backend" in describe(_Everything(), Thresholds()) for describe in others)


def test_a_prompt_p90_past_the_last_finite_bucket_reads_above_it() -> None:
    """12k-token prompts in a histogram whose last finite bound is 5,000: the p90 is "above 5000", a
    floor, never "5000" (issue 32: the prompts' p90 was reported as the top bound)."""
    from tests.diagnosis.diag_points import histogram

    def build(top: float) -> Callable[[int], list[Point]]:
        bounds = (256.0, 1024.0, top, float("inf"))

        def one(i: int) -> list[Point]:
            return (
                gpu(**BUSY)
                + engine(waiting=0, running=4, kv=0.4)
                + [setting("max_num_batched_tokens", 512)]
                + [histogram("llm_request_prompt_tokens", [12000.0] * (30 * i), bounds)]
                + [histogram("llm_request_generation_tokens", [200.0] * (30 * i), bounds)]
                + latency(i, ttft=3.0, itl=0.03)
            )

        return one

    v = _verdict(build(5000.0))
    assert v.primary is not None and v.primary.cause == "prefill_chunk_too_small"
    assert "prompt p90 above 5000 tokens over a 512-token step budget: at least 10 prefill steps" in v.primary.summary
    within = _verdict(build(16384.0))  # a finite bound past 12k: the p90 is interpolated, a figure, not a floor
    assert within.primary is not None and "prompt p90 above" not in within.primary.summary
    assert "at least" not in within.primary.summary
