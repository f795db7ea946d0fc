"""An OpenAI-compatible server that serves one client at a time and falls over at the second.

Why: "a step with only errors" needs a target that passes the ramp's pre-flight
and its first step, then fails every request - the way a server does when it
runs out of memory or its backend dies under load. This is a real HTTP server
on 127.0.0.1 (FastAPI + uvicorn in a thread), speaking the same streaming
protocol as vLLM; only its breaking point is chosen.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

MODEL = "falling-model"
TOKENS_PER_REQUEST = 4
TOKEN_GAP_S = 0.01
ERROR = {"error": {"message": "backend crashed: CUDA error: out of memory", "type": "server_error", "code": 503}}


class FallingServer:
    """State of one server: how many requests run now, and whether it broke."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.broken = False
        self.served_ok = 0
        self.app = self._build()

    def _build(self) -> FastAPI:
        app = FastAPI()

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": MODEL, "object": "model"}]}

        @app.post("/v1/completions")
        async def completions(request: Request) -> Any:
            body = await request.json()
            if body.get("model") != MODEL:
                return JSONResponse({"error": {"message": f"The model `{body.get('model')}` does not exist."}}, 404)
            self.in_flight += 1
            if self.in_flight >= 2:
                self.broken = True
            if self.broken:
                self.in_flight -= 1
                return JSONResponse(ERROR, 503)
            if not body.get("stream"):
                self.in_flight -= 1
                self.served_ok += 1
                return {"choices": [{"text": "ok", "finish_reason": "length"}], "usage": {"completion_tokens": 1}}
            return StreamingResponse(self._stream(), media_type="text/event-stream")

        return app

    async def _stream(self) -> AsyncIterator[str]:
        done = False
        try:
            for i in range(TOKENS_PER_REQUEST):
                if self.broken:
                    yield f"data: {json.dumps(ERROR)}\n\n"
                    return
                await asyncio.sleep(TOKEN_GAP_S)
                chunk = {"choices": [{"text": f" w{i}", "finish_reason": None}]}
                yield f"data: {json.dumps(chunk)}\n\n"
            # leave before the last bytes go out: the client's next request must find us idle
            done = True
            self.in_flight -= 1
            self.served_ok += 1
            yield "data: " + json.dumps({"choices": [], "usage": {"completion_tokens": TOKENS_PER_REQUEST}}) + "\n\n"
            yield "data: [DONE]\n\n"
        finally:
            if not done:
                self.in_flight -= 1
