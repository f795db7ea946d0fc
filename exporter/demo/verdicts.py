"""One ``/diagnosis`` answer in one line: its state, and in trouble the primary, its confidence and chain.

Why apart: the live view's verdict panel, the plain progress lines, the tour's closing line
per scenario and its summary all name a verdict the same way.
"""

from __future__ import annotations

from typing import Any


def verdict_text(diagnosis: dict[str, Any] | None) -> str:
    """One line: the state, and in trouble the primary with its confidence and chain."""
    if diagnosis is None:
        return "n/a (no /diagnosis)"
    state = str(diagnosis.get("state", "unknown"))
    primary = diagnosis.get("primary")
    if primary:
        return (
            f"{state}: {primary.get('layer')}/{primary.get('cause')} "
            f"(confidence {primary.get('confidence', 0):.2f}): {primary.get('chain', '')}"
        )
    if state == "healthy":
        warnings = [b for b in diagnosis.get("bottlenecks") or [] if b.get("role") == "warning"]
        extra = "; warning: " + ", ".join(f"{b.get('layer')}/{b.get('cause')}" for b in warnings) if warnings else ""
        return "healthy: no symptom" + extra
    if state == "degraded":
        symptoms = [str(x.get("text") or x.get("id")) for x in diagnosis.get("symptoms") or []]
        return "degraded: no primary cause found" + (f" ({'; '.join(symptoms)})" if symptoms else "")
    notices = diagnosis.get("notices") or []
    return "unknown: " + (notices[0] if notices else "nothing measured yet")


def primary_name(diagnosis: dict[str, Any] | None) -> str | None:
    """``layer/cause`` of the verdict's primary, None when it names none."""
    p = (diagnosis or {}).get("primary")
    return f"{p.get('layer')}/{p.get('cause')}" if p else None


def conclusion_line(diagnosis: dict[str, Any] | None) -> str:
    """``verdict: <state> primary <layer/cause> (confidence x.xx): <chain>``."""
    if diagnosis is None:
        return "verdict: unknown primary none: no verdict from /diagnosis"
    state = str(diagnosis.get("state", "unknown"))
    p = diagnosis.get("primary")
    if p:
        return (
            f"verdict: {state} primary {p.get('layer')}/{p.get('cause')} "
            f"(confidence {float(p.get('confidence') or 0):.2f}): {p.get('chain', '')}"
        )
    return f"verdict: {state} primary none: {verdict_text(diagnosis).partition(': ')[2]}"
