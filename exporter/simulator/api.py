"""The simulator's HTTP surface: OpenAI-compatible completions plus /metrics and /sim/*.

Why hand-validated JSON instead of pydantic models: every bad request must get
an OpenAI-style body ``{"error": {"message", "type", "param", "code"}}`` with
the parameter named, the way clients of real servers expect, and the body size
and queue length stay bounded (413, 429) so the simulator never grows without
bound under abuse.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from exporter.simulator import dialects, scenarios, tokenizer
from exporter.simulator.delivery import LoopSink
from exporter.simulator.engine import EngineStopped, QueueFull
from exporter.simulator.instance import Simulator
from exporter.simulator.lockstep import HEADER, client_id
from exporter.simulator.requests import TokenEvent

MAX_BODY_BYTES = 4 * 1024 * 1024
#: Non-streaming requests check for a vanished client this often (wall seconds).
DISCONNECT_POLL_S = 0.25
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")


class ApiError(Exception):
    """Becomes an OpenAI-style error response."""

    def __init__(
        self, status: int, message: str, type_: str = "invalid_request_error", param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        self.code = code

    def response(self) -> JSONResponse:
        return error_response(self.status, self.message, self.type, self.param, self.code)


def error_response(status: int, message: str, type_: str, param: str | None = None, code: str | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": type_, "param": param, "code": code}}, status_code=status)


async def read_json(request: Request) -> dict[str, Any]:
    """The request body as a JSON object, read up to MAX_BODY_BYTES."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ApiError(413, f"request body over {MAX_BODY_BYTES} bytes", code="request_too_large")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise ApiError(413, f"request body over {MAX_BODY_BYTES} bytes", code="request_too_large")
            chunks.append(chunk)
    except ClientDisconnect:
        raise ApiError(499, "client closed the request", code="client_closed_request") from None
    try:
        body = json.loads(b"".join(chunks) or b"null")
    except ValueError as err:
        raise ApiError(400, f"request body is not valid JSON: {err}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    return body


def _int_param(body: dict[str, Any], name: str, minimum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ApiError(400, f"{name} must be an integer >= {minimum}, got {value!r}", param=name)
    return value


def _common(body: dict[str, Any], served: str) -> tuple[str, bool, bool]:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "you must provide a model parameter", param="model")
    if model != served:
        raise ApiError(404, f"The model `{model}` does not exist.", param="model", code="model_not_found")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, f"stream must be true or false, got {stream!r}", param="stream")
    n = body.get("n", 1)
    if n != 1:
        raise ApiError(400, "only n=1 is supported by the simulator", param="n")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise ApiError(400, "stream_options must be an object", param="stream_options")
    temperature = body.get("temperature", 1.0)
    if temperature is not None and (
        isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2
    ):
        raise ApiError(400, f"temperature must be a number from 0 to 2, got {temperature!r}", param="temperature")
    return model, stream, bool(options.get("include_usage", False))


def _prompt_ids(prompt: Any) -> list[int]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        ids = tokenizer.encode(prompt)
    elif isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 2**32 for t in prompt):
        ids = list(prompt)
    else:
        raise ApiError(400, "prompt must be a string, a list of token ids, or a one-element list of either", param="prompt")
    if not ids:
        raise ApiError(400, "prompt must contain at least one token", param="prompt")
    return ids


def _chat_ids(messages: Any) -> list[int]:
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list", param="messages")
    flat = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in CHAT_ROLES:
            raise ApiError(400, f"messages[{i}]: expected an object with a role of {', '.join(CHAT_ROLES)}", param="messages")
        content = m.get("content")
        if isinstance(content, list):
            texts = [
                t for p in content if isinstance(p, dict) and p.get("type") == "text" and isinstance(t := p.get("text"), str)
            ]
            if len(texts) != len(content):
                raise ApiError(400, f"messages[{i}].content: only text parts are supported", param="messages")
            content = " ".join(texts)
        if not isinstance(content, str):
            raise ApiError(400, f"messages[{i}].content must be a string or a list of text parts", param="messages")
        flat.append({"role": m["role"], "content": content})
    return tokenizer.encode(tokenizer.chat_prompt(flat))


def create_app(sim: Simulator) -> FastAPI:
    """The FastAPI application of one simulated server."""
    app = FastAPI(title="llm-layer-exporter simulated inference server", docs_url=None, redoc_url=None, openapi_url=None)
    engine = sim.engine

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, err: ApiError) -> JSONResponse:
        if request.url.path.startswith("/v1/") and err.status != 499:
            engine.count("validation_errors")
        return err.response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, err: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if err.status_code == 404 else "invalid_request_error"
        return error_response(err.status_code, str(err.detail), kind, code=str(err.status_code))

    @app.exception_handler(Exception)
    async def _internal(_: Request, err: Exception) -> JSONResponse:  # pragma: no cover - last resort
        return error_response(500, f"internal error: {type(err).__name__}", "internal_error")

    @app.get("/health")
    async def health() -> JSONResponse:
        if engine.alive:
            return JSONResponse({"status": "ok"})
        return error_response(503, "the simulated engine is not running", "service_unavailable")

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        cfg = engine.config
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": cfg.model,
                        "object": "model",
                        "created": int(engine.start_unix),
                        "owned_by": "llm-layer-exporter",
                        "max_model_len": cfg.max_model_len,
                    }
                ],
            }
        )

    @app.get("/metrics")
    async def metrics() -> Response:
        # off the event loop: the snapshot takes the engine lock, which a step holds (issue 31)
        body, headers = await asyncio.to_thread(lambda: dialects.render(sim.dialect, engine.snapshot()))
        return Response(body, media_type=dialects.CONTENT_TYPE, headers=headers)

    async def side(route: str) -> JSONResponse:
        """llama.cpp's /props and /slots where the dialect has them; elsewhere 404, as on the real engine."""
        maker = dialects.side_route(sim.dialect, route)
        if maker is None:
            raise ApiError(404, f"/{route}: not served by the {sim.dialect} dialect", type_="not_found_error")
        return JSONResponse(maker(await asyncio.to_thread(engine.snapshot)))

    @app.get("/props")
    async def props() -> JSONResponse:
        return await side("props")

    @app.get("/slots")
    async def slots() -> JSONResponse:
        return await side("slots")

    @app.get("/sim/gpu")
    async def sim_gpu() -> JSONResponse:
        return JSONResponse({"gpus": engine.gpu_readings()})

    @app.get("/sim/clock")
    async def sim_clock() -> JSONResponse:
        # cheap (no snapshot): load generators pace their arrivals on it (exporter/loadgen/pacing.py)
        return JSONResponse({"model_time_s": engine.clock.now(), "time_scale": engine.clock.scale})

    @app.get("/sim/state")
    async def sim_state() -> JSONResponse:
        state = (await asyncio.to_thread(engine.snapshot)).state()
        state["dialect"] = sim.dialect
        return JSONResponse(state)

    @app.get("/sim/scenarios")
    async def sim_scenarios() -> JSONResponse:
        return JSONResponse(
            {
                "current": engine.scenario,
                "scenarios": [
                    {
                        "name": s.name,
                        "summary": s.summary,
                        "signature": s.signature,
                        "settings": s.settings,
                        "launch": list(s.launch),
                        "dialect": s.dialect,
                    }
                    for s in scenarios.SCENARIOS.values()
                ],
            }
        )

    @app.post("/sim/scenario")
    async def sim_scenario(request: Request) -> JSONResponse:
        body = await read_json(request)
        name = body.get("scenario")
        if name not in scenarios.SCENARIOS:
            raise ApiError(400, f"unknown scenario {name!r}; expected one of {', '.join(scenarios.NAMES)}", param="scenario")
        try:
            sim.switch(str(name))
        except ValueError as err:
            raise ApiError(400, str(err), param="scenario") from None
        return JSONResponse({"scenario": name, "config": engine.config.as_dict()})

    @app.post("/sim/prefix_cache")
    async def sim_prefix_cache(request: Request) -> JSONResponse:
        """``{"shared": false}``: prefix sharing breaks mid-run (every new request salted; the engine
        still looks each prompt up and finds nothing); ``{"enabled": false}``: prefix caching is switched
        off (nothing is looked up). Either or both; true restores each."""
        body = await read_json(request)
        changes = {name: body[name] for name in ("shared", "enabled") if name in body}
        if not changes:
            raise ApiError(400, "expected shared and/or enabled (true or false)", param="shared")
        for name, value in changes.items():
            if not isinstance(value, bool):
                raise ApiError(400, f"{name} must be true or false, got {value!r}", param=name)
        # the engine lock, which a step holds
        if "shared" in changes:
            await asyncio.to_thread(sim.share_prefixes, changes["shared"])
        if "enabled" in changes:
            await asyncio.to_thread(sim.enable_prefix_caching, changes["enabled"])
        return JSONResponse({**changes, "config": engine.config.as_dict()})

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        engine.count("api_requests")
        body = await read_json(request)
        model, stream, usage = _common(body, engine.config.model)
        if "prompt" not in body:
            raise ApiError(400, "you must provide a prompt parameter", param="prompt")
        ids = _prompt_ids(body["prompt"])
        max_tokens = _max_tokens(body, len(ids), 16, ("max_tokens",))
        return await _serve(request, ids, max_tokens, model, stream, usage, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        engine.count("api_requests")
        body = await read_json(request)
        model, stream, usage = _common(body, engine.config.model)
        ids = _chat_ids(body.get("messages"))
        max_tokens = _max_tokens(body, len(ids), 256, ("max_completion_tokens", "max_tokens"))
        return await _serve(request, ids, max_tokens, model, stream, usage, chat=True)

    def _max_tokens(body: dict[str, Any], prompt_len: int, default: int, names: tuple[str, ...]) -> int:
        limit = engine.config.max_model_len
        value = None
        for name in names:
            value = _int_param(body, name, 1)
            if value is not None:
                break
        if prompt_len >= limit:
            raise ApiError(
                400,
                f"This model's maximum context length is {limit} tokens. However, your prompt has {prompt_len} tokens.",
                param="prompt",
                code="context_length_exceeded",
            )
        if value is None:
            return min(default, limit - prompt_len)
        if prompt_len + value > limit:
            raise ApiError(
                400,
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{prompt_len + value} tokens ({prompt_len} in the prompt, {value} for the completion).",
                param=names[-1],
                code="context_length_exceeded",
            )
        return value

    async def _serve(
        request: Request, ids: list[int], max_tokens: int, model: str, stream: bool, usage: bool, chat: bool
    ) -> Response:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[TokenEvent] = asyncio.Queue()
        try:
            client = client_id(request.headers.get(HEADER))  # a closed-loop client (exporter/simulator/lockstep.py)
            req = engine.submit(ids, max_tokens, stream, LoopSink(loop, queue), client)
        except QueueFull as err:
            return error_response(429, f"The server is overloaded: {err}. Retry later.", "rate_limit_exceeded", code="queue_full")
        except EngineStopped as err:
            return error_response(503, str(err), "service_unavailable")
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        created = int(time.time())
        if stream:
            return StreamingResponse(
                _sse(req, queue, rid, created, model, usage, chat, len(ids)),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        text, finish, completion = [], None, 0
        try:
            while finish is None:
                try:
                    event = await asyncio.wait_for(queue.get(), DISCONNECT_POLL_S)
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        return Response(status_code=499)
                    continue
                text.append(event.text)
                completion += event.tokens
                finish = event.finish_reason
        finally:
            if finish is None:
                engine.abort(req)
        usage_body = {"prompt_tokens": len(ids), "completion_tokens": completion, "total_tokens": len(ids) + completion}
        content = "".join(text)
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": content}, "logprobs": None, "finish_reason": finish}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": content, "logprobs": None, "finish_reason": finish}
            obj = "text_completion"
        return JSONResponse(
            {"id": rid, "object": obj, "created": created, "model": model, "choices": [choice], "usage": usage_body}
        )

    async def _sse(
        req: Any, queue: asyncio.Queue[TokenEvent], rid: str, created: int, model: str, usage: bool, chat: bool, prompt_len: int
    ) -> AsyncIterator[str]:
        obj = "chat.completion.chunk" if chat else "text_completion"
        finish = None
        completion = 0

        def chunk(text: str | None, finish_reason: str | None, role: bool = False) -> str:
            if chat:
                delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {"content": text}
                choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            else:
                choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
            return (
                "data: "
                + json.dumps({"id": rid, "object": obj, "created": created, "model": model, "choices": [choice]})
                + "\n\n"
            )

        try:
            if chat:
                yield chunk(None, None, role=True)
            while finish is None:
                # one chunk per step; if the client fell behind, what queued up goes out as one chunk
                events = [await queue.get()]
                while not queue.empty() and events[-1].finish_reason is None:
                    events.append(queue.get_nowait())
                completion += sum(e.tokens for e in events)
                finish = events[-1].finish_reason
                yield chunk("".join(e.text for e in events), finish)
            if usage:
                yield (
                    "data: "
                    + json.dumps(
                        {
                            "id": rid,
                            "object": obj,
                            "created": created,
                            "model": model,
                            "choices": [],
                            "usage": {
                                "prompt_tokens": prompt_len,
                                "completion_tokens": completion,
                                "total_tokens": prompt_len + completion,
                            },
                        }
                    )
                    + "\n\n"
                )
            yield "data: [DONE]\n\n"
        finally:
            if finish is None:
                engine.abort(req)

    return app
