"""Arithmetic on engine-controlled figures that never leaves the finite numbers, and never raises.

Why: an engine may report any finite double (1.7e308 in a gauge is legal exposition), and the
non-finite filter of ``signals.compute`` only sees the values it is handed. The arithmetic after
it can still overflow (1.7e308 x 2 is +Inf, +Inf - +Inf is NaN, x / 5e-324 is +Inf, a product of
two subnormals is 0 and a division by it raises) and ``math.ceil`` / ``int`` of an infinity raise
``OverflowError``: one such value took the whole diagnosis step down for a window's length
(issue 37). Each helper here returns None where the true result is not a representable number,
so the figure it feeds is absent and the rule that needs it is not judged, as for a missing input.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["ceil_or_none", "clamp01", "finite_or_none", "mean", "ratio", "total"]


def finite_or_none(x: float | None) -> float | None:
    """``x`` when it is a finite number; None for None, NaN or an infinity (an overflow, inf - inf)."""
    return x if x is not None and math.isfinite(x) else None


def ratio(numerator: float, denominator: float) -> float | None:
    """``numerator / denominator``, or None where the denominator is 0 (an underflowed product
    included) or the quotient is not finite (a huge figure over a tiny one)."""
    if denominator == 0 or not math.isfinite(denominator):
        return None
    return finite_or_none(numerator / denominator)


def total(values: Sequence[float]) -> float | None:
    """The sum of ``values``, or None when it overflows (or a value is not finite) or there are none."""
    return finite_or_none(sum(values)) if values else None


def mean(values: Sequence[float]) -> float | None:
    """The mean of ``values`` without the overflow of summing first (the mean of finite values is
    finite); None when there are none or one is not finite."""
    if not values:
        return None
    n = len(values)
    return finite_or_none(sum(v / n for v in values))


def ceil_or_none(x: float) -> float | None:
    """``math.ceil(x)`` as a float; None where ``x`` is not finite (``math.ceil`` would raise)."""
    return float(math.ceil(x)) if math.isfinite(x) else None


def clamp01(x: float) -> float:
    """``x`` clamped to 0-1, NaN read as 0 (no evidence), never as a severity or a nearness."""
    return min(1.0, max(0.0, x)) if not math.isnan(x) else 0.0
