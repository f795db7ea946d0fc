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
) -> list[str]:
    """``--concurrency C --prompt-tokens P --output-tokens O --step-seconds S --sample-interval I --start-timeout T``."""
    return [
        "--concurrency", concurrency,
        "--prompt-tokens", str(prompt_tokens),
        "--output-tokens", str(output_tokens),
        "--step-seconds", f"{step_seconds:g}",
        "--sample-interval", f"{sample_interval:g}",
        "--start-timeout", f"{start_timeout:g}",
    ]  # fmt: skip
