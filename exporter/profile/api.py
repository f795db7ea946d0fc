"""HTTP face of the on-demand profile: ``POST /profile`` takes one, ``GET /profile`` shows the last.

Why the routes exist when profiling is off: a bare 404 "Not Found" reads as a
wrong URL; here the 404 says the feature is off and which flag turns it on.
Nothing else is served then (no engine is touched, no directory read).

Why the POST is a plain (threaded) handler: it waits ``seconds`` and reads the
traces, which must not hold the event loop that answers /metrics.
"""

from __future__ import annotations

from fastapi import APIRouter, Query
from fastapi.responses import Response

from exporter import jsonsafe
from exporter.profile.run import Outcome, Profiler, error

OFF = "the on-demand profile is off: start serve with --enable-profile --profile-dir DIR (docs/profile.md)"
_HEADERS = {"Cache-Control": "no-store"}


def _json(outcome: Outcome) -> Response:
    text = jsonsafe.dumps(outcome.body, ensure_ascii=False, separators=(",", ":"))
    return Response(text.encode("utf-8"), status_code=outcome.status, media_type="application/json", headers=_HEADERS)


def build_router(profiler: Profiler | None) -> APIRouter:
    """The routes; ``profiler`` None: profiling is off and both answer 404 saying so."""
    router = APIRouter()

    @router.post("/profile")
    def take(engine: str | None = Query(None, max_length=1000), seconds: str | None = Query(None, max_length=100)) -> Response:
        if profiler is None:
            return _json(error(404, OFF))
        return _json(profiler.take(engine, seconds))

    @router.get("/profile")
    def last(engine: str | None = Query(None, max_length=1000)) -> Response:
        """One engine's last profile (404 before one), or every engine's without ``engine``."""
        if profiler is None:
            return _json(error(404, OFF))
        if engine is None:
            return _json(Outcome(200, {"running": profiler.state.running, "profiles": profiler.state.all_last()}))
        body = profiler.state.last(engine)
        if body is None:
            if engine not in profiler.engines:
                return _json(error(404, f"unknown engine {engine[:200]!r}", engines=sorted(profiler.engines)[:20]))
            return _json(error(404, f"no profile of engine {engine!r} yet: POST /profile?engine={engine}&seconds=N"))
        return _json(Outcome(200, body))

    return router
