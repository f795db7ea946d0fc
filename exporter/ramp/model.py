"""The records a ramp produces: one ``Step`` per concurrency level, plus the verdict.

Why plain dataclasses: the same objects feed the knee logic, the terminal view,
report.json (``dataclasses.asdict``), report.md and report.png, so every figure
has exactly one name everywhere.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from exporter.ramp.traced import TracedFigures

#: Diagnosis statuses from least to most severe; ``unknown`` means "no data to judge".
STATUS_SEVERITY: dict[str, int] = {"unknown": -1, "ok": 0, "warning": 1, "bottleneck": 2}
SATURATED_STATUSES: tuple[str, ...] = ("warning", "bottleneck")
#: the service states of /diagnosis (schema 2), from least to most severe; ``unknown`` does not vote
STATE_SEVERITY: dict[str, int] = {"unknown": -1, "healthy": 0, "degraded": 1}
STATES: tuple[str, ...] = ("degraded", "healthy", "unknown")


class RampError(Exception):
    """A condition that stops the ramp: printed as one clear line, non-zero exit."""


@dataclass
class Percentiles:
    """p50/p95/p99 in seconds; None when the step produced no value at all."""

    p50: float | None = None
    p95: float | None = None
    p99: float | None = None


@dataclass
class ClientFigures:
    """What the load generator measured during one step (client side, streaming)."""

    duration_s: float
    requests: int  # completed without error
    errors: int  # failed requests, timeouts included
    timeouts: int
    output_tokens: int
    requests_per_s: float
    output_tokens_per_s: float
    #: in flight when the step ended, closed by the client (the engine counts them as aborted)
    cancelled: int = 0
    ttft_s: Percentiles = field(default_factory=Percentiles)
    itl_s: Percentiles = field(default_factory=Percentiles)
    #: first few distinct error messages, so a failed step says why
    error_messages: list[str] = field(default_factory=list)

    @property
    def attempted(self) -> int:
        return self.requests + self.errors


@dataclass
class Stat:
    """Mean and maximum of a gauge over the samples of one step."""

    mean: float
    max: float


@dataclass
class ExporterFigures:
    """Layered metrics read from the exporter's /metrics during one step."""

    samples: int = 0
    #: scrapes or diagnosis reads that failed during the step
    errors: int = 0
    #: gauge short name -> mean/max over the step (absent when the exporter never published it)
    gauges: dict[str, Stat] = field(default_factory=dict)
    #: counter short name -> increase from the first to the last sample of the step
    counters: dict[str, float] = field(default_factory=dict)


@dataclass
class LayerFigures:
    """One layer's diagnosis over a step: score mean/max and the step's status."""

    score_mean: float | None
    score_max: float | None
    #: the step's status: the upper median of its samples (see exporter.ramp.aggregate)
    status: str
    samples: int
    #: the most severe status any sample of the step showed
    worst_status: str = "unknown"
    #: 0-1, how far the layer was from its nearest limit: mean and least over the samples that measured it
    headroom_mean: float | None = None
    headroom_min: float | None = None
    #: the diagnosis's sentence for that limit, from the sample with the least headroom
    limit: str = ""


@dataclass
class CauseFigures:
    """One cause the diagnosis reported during a step, with its strongest evidence."""

    layer: str
    cause: str
    score_max: float
    #: share of the step's diagnosis samples in which the cause was listed
    share: float
    evidence: dict[str, Any] = field(default_factory=dict)
    advice: str = ""
    #: the role it was given most often (schema 2: primary, contributing, symptom, warning, candidate)
    role: str = ""


@dataclass
class PrimaryFigures:
    """One cause the diagnosis named ``primary`` in the degraded readings of a step."""

    layer: str
    cause: str
    #: degraded readings of the step that named it primary
    readings: int
    #: ``readings`` over the step's degraded readings
    share: float
    confidence_mean: float
    #: the chain (symptom <- cause, with numbers) it was given most often; ties: the latest
    chain: str = ""
    #: its own link of the chain, from the same reading as ``chain``
    summary: str = ""
    #: the symptom ids it explained, in any of its readings
    explains: list[str] = field(default_factory=list)
    #: evidence and advice of the same reading as ``chain``
    evidence: dict[str, Any] = field(default_factory=dict)
    advice: str = ""


@dataclass
class DiagnosisFigures:
    """The exporter's /diagnosis over one step."""

    samples: int = 0
    layers: dict[str, LayerFigures] = field(default_factory=dict)
    causes: list[CauseFigures] = field(default_factory=list)
    #: the step's service state: ``degraded`` when at least half of the judged readings were
    #: (upper median; ``unknown`` readings do not vote), ``unknown`` when none was judged
    state: str = "unknown"
    #: share of the step's readings per state (degraded, healthy, unknown)
    states: dict[str, float] = field(default_factory=dict)
    #: readings whose state was ``degraded``
    degraded_readings: int = 0
    #: every primary named in the degraded readings, most readings first
    primaries: list[PrimaryFigures] = field(default_factory=list)
    #: the primary named most often (None when no degraded reading named one)
    primary: PrimaryFigures | None = None


@dataclass
class Step:
    """One concurrency level: client figures, exporter figures, and the knee flags."""

    index: int
    concurrency: int
    client: ClientFigures
    exporter: ExporterFigures = field(default_factory=ExporterFigures)
    diagnosis: DiagnosisFigures = field(default_factory=DiagnosisFigures)
    #: relative throughput gain over relative concurrency gain against the previous step
    #: (1.0 = linear scaling, 0 = flat); None for the first step
    scaling: float | None = None
    #: TTFT p95 over the previous step's; None for the first step or when unmeasured
    ttft_p95_ratio: float | None = None
    #: why this step counts as a knee: "throughput_flat", "ttft_jump", "errors" (confirmed by the next step)
    flags: list[str] = field(default_factory=list)
    #: flags the next step did not confirm (a dip or a spike the ramp recovered from)
    transient_flags: list[str] = field(default_factory=list)
    #: the engine's own spans of the step's requests (exporter/ramp/traced.py); None: no spans received
    traced: TracedFigures | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
