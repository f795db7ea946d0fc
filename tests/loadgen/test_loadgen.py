"""The load generator against a real (simulated) OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from exporter.loadgen import LoadResult, LoadSpec, percentile, run_load, summarize
from exporter.loadgen.prompts import PromptFactory
from exporter.loadgen.spec import RequestRecord
from tests.simulator.sim_helpers import sim_server
from tests.support.waiting import wait_until


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with sim_server("healthy", "vllm", time_scale=20.0) as srv:
        yield srv.base_url


def spec(url: str, **kw: Any) -> LoadSpec:
    base: dict[str, Any] = {"concurrency": 4, "duration_s": 60.0, "prompt_tokens": ((40, 1.0),), "max_tokens": ((8, 1.0),)}
    base.update(kw)
    return LoadSpec(url, **base)


def test_request_count_bounds_the_run_and_streaming_is_measured() -> None:
    with sim_server("healthy", "vllm", time_scale=1.0) as srv:  # real-time steps: chunks arrive one by one
        result = asyncio.run(run_load(spec(srv.base_url, max_requests=10)))
    s = result.summary
    assert len(result.records) == 10 and s.requests == 10 and s.ok == 10 and s.errors == 0
    assert [r.index for r in result.records] == list(range(10))
    for r in result.records:
        assert r.output_tokens == 8 and r.finish_reason == "length" and r.attempts == 1
        assert r.ttft_s is not None and r.e2e_s is not None and 0 < r.ttft_s <= r.e2e_s
        assert len(r.itl_s) <= 7  # one gap per later chunk; a client that falls behind gets tokens merged
    assert sum(len(r.itl_s) for r in result.records) >= 10
    assert s.output_tokens == 80 and s.prompt_tokens == 400
    assert s.ttft_p95_s is not None and s.ttft_p99_s is not None
    assert s.ttft_p50_s is not None and s.ttft_p50_s <= s.ttft_p95_s <= s.ttft_p99_s
    assert s.requests_per_s > 0 and s.output_tokens_per_s > 0


def test_duration_bounds_the_run_and_cancels_what_is_in_flight(url: str) -> None:
    result = asyncio.run(run_load(spec(url, duration_s=1.0, max_tokens=((4000, 1.0),), concurrency=3)))
    s = result.summary
    assert s.cancelled == 3 and s.errors == 0
    assert 1.0 <= s.duration_s < 15.0


def _aborted(url: str) -> int:
    return int(httpx.get(url + "/sim/state").json()["requests"]["finished"].get("abort", 0))


@pytest.mark.parametrize("rate", [None, 20.0], ids=["closed_loop", "open_loop"])
def test_drain_lets_requests_in_flight_finish_after_the_deadline(url: str, rate: float | None) -> None:
    aborted_before = _aborted(url)
    # ~1 s per request here: the ones started before the deadline are still running at it
    result = asyncio.run(
        run_load(spec(url, duration_s=0.5, drain=True, rate=rate, concurrency=3, max_tokens=((1500, 1.0),), timeout_s=30.0))
    )
    s = result.summary
    assert s.cancelled == 0 and s.errors == 0 and s.ok == s.requests >= 1
    assert all(r.status == "ok" and r.output_tokens == 1500 for r in result.records)
    assert all(r.start_s < 0.5 + 0.2 for r in result.records)  # nothing starts after the deadline
    assert max(r.start_s + (r.total_s or 0.0) for r in result.records) > 0.5  # something ran past it
    assert 0.5 < s.duration_s < 30.0  # the drain tail counts in the run's duration
    assert _aborted(url) == aborted_before  # the server saw no request closed early


def test_drain_is_bounded_by_the_request_timeout_and_retries_nothing() -> None:
    # the batching window holds every request for 30 s: each attempt can only time out
    with sim_server("healthy", "vllm", time_scale=1.0, batch_wait_s=30.0) as srv:
        base: dict[str, Any] = {
            "concurrency": 2,
            "duration_s": 0.3,
            "drain": True,
            "timeout_s": 1.0,
            "retries": 3,
            "retry_backoff_s": 0.01,
            "prompt_tokens": ((10, 1.0),),
            "max_tokens": ((4, 1.0),),
        }
        result = asyncio.run(run_load(LoadSpec(srv.base_url, **base)))
        s = result.summary
        # the requests in flight at the deadline end by their own timeout, and no retry starts after it
        assert s.timeouts == 2 and s.cancelled == 0 and all(r.attempts == 1 for r in result.records)
        assert 1.0 <= s.duration_s < 0.3 + 1.0 + 5.0

        async def stopped_while_draining() -> LoadResult:
            stop = asyncio.Event()
            asyncio.get_running_loop().call_later(0.6, stop.set)
            return await run_load(LoadSpec(srv.base_url, **{**base, "timeout_s": 20.0}), stop=stop)

        stopped = asyncio.run(stopped_while_draining()).summary
        assert stopped.cancelled == 2 and stopped.duration_s < 10.0  # the stop event still ends the run at once


def test_runs_do_not_share_prompts_unless_salted_alike(url: str) -> None:
    def hits_of_a_second_identical_run(**kw: object) -> int:
        asyncio.run(run_load(spec(url, max_requests=3, concurrency=1, prompt_tokens=((64, 1.0),), **kw)))
        before = httpx.get(url + "/sim/state").json()["prefix_cache"]["hit_tokens"]
        asyncio.run(run_load(spec(url, max_requests=3, concurrency=1, prompt_tokens=((64, 1.0),), **kw)))
        return int(httpx.get(url + "/sim/state").json()["prefix_cache"]["hit_tokens"] - before)

    assert hits_of_a_second_identical_run() == 0  # a fresh salt per run: nothing to reuse
    assert hits_of_a_second_identical_run(prompt_salt="fixed") > 0  # same salt: the same prompts again


def test_non_streaming_and_chat(url: str) -> None:
    plain = asyncio.run(run_load(spec(url, max_requests=4, stream=False)))
    assert plain.summary.ok == 4 and all(r.ttft_s is None and r.output_tokens == 8 for r in plain.records)
    chat = asyncio.run(run_load(spec(url, max_requests=4, endpoint="chat")))
    assert chat.summary.ok == 4 and all(r.output_tokens == 8 for r in chat.records)


def test_open_loop_rate_and_stop_event(url: str) -> None:
    async def main() -> tuple[int, int]:
        stop = asyncio.Event()
        seen: list[RequestRecord] = []
        task = asyncio.create_task(
            run_load(spec(url, rate=40.0, duration_s=None, concurrency=8), stop=stop, on_record=seen.append)
        )
        await asyncio.sleep(1.5)
        stop.set()
        result = await asyncio.wait_for(task, 30)
        return result.summary.requests, len(seen)

    requests, seen = asyncio.run(main())
    assert requests == seen and 5 <= requests <= 200


def test_shared_prefixes_reach_the_prefix_cache(url: str) -> None:
    state0 = httpx.get(url + "/sim/state").json()["prefix_cache"]["hit_tokens"]
    asyncio.run(
        run_load(
            spec(
                url,
                max_requests=8,
                concurrency=1,
                prompt_tokens=((100, 1.0),),
                shared_prefix_ratio=1.0,
                shared_prefix_tokens=64,
                prefix_groups=1,
                seed=11,
            )
        )
    )
    hits = httpx.get(url + "/sim/state").json()["prefix_cache"]["hit_tokens"] - state0
    assert hits >= 7 * 64  # every request after the first reuses the 4 shared blocks


def test_timeouts_are_retried_and_abort_on_the_server() -> None:
    # the batching window holds every request for 30 s: each attempt times out
    with sim_server("healthy", "vllm", time_scale=1.0, batch_wait_s=30.0) as srv:
        result = asyncio.run(
            run_load(
                LoadSpec(
                    srv.base_url,
                    concurrency=2,
                    max_requests=2,
                    duration_s=60,
                    timeout_s=0.3,
                    retries=2,
                    retry_backoff_s=0.01,
                    prompt_tokens=((10, 1.0),),
                    max_tokens=((4, 1.0),),
                )
            )
        )
        s = result.summary
        assert s.timeouts == 2 and s.retries == 4 and all(r.attempts == 3 for r in result.records)
        wait_until(lambda: _aborted(srv.base_url) == 6, 10, "6 aborts counted")


def test_429_is_recorded_as_rejected_after_retries() -> None:
    with sim_server("healthy", "vllm", time_scale=1.0, batch_wait_s=30.0, max_queue_len=1) as srv:
        result = asyncio.run(
            run_load(
                LoadSpec(
                    srv.base_url,
                    concurrency=3,
                    duration_s=1.5,
                    timeout_s=5.0,
                    retries=1,
                    retry_backoff_s=0.01,
                    prompt_tokens=((10, 1.0),),
                    max_tokens=((4, 1.0),),
                )
            )
        )
        s = result.summary
        assert s.rejected >= 1 and s.by_status.get("rejected") == s.rejected
        rejected = [r for r in result.records if r.status == "rejected"]
        assert all(r.http_status == 429 and r.attempts == 2 and "overloaded" in (r.error or "") for r in rejected)


def test_unbounded_or_bad_specs_are_refused() -> None:
    with pytest.raises(ValueError, match="unbounded"):
        asyncio.run(run_load(LoadSpec("http://127.0.0.1:9", duration_s=None)))
    for bad in (
        {"concurrency": 0},
        {"endpoint": "embeddings"},
        {"prompt_tokens": ((0, 1.0),)},
        {"shared_prefix_ratio": 2},
        {"rate": -1.0},
        {"retries": -1},
        {"prompt_salt": "a b"},
    ):
        with pytest.raises(ValueError):
            LoadSpec("http://127.0.0.1:9", **bad).validate()
    with pytest.raises(ValueError):
        LoadSpec("ftp://x").validate()


def test_connection_errors_are_recorded_not_raised() -> None:
    result = asyncio.run(
        run_load(
            LoadSpec(
                "http://127.0.0.1:9",
                model="m",
                max_requests=2,
                concurrency=1,
                connect_timeout_s=1.0,
                retries=1,
                retry_backoff_s=0.01,
            )
        )
    )
    assert result.summary.errors == 2 and all(r.status == "connection_error" and r.attempts == 2 for r in result.records)


def test_percentile_interpolates_like_numpy() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 99) == 3.0
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([1, 2, 3, 4, 5], 95) == pytest.approx(4.8)
    assert percentile(list(range(101)), 99) == pytest.approx(99.0)


def test_summary_counts_statuses() -> None:
    recs = [
        RequestRecord(0, 0.0, "ok", 1, 10, 4, output_tokens=4, ttft_s=0.1, e2e_s=0.5, itl_s=[0.1, 0.2]),
        RequestRecord(1, 0.0, "timeout", 3, 10, 4),
        RequestRecord(2, 0.0, "cancelled", 1, 10, 4),
    ]
    s = summarize(recs, 2.0)
    assert (s.ok, s.errors, s.timeouts, s.cancelled, s.retries) == (1, 1, 1, 1, 2)
    assert s.output_tokens_per_s == 2.0 and s.itl_p50_s == pytest.approx(0.15)


def test_prompt_factory_lengths_and_prefixes() -> None:
    spec_ = LoadSpec(
        "http://x",
        prompt_tokens=((50, 1.0), (200, 1.0)),
        shared_prefix_ratio=1.0,
        shared_prefix_tokens=30,
        prefix_groups=2,
        seed=5,
    )
    f = PromptFactory(spec_, random.Random(5))
    made = [f.make(i) for i in range(40)]
    assert {n for _, n, _ in made} == {50, 200}
    for text, n, _ in made:
        assert len(text.split()) == n
    heads = {" ".join(text.split()[:30]) for text, _, _ in made}
    assert len(heads) == 2  # two prefix groups
    tails = [text.split()[30:] for text, _, _ in made]
    assert len({tuple(t[:1]) for t in tails}) == 40  # the rest is unique per request


def test_prompt_salt_makes_runs_unique_and_keeps_lengths_and_prefixes() -> None:
    spec_ = LoadSpec("http://x", prompt_tokens=((20, 1.0),), shared_prefix_ratio=0.5, shared_prefix_tokens=8, seed=3)

    def prompts(**kw: Any) -> list[str]:
        f = PromptFactory(dataclasses.replace(spec_, **kw), random.Random(3))
        return [f.make(i)[0] for i in range(20)]

    first, second = prompts(), prompts()
    assert all(len(a.split()) == len(b.split()) == 20 for a, b in zip(first, second))
    assert not set(first) & set(second)  # each run draws its own salt
    # the shared prefixes (seeded) still repeat across runs: a cache may reuse them, as asked
    assert {" ".join(p.split()[:8]) for p in first} & {" ".join(p.split()[:8]) for p in second}
    assert prompts(prompt_salt="s1") == prompts(prompt_salt="s1") != prompts(prompt_salt="s2")
    assert all("." in p for p in first) and not any("." in p for p in prompts(prompt_salt=""))  # "": no salt
