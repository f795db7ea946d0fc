"""The slowest traced requests and why, for the report (docs/tracing.md).

Why fetched apart from the verdict: the requests are kept by the exporter's request log
(``GET /requests``), only when its OTLP receiver runs. An exporter without it (404), an older
one, or any failure gives no section, never a failed report.
"""

from __future__ import annotations

from typing import Any

#: requests listed at most
SLOWEST = 10
_NUMBERS = ("ttft_seconds", "queue_seconds", "prefill_seconds", "decode_seconds", "e2e_seconds")


def fetch_requests(session: Any, base: str, timeout: float) -> list[dict[str, Any]]:
    """The slowest requests the exporter holds, each checked; empty when none or unreadable."""
    try:
        response = session.get(base + "/requests", params={"slowest": str(SLOWEST)}, timeout=timeout)
        if response.status_code != 200:
            return []
        body = response.json()
    except Exception:  # noqa: BLE001 - traced requests are an extra: the report goes on without them
        return []
    found = body.get("requests") if isinstance(body, dict) else None
    if not isinstance(found, list):
        return []
    return [_checked(r) for r in found[:SLOWEST] if isinstance(r, dict)]


def _checked(r: dict[str, Any]) -> dict[str, Any]:
    """Only the keys the report prints, each of its type (text bounded)."""
    out: dict[str, Any] = {k: str(r.get(k) or "")[:200] for k in ("engine", "trace_id")}
    out["sentence"] = str(r.get("sentence") or "")[:600]
    for k in _NUMBERS:
        v = r.get(k)
        out[k] = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    p = r.get("primary")
    out["primary"] = f"{str(p.get('layer'))[:40]}/{str(p.get('cause'))[:80]}" if isinstance(p, dict) else ""
    return out


def seconds(v: float | None) -> str:
    return "–" if v is None else f"{v:.3f}"
