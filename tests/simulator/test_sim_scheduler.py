"""Continuous batching driven step by step: budget, chunked prefill, preemption, prefix hits, admission rules."""

from __future__ import annotations

import pytest

from exporter.simulator.requests import SimRequest, TokenEvent
from exporter.simulator.scheduler import Plan, QueueFull, Scheduler
from exporter.simulator.settings import SimConfig
from exporter.simulator.stats import EngineStats


def make(cfg: SimConfig) -> Scheduler:
    return Scheduler(cfg, EngineStats())


def req(n: int, max_tokens: int = 4, tag: str = "r", prefix: list[int] | None = None, arrival: float = 0.0) -> SimRequest:
    ids = list(prefix or []) + [hash((tag, i)) & 0xFFFFFFFF for i in range(n - len(prefix or []))]
    return SimRequest(id=tag, prompt_ids=ids, max_tokens=max_tokens, streaming=True, sink=lambda e: None, arrival=arrival)


def step(s: Scheduler, t: float) -> tuple[list[tuple[SimRequest, TokenEvent]], Plan]:
    plan = s.schedule(t)
    return s.apply(plan, t + 0.01), plan


def run_until_idle(s: Scheduler, limit: int = 2000) -> int:
    t = 0.0
    for i in range(limit):
        plan = s.schedule(t)
        if plan.empty:
            return i
        s.apply(plan, t + 0.01)
        t += 0.01
    raise AssertionError("scheduler did not drain")


def test_chunked_prefill_respects_the_token_budget() -> None:
    s = make(SimConfig(max_num_batched_tokens=2048))
    r = req(5000, max_tokens=2)
    s.submit(r)
    sizes = []
    for i in range(3):
        events, plan = step(s, i)
        sizes.append(plan.work(0).prefill_tokens)
        assert (len(events) == 1) == (i == 2)  # first token only once the whole prompt is computed
    assert sizes == [2048, 2048, 904]
    assert r.first_token is not None and len(r.output_ids) == 1


def test_running_batch_is_capped_at_max_num_seqs() -> None:
    s = make(SimConfig(max_num_seqs=3))
    for i in range(5):
        s.submit(req(10, tag=f"r{i}"))
    step(s, 0.0)
    assert len(s.running) == 3 and len(s.waiting) == 2
    assert run_until_idle(s) > 0
    assert s.stats.freeze().counter("finished", reason="length") == 5


def test_out_of_blocks_preempts_the_newest_and_recomputes() -> None:
    cfg = SimConfig(num_gpu_blocks=12, block_size=16, kv_watermark=0.0, enable_prefix_caching=False)
    s = make(cfg)
    first, second = req(60, max_tokens=80, tag="a"), req(60, max_tokens=80, tag="b")
    s.submit(first)
    s.submit(second)
    preempted_seen = False
    t = 0.0
    for _ in range(400):
        plan = s.schedule(t)
        if plan.empty:
            break
        if plan.preempted:
            preempted_seen = True
            assert second in s.waiting and second.num_computed == 0 and not second.blocks
        s.apply(plan, t + 0.01)
        t += 0.01
    st = s.stats.freeze()
    assert preempted_seen and st.counter("preemptions") >= 1
    assert st.counter("retracted_input_tokens") >= 60
    assert first.finish_reason == "length" and second.finish_reason == "length"
    assert len(second.output_ids) == 80 and second.preemptions >= 1
    assert s.pool.used == 0


def test_swap_mode_moves_kv_over_pcie_instead_of_recomputing() -> None:
    cfg = SimConfig(
        num_gpu_blocks=12, block_size=16, kv_watermark=0.0, enable_prefix_caching=False, preemption_mode="swap", num_cpu_blocks=64
    )
    s = make(cfg)
    a, b = req(60, max_tokens=80, tag="a"), req(60, max_tokens=80, tag="b")
    s.submit(a)
    s.submit(b)
    d2h = h2d = 0.0
    t = 0.0
    for _ in range(400):
        plan = s.schedule(t)
        if plan.empty:
            break
        d2h += plan.d2h_bytes
        h2d += plan.h2d_bytes
        if plan.preempted:
            assert b.swapped_blocks > 0 and b.num_computed > 0  # kept: no recompute
        s.apply(plan, t + 0.01)
        t += 0.01
    st = s.stats.freeze()
    assert st.counter("swap_out_blocks") >= 1 and st.counter("swap_in_blocks") == st.counter("swap_out_blocks")
    assert d2h > 0 and h2d == d2h
    assert st.counter("retracted_input_tokens") == 0
    assert a.finish_reason == b.finish_reason == "length"


def test_shared_prefix_hits_the_prefix_cache() -> None:
    s = make(SimConfig(block_size=16))
    shared = [hash(("p", i)) & 0xFFFFFFFF for i in range(64)]
    s.submit(req(100, max_tokens=2, tag="x", prefix=shared))
    run_until_idle(s)
    second = req(100, max_tokens=2, tag="y", prefix=shared)
    s.submit(second)
    _, plan = step(s, 1.0)
    assert plan.work(0).prefill_tokens == 100 - 64
    st = s.stats.freeze()
    assert st.counter("prefix_hits") == 64 and st.counter("prefix_queries") == 200
    assert st.counter("prefix_hits_blocks") == 4
    run_until_idle(s)
    assert s.stats.freeze().counter("prompt_tokens_cached") == 64


def test_reserving_prompt_plus_max_tokens_makes_requests_wait_with_the_cache_mostly_empty() -> None:
    cfg = SimConfig(num_gpu_blocks=100, block_size=16, kv_reserve_full=True, kv_watermark=0.0)
    s = make(cfg)
    for i in range(6):
        s.submit(req(32, max_tokens=768, tag=f"r{i}"))  # each reserves (32 + 768) / 16 = 50 blocks
    step(s, 0.0)
    assert len(s.running) == 2 and len(s.waiting) == 4
    assert s.pool.usage() < 0.1
    assert s.stats.freeze().counter("preemptions") == 0


def test_batching_window_holds_new_requests_then_releases_them() -> None:
    s = make(SimConfig(batch_wait_s=0.5, max_num_seqs=8))
    s.submit(req(10, tag="a", arrival=0.0))
    plan = s.schedule(0.1)
    assert plan.empty and s.waiting_deferred() == 1
    assert s.hold_remaining(0.1) == pytest.approx(0.4)
    plan = s.schedule(0.6)
    assert not plan.empty and s.waiting_deferred() == 0


def test_batching_window_releases_early_once_enough_requests_wait() -> None:
    s = make(SimConfig(batch_wait_s=10.0, batch_min_requests=3))
    for i in range(3):
        s.submit(req(10, tag=f"r{i}"))
    assert len(s.schedule(0.0).items) == 3


@pytest.mark.parametrize("p, per_step", [(1.0, 4), (0.0, 1)])
def test_speculative_decoding_acceptance(p: float, per_step: int) -> None:
    s = make(SimConfig(spec_tokens=3, spec_acceptance=p))
    r = req(10, max_tokens=41)
    s.submit(r)
    step(s, 0.0)  # prefill -> first token
    events, plan = step(s, 1.0)
    assert plan.items[0].draft_tokens == 3
    assert events[0][1].tokens == per_step
    run_until_idle(s)
    st = s.stats.freeze()
    assert len(r.output_ids) == 41
    assert st.counter("spec_draft_tokens") == 3 * st.counter("spec_drafts")
    per_pos = [st.counter("spec_accepted_per_pos", position=str(i)) for i in range(3)]
    assert sum(per_pos) == st.counter("spec_accepted_tokens")
    if p == 1.0:
        assert per_pos[0] == per_pos[2] > 0
    else:
        assert st.counter("spec_accepted_tokens") == 0


def test_abort_frees_blocks_and_counts_abort() -> None:
    s = make(SimConfig())
    r = req(40, max_tokens=100)
    s.submit(r)
    step(s, 0.0)
    assert s.pool.used > 0
    s.abort(r)
    s.reap_aborted(1.0)
    assert s.pool.used == 0 and not s.running and r.finish_reason == "abort"
    assert s.stats.freeze().counter("finished", reason="abort") == 1


def test_queue_limit_rejects_instead_of_growing() -> None:
    s = make(SimConfig(max_queue_len=3))
    for i in range(3):
        s.submit(req(10, tag=f"r{i}"))
    with pytest.raises(QueueFull):
        s.submit(req(10, tag="extra"))
    assert len(s.waiting) == 3
    assert s.stats.freeze().counter("rejected", reason="queue_full") == 1


def test_shrinking_the_pool_live_preempts_until_it_fits() -> None:
    s = make(SimConfig(num_gpu_blocks=64, enable_prefix_caching=False))
    reqs = [req(200, max_tokens=50, tag=f"r{i}") for i in range(4)]
    for r in reqs:
        s.submit(r)
    step(s, 0.0)
    assert s.pool.used > 40
    s.reconfigure(SimConfig(num_gpu_blocks=16, enable_prefix_caching=False), 1.0)
    assert s.pool.used <= 16 and s.stats.freeze().counter("preemptions") >= 1
    run_until_idle(s, limit=5000)
    assert [r.finish_reason for r in reqs] == ["length"] * 4 and s.pool.used == 0
