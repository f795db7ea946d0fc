"""An unmeasured load on a freshly started engine before its first repeat, then a quiet gap.

Why: an engine's first requests pay one-time costs that are not its configuration's:
kernels compiled or JIT'ed for a batch size seen for the first time, graphs captured
lazily, the KV allocator touching its pages, connection pools. Measured on the CPU vLLM
of tests/tune/test_tune_vllm.py (enforce-eager, no start-up warm-up): the first request
of a fresh engine took 0.5-1.0 s to its first token where later ones took 0.05 s. A
tuner restarts the engine for every candidate, so without a warm-up the first repeat of
every configuration measures start-up, and it lands on whichever step first batches
what the new configuration allows (for more sequence slots: the step the candidate
should win). The load runs at the ramp's highest concurrency, so every batch size up to
the largest the engine admits is run once.

Why the gap after it: the tuner's exporter judges each step over a window one step long
(session.py ``_window``); the first step's verdict must not read the warm-up's queue or
preemptions. The gap is that window; with no warm-up there is no gap.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from exporter.ramp.load import LoadSettings, make_step_loader
from exporter.ramp.model import ClientFigures

#: seed offset of the warm-up's prompts: apart from every measured step's (session.py seeds repeats by 1000)
WARMUP_SEED = 999_999


@dataclass(frozen=True)
class WarmUp:
    """What the warm-up sent (kept in tune.json, so a reader sees the engine was warm when measured)."""

    concurrency: int
    seconds: float
    requests: int
    errors: int
    error_messages: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        return {
            "concurrency": self.concurrency,
            "seconds": round(self.seconds, 1),
            "requests": self.requests,
            "errors": self.errors,
            "error_messages": list(self.error_messages),
        }

    def failure(self) -> str | None:
        """Why the configuration cannot be measured: every warm-up request failed (None otherwise)."""
        if self.requests == 0 and self.errors > 0:
            why = "; ".join(self.error_messages) or "no error message"
            return f"all {self.errors} warm-up requests failed: {why}"
        return None


def warm_up(
    load: LoadSettings,
    concurrency: int,
    quiet_s: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> WarmUp:
    """Load the engine for ``load.step_seconds`` at ``concurrency`` (draining), then stay quiet ``quiet_s``."""
    t0 = clock()
    figures: ClientFigures = make_step_loader(load)(concurrency)
    sleep(max(0.0, quiet_s))
    return WarmUp(
        concurrency=concurrency,
        seconds=clock() - t0,
        requests=figures.requests,
        errors=figures.errors,
        error_messages=tuple(figures.error_messages),
    )


__all__ = ["WARMUP_SEED", "WarmUp", "warm_up"]
