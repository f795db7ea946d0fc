"""One ramp step's load: a draining loadgen run with fresh prompts, and its client-side figures."""

from __future__ import annotations

from typing import Any

import pytest

from exporter.loadgen import LoadResult, LoadSpec, summarize
from exporter.loadgen.spec import RequestRecord
from exporter.ramp.load import LoadSettings, build_spec, client_figures, make_step_loader
from exporter.ramp.model import Percentiles
from tests.simulator.sim_helpers import sim_server


def settings(base_url: str = "http://127.0.0.1:9", **kw: Any) -> LoadSettings:
    base: dict[str, Any] = {
        "base_url": base_url,
        "model": "m",
        "step_seconds": 4.0,
        "prompt_tokens": 64,
        "output_tokens": 128,
        "request_timeout_s": 20.0,
        "max_requests_per_step": 50,
        "seed": 7,
    }
    return LoadSettings(**{**base, **kw})


def test_a_step_issues_until_its_deadline_then_drains_with_fresh_prompts() -> None:
    first, second = build_spec(settings(), 2, 0), build_spec(settings(), 4, 1)
    first.validate()
    assert first.drain and first.duration_s == 4.0 and first.timeout_s == 20.0 and first.retries == 0
    assert (first.max_requests, first.rate, first.stream, first.endpoint) == (50, None, True, "completions")
    assert (first.seed, second.seed, second.concurrency) == (7, 8, 4)
    assert first.prompt_salt is None  # the load generator draws a fresh salt per step


def test_client_figures_from_a_summary() -> None:
    recs = [
        RequestRecord(0, 0.0, "ok", 1, 10, 4, output_tokens=4, ttft_s=0.1, e2e_s=0.5, itl_s=[0.1, 0.2]),
        RequestRecord(1, 0.0, "timeout", 1, 10, 4, error="slow"),
        RequestRecord(2, 0.0, "http_error", 1, 10, 4, http_status=503, error="out of memory"),
        RequestRecord(3, 0.0, "http_error", 1, 10, 4, http_status=503, error="out of memory"),
    ]
    c = client_figures(LoadResult(LoadSpec("http://x"), recs, summarize(recs, 2.0)))
    assert (c.duration_s, c.requests, c.errors, c.timeouts, c.cancelled, c.output_tokens) == (2.0, 1, 3, 1, 0, 4)
    assert (c.requests_per_s, c.output_tokens_per_s) == (0.5, 2.0)
    assert c.ttft_s == Percentiles(0.1, 0.1, 0.1) and c.itl_s.p50 == pytest.approx(0.15)
    assert c.error_messages == ["timeout: slow", "http_error HTTP 503: out of memory"]


def test_a_step_against_a_server_cancels_nothing() -> None:
    with sim_server("healthy", "vllm", time_scale=10.0) as srv:
        load_step = make_step_loader(
            settings(srv.base_url, model=None, step_seconds=0.5, prompt_tokens=32, output_tokens=400, max_requests_per_step=None)
        )
        c = load_step(3)
    # requests in flight at the deadline finished after it, and counted
    assert c.cancelled == 0 and c.errors == 0 and c.requests >= 3 and c.duration_s > 0.5
