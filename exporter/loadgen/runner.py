"""``run_load``: drive an OpenAI-compatible server for a bounded time or request count.

Why both loops: a closed loop (N clients back to back) measures what a fixed
concurrency gets; an open loop (Poisson arrivals) keeps arriving whatever the
server does, which is what builds queues and backlogs. Both cap in-flight
requests at ``concurrency`` so the generator itself stays bounded. When the run
ends, requests still in flight are cancelled (their connections close) and
recorded as ``cancelled`` - unless the spec asks to ``drain``: then, at
``duration_s``, issuing stops and the requests in flight finish on their own,
within ``timeout_s`` (plus ``DRAIN_GRACE_S``, after which any left are
cancelled all the same).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections import deque
from collections.abc import Callable, Mapping

import httpx

from exporter.loadgen.client import discover_model, issue
from exporter.loadgen.pacing import ArrivalClock, WallClock
from exporter.loadgen.prompts import PromptFactory
from exporter.loadgen.spec import LoadResult, LoadSpec, RequestRecord
from exporter.loadgen.summary import summarize

#: slack after a drain's ``timeout_s`` before what is still in flight is cancelled anyway
DRAIN_GRACE_S = 1.0


class _Tally:
    """Counters over every request, even the records a long run drops."""

    def __init__(self, keep: int) -> None:
        self.records: deque[RequestRecord] = deque(maxlen=keep)
        self.counts: dict[str, int] = {}
        self.prompt_tokens = 0
        self.output_tokens = 0
        self.retries = 0

    def add(self, rec: RequestRecord) -> None:
        self.records.append(rec)
        self.counts[rec.status] = self.counts.get(rec.status, 0) + 1
        self.retries += rec.attempts - 1
        if rec.status == "ok":
            self.prompt_tokens += rec.prompt_tokens
            self.output_tokens += rec.output_tokens


async def run_load(
    spec: LoadSpec,
    *,
    stop: asyncio.Event | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
    clock: ArrivalClock | None = None,
) -> LoadResult:
    """Run ``spec`` to its end (duration, request count or ``stop``) and return records + summary.

    With ``spec.drain`` the duration ends issuing, not the run: requests in
    flight then finish (bounded by ``spec.timeout_s``); ``stop`` still ends the
    run at once.

    ``clock`` paces the open loop's arrivals (``spec.rate`` is per second of it);
    the wall clock by default, the simulator's model time against the simulator
    (``exporter/loadgen/pacing.py``). Durations stay wall seconds; timeouts too, unless
    ``spec.timeout_on_clock`` puts them on ``clock``.

    Raises ValueError for a bad spec or an unbounded run (no duration, no
    request limit, no stop event), and httpx errors if the model cannot be
    discovered (``spec.model`` unset and ``GET /v1/models`` fails).
    """
    spec.validate()
    if spec.duration_s is None and spec.max_requests is None and stop is None:
        raise ValueError("unbounded load: set duration_s, max_requests or pass a stop event")
    rng = random.Random(spec.seed)
    prompts = PromptFactory(spec, rng)
    tally = _Tally(spec.max_records)
    timeout = httpx.Timeout(None, connect=spec.connect_timeout_s)
    limits = httpx.Limits(max_connections=spec.concurrency + 2, max_keepalive_connections=spec.concurrency)
    async with httpx.AsyncClient(
        base_url=spec.base_url.rstrip("/"), timeout=timeout, limits=limits, headers=spec.headers
    ) as client:
        model = spec.model or await discover_model(client)
        loop = asyncio.get_running_loop()
        run_start = time.perf_counter()
        deadline = None if spec.duration_s is None else loop.time() + spec.duration_s
        # when the run ends: at the deadline, or once a drain has had its chance
        end = None if deadline is None else deadline + (spec.timeout_s + DRAIN_GRACE_S if spec.drain else 0.0)
        indexes = itertools.count()
        in_flight: dict[asyncio.Task[None], tuple[int, int, int, float]] = {}  # the task running one()
        slots = asyncio.Semaphore(spec.concurrency)
        finished = asyncio.Event()
        pace = clock or WallClock()

        def done_issuing() -> bool:
            return (stop is not None and stop.is_set()) or (deadline is not None and loop.time() >= deadline)

        def may_retry() -> bool:
            # a draining run starts no retry after issuing stopped; any other run cancels what is in flight at its end
            return not (spec.drain and done_issuing())

        def record(rec: RequestRecord) -> None:
            tally.add(rec)
            if on_record is not None:
                on_record(rec)

        async def one(index: int, headers: Mapping[str, str] | None = None) -> None:
            prompt, n_prompt, n_max = prompts.make(index)
            task = asyncio.current_task()
            assert task is not None
            in_flight[task] = (index, n_prompt, n_max, time.perf_counter())
            try:
                record(await issue(client, spec, model, index, prompt, n_prompt, n_max, run_start, rng, may_retry, headers, pace))
            finally:
                in_flight.pop(task, None)

        def next_index() -> int | None:
            index = next(indexes)
            if spec.max_requests is not None and index >= spec.max_requests:
                return None
            return index

        async def closed_client(number: int) -> None:
            # who this client is, per run (the prompts' salt is random per run): a simulator waits for it
            named = {spec.client_header: f"{prompts.salt}-{number}"} if spec.client_header else None
            if spec.ramp_up_s:
                await asyncio.sleep(spec.ramp_up_s * number / spec.concurrency)
            while not done_issuing():
                index = next_index()
                if index is None:
                    return
                await one(index, named)

        async def open_arrivals() -> None:
            assert spec.rate is not None
            children: set[asyncio.Task[None]] = set()

            def ended(child: asyncio.Task[None]) -> None:
                children.discard(child)
                slots.release()

            try:
                at = await pace.now()
                while not done_issuing():
                    at += rng.expovariate(spec.rate)
                    # no arrival after the deadline: wake there (a draining run waits for this task)
                    await pace.wait_until(at, deadline)
                    if done_issuing():
                        break
                    await slots.acquire()  # may wait past the deadline for a request to end
                    at = max(at, await pace.now())  # a wait for a slot delays what follows, no burst to catch up
                    index = None if done_issuing() else next_index()
                    if index is None:
                        slots.release()
                        break
                    child = asyncio.create_task(one(index))
                    children.add(child)
                    child.add_done_callback(ended)
                if children:
                    await asyncio.gather(*children, return_exceptions=True)
            finally:
                for child in list(children):
                    child.cancel()

        producers = (
            [asyncio.create_task(open_arrivals())]
            if spec.rate is not None
            else [asyncio.create_task(closed_client(i)) for i in range(spec.concurrency)]
        )

        async def watch() -> None:
            await asyncio.gather(*producers, return_exceptions=True)
            finished.set()

        watcher = asyncio.create_task(watch())
        try:
            while not finished.is_set():
                if stop is not None and stop.is_set():
                    break
                if end is not None and loop.time() >= end:
                    break
                wait = 0.1 if end is None else max(0.0, min(0.1, end - loop.time()))
                try:
                    await asyncio.wait_for(finished.wait(), wait)
                except asyncio.TimeoutError:
                    pass
        finally:
            pending = dict(in_flight)
            for task in producers:
                task.cancel()
            for task in pending:
                task.cancel()
            await asyncio.gather(*producers, *pending, return_exceptions=True)
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
            now = time.perf_counter()
            for index, n_prompt, n_max, started in pending.values():
                record(
                    RequestRecord(
                        index=index,
                        start_s=started - run_start,
                        status="cancelled",
                        attempts=1,
                        prompt_tokens=n_prompt,
                        max_tokens=n_max,
                        total_s=now - started,
                    )
                )
        duration = time.perf_counter() - run_start
    records = sorted(tally.records, key=lambda r: r.index)
    summary = summarize(records, duration, tally.counts, (tally.prompt_tokens, tally.output_tokens), tally.retries)
    return LoadResult(spec=spec, records=records, summary=summary)
