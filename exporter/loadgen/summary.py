"""Percentiles and the per-run summary, computed from request records.

Why linear-interpolated percentiles: they are what numpy and most benchmark
tools report, so numbers compare with vLLM's benchmark_serving and friends.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from exporter.loadgen.spec import STATUSES, LoadSummary, RequestRecord


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) with linear interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(
    records: Iterable[RequestRecord],
    duration_s: float,
    counts: dict[str, int] | None = None,
    tokens: tuple[int, int] | None = None,
    retries: int | None = None,
) -> LoadSummary:
    """Summary of ``records``; ``counts``/``tokens``/``retries`` override them when records were dropped."""
    recs = list(records)
    by_status = dict(counts) if counts is not None else {}
    if counts is None:
        for r in recs:
            by_status[r.status] = by_status.get(r.status, 0) + 1
    prompt_tokens, output_tokens = (
        tokens
        if tokens is not None
        else (sum(r.prompt_tokens for r in recs if r.status == "ok"), sum(r.output_tokens for r in recs if r.status == "ok"))
    )
    extra = retries if retries is not None else sum(r.attempts - 1 for r in recs)
    ok = [r for r in recs if r.status == "ok"]
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    itl = [g for r in ok for g in r.itl_s]
    e2e = [r.e2e_s for r in ok if r.e2e_s is not None]
    total = sum(by_status.values())
    span = max(duration_s, 1e-9)
    n_ok = by_status.get("ok", 0)
    failures = sum(v for k, v in by_status.items() if k not in ("ok", "cancelled"))
    return LoadSummary(
        duration_s=duration_s,
        requests=total,
        ok=n_ok,
        errors=failures,
        timeouts=by_status.get("timeout", 0),
        rejected=by_status.get("rejected", 0),
        cancelled=by_status.get("cancelled", 0),
        retries=extra,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        requests_per_s=n_ok / span,
        output_tokens_per_s=output_tokens / span,
        ttft_p50_s=percentile(ttft, 50),
        ttft_p95_s=percentile(ttft, 95),
        ttft_p99_s=percentile(ttft, 99),
        itl_p50_s=percentile(itl, 50),
        itl_p95_s=percentile(itl, 95),
        itl_p99_s=percentile(itl, 99),
        e2e_p50_s=percentile(e2e, 50),
        e2e_p95_s=percentile(e2e, 95),
        e2e_p99_s=percentile(e2e, 99),
        by_status={k: by_status.get(k, 0) for k in STATUSES if by_status.get(k)},
    )
