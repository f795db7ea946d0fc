"""A ramp step's traced requests (exporter/ramp/traced.py): where their time went, from the engine's spans."""

from __future__ import annotations

from exporter.ramp.model import ClientFigures, Step
from exporter.ramp.report import build_report, render_markdown
from exporter.ramp.traced import TracedFigures, sentence, traced_figures


def _r(n: int, arrival: float, queue: float, prefill: float, decode: float) -> dict[str, object]:
    return {
        "trace_id": f"{n:032x}",
        "span_id": f"{n:016x}",
        "arrival": arrival,
        "queue_seconds": queue,
        "prefill_seconds": prefill,
        "decode_seconds": decode,
        "ttft_seconds": queue + prefill,
        "e2e_seconds": queue + prefill + decode,
    }


def test_only_the_steps_own_requests_count_once_each() -> None:
    held = [_r(1, 100.0, 3.0, 1.0, 6.0), _r(2, 101.0, 1.0, 1.0, 8.0), _r(3, 99.0, 50.0, 0.0, 1.0), _r(4, 110.0, 50, 0, 1)]
    held.append(dict(held[0]))  # held twice (the slowest and the sample): counted once
    t = traced_figures(held, 100.0, 110.0)
    assert t.requests == 2
    assert (t.queue_share, t.prefill_share, t.decode_share) == (0.2, 0.1, 0.7)
    assert t.queue_share_of_ttft == 4.0 / 6.0
    assert sentence(t) == "2 traced requests: 20 % queued, 10 % in prefill, 70 % in decode of their end-to-end time"
    assert traced_figures([], 0, 1) == TracedFigures() and sentence(TracedFigures()) is None


def test_hostile_values_are_skipped_not_counted() -> None:
    bad: list[dict[str, object]] = [
        {"arrival": "soon", "e2e_seconds": 1.0},
        {"arrival": 100.5, "e2e_seconds": -1.0},
        {"arrival": 100.5, "e2e_seconds": True},
        {"arrival": 100.5, "e2e_seconds": 2.0, "queue_seconds": float("nan")},
    ]
    t = traced_figures(bad, 100.0, 101.0)
    assert t.requests == 1 and t.queue_share is None and t.decode_share is None


def test_the_report_says_where_the_time_went_at_the_knee() -> None:
    client = ClientFigures(
        duration_s=5, requests=10, errors=0, timeouts=0, output_tokens=100, requests_per_s=2, output_tokens_per_s=20
    )
    knee = Step(index=1, concurrency=8, client=client, flags=["throughput_flat"])
    knee.traced = TracedFigures(12, 0.63, 0.1, 0.27, 0.86)
    steps = [Step(index=0, concurrency=1, client=client), knee]
    md = render_markdown(build_report(steps, knee, None, {}), steps, knee, None)
    assert (
        "Where the time went at the knee, from the engine's spans: 12 traced requests: 63 % queued, 10 % in prefill, "
        "27 % in decode of their end-to-end time." in md
    )
