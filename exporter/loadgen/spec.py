"""What a load run does (``LoadSpec``) and what it measured (``RequestRecord``, ``LoadSummary``).

Why plain dataclasses: the demo, the simulator tests and the ``ramp`` command
build specs in code and read records back; nothing here knows about HTTP.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

ENDPOINTS = ("completions", "chat")
#: Final outcome of one logical request (after retries).
STATUSES = ("ok", "timeout", "rejected", "http_error", "connection_error", "protocol_error", "cancelled")


@dataclass
class LoadSpec:
    """One load run against an OpenAI-compatible server.

    ``prompt_tokens`` and ``max_tokens`` are mixes of ``(value, weight)``; one
    prompt token is one whitespace-separated word (what the simulator counts;
    a real tokenizer gives a similar count for these synthetic words).
    A run ends at ``duration_s``, after ``max_requests`` requests, or when the
    caller's stop event is set — at least one of them must bound it.

    ``drain``: at ``duration_s`` no new request (nor retry) starts, and the
    requests in flight run to completion, each bounded by ``timeout_s``,
    instead of being cancelled (a cancelled stream is an abort on the server).
    The run's duration then includes that drain tail. The stop event always
    ends a run at once, cancelling what is in flight, drain or not.

    ``prompt_salt``: the unique part of every prompt starts with it. Left
    None, each run draws a fresh random salt, so a run never repeats an
    earlier run's prompts (a server's prefix cache cannot serve one run from
    another); only the shared prefixes (``shared_prefix_ratio``), deterministic
    per ``seed``, repeat across runs. Set it to repeat a run's prompts exactly.
    """

    base_url: str
    model: str | None = None
    endpoint: str = "completions"
    stream: bool = True
    #: most requests in flight at once (closed loop: this many clients back to back)
    concurrency: int = 8
    #: open loop: Poisson arrivals per second, still capped at ``concurrency`` in flight
    rate: float | None = None
    duration_s: float | None = 10.0
    max_requests: int | None = None
    #: at ``duration_s`` let the requests in flight finish (bounded by ``timeout_s``) instead of cancelling them
    drain: bool = False
    prompt_tokens: tuple[tuple[int, float], ...] = ((128, 0.5), (512, 0.4), (2048, 0.1))
    max_tokens: tuple[tuple[int, float], ...] = ((64, 1.0),)
    #: share of requests whose prompt starts with one of ``prefix_groups`` shared prefixes
    shared_prefix_ratio: float = 0.0
    shared_prefix_tokens: int = 256
    prefix_groups: int = 1
    #: starts the unique part of every prompt; None: a fresh random salt per run ("": none, prompts repeat)
    prompt_salt: str | None = None
    #: per attempt, seconds; on expiry the connection is closed (the server sees an abort)
    timeout_s: float = 30.0
    #: ``timeout_s`` counts seconds of the clock ``run_load`` paces arrivals on (the simulator's model
    #: time, exporter/loadgen/pacing.py), not wall seconds: a scenario's client timeouts stay the
    #: scenario's however far a starved simulator falls behind the wall clock
    timeout_on_clock: bool = False
    connect_timeout_s: float = 5.0
    #: extra attempts after a timeout, 429, 5xx or connection error
    retries: int = 0
    #: base of the exponential backoff between attempts; each wait is jittered by x0.5-1.5
    retry_backoff_s: float = 0.1
    #: closed loop: client i starts after i/concurrency of this many seconds (0: all at once)
    ramp_up_s: float = 0.0
    seed: int = 0
    #: newest records kept (the summary's counters still cover every request)
    max_records: int = 100_000
    headers: dict[str, str] = field(default_factory=dict)
    #: closed loop: a header naming each client on its requests (per run and client), so a simulator
    #: can hold its model clock until an answered client is back (exporter/simulator/lockstep.py);
    #: None: requests carry no client identity (real engines, open loops)
    client_header: str | None = None

    def validate(self) -> None:
        """Raise ValueError naming the first bad field."""
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url: expected an http(s) URL, got {self.base_url!r}")
        if self.endpoint not in ENDPOINTS:
            raise ValueError(f"endpoint: expected one of {', '.join(ENDPOINTS)}, got {self.endpoint!r}")
        if self.concurrency < 1:
            raise ValueError("concurrency: expected at least 1")
        for name in ("rate", "duration_s", "timeout_s", "connect_timeout_s"):
            value = getattr(self, name)
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name}: expected a positive number, got {value!r}")
        if self.max_requests is not None and self.max_requests < 1:
            raise ValueError("max_requests: expected at least 1")
        for name in ("prompt_tokens", "max_tokens"):
            mix = getattr(self, name)
            if not mix or any(int(v) < 1 or w < 0 for v, w in mix) or sum(w for _, w in mix) <= 0:
                raise ValueError(f"{name}: expected (value >= 1, weight >= 0) pairs with a positive total weight")
        if not 0.0 <= self.shared_prefix_ratio <= 1.0:
            raise ValueError("shared_prefix_ratio: expected a value from 0 to 1")
        if self.shared_prefix_tokens < 0 or self.prefix_groups < 1:
            raise ValueError("shared_prefix_tokens >= 0 and prefix_groups >= 1 expected")
        if self.retries < 0 or self.retry_backoff_s < 0 or self.ramp_up_s < 0:
            raise ValueError("retries, retry_backoff_s and ramp_up_s: expected 0 or more")
        if self.max_records < 1:
            raise ValueError("max_records: expected at least 1")
        if self.prompt_salt is not None and any(c.isspace() for c in self.prompt_salt):
            raise ValueError("prompt_salt: expected a string without whitespace (it is part of one word)")


@dataclass
class RequestRecord:
    """One logical request: its final attempt's timings and how it ended."""

    index: int
    #: seconds from the start of the run to the first attempt
    start_s: float
    status: str
    attempts: int
    prompt_tokens: int
    max_tokens: int
    output_tokens: int = 0
    http_status: int | None = None
    #: streaming only: time to the first token of the final attempt
    ttft_s: float | None = None
    #: final attempt: request to last byte
    e2e_s: float | None = None
    #: first attempt start to the end, retries included
    total_s: float | None = None
    #: gaps between consecutive streamed chunks (one chunk may hold several tokens)
    itl_s: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None
    #: the W3C trace id sent in ``traceparent`` (every attempt): the engine's spans of this request
    trace_id: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LoadSummary:
    """Aggregates over a run. Latencies in seconds; None where nothing was measured."""

    duration_s: float
    requests: int
    ok: int
    errors: int
    timeouts: int
    rejected: int
    cancelled: int
    retries: int
    prompt_tokens: int
    output_tokens: int
    requests_per_s: float
    output_tokens_per_s: float
    ttft_p50_s: float | None = None
    ttft_p95_s: float | None = None
    ttft_p99_s: float | None = None
    itl_p50_s: float | None = None
    itl_p95_s: float | None = None
    itl_p99_s: float | None = None
    e2e_p50_s: float | None = None
    e2e_p95_s: float | None = None
    e2e_p99_s: float | None = None
    by_status: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LoadResult:
    spec: LoadSpec
    records: list[RequestRecord]
    summary: LoadSummary
