"""The last on-demand operator profile per engine, for the report (issue 23 item 4, docs/profile.md).

Why fetched apart from the verdict: the profile is taken on request (``POST
/profile``) and kept by the exporter; ``GET /profile`` answers the last one of
every engine. An exporter without profiling (404), an older one, or any failure
gives no section, never a failed report.

Beside the table each engine gets its split in one sentence, the largest kind with the prompt
length it was measured at ("62 % attention at 8k-token prompts"): the same sentence the live
page prints (exporter/profile/summary.py).
"""

from __future__ import annotations

from typing import Any

from exporter.profile.summary import sentence
from exporter.schema import OPERATOR_KINDS

#: engines listed in the report's table at most
MAX_ENGINES = 20


def fetch_profiles(session: Any, base: str, timeout: float) -> dict[str, dict[str, Any]]:
    """engine -> its last profile with shares; empty when none or when /profile cannot be read."""
    try:
        response = session.get(base + "/profile", timeout=timeout)
        if response.status_code != 200:
            return {}
        body = response.json()
    except Exception:  # noqa: BLE001 - a profile is an extra: the report goes on without it
        return {}
    profiles = body.get("profiles") if isinstance(body, dict) else None
    if not isinstance(profiles, dict):
        return {}
    out: dict[str, dict[str, Any]] = {}
    for engine, p in sorted(profiles.items())[:MAX_ENGINES]:
        if isinstance(p, dict) and isinstance(p.get("shares"), dict) and p["shares"]:
            out[str(engine)[:200]] = p
    return out


def share_rows(profiles: dict[str, dict[str, Any]]) -> list[tuple[str, Any, list[float | None]]]:
    """(engine, ended_at, share per kind in OPERATOR_KINDS order) for each profile."""
    rows = []
    for engine, p in profiles.items():
        shares = p["shares"]
        values = [float(v) if isinstance(v := shares.get(k), (int, float)) else None for k in OPERATOR_KINDS]
        rows.append((engine, p.get("ended_at"), values))
    return rows


def split_sentences(profiles: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    """(engine, "62 % attention at 8k-token prompts (of GPU kernel time)") for each profile with shares."""
    out = []
    for engine, p in profiles.items():
        text = sentence(p)
        if text is not None:
            out.append((engine, text))
    return out
