"""The exporter's HTTP face: /metrics, /healthz, /readyz, plus contributed routers.

Why FastAPI: the diagnosis contributes JSON and HTML routes next to /metrics,
and uvicorn serves TLS. GET /metrics, /healthz and /readyz are answered by
exporter/serving.py's ASGI layer from published state, ahead of FastAPI's stack,
so a probe never waits behind a /metrics render (issue 25).

Basic auth, when configured, guards every path except OPEN_PATHS. Those two stay
open by design: a kubelet or load balancer probes them without credentials, and
they reveal nothing but "the process answers" and "a source has sampled". The
check runs in a plain ASGI middleware that awaits exporter.basicauth off the event
loop, so wrong passwords never delay the open probes or authorised scrapes.
"""

from __future__ import annotations

from collections.abc import Iterable

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import PlainTextResponse, Response
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from exporter.basicauth import BasicAuthVerifier, Verdict
from exporter.collector import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE, ExpositionCache, wants_openmetrics
from exporter.familyfilter import FamilyFilter
from exporter.serving import NOT_READY, ServingPaths, favour_the_event_loop
from exporter.store import SnapshotStore
from exporter.webconfig import WebConfig

#: reachable without credentials even when basic auth is on: liveness and readiness probes
OPEN_PATHS = frozenset({"/healthz", "/readyz"})


class BasicAuthMiddleware:
    """401 for missing or wrong credentials, 503 when the verification pool is full, else the app."""

    def __init__(self, app: ASGIApp, verifier: BasicAuthVerifier) -> None:
        self.app = app
        self.verifier = verifier

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        client = scope.get("client")  # (host, port); failures are limited per address (exporter/basicauth.py)
        verdict = await self.verifier.verify(Headers(scope=scope).get("authorization"), client[0] if client else None)
        if verdict is Verdict.OK:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        if verdict is Verdict.BUSY:
            response = PlainTextResponse(
                "Too many password checks in progress; retry\n", status_code=503, headers={"Retry-After": "1"}
            )
        else:
            response = PlainTextResponse(
                "Unauthorized\n", status_code=401, headers={"WWW-Authenticate": 'Basic realm="llm-layer-exporter"'}
            )
        await response(scope, receive, send)


def create_app(
    store: SnapshotStore,
    routers: Iterable[APIRouter] = (),
    web_config: WebConfig | None = None,
    families: FamilyFilter | None = None,
) -> FastAPI:
    """``families``: what /metrics publishes (--metrics.include / --metrics.exclude, exporter/familyfilter.py)."""
    app = FastAPI(title="llm-layer-exporter", docs_url=None, redoc_url=None, openapi_url=None)
    cache = ExpositionCache(store, families)
    app.state.exposition = cache
    # GET /healthz, /readyz and /metrics are answered here, before FastAPI's stack, never behind a
    # render (exporter/serving.py); added first, so basic auth (added next) wraps it
    app.add_middleware(ServingPaths, store=store, cache=cache)
    favour_the_event_loop()
    users = (web_config or WebConfig()).basic_auth_users
    if users:
        verifier = BasicAuthVerifier(users)
        app.state.auth = verifier
        app.add_middleware(BasicAuthMiddleware, verifier=verifier)

    # the three routes below declare the paths (other methods get 405); ServingPaths answers their GETs
    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        om = wants_openmetrics(request.headers.get("accept"))
        return Response(cache.render(om), media_type=OPENMETRICS_CONTENT_TYPE if om else TEXT_CONTENT_TYPE)

    @app.get("/healthz")
    async def healthz() -> Response:
        """Open without auth (OPEN_PATHS): liveness only."""
        return PlainTextResponse("ok\n")

    @app.get("/readyz")
    def readyz() -> Response:
        """Open without auth (OPEN_PATHS): ready once a GPU or engine source has sampled (store.ready)."""
        if store.ready():
            return PlainTextResponse("ready\n")
        return PlainTextResponse(NOT_READY, status_code=503)

    for router in routers:
        app.include_router(router)
    return app
