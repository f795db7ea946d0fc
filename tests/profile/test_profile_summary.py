"""The profile's split in one sentence: the largest kind with the prompt p50 the engine saw while
it ran (exporter/profile/summary.py), as the report and the live page print it."""

from __future__ import annotations

import math

import pytest

from exporter.profile.summary import prompt_p50, sentence, tokens_text
from exporter.report.operator import split_sentences
from exporter.samples import HistogramSample
from exporter.store import Snapshot

BOUNDS = (1024.0, 4096.0, 16384.0, math.inf)


def _prompts(server: str, counts: tuple[float, ...]) -> HistogramSample:
    """``llm_request_prompt_tokens`` of one engine: cumulative counts per bound of BOUNDS."""
    labels = {"server": server, "engine": "vllm", "model": "m", "rank": ""}
    return HistogramSample("llm_request_prompt_tokens", labels, tuple(zip(BOUNDS, counts)), 0.0, counts[-1])


def _snap(*points: HistogramSample) -> Snapshot:
    return Snapshot(1000.0, list(points), {})


def test_the_p50_is_of_the_requests_finished_during_the_profile() -> None:
    # before: 100 short prompts; during the profile: 40 prompts between 4096 and 16384 tokens
    before = _snap(_prompts("A", (100, 100, 100, 100)), _prompts("B", (0, 0, 5, 5)))
    after = _snap(_prompts("A", (100, 100, 140, 140)), _prompts("B", (0, 0, 9, 9)))
    p50, during = prompt_p50(before, after, "A")
    assert during and p50 == pytest.approx(4096 + 0.5 * (16384 - 4096))  # the short ones before are not counted


def test_without_requests_during_the_profile_the_whole_histogram_is_said_so() -> None:
    snap = _snap(_prompts("A", (10, 30, 40, 40)))
    p50, during = prompt_p50(snap, snap, "A")
    assert not during and p50 == pytest.approx(1024 + (20 - 10) / 20 * 3072)
    assert prompt_p50(snap, snap, "other") == (None, False)  # no histogram of that engine


@pytest.mark.parametrize(("tokens", "text"), [(600, "600"), (8192, "8.2k"), (8000, "8k"), (32768, "33k")])
def test_prompt_lengths_read_as_people_say_them(tokens: float, text: str) -> None:
    assert tokens_text(tokens) == text


def test_the_sentence_names_the_largest_kind_the_prompt_length_and_the_basis() -> None:
    shares = {"attention": 0.62, "gemm": 0.25, "communication": 0.06, "memory_copy": 0.04, "sampling": 0.02, "other": 0.01}
    gpu = {"shares": shares, "basis": "gpu_kernels", "prompt_tokens_p50": 8000, "prompt_tokens_during_profile": True}
    assert sentence(gpu) == "62 % attention at 8k-token prompts (of GPU kernel time)"
    cpu = {"shares": {"gemm": 0.7, "attention": 0.3}, "basis": "cpu_ops", "prompt_tokens_p50": 12.0}
    assert sentence(cpu) == "70 % gemm at 12-token prompts (of CPU operator time)"
    stale = {**gpu, "prompt_tokens_during_profile": False}
    assert "median since the engine started" in (sentence(stale) or "")
    assert sentence({"shares": shares}) == "62 % attention"  # no prompt histogram, no basis: only the split
    assert sentence({"shares": {}}) is None and sentence({"message": "x"}) is None
    assert split_sentences({"A": gpu, "B": {"shares": {}}}) == [("A", "62 % attention at 8k-token prompts (of GPU kernel time)")]
