"""One ramp step = one bounded run of exporter.loadgen at a fixed concurrency.

Why closed loop (``rate=None``): a ramp asks "what does concurrency N get?", so
N clients send back to back. New requests stop at ``--step-seconds`` (or after
``--max-requests-per-step``); the requests in flight then *drain* - they run to
completion, bounded by the request timeout - instead of being cancelled. Why
drain: a cancelled stream is an abort on the server, and a ramp that aborts
N requests at every step boundary makes the application layer report
``retries_and_timeouts`` for its own doing, and makes the engine's finished
counters disagree with the client's. The step's duration therefore includes the
drain tail, and throughput is output tokens of completed requests over it.

The load generator has no drain option (yet): issuing stops by lowering the
spec's ``max_requests`` to 0 at the step deadline, which its closed-loop
clients read before each request. tests/ramp checks that no request is
cancelled, so a change there shows up as a failing test, not as skewed figures.

A step that sees only failures stops early instead of spinning for its full
length against a dead server.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from exporter.loadgen import LoadResult, LoadSpec, RequestRecord, run_load
from exporter.ramp.driver import StepLoader
from exporter.ramp.model import ClientFigures, Percentiles

#: consecutive failures with no success that end a step early (at least this many, or 2 x concurrency)
FAIL_FAST_AFTER = 20
MAX_ERROR_MESSAGES = 3


@dataclass(frozen=True)
class LoadSettings:
    base_url: str
    model: str
    step_seconds: float
    prompt_tokens: int
    output_tokens: int
    shared_prefix_ratio: float = 0.0
    shared_prefix_tokens: int = 0
    request_timeout_s: float = 60.0
    max_requests_per_step: int | None = None
    seed: int = 0


def client_figures(result: LoadResult) -> ClientFigures:
    """The step's client-side row from a loadgen result."""
    s = result.summary
    messages: list[str] = []
    for rec in result.records:
        if rec.status in ("ok", "cancelled") or not rec.error:
            continue
        msg = f"{rec.status}" + (f" HTTP {rec.http_status}" if rec.http_status else "") + f": {rec.error}"
        if msg not in messages:
            messages.append(msg[:300])
        if len(messages) >= MAX_ERROR_MESSAGES:
            break
    return ClientFigures(
        duration_s=s.duration_s,
        requests=s.ok,
        errors=s.errors,
        timeouts=s.timeouts,
        cancelled=s.cancelled,
        output_tokens=s.output_tokens,
        requests_per_s=s.requests_per_s,
        output_tokens_per_s=s.output_tokens_per_s,
        ttft_s=Percentiles(s.ttft_p50_s, s.ttft_p95_s, s.ttft_p99_s),
        itl_s=Percentiles(s.itl_p50_s, s.itl_p95_s, s.itl_p99_s),
        error_messages=messages,
    )


def build_spec(settings: LoadSettings, concurrency: int, step_index: int) -> LoadSpec:
    return LoadSpec(
        base_url=settings.base_url,
        model=settings.model,
        endpoint="completions",
        stream=True,
        concurrency=concurrency,
        # hard bound: issuing stops at step_seconds (see _run_step), the drain ends within one timeout
        duration_s=settings.step_seconds + settings.request_timeout_s + 1.0,
        max_requests=settings.max_requests_per_step,
        prompt_tokens=((settings.prompt_tokens, 1.0),),
        max_tokens=((settings.output_tokens, 1.0),),
        shared_prefix_ratio=settings.shared_prefix_ratio,
        shared_prefix_tokens=settings.shared_prefix_tokens,
        timeout_s=settings.request_timeout_s,
        retries=0,
        seed=settings.seed + step_index,
    )


async def _run_step(spec: LoadSpec, issue_s: float) -> LoadResult:
    """Issue for ``issue_s`` seconds, then let the requests in flight finish."""
    stop = asyncio.Event()
    limit = max(FAIL_FAST_AFTER, 2 * spec.concurrency)
    state = {"ok": 0, "failed_in_a_row": 0}

    def on_record(rec: RequestRecord) -> None:
        if rec.status == "ok":
            state["ok"] += 1
            state["failed_in_a_row"] = 0
        elif rec.status != "cancelled":
            state["failed_in_a_row"] += 1
            if state["ok"] == 0 and state["failed_in_a_row"] >= limit:
                stop.set()

    def stop_issuing() -> None:
        spec.max_requests = 0  # closed-loop clients issue no further request; in-flight ones finish

    handle = asyncio.get_running_loop().call_later(issue_s, stop_issuing)
    try:
        return await run_load(spec, stop=stop, on_record=on_record)
    finally:
        handle.cancel()


def make_step_loader(settings: LoadSettings) -> StepLoader:
    """A StepLoader running one loadgen step per call (its own event loop each time)."""
    calls = {"n": 0}

    def load_step(concurrency: int) -> ClientFigures:
        spec = build_spec(settings, concurrency, calls["n"])
        calls["n"] += 1
        return client_figures(asyncio.run(_run_step(spec, settings.step_seconds)))

    return load_step
