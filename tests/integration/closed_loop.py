"""A steady closed-loop load and a verdict reader, for the real-engine verdict tests.

Closed loop: ``clients`` threads, each sending its next request as soon as the
previous one answers (the common interactive shape), until ``stop()`` or the
deadline. One shared ``httpx.Client`` (a client per request costs more CPU than
the tiny models do). Every loop is bounded by the deadline; ``stop()`` joins.

``read_verdicts`` polls an exporter's ``/diagnosis`` and keeps ``count`` distinct
verdicts (one per diagnosis cycle) spaced at least ``spacing`` seconds apart.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx


class ClosedLoop:
    """``clients`` back-to-back request loops against one server."""

    def __init__(self, send: Callable[[httpx.Client], int], clients: int, deadline_s: float) -> None:
        self._send = send
        self.clients = clients
        self._deadline = time.monotonic() + deadline_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.statuses: Counter[int] = Counter()
        self.errors: Counter[str] = Counter()
        limits = httpx.Limits(max_connections=clients + 2, max_keepalive_connections=clients + 2)
        self._client = httpx.Client(timeout=httpx.Timeout(120.0, connect=10.0), limits=limits)
        self._threads = [threading.Thread(target=self._loop, name=f"client-{i}", daemon=True) for i in range(clients)]

    def _loop(self) -> None:
        while not self._stop.is_set() and time.monotonic() < self._deadline:
            try:
                status = self._send(self._client)
            except httpx.HTTPError as err:
                with self._lock:
                    self.errors[type(err).__name__] += 1
                self._stop.wait(0.2)
                continue
            with self._lock:
                self.statuses[status] += 1

    def __enter__(self) -> ClosedLoop:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(150)
        self._client.close()

    @property
    def completed(self) -> int:
        with self._lock:
            return self.statuses.get(200, 0)


def read_verdicts(exporter_base: str, count: int, spacing: float, timeout_s: float) -> list[dict[str, Any]]:
    """``count`` distinct /diagnosis verdicts, at least ``spacing`` s apart, within ``timeout_s``."""
    out: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    last_kept = -1e9
    with httpx.Client(timeout=10) as client:
        while len(out) < count and time.monotonic() < deadline:
            try:
                v = client.get(exporter_base + "/diagnosis", params={"signals": "1"}).json()
            except (httpx.HTTPError, ValueError):
                time.sleep(0.5)
                continue
            now = time.monotonic()
            if now - last_kept >= spacing and (not out or v.get("timestamp") != out[-1].get("timestamp")):
                out.append(v)
                last_kept = now
            time.sleep(0.2)
    return out


def primary_of(verdict: dict[str, Any]) -> str:
    """``layer/cause`` of the primary, else the state (``healthy``, ``degraded``, ``unknown``)."""
    p = verdict.get("primary")
    return f"{p['layer']}/{p['cause']}" if p else str(verdict.get("state"))


#: signals worth seeing when a reading is wrong (short names for the message)
STORY_SIGNALS = {
    "kv_max": "max_over_window(max(llm_kv_cache_usage_ratio))",
    "slot_ctx": "sum(llm_kv_cache_used_tokens) / (sum(llm_scheduler_slots) * max(llm_kv_cache_slot_context_tokens))",
    "waiting": "sum(llm_scheduler_requests_waiting)",
    "wait_min": "min_over_recent(sum(llm_scheduler_requests_waiting))",
    "capacity": 'sum(llm_scheduler_requests_waiting_by_reason{reason="capacity"})',
    "running": "sum(llm_scheduler_requests_running)",
    "preempt/s": "rate(llm_kv_cache_preemptions_total)",
    "queue_p95": "p95_over_recent(llm_scheduler_queue_seconds)",
    "ttft_p95": "p95_over_recent(llm_request_ttft_seconds)",
    "itl_p95": "p95_over_recent(llm_request_inter_token_seconds)",
}


def story(verdicts: list[dict[str, Any]]) -> str:
    """One line per verdict, for a failure message: what it concluded, on which symptoms and signals."""
    lines = []
    for v in verdicts:
        syms = ",".join(s["id"] for s in v.get("symptoms", []))
        sig = v.get("signals") or {}
        shown = " ".join(f"{k}={sig[n]:.3g}" for k, n in STORY_SIGNALS.items() if n in sig)
        lines.append(f"{primary_of(v):50} symptoms[{syms}] holding{v.get('holding')} {shown} notices{v.get('notices', [])[:1]}")
    return "\n".join(lines)
