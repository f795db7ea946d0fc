"""The exporter's HTTP face: /metrics, /healthz, /readyz, plus contributed routers.

Why FastAPI: the diagnosis contributes JSON and HTML routes next to /metrics,
and uvicorn serves TLS. /metrics itself is a plain route over cached bytes.
"""

from __future__ import annotations

from typing import Iterable

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import PlainTextResponse, Response

from exporter.collector import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE, ExpositionCache, wants_openmetrics
from exporter.store import SnapshotStore
from exporter.webconfig import WebConfig


def create_app(store: SnapshotStore, routers: Iterable[APIRouter] = (), web_config: WebConfig | None = None) -> FastAPI:
    app = FastAPI(title="llm-layer-exporter", docs_url=None, redoc_url=None, openapi_url=None)
    cache = ExpositionCache(store)
    auth = web_config or WebConfig()

    if auth.basic_auth_users:

        @app.middleware("http")
        async def basic_auth(request: Request, call_next):  # type: ignore[no-untyped-def]
            if request.url.path in ("/healthz", "/readyz"):
                return await call_next(request)
            if not auth.check_authorization(request.headers.get("authorization")):
                return PlainTextResponse(
                    "Unauthorized\n", status_code=401, headers={"WWW-Authenticate": 'Basic realm="llm-layer-exporter"'}
                )
            return await call_next(request)

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        om = wants_openmetrics(request.headers.get("accept"))
        return Response(cache.render(om), media_type=OPENMETRICS_CONTENT_TYPE if om else TEXT_CONTENT_TYPE)

    @app.get("/healthz")
    def healthz() -> Response:
        return PlainTextResponse("ok\n")

    @app.get("/readyz")
    def readyz() -> Response:
        if store.ready():
            return PlainTextResponse("ready\n")
        return PlainTextResponse("not ready: no source has sampled successfully yet\n", status_code=503)

    for router in routers:
        app.include_router(router)
    return app
