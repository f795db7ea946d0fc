"""A small Prometheus text-format writer with the quirks real engines show.

Why hand-rendered instead of prometheus_client: each engine's exposition has
its own wire habits that the exporter's adapters must cope with — Python
engines print floats like ``3.0``, TGI's Rust exporter prints ``3`` and blank
lines between families, llama.cpp types its high-watermark as a counter,
Triton's TTFT histogram is in milliseconds. The writer lets each dialect say
exactly what its engine prints.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

from exporter.simulator.stats import HistogramData

Formatter = Callable[[float], str]


def python_float(value: float) -> str:
    """prometheus_client style: ``3.0``, ``1.5e+06``, ``+Inf``."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(float(value))
    return text


def compact_number(value: float) -> str:
    """Rust / C++ style: integers without a decimal point, other values as shortest repr."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def labels_text(labels: Mapping[str, str] | Iterable[tuple[str, str]]) -> str:
    items = list(labels.items()) if isinstance(labels, Mapping) else list(labels)
    if not items:
        return ""
    return "{" + ",".join(f'{k}="{escape(str(v))}"' for k, v in items) + "}"


class Exposition:
    """Accumulates families; ``text()`` returns the body (newline-terminated)."""

    def __init__(self, fmt: Formatter = python_float, blank_between: bool = False) -> None:
        self.fmt = fmt
        self.blank_between = blank_between
        self._lines: list[str] = []
        self._families = 0

    def family(self, name: str, type_: str, help_text: str | None) -> None:
        if self.blank_between and self._families:
            self._lines.append("")
        self._families += 1
        if help_text is not None:
            self._lines.append(f"# HELP {name} {help_text}")
        self._lines.append(f"# TYPE {name} {type_}")

    def sample(self, name: str, labels: Mapping[str, str] | Iterable[tuple[str, str]], value: float) -> None:
        self._lines.append(f"{name}{labels_text(labels)} {self.fmt(value)}")

    def metric(self, name: str, type_: str, help_text: str | None, labels: Mapping[str, str], value: float) -> None:
        """A one-series family."""
        self.family(name, type_, help_text)
        self.sample(name, labels, value)

    def histogram_series(
        self,
        name: str,
        labels: Mapping[str, str],
        data: HistogramData,
        bound_scale: float = 1.0,
        le_first: bool = False,
        sum_scale: float | None = None,
    ) -> None:
        """``_bucket`` lines (cumulative, +Inf last), then ``_sum`` and ``_count``.

        ``bound_scale`` converts bounds to the engine's unit (1000 for ms);
        ``sum_scale`` likewise for the sum (defaults to ``bound_scale``).
        """
        scale_sum = bound_scale if sum_scale is None else sum_scale
        for bound, count in zip(data.bounds, data.cumulative):
            le = "+Inf" if math.isinf(bound) else self.fmt(bound * bound_scale)
            items = list(labels.items())
            items = [("le", le)] + items if le_first else items + [("le", le)]
            self.sample(f"{name}_bucket", items, count)
        self.sample(f"{name}_sum", labels, data.sum * scale_sum)
        self.sample(f"{name}_count", labels, data.count)

    def summary_series(
        self, name: str, labels: Mapping[str, str], quantiles: list[tuple[float, float]], total: float, count: float
    ) -> None:
        for q, v in quantiles:
            self.sample(name, list(labels.items()) + [("quantile", compact_quantile(q))], v)
        self.sample(f"{name}_sum", labels, total)
        self.sample(f"{name}_count", labels, count)

    def text(self) -> str:
        return "\n".join(self._lines) + "\n"


def compact_quantile(q: float) -> str:
    return str(int(q)) if float(q).is_integer() else repr(float(q))
