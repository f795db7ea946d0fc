"""Durations as ``plan`` prints them (``7d``, ``1h30m``): the largest units first.

The flags (``--since 7d``, ``--step 5m``) are read by the one duration grammar of
exporter/values.py, which takes the units an operator types in PromQL (``s m h d w``).
"""

from __future__ import annotations


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


__all__ = ["format_duration"]
