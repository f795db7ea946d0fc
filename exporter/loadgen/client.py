"""One OpenAI-compatible request, streamed or not, with a timeout and retries.

Why measure on the client: TTFT and inter-token latency as a user sees them
include queueing, HTTP and streaming overheads an engine's histograms miss.
A timeout closes the connection (``asyncio.wait_for`` cancels the stream), which
is exactly how an impatient client turns into an engine-side abort.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from exporter.loadgen.pacing import ArrivalClock, WallClock
from exporter.loadgen.spec import LoadSpec, RequestRecord
from exporter.tracing.traceparent import HEADER, new_trace_id, traceparent

MAX_ERROR_BODY = 4096


@dataclass
class _Attempt:
    status: str
    http_status: int | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    output_tokens: int = 0
    finish_reason: str | None = None
    error: str | None = None

    @property
    def retryable(self) -> bool:
        if self.status in ("timeout", "connection_error", "rejected"):
            return True
        return self.status == "http_error" and (self.http_status or 0) >= 500


def request_body(spec: LoadSpec, model: str, prompt: str, max_tokens: int) -> tuple[str, dict[str, Any]]:
    """(path, JSON body) of one request."""
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "stream": spec.stream}
    if spec.stream:
        body["stream_options"] = {"include_usage": True}
    if spec.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
        return "/v1/chat/completions", body
    body["prompt"] = prompt
    return "/v1/completions", body


def _chunk_text(obj: dict[str, Any]) -> tuple[str, str | None]:
    choices = obj.get("choices") or []
    if not choices:
        return "", None
    choice = choices[0]
    text = choice.get("text")
    if text is None:
        text = (choice.get("delta") or {}).get("content") or (choice.get("message") or {}).get("content") or ""
    return text, choice.get("finish_reason")


def _error_message(raw: bytes) -> str:
    try:
        obj = json.loads(raw[:MAX_ERROR_BODY])
        return str(obj["error"]["message"])
    except Exception:
        return raw[:200].decode("utf-8", "replace")


async def _sse_lines(resp: httpx.Response) -> AsyncIterator[str]:
    """The stream's lines split at CR/LF only, as the SSE format does.

    Why not ``aiter_lines``: httpx splits like ``str.splitlines`` (also at U+0085, U+2028,
    U+001C...), and JSON carries U+0085/U+2028 unescaped, so a generated token holding one
    cut its event in two and the request was counted as a protocol error.
    """
    pending = ""
    async for text in resp.aiter_text():
        pending += text
        *lines, pending = pending.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        for line in lines:
            yield line
    if pending:
        yield pending


async def _streamed(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], headers: Mapping[str, str] | None = None
) -> _Attempt:
    start = time.perf_counter()
    async with client.stream("POST", path, json=body, headers=headers) as resp:
        if resp.status_code != 200:
            raw = await resp.aread()
            status = "rejected" if resp.status_code == 429 else "http_error"
            return _Attempt(status, resp.status_code, error=_error_message(raw))
        first: float | None = None
        last = start
        gaps: list[float] = []
        words = 0
        finish = None
        usage_tokens = None
        async for line in _sse_lines(resp):
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            try:
                obj = json.loads(data)
            except ValueError:
                return _Attempt("protocol_error", 200, error=f"bad SSE data: {data[:80]!r}")
            if "error" in obj:
                return _Attempt("http_error", 200, error=str(obj["error"]))
            text, reason = _chunk_text(obj)
            if text:
                now = time.perf_counter()
                if first is None:
                    first = now
                else:
                    gaps.append(now - last)
                last = now
                words += len(text.split())
            finish = reason or finish
            usage = obj.get("usage")
            if usage:
                usage_tokens = usage.get("completion_tokens")
        end = time.perf_counter()
        return _Attempt(
            "ok",
            200,
            ttft_s=None if first is None else first - start,
            e2e_s=end - start,
            itl_s=gaps,
            output_tokens=int(usage_tokens) if usage_tokens is not None else words,
            finish_reason=finish,
        )


async def _plain(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], headers: Mapping[str, str] | None = None
) -> _Attempt:
    start = time.perf_counter()
    resp = await client.post(path, json=body, headers=headers)
    end = time.perf_counter()
    if resp.status_code != 200:
        status = "rejected" if resp.status_code == 429 else "http_error"
        return _Attempt(status, resp.status_code, error=_error_message(resp.content))
    try:
        obj = resp.json()
    except ValueError:
        return _Attempt("protocol_error", 200, error="response is not JSON")
    text, reason = _chunk_text(obj)
    usage = obj.get("usage") or {}
    tokens = usage.get("completion_tokens")
    return _Attempt(
        "ok", 200, e2e_s=end - start, output_tokens=int(tokens) if tokens is not None else len(text.split()), finish_reason=reason
    )


async def issue(
    client: httpx.AsyncClient,
    spec: LoadSpec,
    model: str,
    index: int,
    prompt: str,
    prompt_tokens: int,
    max_tokens: int,
    run_start: float,
    rng: random.Random | None = None,
    may_retry: Callable[[], bool] = lambda: True,
    headers: Mapping[str, str] | None = None,
    clock: ArrivalClock | None = None,
) -> RequestRecord:
    """Send request ``index`` with retries; never raises except on cancellation.

    Backoff waits are jittered (x0.5-1.5) so that clients which failed together
    do not retry in lock-step. A retry starts only while ``may_retry()`` holds
    (a draining run starts none: the final attempt's outcome is kept). ``headers``: added to
    this request's (a closed-loop client's identity, ``LoadSpec.client_header``). ``clock``: what an
    attempt's ``spec.timeout_s`` counts when ``spec.timeout_on_clock`` (the load's pacing clock).
    """
    timer = clock if clock is not None and spec.timeout_on_clock else WallClock()
    rng = rng or random.Random(index)
    path, body = request_body(spec, model, prompt, max_tokens)
    first_start = time.perf_counter()
    attempt = _Attempt("connection_error")
    attempts = 0
    trace_id = new_trace_id()  # one trace per request, a parent span per attempt (exporter/tracing/traceparent.py)
    for n in range(spec.retries + 1):
        attempts = n + 1
        sent = {**(headers or {}), HEADER: traceparent(trace_id)}
        try:
            coro = _streamed(client, path, body, sent) if spec.stream else _plain(client, path, body, sent)
            attempt = await timer.within(coro, spec.timeout_s)
        except asyncio.TimeoutError:
            attempt = _Attempt("timeout", error=f"no complete answer within {spec.timeout_s:g} s")
        except httpx.HTTPError as err:
            attempt = _Attempt("connection_error", error=f"{type(err).__name__}: {err}")
        if not attempt.retryable or n == spec.retries or not may_retry():
            break
        await asyncio.sleep(spec.retry_backoff_s * (2**n) * (0.5 + rng.random()))
        if not may_retry():
            break
    end = time.perf_counter()
    return RequestRecord(
        index=index,
        start_s=first_start - run_start,
        status=attempt.status,
        attempts=attempts,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        output_tokens=attempt.output_tokens,
        http_status=attempt.http_status,
        ttft_s=attempt.ttft_s,
        e2e_s=attempt.e2e_s,
        total_s=end - first_start,
        itl_s=attempt.itl_s,
        finish_reason=attempt.finish_reason,
        error=attempt.error,
        trace_id=trace_id,
    )


async def discover_model(client: httpx.AsyncClient) -> str:
    """The first model ``GET /v1/models`` lists."""
    resp = await client.get("/v1/models")
    resp.raise_for_status()
    data = resp.json().get("data") or []
    if not data:
        raise ValueError("GET /v1/models listed no model")
    return str(data[0]["id"])
