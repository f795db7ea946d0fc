"""The key series per layer the report charts, each as PromQL *and* as a local evaluation.

Why one description with two evaluations: with ``--prometheus`` the report asks
Prometheus (``/api/v1/query_range``) for the expression; without it the report
samples the exporter's own ``/metrics`` for a short while and evaluates the same
expression over those readings here. Either way a chart means the same thing.

Metric names come from :mod:`exporter.schema` (looked up with ``schema.spec``,
so a renamed metric fails at import, not as a silently empty chart).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

from exporter import schema
from exporter.schema import LAYERS

#: look-back of rates and quantiles, as in ``rate(x[1m])``
RATE_WINDOW_S = 60.0

Labels = dict[str, str]
#: one reading of the exporter: unix time, sample name -> [(labels, value)]
Reading = tuple[float, dict[str, list[tuple[Labels, float]]]]
#: legend -> [(unix time, value)]
Curves = dict[str, list[tuple[float, float]]]


def _name(metric: str) -> str:
    return schema.spec(metric).name


SCORE = _name("llm_bottleneck_score")
HEADROOM = _name("llm_layer_headroom_ratio")
STATE = _name("llm_service_state")
SYMPTOM = _name("llm_symptom_active")
KV_USAGE = _name("llm_kv_cache_usage_ratio")
PREEMPTIONS = _name("llm_kv_cache_preemptions_total")
WAITING = _name("llm_scheduler_requests_waiting")
RUNNING = _name("llm_scheduler_requests_running")
BUSIEST_THREAD = _name("llm_process_busiest_thread_cpu_ratio")
TTFT = _name("llm_request_ttft_seconds")
ITL = _name("llm_request_inter_token_seconds")
PREFILL = _name("llm_request_prefill_seconds")
SM = _name("llm_gpu_sm_active_ratio")
DRAM = _name("llm_gpu_dram_active_ratio")
UTIL = _name("llm_gpu_utilization_ratio")
TENSOR = _name("llm_gpu_tensor_active_ratio")
PCIE_TX = _name("llm_gpu_pcie_transmit_bytes_per_second")
PCIE_RX = _name("llm_gpu_pcie_receive_bytes_per_second")
SKEW = _name("llm_parallel_sm_active_skew_ratio")
INTERCONNECT = _name("llm_parallel_interconnect_bytes_per_second")
DRAFT_TOKENS = _name("llm_spec_decode_draft_tokens_total")
ACCEPTED_TOKENS = _name("llm_spec_decode_accepted_tokens_total")


class Expr(Protocol):
    @property
    def label(self) -> str: ...  # read-only: the series are frozen dataclasses

    def promql(self) -> str: ...

    def local(self, readings: list[Reading]) -> Curves: ...


def _selector(name: str, match: dict[str, str]) -> str:
    if not match:
        return name
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(match.items()))
    return f"{name}{{{inner}}}"


def _matches(labels: Labels, match: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in match.items())


def _agg(values: list[float], how: str) -> float:
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return math.nan
    return max(finite) if how == "max" else sum(finite)


def _legend(label: str, by: str | None, key: str) -> str:
    if not by:
        return label
    return f"{by}={key}" if label == by else f"{label} {by}={key}"


def _grouped(samples: list[tuple[Labels, float]], match: dict[str, str], by: str | None, how: str) -> dict[str, float]:
    groups: dict[str, list[float]] = {}
    for labels, value in samples:
        if _matches(labels, match):
            groups.setdefault(labels.get(by, "") if by else "", []).append(value)
    return {k: _agg(v, how) for k, v in groups.items()}


def _back(readings: list[Reading], i: int) -> int | None:
    """Index of the earliest reading within RATE_WINDOW_S before reading i (None for the first)."""
    if i == 0:
        return None
    t = readings[i][0]
    j = i - 1
    while j > 0 and t - readings[j - 1][0] <= RATE_WINDOW_S:
        j -= 1
    return j


def _deltas(readings: list[Reading], name: str, i: int, j: int, match: dict[str, str]) -> list[tuple[Labels, float]]:
    """Per series: increase of a counter from reading j to reading i (a reset counts from 0)."""
    before = {tuple(sorted(lab.items())): v for lab, v in readings[j][1].get(name, []) if _matches(lab, match)}
    out = []
    for labels, v in readings[i][1].get(name, []):
        if not _matches(labels, match):
            continue
        old = before.get(tuple(sorted(labels.items())))
        if old is None:
            continue
        out.append((labels, v - old if v >= old else v))
    return out


@dataclass(frozen=True)
class Gauge:
    label: str
    name: str
    how: str = "max"
    by: str | None = None
    match: dict[str, str] = field(default_factory=dict)

    def promql(self) -> str:
        sel = _selector(self.name, self.match)
        return f"{self.how} by ({self.by}) ({sel})" if self.by else f"{self.how}({sel})"

    def local(self, readings: list[Reading]) -> Curves:
        out: Curves = {}
        for t, values in readings:
            for key, v in _grouped(values.get(self.name, []), self.match, self.by, self.how).items():
                out.setdefault(_legend(self.label, self.by, key), []).append((t, v))
        return out


@dataclass(frozen=True)
class GaugeSum:
    """``sum by (by) (a) + sum by (by) (b)`` (e.g. PCIe transmit plus receive per GPU)."""

    label: str
    a: str
    b: str
    by: str | None = None

    def promql(self) -> str:
        grp = f" by ({self.by})" if self.by else ""
        return f"sum{grp} ({self.a}) + sum{grp} ({self.b})"

    def local(self, readings: list[Reading]) -> Curves:
        out: Curves = {}
        for t, values in readings:
            a = _grouped(values.get(self.a, []), {}, self.by, "sum")
            b = _grouped(values.get(self.b, []), {}, self.by, "sum")
            for key in sorted(set(a) & set(b)):
                out.setdefault(_legend(self.label, self.by, key), []).append((t, a[key] + b[key]))
        return out


@dataclass(frozen=True)
class Rate:
    label: str
    name: str
    by: str | None = None

    def promql(self) -> str:
        grp = f" by ({self.by})" if self.by else ""
        return f"sum{grp} (rate({self.name}[1m]))"

    def local(self, readings: list[Reading]) -> Curves:
        out: Curves = {}
        for i, (t, _) in enumerate(readings):
            j = _back(readings, i)
            if j is None or t <= readings[j][0]:
                continue
            dt = t - readings[j][0]
            for key, inc in _grouped(_deltas(readings, self.name, i, j, {}), {}, self.by, "sum").items():
                out.setdefault(_legend(self.label, self.by, key), []).append((t, inc / dt))
        return out


@dataclass(frozen=True)
class RateRatio:
    """``sum(rate(num[1m])) / sum(rate(den[1m]))`` (e.g. the draft acceptance rate)."""

    label: str
    num: str
    den: str

    def promql(self) -> str:
        return f"sum(rate({self.num}[1m])) / sum(rate({self.den}[1m]))"

    def local(self, readings: list[Reading]) -> Curves:
        points = []
        for i, (t, _) in enumerate(readings):
            j = _back(readings, i)
            if j is None:
                continue
            num = [v for _, v in _deltas(readings, self.num, i, j, {})]
            den = [v for _, v in _deltas(readings, self.den, i, j, {})]
            if num and den and sum(den) > 0:
                points.append((t, sum(num) / sum(den)))
        return {self.label: points} if points else {}


def bucket_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """Prometheus' histogram_quantile over (upper bound, cumulative count) pairs; None without observations."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):  # the quantile lies in the +Inf bucket: the highest finite bound
                return prev_bound
            if count == prev_count:
                return bound
            lower = prev_bound if prev_bound > 0 or bound <= 0 else 0.0
            return lower + (bound - lower) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = bound, count
    return prev_bound


@dataclass(frozen=True)
class Quantile:
    """``histogram_quantile(q, sum by (le) (rate(name_bucket[1m])))``."""

    label: str
    name: str
    q: float = 0.95

    def promql(self) -> str:
        return f"histogram_quantile({self.q}, sum by (le) (rate({self.name}_bucket[1m])))"

    def local(self, readings: list[Reading]) -> Curves:
        points = []
        for i, (t, _) in enumerate(readings):
            j = _back(readings, i)
            if j is None:
                continue
            by_le: dict[float, float] = {}
            for labels, inc in _deltas(readings, f"{self.name}_bucket", i, j, {}):
                try:
                    le = float(labels.get("le", "nan"))
                except ValueError:
                    continue
                by_le[le] = by_le.get(le, 0.0) + inc
            value = bucket_quantile(self.q, list(by_le.items()))
            if value is not None:
                points.append((t, value))
        return {self.label: points} if points else {}


@dataclass(frozen=True)
class Panel:
    title: str
    #: "ratio" (0-1 axis), "percent", "seconds", "bytes_per_second", "per_second", "count"
    unit: str
    series: tuple[Expr, ...]


@dataclass(frozen=True)
class Chart:
    #: file stem: DIR/<stem>.png
    stem: str
    title: str
    #: a layer name, or "verdict" for the overview
    layer: str
    panels: tuple[Panel, ...]


def _layer_panel(layer: str) -> Panel:
    return Panel(
        f"{layer}: bottleneck score and headroom (0-1)",
        "ratio",
        (Gauge("score", SCORE, match={"layer": layer}), Gauge("headroom", HEADROOM, match={"layer": layer})),
    )


_LAYER_PANELS: dict[str, tuple[Panel, ...]] = {
    "hardware": (
        Panel(
            "GPU activity (ratio)",
            "ratio",
            (Gauge("SM active", SM, by="gpu"), Gauge("DRAM active", DRAM, by="gpu"), Gauge('"GPU util"', UTIL, by="gpu")),
        ),
        Panel("PCIe transmit + receive", "bytes_per_second", (GaugeSum("PCIe", PCIE_TX, PCIE_RX, by="gpu"),)),
    ),
    "operator": (
        Panel("tensor pipes (ratio)", "ratio", (Gauge("tensor active", TENSOR, by="gpu"),)),
        Panel("prefill time p95", "seconds", (Quantile("prefill p95", PREFILL),)),
    ),
    "memory": (
        Panel("KV cache usage (ratio)", "ratio", (Gauge("KV usage", KV_USAGE, by="server"),)),
        Panel("KV-cache preemptions", "per_second", (Rate("preemptions/s", PREEMPTIONS),)),
    ),
    "scheduler": (
        Panel("requests", "count", (Gauge("waiting (sum)", WAITING, how="sum"), Gauge("running (sum)", RUNNING, how="sum"))),
        Panel("busiest serving thread CPU (1.0 = one core)", "ratio", (Gauge("busiest thread", BUSIEST_THREAD, by="server"),)),
    ),
    "parallel": (
        Panel("SM-active skew, max over mean (ratio, 1.0 = balanced)", "skew", (Gauge("skew", SKEW, by="group"),)),
        Panel("interconnect traffic", "bytes_per_second", (Gauge("interconnect", INTERCONNECT, how="sum", by="link"),)),
    ),
    "speculative_decoding": (
        Panel("draft acceptance (ratio)", "ratio", (RateRatio("accepted / drafted", ACCEPTED_TOKENS, DRAFT_TOKENS),)),
        Panel("draft tokens", "per_second", (Rate("draft tokens/s", DRAFT_TOKENS),)),
    ),
    "application": (Panel("latency p95", "seconds", (Quantile("TTFT p95", TTFT), Quantile("ITL p95", ITL))),),
}


def charts() -> list[Chart]:
    """The overview, then one chart per layer in the map's order."""
    out = [
        Chart(
            "verdict",
            "verdict over time",
            "verdict",
            (
                Panel("bottleneck score per layer (0-1)", "ratio", (Gauge("score", SCORE, by="layer"),)),
                Panel("headroom per layer (0-1, 1 = idle)", "ratio", (Gauge("headroom", HEADROOM, by="layer"),)),
                Panel(
                    "service state and symptoms (1 = on; lines offset a little to stay apart)",
                    "onoff",
                    (Gauge("state", STATE, by="state"), Gauge("symptom", SYMPTOM, by="symptom")),
                ),
            ),
        ),
    ]
    for layer in LAYERS:
        out.append(Chart(f"layer-{layer}", f"{layer} layer", layer, (_layer_panel(layer), *_LAYER_PANELS[layer])))
    return out
