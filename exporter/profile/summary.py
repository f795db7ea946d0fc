"""The profile's split in one sentence beside the verdict: "62 % attention at 8k-token prompts".

Why the prompt length goes with it: a split means little without the input it was measured
on (attention's share grows with the context, gemm's with the batch). The profile keeps the
median prompt length of the requests the engine finished while it ran (the delta of its
``llm_request_prompt_tokens`` histogram between the snapshots before and after; when none
finished in that time, the engine's whole histogram, said so), and the report and the live page
(exporter/diagnosis/static/index.html) print the same sentence (``sentence``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from exporter.diagnosis.window import bucket_quantile
from exporter.samples import HistogramSample
from exporter.store import Snapshot

PROMPT_HISTOGRAM = "llm_request_prompt_tokens"
#: what each basis splits, in words
BASIS_WORDS = {"gpu_kernels": "of GPU kernel time", "cpu_ops": "of CPU operator time"}


def _merged(histograms: list[HistogramSample]) -> dict[tuple[float, ...], list[float]]:
    out: dict[tuple[float, ...], list[float]] = {}
    for h in histograms:
        bounds = tuple(le for le, _ in h.buckets)
        acc = out.setdefault(bounds, [0.0] * len(bounds))
        for i, (_, c) in enumerate(h.buckets):
            acc[i] += c
    return out


def prompt_p50(before: Snapshot | None, after: Snapshot | None, server: str) -> tuple[float | None, bool]:
    """(median prompt tokens of the engine ``server``, whether it is of the requests finished during
    the profile); (None, False) when the engine publishes no prompt histogram."""
    if after is None:
        return None, False
    now = _merged([h for h in after.histograms(PROMPT_HISTOGRAM) if h.labels.get("server") == server])
    if not now:
        return None, False
    then = _merged([h for h in before.histograms(PROMPT_HISTOGRAM) if h.labels.get("server") == server]) if before else {}
    bounds, counts = max(now.items(), key=lambda item: item[1][-1])  # the bucket layout most requests are in
    old = then.get(bounds)
    if old is not None and counts[-1] > old[-1]:
        delta = [max(0.0, c - o) for c, o in zip(counts, old)]
        return bucket_quantile(0.5, list(zip(bounds, delta))), True
    return bucket_quantile(0.5, list(zip(bounds, counts))), False


def tokens_text(n: float) -> str:
    """8192 -> "8.2k", 600 -> "600", 32768 -> "33k": prompt lengths as people say them."""
    if n < 1000:
        return f"{n:.0f}"
    k = n / 1000
    return f"{k:.0f}k" if k >= 10 else f"{k:.1f}".removesuffix(".0") + "k"


def sentence(profile: Mapping[str, Any]) -> str | None:
    """The largest kind of a profile's split with the prompt p50 it was measured at; None without shares."""
    shares = profile.get("shares")
    if not isinstance(shares, Mapping):
        return None
    numeric = {str(k): float(v) for k, v in shares.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if not numeric or max(numeric.values()) <= 0:
        return None
    kind = max(numeric, key=lambda k: numeric[k])
    text = f"{100 * numeric[kind]:.0f} % {kind}"
    p50 = profile.get("prompt_tokens_p50")
    if isinstance(p50, (int, float)) and not isinstance(p50, bool) and p50 > 0:
        text += f" at {tokens_text(float(p50))}-token prompts"
        if profile.get("prompt_tokens_during_profile") is False:
            text += " (median since the engine started: none finished during the profile)"
    words = BASIS_WORDS.get(str(profile.get("basis")))
    return f"{text} ({words})" if words else text
