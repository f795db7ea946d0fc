"""The values sources hand to the store: one neutral shape for every source.

Why: data flows one way (source -> snapshot -> collector / diagnosis). Sources
already speak the schema's names, so nothing downstream knows an engine's or a
GPU library's own vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from exporter.schema import SOURCE_ERROR_REASONS

#: longest error message the store keeps (longer ones are cut)
MAX_ERROR_MESSAGE = 300


@dataclass(frozen=True, slots=True)
class Sample:
    """One gauge or counter value of a schema metric."""

    name: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class BucketExemplar:
    """One observation of a histogram bucket and the trace it came from (exporter/tracing)."""

    #: the bucket's upper bound (base unit)
    le: float
    trace_id: str
    value: float
    #: Unix seconds of the observation
    timestamp: float


@dataclass(frozen=True, slots=True)
class HistogramSample:
    """One histogram series of a schema metric, native buckets kept.

    ``buckets`` holds (upper bound in the metric's base unit, cumulative count),
    ascending, the last bound being +Inf.
    """

    name: str
    labels: Mapping[str, str]
    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float
    #: OpenMetrics exemplars, at most one per bucket: one observation that fell in it, with the
    #: trace it belongs to (the text format has no exemplars and leaves them out)
    exemplars: tuple[BucketExemplar, ...] = ()

    def __post_init__(self) -> None:
        if not self.buckets or not math.isinf(self.buckets[-1][0]):
            raise ValueError(f"{self.name}: histogram buckets must end with +Inf")


Point = Sample | HistogramSample


class SourceError(Exception):
    """A sample attempt failed for a known reason (a bounded label value)."""

    def __init__(self, reason: str, message: str) -> None:
        if reason not in SOURCE_ERROR_REASONS:
            raise ValueError(f"unknown source error reason {reason!r}")
        super().__init__(message)
        self.reason = reason
        self.message = message

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"

    def detached(self) -> SourceError:
        """A copy to keep: reason and a message cut to ``MAX_ERROR_MESSAGE`` characters.

        Why: a raised error carries its traceback, cause and context, and
        through their frames whatever the failed attempt had parsed; a stored
        error must hold nothing after the attempt returns.
        """
        message = self.message if len(self.message) <= MAX_ERROR_MESSAGE else self.message[: MAX_ERROR_MESSAGE - 3] + "..."
        return SourceError(self.reason, message)


@dataclass
class SampleResult:
    """What one successful (possibly partial) sample attempt produced.

    ``partial_errors`` records faults that did not fail the whole source, e.g.
    one GPU of eight lost: the others keep reporting and the fault is counted.
    """

    points: list[Point]
    partial_errors: list[SourceError] = field(default_factory=list)
