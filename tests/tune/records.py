"""Ramp records (report.json dicts) built in code: the shape exporter/ramp/report.py writes, only the keys tune reads."""

from __future__ import annotations

from typing import Any


def step(
    concurrency: int,
    rps: float,
    ttft_p95: float | None,
    itl_p95: float | None = 0.02,
    errors: int = 0,
    preemptions: float = 0.0,
    running_max: float | None = None,
    primary: tuple[str, str] | None = None,
    headroom: dict[str, float] | None = None,
    causes: tuple[tuple[str, str], ...] = (),
    primaries: tuple[tuple[str, str, float], ...] = (),
) -> dict[str, Any]:
    gauges = {} if running_max is None else {"requests_running": {"mean": running_max, "max": running_max}}
    return {
        "index": 0,
        "concurrency": concurrency,
        "client": {
            "requests": max(1, int(rps * 10)),
            "errors": errors,
            "requests_per_s": rps,
            "output_tokens_per_s": rps * 100,
            "ttft_s": {"p50": None, "p95": ttft_p95, "p99": None},
            "itl_s": {"p50": None, "p95": itl_p95, "p99": None},
        },
        "exporter": {"gauges": gauges, "counters": {"preemptions": preemptions}},
        "diagnosis": {
            "primary": None if primary is None else {"layer": primary[0], "cause": primary[1], "chain": "x <- y"},
            "layers": {k: {"headroom_mean": v} for k, v in (headroom or {}).items()},
            "causes": [{"layer": layer, "cause": cause, "role": "primary"} for layer, cause in causes],
            # the primaries the step's readings named, with their share of the degraded readings (exporter/ramp/aggregate.py)
            "primaries": [{"layer": layer, "cause": cause, "share": share, "chain": cause} for layer, cause, share in primaries],
        },
    }


def report(steps: list[dict[str, Any]], knee_index: int | None = None, cause: tuple[str, str] | None = None) -> dict[str, Any]:
    for i, s in enumerate(steps):
        s["index"] = i
    return {
        "steps": steps,
        "knee": None if knee_index is None else steps[knee_index],
        "first_saturated_layer": cause[0] if cause else None,
        "cause": cause[1] if cause else None,
        "saturation": {"chain": "TTFT high <- KV cache full"} if cause else None,
    }
