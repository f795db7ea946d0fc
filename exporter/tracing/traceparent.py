"""W3C ``traceparent`` for our own clients: the canary probe and the load generator.

Why: the engines honour an incoming ``traceparent`` (the request span becomes a child of the
caller's), so a probe or a ramp/tune request sent with one can be found again in the engine's
spans (``GET /requests?trace_id=...``, the user's tracing backend). One trace per logical
request, a new parent span id per attempt (a retry is another HTTP request of the same trace);
sampled flag set, so an engine that samples by its parent keeps the span. Random ids from the
OS (``secrets``): ids must not repeat across processes, whatever a run's seeded RNG does.
"""

from __future__ import annotations

import re
import secrets

HEADER = "traceparent"
_FORMAT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]\Z")


def new_trace_id() -> str:
    """32 lowercase hex digits, never all zero (W3C: an all-zero trace id is invalid)."""
    while True:
        trace_id = secrets.token_hex(16)
        if trace_id.strip("0"):
            return trace_id


def traceparent(trace_id: str) -> str:
    """``00-<trace_id>-<new parent span id>-01`` (version 00, sampled)."""
    while True:
        span_id = secrets.token_hex(8)
        if span_id.strip("0"):
            return f"00-{trace_id}-{span_id}-01"


def trace_id_of(header: str) -> str | None:
    """The trace id of a well-formed version-00 ``traceparent``; None otherwise."""
    m = _FORMAT.match(header.strip())
    return m.group(1) if m and m.group(1).strip("0") and m.group(2).strip("0") else None
