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
The load generator does the draining (``LoadSpec.drain``); tests/ramp checks
that no request of a step is ever cancelled.

Why a fresh prompt salt per step (``LoadSpec.prompt_salt`` left None): request
*n* of every step would otherwise send the same text, and an engine with
prefix caching would serve later steps partly from what earlier ones cached.
Only the shared prefix (``--shared-prefix-ratio``) is meant to be reused.

A step that sees only failures stops early instead of spinning for its full
length against a dead server.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from exporter.loadgen import LoadResult, LoadSpec, LoadSummary, RequestRecord, run_load
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


#: ClientFigures fields that LoadSummary holds under the same name
_SAME_FIGURES = ("duration_s", "errors", "timeouts", "cancelled", "output_tokens", "requests_per_s", "output_tokens_per_s")


def _percentiles(summary: LoadSummary, name: str) -> Percentiles:
    return Percentiles(*(getattr(summary, f"{name}_p{q}_s") for q in (50, 95, 99)))


def _error_messages(result: LoadResult) -> list[str]:
    """The first few distinct error messages of a step."""
    messages: list[str] = []
    for rec in result.records:
        if rec.status in ("ok", "cancelled") or not rec.error:
            continue
        msg = f"{rec.status}" + (f" HTTP {rec.http_status}" if rec.http_status else "") + f": {rec.error}"
        if msg not in messages:
            messages.append(msg[:300])
        if len(messages) >= MAX_ERROR_MESSAGES:
            break
    return messages


def client_figures(result: LoadResult) -> ClientFigures:
    """The step's client-side row from a loadgen result."""
    s = result.summary
    return ClientFigures(
        requests=s.ok,
        ttft_s=_percentiles(s, "ttft"),
        itl_s=_percentiles(s, "itl"),
        error_messages=_error_messages(result),
        **{name: getattr(s, name) for name in _SAME_FIGURES},
    )


def build_spec(settings: LoadSettings, concurrency: int, step_index: int) -> LoadSpec:
    return LoadSpec(
        base_url=settings.base_url,
        model=settings.model,
        endpoint="completions",
        stream=True,
        concurrency=concurrency,
        # issuing stops at step_seconds; the requests in flight then finish, each within the timeout
        duration_s=settings.step_seconds,
        drain=True,
        max_requests=settings.max_requests_per_step,
        prompt_tokens=((settings.prompt_tokens, 1.0),),
        max_tokens=((settings.output_tokens, 1.0),),
        shared_prefix_ratio=settings.shared_prefix_ratio,
        shared_prefix_tokens=settings.shared_prefix_tokens,
        timeout_s=settings.request_timeout_s,
        retries=0,
        seed=settings.seed + step_index,
        prompt_salt=None,  # a fresh salt per step: no step replays another's prompts
    )


async def _run_step(spec: LoadSpec) -> LoadResult:
    """Run one draining step; a step that sees only failures stops at once."""
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

    return await run_load(spec, stop=stop, on_record=on_record)


def make_step_loader(settings: LoadSettings) -> StepLoader:
    """A StepLoader running one loadgen step per call (its own event loop each time)."""
    calls = {"n": 0}

    def load_step(concurrency: int) -> ClientFigures:
        spec = build_spec(settings, concurrency, calls["n"])
        calls["n"] += 1
        return client_figures(asyncio.run(_run_step(spec)))

    return load_step
