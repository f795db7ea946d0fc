"""HTTP face of the diagnosis: ``GET /diagnosis`` (JSON) and ``GET /`` (live page).

Why the page is static and fetches the JSON: one source of truth (the same
body ``diagnose`` prints), no template engine, no external assets (it must
work on an air-gapped GPU node), and it keeps refreshing on its own.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import HTMLResponse, JSONResponse

from exporter.diagnosis.engine import DiagnosisEngine


def page_html() -> str:
    """The self-contained page shipped as package data."""
    return (resources.files("exporter.diagnosis") / "static" / "index.html").read_text(encoding="utf-8")


def build_router(engine: DiagnosisEngine) -> APIRouter:
    router = APIRouter()
    page = page_html()

    @router.get("/diagnosis")
    def diagnosis(signals: bool = False) -> JSONResponse:
        """The verdict; ``?signals=1`` adds the service-scope signals it was judged on."""
        latest = engine.latest
        body = latest.as_dict()
        if signals:
            body["signals"] = latest.signals
        return JSONResponse(body, headers={"Cache-Control": "no-store"})

    @router.get("/", response_class=HTMLResponse)
    def index() -> HTMLResponse:
        return HTMLResponse(page, headers={"Cache-Control": "no-store"})

    return router
