"""The canary request: one small streaming completion, read as a client reads it.

What is measured, on the monotonic clock from just before the connection is
opened (what a client waits for, connection set-up included):

* TTFT — until the first chunk that carries text (``choices[0].text`` for
  ``/v1/completions``; ``delta.content`` or a reasoning field for
  ``/v1/chat/completions``); a chat stream's first role-only chunk is not a token;
* inter-token gaps — between consecutive chunks carrying text (a server that
  sends several tokens per chunk shows one gap per chunk);
* duration — until the stream ended (``data: [DONE]``), failed, or timed out.

The outcome is one of the bounded ``result`` values: ``ok`` (a token came and
the stream ended cleanly), ``timeout`` (the deadline passed at any step — also a
stream that stalled after its first token), ``http_error`` (a non-2xx status),
``bad_stream`` (not an event stream, invalid JSON, an error event, a stream that
ended early or without a token) and ``refused`` (no connection).

Marked so operators can tell it apart: a fixed OpenAI ``user`` field
(``PROBE_USER``) and the request header ``X-LLM-Exporter-Probe: 1``, besides
the ``User-Agent``. Token counts come from the stream's ``usage`` when the
server reports it (``stream_options.include_usage``), else the generated ones
are the chunks that carried text. Where the server reports its own timing for
the request (llama.cpp's final ``timings.prompt_ms``), it is kept: the engine's
own account of this very request, used for the time outside the engine.
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from exporter import __version__
from exporter.engines.urls import safe_url
from exporter.jsonsafe import JSONLimitError, loads_bounded
from exporter.probe.client import Clock, Deadline, ProbeFailure, exchange
from exporter.tracing.traceparent import HEADER as TRACEPARENT
from exporter.tracing.traceparent import new_trace_id, traceparent

PROBE_USER = "llm-layer-exporter-probe"
PROBE_HEADER = "X-LLM-Exporter-Probe"
RESULTS: tuple[str, ...] = ("ok", "timeout", "http_error", "bad_stream", "refused")
#: endpoint path per ``probe.api``
PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
MODELS_PATH = "/v1/models"
#: the most bytes of /v1/models we read
MAX_MODELS_BYTES = 1024 * 1024
#: one SSE event's JSON (its ``data:`` lines joined) is decoded only under these bounds:
#: a completion chunk is a few hundred bytes and four levels deep (exporter/jsonsafe.py)
MAX_EVENT_BYTES = 256 * 1024
MAX_EVENT_DEPTH = 32


def probe_headers(authorization: str | None, sse: bool = True) -> dict[str, str]:
    """Headers of every probe request: the probe's marks, a fresh ``traceparent`` on the completion,
    and credentials when given."""
    headers = {
        "User-Agent": f"llm-layer-exporter-probe/{__version__}",
        PROBE_HEADER: "1",
        "Accept": "text/event-stream" if sse else "application/json",
        "Connection": "close",
    }
    if sse:  # the completion itself: its own trace, to be found in the engine's spans (docs/tracing.md)
        headers["Content-Type"] = "application/json"
        headers[TRACEPARENT] = traceparent(new_trace_id())
    if authorization:
        headers["Authorization"] = authorization
    return headers


def request_body(api: str, model: str, prompt: str, max_tokens: int) -> bytes:
    """The JSON body: greedy, short, streamed, with usage, marked by ``user``."""
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "user": PROBE_USER,
    }
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return json.dumps(body).encode("utf-8")


@dataclass
class Outcome:
    """What one probe saw. Times are monotonic seconds; ``detail`` holds no secret."""

    result: str
    started: float
    ended: float
    #: client-seen time to first token (None: no token came)
    ttft: float | None = None
    #: gaps between consecutive token-carrying chunks
    gaps: list[float] = field(default_factory=list)
    #: token-carrying chunks received
    chunks: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    #: the engine's own prefill time for this request, when the stream reports it (llama.cpp ``timings``)
    engine_prompt_seconds: float | None = None
    status: int | None = None
    detail: str = ""

    @property
    def duration(self) -> float:
        return self.ended - self.started

    @property
    def generated_tokens(self) -> int:
        """Tokens the probe made the engine generate (usage when reported, else chunks)."""
        return self.completion_tokens if self.completion_tokens is not None else self.chunks


@dataclass
class _Stream:
    """Accumulates the events of one SSE stream."""

    started: float
    token_times: list[float] = field(default_factory=list)
    done: bool = False
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    engine_prompt_seconds: float | None = None

    def event(self, data: str, now: float) -> None:
        if data.strip() == "[DONE]":
            self.done = True
            return
        try:
            obj = loads_bounded(data, max_bytes=MAX_EVENT_BYTES, max_depth=MAX_EVENT_DEPTH)
        except JSONLimitError as err:
            raise ProbeFailure("bad_stream", f"an event is {err}") from None
        except ValueError:
            raise ProbeFailure("bad_stream", "an event is not valid JSON") from None
        if not isinstance(obj, dict):
            raise ProbeFailure("bad_stream", "an event is not a JSON object")
        if obj.get("error"):
            raise ProbeFailure("bad_stream", "the server sent an error event in the stream")
        choices = obj.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            choice = choices[0]
            if _has_text(choice):
                self.token_times.append(now)
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                self.finish_reason = reason
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = _count(usage.get("prompt_tokens"), self.prompt_tokens)
            self.completion_tokens = _count(usage.get("completion_tokens"), self.completion_tokens)
        timings = obj.get("timings")
        if isinstance(timings, dict):
            ms = timings.get("prompt_ms")
            if isinstance(ms, (int, float)) and not isinstance(ms, bool) and 0 <= ms < 3.6e9:
                self.engine_prompt_seconds = float(ms) / 1000.0


def _has_text(choice: Mapping[str, Any]) -> bool:
    text = choice.get("text")
    if isinstance(text, str) and text:
        return True
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return any(isinstance(delta.get(k), str) and delta.get(k) for k in ("content", "reasoning_content", "reasoning"))
    return False


def _count(value: Any, old: int | None) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**9:
        return value
    return old


def _read_events(lines: Any, stream: _Stream, clock: Clock) -> None:
    """Feed SSE events (``data:`` lines joined until a blank line) to ``stream`` until [DONE] or EOF."""
    data: list[str] = []
    for raw in lines:
        now = clock()
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ProbeFailure("bad_stream", "the stream is not UTF-8 text") from None
        if not line:
            if data:
                stream.event("\n".join(data), now)
                data = []
                if stream.done:
                    return
            continue
        if line.startswith(":"):
            continue  # an SSE comment (a keep-alive)
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if value.startswith(" ") else value)
        elif name == "event" and value.strip() == "error":
            raise ProbeFailure("bad_stream", "the server sent an error event in the stream")
    if data:
        stream.event("\n".join(data), clock())


def run_probe(
    url: str,
    body: bytes,
    authorization: str | None,
    deadline: Deadline,
    tls: ssl.SSLContext | None = None,
    clock: Clock = time.monotonic,
) -> Outcome:
    """POST one streaming completion to ``url`` and read it to its end under ``deadline``."""
    started = clock()
    stream = _Stream(started)
    status: int | None = None
    try:
        with exchange("POST", url, probe_headers(authorization), body, deadline, tls) as resp:
            status = resp.status
            if not 200 <= resp.status < 300:
                raise ProbeFailure("http_error", f"{safe_url(url)}: HTTP {resp.status}{_hint(resp.status)}")
            kind = resp.headers.get("content-type", "").split(";")[0].strip().lower()
            if kind != "text/event-stream":
                raise ProbeFailure("bad_stream", f"{safe_url(url)}: answered {kind or 'no content type'}, not text/event-stream")
            _read_events(resp.lines(), stream, clock)
        if not stream.token_times:
            raise ProbeFailure("bad_stream", f"{safe_url(url)}: the stream ended without a token")
        if not stream.done and stream.finish_reason is None:
            raise ProbeFailure("bad_stream", f"{safe_url(url)}: the stream ended early (no [DONE], no finish_reason)")
        result, detail = "ok", ""
    except ProbeFailure as failure:
        result, detail = failure.result, failure.detail
    times = stream.token_times
    return Outcome(
        result=result,
        started=started,
        ended=clock(),
        ttft=(times[0] - started) if times else None,
        gaps=[b - a for a, b in zip(times, times[1:])],
        chunks=len(times),
        prompt_tokens=stream.prompt_tokens,
        completion_tokens=stream.completion_tokens,
        engine_prompt_seconds=stream.engine_prompt_seconds,
        status=status,
        detail=detail,
    )


def _hint(status: int) -> str:
    if status == 404:
        return " (no OpenAI-compatible route here: set probe.url, probe.api or probe.model)"
    if status in (401, 403):
        return " (check the engine's credentials or probe.bearer_token_file)"
    return ""


def first_model(base: str, authorization: str | None, deadline: Deadline, tls: ssl.SSLContext | None = None) -> str:
    """The first model id ``GET {base}/v1/models`` lists (raises ``ProbeFailure``)."""
    url = base + MODELS_PATH
    with exchange("GET", url, probe_headers(authorization, sse=False), None, deadline, tls) as resp:
        if not 200 <= resp.status < 300:
            raise ProbeFailure("http_error", f"{safe_url(url)}: HTTP {resp.status}{_hint(resp.status)}")
        raw = resp.body(MAX_MODELS_BYTES)
    try:
        doc = loads_bounded(raw, max_bytes=MAX_MODELS_BYTES, max_depth=MAX_EVENT_DEPTH)
        model = doc["data"][0]["id"]
    except (ValueError, KeyError, IndexError, TypeError):  # JSONLimitError is a ValueError
        raise ProbeFailure("bad_stream", f"{safe_url(url)}: no model id in the answer (set probe.model)") from None
    if not isinstance(model, str) or not model:
        raise ProbeFailure("bad_stream", f"{safe_url(url)}: no model id in the answer (set probe.model)")
    return model
