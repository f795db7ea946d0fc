"""The ramp workload flags a tune test passes (the ``ramp`` names), built in one place.

Why: every real or simulated tune test states the same few numbers (concurrency levels,
prompt and output length, step length, sampling, start-up timeout); spelling the flag
list out in each file hid the numbers that differ between them.
"""

from __future__ import annotations


def workload(
    concurrency: str,
    prompt_tokens: int,
    output_tokens: int,
    step_seconds: float = 4,
    start_timeout: float = 60,
    sample_interval: float = 0.5,
    warmup_seconds: float | None = None,
) -> list[str]:
    """``--concurrency C --prompt-tokens P --output-tokens O --step-seconds S --sample-interval I --start-timeout T``.

    ``warmup_seconds`` adds ``--warmup-seconds`` (None: tune's default, one step). The
    simulator tests pass 0: the simulator runs in model time and its cost model has no
    one-time work (no compile, no graph capture, no lazy allocation), so a fresh simulator
    serves its first requests as it serves later ones and a warm-up would only cost CI two
    steps per configuration. The warm-up itself is proven by
    test_healthy_recommends_no_change and tests/tune/test_tune_warmup.py; the real engines,
    which do have a cold start, keep the default.
    """
    warmup = [] if warmup_seconds is None else ["--warmup-seconds", f"{warmup_seconds:g}"]
    return [*warmup,
        "--concurrency", concurrency,
        "--prompt-tokens", str(prompt_tokens),
        "--output-tokens", str(output_tokens),
        "--step-seconds", f"{step_seconds:g}",
        "--sample-interval", f"{sample_interval:g}",
        "--start-timeout", f"{start_timeout:g}",
    ]  # fmt: skip
