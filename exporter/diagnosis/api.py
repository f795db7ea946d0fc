"""HTTP face of the diagnosis: ``GET /diagnosis`` (JSON) and ``GET /`` (live page).

Why the page is static and fetches the JSON: one source of truth (the same
body ``diagnose`` prints), no template engine, no external assets (it must
work on an air-gapped GPU node), and it keeps refreshing on its own.

``/diagnosis?engine=NAME`` is one engine's verdict (exporter/diagnosis/fanout.py);
an unknown name is a 404 with a one-line JSON error that lists the known ones.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse, Response

from exporter import jsonsafe
from exporter.diagnosis.engine import DiagnosisEngine
from exporter.diagnosis.fanout import NodeDiagnosis

#: engine names listed in a 404 body at most (discovery may find dozens of pods)
MAX_NAMES_LISTED = 20


def page_html() -> str:
    """The self-contained page shipped as package data."""
    return (resources.files("exporter.diagnosis") / "static" / "index.html").read_text(encoding="utf-8")


def _json(body: object, headers: dict[str, str], status_code: int = 200) -> Response:
    """``body`` as strict JSON: a NaN or infinity an engine reported is ``null``, never an HTTP 500
    (exporter/jsonsafe.py); otherwise what fastapi's JSON response writes."""
    text = jsonsafe.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return Response(text.encode("utf-8"), status_code=status_code, media_type="application/json", headers=headers)


def build_router(engine: NodeDiagnosis | DiagnosisEngine) -> APIRouter:
    router = APIRouter()
    page = page_html()
    headers = {"Cache-Control": "no-store"}

    @router.get("/diagnosis")
    def diagnosis(signals: bool = False, engine_name: str | None = Query(None, alias="engine")) -> Response:
        """The verdict; ``?signals=1`` adds the service-scope signals it was judged on."""
        if isinstance(engine, DiagnosisEngine):  # a bare engine (tests, tools): the old single verdict
            body = engine.latest.as_dict()
            if signals:
                body["signals"] = engine.latest.signals
            return _json(body, headers)
        found = engine.body(engine_name, signals)
        if found is None:
            known = sorted(engine.latest.engines)[:MAX_NAMES_LISTED]
            error = {"error": f"unknown engine {(engine_name or '')[:200]!r}", "engines": known}
            return _json(error, headers, status_code=404)
        return _json(found, headers)

    @router.get("/", response_class=HTMLResponse)
    def index() -> HTMLResponse:
        return HTMLResponse(page, headers=headers)

    return router
