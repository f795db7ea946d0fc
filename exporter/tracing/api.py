"""``GET /requests``: the traced requests the exporter holds, each with why it was slow.

Parameters: ``slowest=N`` (1-1000: the N slowest held, slowest first), ``engine=NAME`` (one
engine's), ``trace_id=ID`` (32 hex digits: the requests of one trace). Without ``slowest`` or
``trace_id`` the uniform sample, newest first. The body: ``{"requests": [...], "held": N,
"engines": [...], "receiving": bool}``; each request's keys are documented in docs/tracing.md.
A bad parameter is a 400 with ``{"error": ...}``; an unknown trace id is a 200 with no request
(it may not have been kept, or not have finished yet).
"""

from __future__ import annotations

import re

from fastapi import APIRouter, Query
from fastapi.responses import Response

from exporter import jsonsafe
from exporter.tracing.log import RequestLog

MAX_SLOWEST = 1000
_TRACE_ID = re.compile(r"[0-9a-fA-F]{32}\Z")
_HEADERS = {"Cache-Control": "no-store"}


def _json(body: object, status_code: int = 200) -> Response:
    return Response(jsonsafe.dumps(body), status_code=status_code, media_type="application/json", headers=_HEADERS)


def build_router(log: RequestLog, receiving: bool) -> APIRouter:
    """The ``/requests`` route over ``log``; ``receiving``: a receiver is listening (else the
    body says so, since no request can arrive)."""
    router = APIRouter()

    @router.get("/requests")
    def requests(
        slowest: str | None = Query(None),
        engine: str | None = Query(None),
        trace_id: str | None = Query(None),
    ) -> Response:
        n = None
        if slowest is not None:
            if not (slowest.isascii() and slowest.isdigit() and 1 <= int(slowest[:5]) <= MAX_SLOWEST):
                return _json({"error": f"slowest: expected a whole number from 1 to {MAX_SLOWEST}"}, 400)
            n = int(slowest)
        if trace_id is not None and not _TRACE_ID.match(trace_id):
            return _json({"error": "trace_id: expected 32 hexadecimal digits"}, 400)
        if engine is not None and len(engine) > 200:
            return _json({"error": "engine: at most 200 characters"}, 400)
        found = log.query(slowest=n, engine=engine, trace_id=trace_id.lower() if trace_id else None)
        body = {
            "requests": found,
            "held": len(log.reservoir),
            "engines": log.reservoir.engines(),
            "receiving": receiving,
        }
        return _json(body)

    return router
