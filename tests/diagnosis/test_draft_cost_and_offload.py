"""What the draft costs against what it saves (``low_acceptance``), and the KV offload traffic the
PCIe and KV-cache causes name (issue 36): the arithmetic on its own, then through the engine."""

from __future__ import annotations

from dataclasses import replace

import pytest

from exporter.diagnosis import draft_cost as dc
from exporter.diagnosis import kv_tiers as kt
from exporter.diagnosis import signals as s
from exporter.diagnosis.engine import Verdict
from exporter.diagnosis.thresholds import Thresholds
from exporter.samples import Point, Sample
from tests.diagnosis.diag_points import ENG, causes, engine, gpu, healthy_gpu, run, steady

T = Thresholds()


def _finding(v: Verdict, cause: str) -> str:
    (found,) = [c for c in v.bottlenecks if c.cause == cause]
    return found.summary


# ---------------------------------------------------------------- the arithmetic


def test_the_acceptance_signal_is_the_one_signals_computes() -> None:
    assert dc.ACCEPTANCE == s.SPEC_ACCEPTANCE


def test_a_cheap_draft_pays_even_with_low_acceptance() -> None:
    # 3 draft tokens a step, 30 % accepted: 1.9 tokens per target step against 1 + 3 x 0.1 = 1.3
    v = {dc.ACCEPTANCE: 0.3, dc.DRAFT_TOKENS_PER_STEP: 3.0, dc.TOKENS_PER_STEP: 1.9}
    cost = dc.draft_cost(v, 0.1)
    assert cost is not None
    assert cost.cost == pytest.approx(0.3)
    assert (cost.cost_from, cost.draft_tokens_from) == ("assumed", "measured")
    assert cost.pays and cost.speedup == pytest.approx(1.9 / 1.3)
    text = dc.describe(cost)
    assert text == (
        "30 % of draft tokens accepted: 1.90 tokens per target step (1 + 0.90 accepted of 3 drafted) against "
        "1 + 0.30 = 1.30 target steps of work (3 draft tokens × 0.1 of a target step each, assumed): "
        "the draft still pays (×1.46)"
    )


def test_an_expensive_draft_costs_more_than_it_saves() -> None:
    # 4 draft tokens at 0.25 of a target step each: 1 + 1.0 = 2.0 target steps; 20 % accepted: 1.8 tokens
    v = {dc.ACCEPTANCE: 0.2, dc.DRAFT_TOKENS_PER_STEP: 4.0, dc.TOKENS_PER_STEP: 1.8}
    cost = dc.draft_cost(v, 0.25)
    assert cost is not None and not cost.pays
    assert dc.describe(cost).endswith(
        "2.00 target steps of work (4 draft tokens × 0.25 of a target step each, assumed): "
        "the draft costs more than it saves (×0.90, below 1 + cost)"
    )


def test_the_break_even_does_not_pay() -> None:
    cost = dc.draft_cost({dc.ACCEPTANCE: 0.1, dc.DRAFT_TOKENS_PER_STEP: 5.0, dc.TOKENS_PER_STEP: 1.5}, 0.1)
    assert cost is not None and cost.tokens_per_step == 1.0 + cost.cost and not cost.pays


def test_without_a_drafts_counter_the_setting_gives_the_draft_tokens() -> None:
    # trtllm-serve / SGLang-like: no verification-step counter; the launch setting says 4 per step
    cost = dc.draft_cost({dc.ACCEPTANCE: 0.5, dc.SPEC_TOKENS_SETTING: 4.0}, 0.1)
    assert cost is not None
    assert (cost.draft_tokens, cost.draft_tokens_from, cost.tokens_per_step) == (4.0, "setting", 3.0)
    assert "(1 + 2.00 accepted of 4 drafted as launched)" in dc.describe(cost)


def test_a_measured_draft_time_replaces_the_assumption() -> None:
    # drafting takes 40 % of each step: the draft costs 0.4 / 0.6 = 0.67 target steps
    v = {dc.ACCEPTANCE: 0.15, dc.SPEC_TOKENS_SETTING: 4.0, dc.DRAFT_TIME: 0.4}
    cost = dc.draft_cost(v, 0.1)
    assert cost is not None and cost.cost_from == "measured"
    assert cost.cost == pytest.approx(0.4 / 0.6) and cost.token_cost == pytest.approx(0.4 / 0.6 / 4)
    assert not cost.pays  # 1.6 tokens per step against 1.67
    assert "drafting takes 40 % of each step, measured" in dc.describe(cost)


def test_nothing_to_say_without_draft_tokens_per_step() -> None:
    assert dc.draft_cost({dc.ACCEPTANCE: 0.3}, 0.1) is None
    assert dc.draft_cost({dc.DRAFT_TOKENS_PER_STEP: 3.0}, 0.1) is None


# ---------------------------------------------------------------- low_acceptance through the engine


def _spec(drafts: float, per_step: float, acceptance: float, setting: float | None = None) -> list[Point]:
    """Engine points after ``drafts`` verification steps of ``per_step`` draft tokens each."""
    points = engine(drafted=drafts * per_step, accepted=drafts * per_step * acceptance)
    points.append(Sample("llm_spec_decode_drafts_total", ENG, drafts))
    if setting is not None:
        points.append(Sample("llm_engine_setting", {**ENG, "setting": "num_speculative_tokens"}, setting))
    return points


def test_low_acceptance_names_tokens_per_step_against_the_cost() -> None:
    verdict = run([healthy_gpu() + _spec(d, 3, 0.3) for d in (0, 100, 200)])[-1]
    assert "low_acceptance" in causes(verdict)
    summary = _finding(verdict, "low_acceptance")
    assert summary.startswith("30 % of draft tokens accepted: 1.90 tokens per target step (1 + 0.90 accepted of 3 drafted)")
    assert summary.endswith("the draft still pays (×1.46)")


def test_a_draft_that_does_not_pay_is_reported_even_above_the_acceptance_line() -> None:
    # 60 % accepted (above spec_acceptance_min) but each draft token costs 0.7 of a target step
    costly = replace(T, spec_draft_token_cost=0.7)
    points = [healthy_gpu() + _spec(d, 4, 0.6) for d in (0, 100, 200)]
    assert "low_acceptance" not in causes(run(points)[-1])  # with the default cost it pays
    verdict = run(points, thresholds=costly)[-1]
    assert "low_acceptance" in causes(verdict)
    assert "the draft costs more than it saves" in _finding(verdict, "low_acceptance")


def test_without_steps_or_setting_acceptance_alone_is_said() -> None:
    verdict = run([healthy_gpu() + engine(drafted=d, accepted=d * 0.2) for d in (0, 500, 1000)])[-1]
    assert _finding(verdict, "low_acceptance") == "20 % of draft tokens accepted"


# ---------------------------------------------------------------- KV offload traffic


def test_the_offload_clause_prefers_bytes_then_tokens() -> None:
    assert kt.offload_clause({}) == ""
    both = {kt.OFFLOAD_BYTES_RATE: 0.8e9, kt.LOAD_BYTES_RATE: 0.4e9}
    assert (
        kt.offload_clause(both)
        == "1.2 GB/s of KV moved between the GPU and host memory (0.8 GB/s offloaded, 0.4 GB/s loaded back)"
    )
    assert kt.offload_clause({kt.OFFLOAD_BYTES_RATE: 5e7}) == "50.0 MB/s of KV was offloaded to host memory"
    tokens = {kt.TIER_HIT_RATES["host"]: 3000.0, kt.TIER_HIT_RATES["storage"]: 500.0, kt.TIER_HIT_RATES["peer"]: 0.0}
    assert kt.offload_clause(tokens) == "the KV of 3500 prompt tokens/s came back from host memory and storage"


def _offload(offloaded: float, loaded: float) -> list[Point]:
    return [
        Sample("llm_kv_cache_tier_transfer_bytes_total", {**ENG, "direction": "offload"}, offloaded),
        Sample("llm_kv_cache_tier_transfer_bytes_total", {**ENG, "direction": "load"}, loaded),
    ]


def test_pcie_transfer_bound_names_the_kv_offload_that_fills_the_link() -> None:
    bus = gpu(util=0.99, sm=0.0, tensor=0.0, dram=0.01, pcie=20e9)
    verdict = run([bus + _offload(i * 8e9, i * 4e9) for i in range(3)])[-1]
    assert causes(verdict) == {"pcie_transfer_bound"}
    summary = _finding(verdict, "pcie_transfer_bound")
    assert summary == (
        'PCIe 20.0 GB/s while "GPU util" 99 % but SMs 0 %; meanwhile 12.0 GB/s of KV moved between the GPU and host '
        "memory (8.0 GB/s offloaded, 4.0 GB/s loaded back) on GPU 0"
    )
    plain = run(steady(bus))[-1]
    assert _finding(plain, "pcie_transfer_bound") == 'PCIe 20.0 GB/s while "GPU util" 99 % but SMs 0 % on GPU 0'


def test_kv_cache_pressure_names_the_kv_loaded_back_from_host_memory() -> None:
    cycles = []
    for i in range(4):
        points = healthy_gpu() + engine(kv=1.0, waiting=4, preemptions=3.0 * i)
        points.append(Sample("llm_kv_cache_tier_hit_tokens_total", {**ENG, "tier": "host"}, 2000.0 * i))
        points.append(Sample("llm_kv_cache_tier_hit_tokens_total", {**ENG, "tier": "gpu"}, 9000.0 * i))
        cycles.append(points)
    verdict = run(cycles)[-1]
    assert "kv_cache_pressure" in causes(verdict)
    summary = _finding(verdict, "kv_cache_pressure")
    assert summary.startswith("KV cache 100 % full, 3 preemptions/s")
    assert summary.endswith("while the KV of 2000 prompt tokens/s came back from host memory")
