"""Closed-loop load against a real engine, a /metrics poller beside it, and a verdict reader.

Closed loop: ``clients`` threads, each sending its next request as soon as the
previous one answers (the common interactive shape), until ``stop()``, the
deadline or, with ``requests``, that many requests in all. One shared
``httpx.Client`` (a client per request costs more CPU than the tiny models do).
Every loop is bounded by the deadline; ``stop()`` and ``wait()`` join.

``MetricsPoller`` scrapes the engine's /metrics during a load and keeps the texts
and the peak of a few lines (read with a line scan, cheap next to the engine);
``polled_load`` runs a fixed number of requests with both, for the real-engine tests.
``read_verdicts`` polls an exporter's ``/diagnosis`` and keeps ``count`` distinct
verdicts (one per diagnosis cycle) spaced at least ``spacing`` seconds apart.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:  # typing.Self is Python 3.11+; the project supports 3.10
    from typing_extensions import Self

#: ``send(client, n)``: send request number ``n`` (0, 1, ...) and return its HTTP status
Send = Callable[[httpx.Client, int], int]


class ClosedLoop:
    """``clients`` back-to-back request loops against one server."""

    def __init__(
        self, send: Send, clients: int, deadline_s: float, requests: int | None = None, request_timeout_s: float = 120.0
    ) -> None:
        self._send = send
        self.clients = clients
        #: how many requests in all (None: until stopped or the deadline)
        self.requests = requests
        self._deadline = time.monotonic() + deadline_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._next = 0
        self.statuses: Counter[int] = Counter()
        self.errors: Counter[str] = Counter()
        limits = httpx.Limits(max_connections=clients + 2, max_keepalive_connections=clients + 2)
        self._client = httpx.Client(timeout=httpx.Timeout(request_timeout_s, connect=10.0), limits=limits)
        self._threads = [threading.Thread(target=self._loop, name=f"client-{i}", daemon=True) for i in range(clients)]

    def _ticket(self) -> int | None:
        """The next request's number, or None when the budget is spent."""
        with self._lock:
            if self.requests is not None and self._next >= self.requests:
                return None
            self._next += 1
            return self._next - 1

    def _loop(self) -> None:
        while not self._stop.is_set() and time.monotonic() < self._deadline:
            n = self._ticket()
            if n is None:
                return
            try:
                status = self._send(self._client, n)
            except httpx.HTTPError as err:
                with self._lock:
                    self.errors[type(err).__name__] += 1
                self._stop.wait(0.2)
                continue
            with self._lock:
                self.statuses[status] += 1

    def __enter__(self) -> Self:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait(self) -> None:
        """Until every loop ends by itself (the ``requests`` budget spent, or the deadline)."""
        for t in self._threads:
            t.join(max(0.0, self._deadline - time.monotonic()) + 30)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(150)
        self._client.close()

    @property
    def completed(self) -> int:
        with self._lock:
            return self.statuses.get(200, 0)


def quick_value(text: str, line_prefix: str) -> float:
    """Largest value of the sample lines starting with ``line_prefix`` (0 if none).

    Used while polling under load, where parsing every exposition fully would
    compete for the CPU with the load itself; the tests then parse fully.
    """
    best = 0.0
    for line in text.splitlines():
        if line.startswith(line_prefix):
            best = max(best, float(line.rsplit(" ", 1)[-1]))
    return best


class MetricsPoller:
    """Scrapes ``url`` every ``interval`` s until stopped: up to ``max_kept`` texts, and ``peaks``.

    ``watch``: name -> line prefix (``"deferred": "llamacpp:requests_deferred "``);
    ``peaks[name]`` is the largest value any scrape showed on such a line.
    """

    def __init__(self, url: str, watch: Mapping[str, str], deadline_s: float, interval: float = 0.1, max_kept: int = 400) -> None:
        self.url = url
        self.watch = dict(watch)
        self.interval = interval
        self.max_kept = max_kept
        self.texts: list[str] = []
        self.peaks = {name: 0.0 for name in self.watch}
        self._deadline = time.monotonic() + deadline_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="metrics-poller", daemon=True)

    def _poll(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self._done.is_set() and time.monotonic() < self._deadline:
                try:
                    text = client.get(self.url).text
                except httpx.HTTPError:
                    time.sleep(self.interval)
                    continue
                for name, prefix in self.watch.items():
                    self.peaks[name] = max(self.peaks[name], quick_value(text, prefix))
                if len(self.texts) < self.max_kept:
                    self.texts.append(text)
                time.sleep(self.interval)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(30)


@dataclass
class PolledLoad:
    """What a bounded load did: HTTP statuses, wall seconds, the /metrics texts seen during it and their peaks."""

    statuses: Counter[int]
    errors: Counter[str]
    seconds: float
    during: list[str] = field(default_factory=list)
    peaks: dict[str, float] = field(default_factory=dict)
    after: str = ""


def polled_load(
    send: Send,
    requests: int,
    clients: int,
    metrics_url: str,
    watch: Mapping[str, str],
    deadline_s: float,
    poll_s: float = 0.1,
    max_kept: int = 400,
) -> PolledLoad:
    """``requests`` requests in a closed loop of ``clients`` while ``MetricsPoller`` watches ``metrics_url``.

    Every request may take up to the whole deadline (a tiny model under a queue
    answers late, never wrongly); ``after`` is the exposition once the load is over.
    """
    t0 = time.monotonic()
    with MetricsPoller(metrics_url, watch, deadline_s, poll_s, max_kept) as poller:
        with ClosedLoop(send, clients, deadline_s, requests=requests, request_timeout_s=deadline_s) as loop:
            loop.wait()
    result = PolledLoad(loop.statuses, loop.errors, time.monotonic() - t0, poller.texts, poller.peaks)
    result.after = httpx.get(metrics_url, timeout=10).raise_for_status().text
    return result


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
    "run_max_recent": "max_over_recent(sum(llm_scheduler_requests_running))",
    "run_max": "max_over_window(sum(llm_scheduler_requests_running))",
    "wait_max": "max_over_recent(sum(llm_scheduler_requests_waiting))",
    "cap_max": 'max_over_recent(sum(llm_scheduler_requests_waiting_by_reason{reason="capacity"}))',
    "queue_p95_window": "p95(llm_scheduler_queue_seconds)",
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
