"""``--since 7d`` / ``--step 5m``: Prometheus-style durations as seconds.

Why our own parser: the flags take the units an operator types in PromQL
(``s m h d w``), combined or not (``1h30m``), and a bad one must be a one-line
usage error naming the flag, not a traceback.
"""

from __future__ import annotations

import re

from exporter.errors import UsageError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_WHOLE = re.compile(r"^(?:\d+(?:\.\d+)?[smhdw])+$")


def parse_duration(text: str, flag: str) -> float:
    """``7d`` -> 604800.0; UsageError (one line, naming ``flag``) when it is not a positive duration."""
    value = (text or "").strip().lower()
    if not _WHOLE.match(value):
        raise UsageError(f"{flag}: expected a duration such as 90s, 5m, 1h, 2d or 1w, got {text!r}"[:200])
    seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(value))
    if seconds <= 0:
        raise UsageError(f"{flag}: expected a positive duration, got {text!r}"[:200])
    return seconds


def format_duration(seconds: float) -> str:
    """604800 -> ``7d``, 5400 -> ``1h30m``: the largest units first, for titles and the summary."""
    left = int(round(seconds))
    if left <= 0:
        return "0s"
    out = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if left >= size:
            out.append(f"{left // size}{unit}")
            left %= size
    return "".join(out)


__all__ = ["format_duration", "parse_duration"]
