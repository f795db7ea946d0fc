"""How the demo writes a value: 0-1 shares as %, ratios of two things as ×, seconds as the diagnosis does.

Why one module: the live view, the plain lines and the evidence of a warning show the same
quantities, and a value must read the same wherever it appears.
"""

from __future__ import annotations

import math
from typing import Any

#: ``*_ratio`` metrics that are not 0-1 shares: shown as "×1.69" (skew) or "1.30 cores"
MULTIPLE_RATIOS = {"llm_parallel_sm_active_skew_ratio": "times"}
CORE_RATIOS = {"llm_process_busiest_thread_cpu_demand_ratio", "llm_process_cpu_ratio"}


def fmt_seconds(value: float) -> str:
    """As the diagnosis writes seconds in its chains: ms below 1 s, then s."""
    if value >= 10:
        return f"{value:.0f} s"
    if value >= 1:
        return f"{value:.2g} s"
    return f"{value * 1000:.0f} ms"


def _number(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.2f}".rstrip("0").rstrip(".")


def fmt(value: float | None, unit: str) -> str:
    """One value in a unit: 0-1 shares as %, ratios of two things as ×, seconds as the diagnosis writes them."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit in ("ratio", "pct", "share"):
        return f"{value * 100:.0f}%"
    if unit == "times":
        return f"×{value:.2f}"
    if unit == "cores":
        return f"{value:.2f} cores"
    if unit == "bytes":
        return f"{value / 2**30:.1f} GiB"
    if unit == "bytes_per_second":
        return f"{value / 2**20:.0f} MiB/s"
    if unit == "hertz":
        return f"{value / 1e6:.0f} MHz"
    if unit in ("watts",):
        return f"{value:.0f} W"
    if unit == "seconds":
        return fmt_seconds(value)
    if unit == "celsius":
        return f"{value:.0f} C"
    if unit == "rate":
        return f"{_number(value)}/s"
    return _number(value)


def metric_unit(name: str, unit: str) -> str:
    """The display unit of a schema metric: its own, except ``*_ratio`` metrics that are not 0-1 shares."""
    if name in MULTIPLE_RATIOS:
        return MULTIPLE_RATIOS[name]
    if name in CORE_RATIOS:
        return "cores"
    return unit


def fmt_signal(key: str, value: Any) -> str:
    """A diagnosis signal or evidence value (keyed by its expression) in the unit its expression implies."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and math.isnan(value):
        return "-"
    k = key.lower()
    if "skew" in k:
        return fmt(value, "times")
    if "cpu_demand_ratio" in k or "llm_process_cpu_ratio" in k:
        return fmt(value, "cores")
    if k.startswith(("rate(", "deriv(")):
        return fmt(value, "rate")
    if "_seconds" in k and "timestamp" not in k:
        return fmt(value, "seconds")
    if "bytes_per_second" in k:
        return fmt(value, "bytes_per_second")
    if "share" in k or "_ratio" in k or " / " in k:
        return fmt(value, "share")
    if "hertz" in k:
        return fmt(value, "hertz")
    if "watts" in k:
        return fmt(value, "watts")
    if "celsius" in k:
        return fmt(value, "celsius")
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def evidence_text(evidence: Any) -> str:
    """The first few evidence values, compact, each in its unit (the diagnosis gives expression -> value)."""
    if isinstance(evidence, dict):
        items = list(evidence.items())[:4]
        return ", ".join(f"{k}={fmt_signal(k, v)}" for k, v in items)
    return str(evidence or "")
