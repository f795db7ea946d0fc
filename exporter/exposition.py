"""The one reader of the exporter's own ``/metrics`` text (demo, ramp probe, report).

Why one reader: three commands read back what ``serve`` publishes, and each had
its own parse (which families to keep, whether ``_created`` and NaN count). A
second copy drifts: one view skipped histograms, another kept their buckets.
Here the text is parsed once, every sample kept by its sample name, and each
caller takes the view it needs (``scalars``, ``histogram_totals``, ``samples``).

``prometheus_client``'s parser is used on purpose, not the engine parser
(``exporter/engines/textparse.py``): our own exposition is small, and its
``# TYPE`` lines are what tell a histogram's ``_sum`` from a gauge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

#: labels of one sample (a fresh dict per sample)
Labels = dict[str, str]
#: one metric's samples: [(labels, value), ...] in the order served
SampleList = list[tuple[Labels, float]]

_HISTOGRAM_TYPES = frozenset({"histogram", "gaugehistogram", "summary"})


@dataclass
class OwnMetrics:
    """One parse of the exporter's ``/metrics``.

    ``samples``: every sample by its sample name (``x_bucket``, ``x_sum``, ``x_count``,
    counters' ``x_total``); ``_created`` series are dropped. ``types``: each family's
    base name -> its type as served.
    """

    samples: dict[str, SampleList] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    #: sample name -> family base name (``x_bucket`` -> ``x``)
    family_of: dict[str, str] = field(default_factory=dict)

    def scalars(self, keep_nan: bool = False) -> dict[str, SampleList]:
        """Gauge, counter, info and untyped samples by sample name; histograms and summaries
        left out, and NaN values too unless ``keep_nan``."""
        out: dict[str, SampleList] = {}
        for name, series in self.samples.items():
            if self.types.get(self.family_of.get(name, name)) in _HISTOGRAM_TYPES:
                continue
            kept = series if keep_nan else [(labels, v) for labels, v in series if not math.isnan(v)]
            if kept:
                out[name] = list(kept)
        return out

    def histogram_totals(self) -> dict[str, tuple[float, float]]:
        """Per histogram family: (sum of its ``_sum``, sum of its ``_count``) over its series."""
        out: dict[str, tuple[float, float]] = {}
        for family, kind in self.types.items():
            if kind != "histogram":
                continue
            total = sum(v for _, v in self.samples.get(family + "_sum", ()))
            count = sum(v for _, v in self.samples.get(family + "_count", ()))
            out[family] = (total, count)
        return out


def read_metrics(text: str) -> OwnMetrics:
    """Parse the exporter's own exposition (Prometheus text format); ValueError on bad text."""
    from prometheus_client.parser import text_string_to_metric_families

    out = OwnMetrics()
    for family in text_string_to_metric_families(text):
        out.types[family.name] = family.type
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            out.family_of[s.name] = family.name
            out.samples.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    return out
