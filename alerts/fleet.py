"""Fleet rules (issue 15): the verdict across the replicas of a model and the nodes of a parallel group.

Each exporter judges its own node. What no single exporter can see is rendered here as
Prometheus rules into ``alerts/fleet_rules.yml`` (by alerts/generate.py; also in the Helm
PrometheusRule and the compose Prometheus): one recording group, one alerting group.
Everything is standard PromQL of Prometheus 2.42 (no feature flags), so the same file runs
in Prometheus, Thanos Ruler and the Mimir ruler. It is loaded together with
``recording_rules.yml``: it reads ``server_model:llm_request_ttft_seconds:p95_rate5m`` and
``instance_cause:llm_bottleneck_confidence:primary`` from there instead of computing them twice.

Identity (see docs/fleet.md):

* a **replica** is one engine an exporter scrapes: ``job, instance`` (the exporter, from
  Prometheus) plus ``server, model`` (from the exporter), the house ``server_model`` level.
  Ranks of one engine add up. Labels a Kubernetes scrape adds (``namespace``, ``pod``) are
  aggregated away on purpose: ``instance`` already names the replica, and rules that kept
  optional labels would split a replica whenever one is missing;
* a **fleet** is every replica serving the same ``model``;
* the verdict (``llm_service_state``, ``llm_bottleneck_primary``, ``llm_layer_headroom_ratio``)
  is per engine (issue 20): its series carry ``engine``, the engine's name, which is the
  ``server`` label of that engine's own series. A replica is therefore (job, instance, engine)
  and gets its own engine's verdict: ``llm_engine_info`` with ``server`` copied into ``engine``,
  ``* on (job, instance, engine) group_left``. Two engines on one node are two replicas with
  two verdicts; the per-replica records carry ``engine`` beside ``server`` (equal values);
* a **multi-node parallel group** is every exporter started with the same
  ``--parallel-group NAME``: they publish ``llm_parallel_node_group_info{group="NAME"}``
  (one series per exporter, a join key, not a label on every series: cardinality stays flat
  and the node-local ``group`` label of ``llm_parallel_*`` keeps its meaning).

Names follow the house ``level:metric:operation`` (colons only in recording rules; the
exporter's own metric names have none). Levels: ``server_model`` (a replica),
``server_model_cause`` (a replica and its primary cause), ``model`` (a fleet),
``model_cause`` (a fleet and one primary cause), ``group`` and ``group_instance``.

The alerts are tickets (``kind="fleet"``), each with a ``cause`` label naming the fleet
concept, which is also the runbook anchor: ``replica_imbalance``
(LLMFleetReplicaImbalance, ``signal`` queue or ttft), ``fleet_capacity_short``
(LLMFleetCapacityShort, ``capacity`` says which kind to add) and ``group_skew``
(LLMFleetGroupSkew). Why tickets: every degraded replica already pages once
(LLMServiceDegraded) with its own primary cause; the fleet alert adds what no page can say
(scale out, or fix the balancing), and a second page for the same users would break the
one-page-per-incident rule of alerts/README.md. Thresholds live in alerts/config.yaml,
section ``fleet``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from alerts import unittests
from alerts.alerting import Alert, Case, runbook_url
from alerts.causes import CAUSES
from alerts.recording import ENGINE, INSTANCE_ENGINE, SERVER_MODEL, Rule
from alerts.settings import ConfigError, Settings, _duration, _number, duration_seconds

#: what the fleet alerts carry in ``kind``: not muted by the per-exporter page (alertmanager.yml)
KIND = "fleet"
IMBALANCE, CAPACITY_SHORT, GROUP_SKEW = "LLMFleetReplicaImbalance", "LLMFleetCapacityShort", "LLMFleetGroupSkew"
#: fleet concept -> alert; the concept is the alert's ``cause`` label and its runbook anchor
CONCEPTS: dict[str, str] = {"replica_imbalance": IMBALANCE, "fleet_capacity_short": CAPACITY_SHORT, "group_skew": GROUP_SKEW}
#: what the fleet rules read from alerts/recording_rules.yml: a replica's TTFT p95 ({w}: the rate
#: window) and its engine's primary cause
REPLICA_TTFT_P95 = "server_model:llm_request_ttft_seconds:p95_rate{w}"
PRIMARY = "instance_cause:llm_bottleneck_confidence:primary"

#: capacity kind -> (what to add, the diagnosis causes that mean "this kind is short").
#: Only causes more replicas (or bigger ones) fix; a fleet-wide fault or misconfiguration
#: (throttling, fragmentation, a batching window, rejected drafts) is not a capacity shortage
#: and stays with the per-replica tickets.
CAPACITY: dict[str, tuple[str, tuple[str, ...]]] = {
    "kv_memory": (
        "KV-cache memory: more replicas, or GPUs with more memory per replica",
        ("kv_cache_pressure", "memory_capacity_exhausted"),
    ),
    "gpu_compute": ("GPU throughput (compute or HBM bandwidth): more GPUs", ("compute_bound", "memory_bandwidth_bound")),
    "host_cpu": ("host CPU (the serial scheduler loop): more replicas, each its own engine process", ("serial_host_ceiling",)),
    # capacity_nearly_used (issue 22): past the measured capacity at SLO, the load itself is the cause
    "replicas": (
        "replicas of the same shape: no layer is at its limit, there is simply too much load",
        ("queue_backlog", "capacity_nearly_used"),
    ),
}


@dataclass(frozen=True)
class FleetSettings:
    """The ``fleet:`` section of alerts/config.yaml, validated."""

    min_replicas: int
    queue_factor: float
    min_waiting: float
    ttft_factor: float
    min_ttft_seconds: float
    min_headroom: float
    imbalance_for: str
    capacity_min_replicas: int
    capacity_share: float
    #: capacity="measured" (issue 22): demand over the profiled replicas' summed capacity at SLO above this
    capacity_measured_ratio: float
    capacity_for: str
    skew_ratio: float
    skew_min_sm_active: float
    skew_for: str


def _int(data: dict[str, Any], path: str, low: int, high: int) -> int:
    value = _number(data, path, low, high)
    if not value.is_integer():
        raise ConfigError(f"alerts/config.yaml: {path} must be a whole number, got {value!r}")
    return int(value)


def fleet_settings(s: Settings, for_override: str | None = None) -> FleetSettings:
    """Read ``fleet:`` from the config Settings hold; ``for_override`` replaces its ``for:`` (tests)."""
    d = s.raw
    base = "fleet.replica_imbalance"

    def for_(path: str) -> str:
        return for_override if for_override is not None else _duration(d, path)

    out = FleetSettings(
        min_replicas=_int(d, f"{base}.min_replicas", 2, 100_000),
        queue_factor=_number(d, f"{base}.queue_factor", 1, 1000),
        min_waiting=_number(d, f"{base}.min_waiting", 1, 1e6),
        ttft_factor=_number(d, f"{base}.ttft_factor", 1, 1000),
        min_ttft_seconds=_number(d, f"{base}.min_ttft_seconds", 0.001, 3600),
        min_headroom=_number(d, f"{base}.min_headroom", 0, 1),
        imbalance_for=for_(f"{base}.for"),
        capacity_min_replicas=_int(d, "fleet.capacity_short.min_replicas", 2, 100_000),
        capacity_share=_number(d, "fleet.capacity_short.share", 0.5, 0.99),
        capacity_measured_ratio=_number(d, "fleet.capacity_short.measured_ratio", 0.1, 10),
        capacity_for=for_("fleet.capacity_short.for"),
        skew_ratio=_number(d, "fleet.group_skew.ratio", 1.01, 100),
        skew_min_sm_active=_number(d, "fleet.group_skew.min_sm_active", 0, 1),
        skew_for=for_("fleet.group_skew.for"),
    )
    return out


# --------------------------------------------------------------------------- recording rules

_ENGINE = f"max by ({SERVER_MODEL}) (llm_engine_info)"
#: each replica with its engine's name as ``engine`` (the join key of the per-engine verdict)
_ENGINE_NAMED = f'label_replace({_ENGINE}, "{ENGINE}", "$1", "server", "(.*)")'


def _per_replica(expr: str, carry: str = "") -> str:
    """The engine's (job, instance, engine) verdict ``expr`` onto the replica that engine is."""
    return f"{_ENGINE_NAMED}\n* on ({INSTANCE_ENGINE}) group_left ({carry})\n{expr}"


def _group_gpus(w: str) -> str:
    """Each GPU's SM active (mean over the window) with its node's multi-node group label."""
    return (
        f"avg_over_time(llm_gpu_sm_active_ratio[{w}])\n* on (job, instance) group_left (group)\n"
        "max by (job, instance, group) (llm_parallel_node_group_info)"
    )


def recording_rules(s: Settings) -> list[Rule]:
    """Per replica, per model, per parallel group; in evaluation order (later rules read earlier ones)."""
    w = s.rate_window
    ttft_p95 = REPLICA_TTFT_P95.format(w=w)
    state_code = (
        f'2 * max by ({INSTANCE_ENGINE}) (llm_service_state{{state="degraded"}})\n'
        f'+ max by ({INSTANCE_ENGINE}) (llm_service_state{{state="unknown"}})'
    )
    replica = [
        Rule("server_model:llm_scheduler_requests_waiting:sum", f"sum by ({SERVER_MODEL}) (llm_scheduler_requests_waiting)"),
        # the engine's tightest layer; NaN (unknown) layers are ignored by min, all-unknown stays NaN
        Rule("server_model:llm_layer_headroom:min", _per_replica(f"min by ({INSTANCE_ENGINE}) (llm_layer_headroom_ratio)")),
        # 0 healthy, 1 unknown, 2 degraded (the Overview's "Service state" encoding)
        Rule("server_model:llm_service_state:code", _per_replica(f"(\n{state_code}\n)")),
        # topk: one verdict per engine even if two primaries overlap for a cycle (group_left needs one)
        Rule(
            "server_model_cause:llm_bottleneck_confidence:primary",
            _per_replica(f"topk by ({INSTANCE_ENGINE}) (1, {PRIMARY})", carry="layer, cause"),
        ),
    ]

    def by_model(metric: str) -> str:
        return f"sum by (model) (rate({metric}[{w}]))"

    def p95(hist: str) -> str:
        # the fleet's quantile from the summed buckets of every replica, never a mean of quantiles
        return f"histogram_quantile(0.95, sum by (le, model) (rate({hist}_bucket[{w}])))"

    kv_weighted = (
        "sum by (model) (llm_kv_cache_usage_ratio * llm_kv_cache_capacity_tokens)\n/\n"
        "(sum by (model) (llm_kv_cache_capacity_tokens) > 0)"
    )
    model = [
        Rule("model:llm_serving_replicas:count", f"count by (model) ({_ENGINE})"),
        Rule(f"model:llm_generation_tokens:rate{w}", by_model("llm_generation_tokens_total")),
        Rule(f"model:llm_prompt_tokens:rate{w}", by_model("llm_prompt_tokens_total")),
        Rule(f"model:llm_requests_finished:rate{w}", by_model("llm_requests_finished_total")),
        Rule("model:llm_scheduler_requests_running:sum", "sum by (model) (llm_scheduler_requests_running)"),
        Rule("model:llm_scheduler_requests_waiting:sum", "sum by (model) (llm_scheduler_requests_waiting)"),
        Rule(f"model:llm_request_ttft_seconds:p95_rate{w}", p95("llm_request_ttft_seconds")),
        Rule(f"model:llm_request_inter_token_seconds:p95_rate{w}", p95("llm_request_inter_token_seconds")),
        # used KV over total KV where the engines publish their capacity, else the mean usage
        Rule("model:llm_kv_cache_usage:ratio", f"(\n{kv_weighted}\n)\nor\navg by (model) (llm_kv_cache_usage_ratio)"),
        Rule("model:llm_kv_cache_usage:max", "max by (model) (llm_kv_cache_usage_ratio)"),
        Rule(
            "model_cause:llm_bottleneck_primary:replicas",
            "count by (model, layer, cause) (server_model_cause:llm_bottleneck_confidence:primary)",
        ),
        Rule("model:llm_service_degraded:replicas", "sum by (model) (server_model:llm_service_state:code == bool 2)"),
        Rule(
            "model:llm_scheduler_requests_waiting:median",
            "quantile by (model) (0.5, server_model:llm_scheduler_requests_waiting:sum)",
        ),
        # ">= 0" drops NaN: a replica without requests in the window has no p95 and no headroom
        Rule(f"model:llm_request_ttft_seconds:median_p95_rate{w}", f"quantile by (model) (0.5, {ttft_p95} >= 0)"),
        Rule("model:llm_layer_headroom:median", "quantile by (model) (0.5, server_model:llm_layer_headroom:min >= 0)"),
    ]

    gpus = _group_gpus(w)
    group = [
        Rule(
            "group:llm_parallel_node_group_info:nodes",
            "count by (group) (max by (group, job, instance) (llm_parallel_node_group_info))",
        ),
        Rule(f"group_instance:llm_gpu_sm_active:max_avg_over_time{w}", f"max by (group, job, instance) (\n{gpus}\n)"),
        Rule(f"group:llm_gpu_sm_active:avg_over_time{w}", f"avg by (group) (\n{gpus}\n)"),
        # the cross-node twin of llm_parallel_sm_active_skew_ratio: max over mean, all idle = balanced.
        # "max by (group)" on both sides: records read back through Thanos Ruler carry its external labels
        Rule(
            "group:llm_gpu_sm_active:skew_ratio",
            f"max by (group) (group_instance:llm_gpu_sm_active:max_avg_over_time{w})\n/ on (group)\n"
            f"(max by (group) (group:llm_gpu_sm_active:avg_over_time{w}) > 0)\n"
            f"or on (group)\n(0 * max by (group) (group:llm_gpu_sm_active:avg_over_time{w}) + 1)",
        ),
    ]
    return replica + model + capacity_records(s) + group


#: the per-engine capacity gauges (issue 22) each replica carries onto its own labels
CAPACITY_GAUGES = (
    "llm_capacity_concurrency_at_slo",
    "llm_capacity_requests_per_second_at_slo",
    "llm_capacity_used_ratio",
    "llm_capacity_recommended_max_concurrency",
    "llm_capacity_profile_age_seconds",
    "llm_capacity_profile_stale",
)
MEASURED_USED = "model:llm_capacity_used_ratio:max"


def capacity_records(s: Settings) -> list[Rule]:
    """The measured capacity at SLO per replica and per model, against the demand of the same replicas.

    Why only profiled replicas on both sides: a replica without a profile has an unknown
    capacity; counting its load against the others' capacity would call a fleet short that is
    not, and leaving it out of both keeps the ratio right under even balancing. The capacity
    gauges carry ``engine`` (the engine's name), so they join a replica like its verdict.
    """
    w = s.rate_window
    replica = [Rule(f"server_model:{g}:max", _per_replica(f"max by ({INSTANCE_ENGINE}) ({g})")) for g in CAPACITY_GAUGES]
    # in flight = running + waiting: a closed-loop client at the measured concurrency has one request in either
    running = f"sum by ({SERVER_MODEL}) (llm_scheduler_requests_running)"
    replica.append(
        Rule(
            "server_model:llm_scheduler_requests_in_flight:sum",
            f"{running}\n+ on ({SERVER_MODEL})\nserver_model:llm_scheduler_requests_waiting:sum\nor\n{running}",
        )
    )
    profiled = f"and on ({SERVER_MODEL})\nserver_model:llm_capacity_requests_per_second_at_slo:max"

    def ratio(name: str, demand: str, capacity: str) -> str:
        return f'label_replace(\n{demand}\n/ on (model)\n({capacity} > 0),\n"signal", "{name}", "", ""\n)'

    demand_rps, demand_conc = f"model:llm_capacity_requests_finished:rate{w}", "model:llm_capacity_requests_in_flight:sum"
    cap_rps, cap_conc = "model:llm_capacity_requests_per_second_at_slo:sum", "model:llm_capacity_concurrency_at_slo:sum"
    model = [
        Rule(
            "model:llm_capacity_profiled_replicas:count",
            "count by (model) (server_model:llm_capacity_requests_per_second_at_slo:max)",
        ),
        Rule(cap_rps, "sum by (model) (server_model:llm_capacity_requests_per_second_at_slo:max)"),
        Rule(cap_conc, "sum by (model) (server_model:llm_capacity_concurrency_at_slo:max)"),
        Rule(demand_rps, f"sum by (model) (\nserver_model:llm_requests_finished:rate{w}\n{profiled}\n)"),
        Rule(demand_conc, f"sum by (model) (\nserver_model:llm_scheduler_requests_in_flight:sum\n{profiled}\n)"),
        # the larger of the two sides, as llm_capacity_used_ratio is per engine; "signal" only keeps the
        # two sides apart before max drops it (a label that swapped sides would restart an alert's for:)
        Rule(
            MEASURED_USED,
            f"max by (model) (\n{ratio('requests', demand_rps, cap_rps)}\nor\n{ratio('concurrency', demand_conc, cap_conc)}\n)",
        ),
    ]
    return replica + model


def record_names(s: Settings) -> set[str]:
    return {r.record for r in recording_rules(s)}


# --------------------------------------------------------------------------- fixture helpers

VALUE_SAMPLES = 20  #: samples per series of the value tests (1m apart): the 10m evaluation sees full windows


def _sel(name: str, **labels: str) -> str:
    return name + "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _inst(i: str) -> str:
    return f"10.0.{i}:9750"


class _Fleet:
    """Builds promtool input series for replicas (engine ``s`` on each exporter unless named) of named models."""

    def __init__(self, job: str, n: int) -> None:
        self.job, self.n = job, n
        self.series: list[tuple[str, str]] = []

    def add(self, name: str, values: str, **labels: str) -> None:
        self.series.append((_sel(name, job=self.job, **labels), values))

    def const(self, v: float) -> str:
        return f"{v:g}x{self.n}"

    def nan(self) -> str:
        """Unknown throughout (promtool's series notation has no NaN expansion)."""
        return " ".join(["NaN"] * (self.n + 1))

    def replica(self, inst: str, model: str, server: str = "s") -> dict[str, str]:
        """Engine ``server`` on exporter ``inst``; returns the labels of its own series (``engine`` is the family)."""
        eng = {"instance": inst, "server": server, "engine": "vllm", "model": model, "rank": "0"}
        self.add("llm_engine_info", self.const(1), instance=inst, server=server, engine="vllm", model=model, generation="v1")
        return eng

    def gauge(self, name: str, eng: dict[str, str], values: str | float) -> None:
        self.add(name, values if isinstance(values, str) else self.const(values), **eng)

    def headroom(self, inst: str, tightest: float, engine: str = "s") -> None:
        """The engine's layers: one at ``tightest``, one idle, one unknown (NaN)."""
        for layer, v in (("hardware", self.const(tightest)), ("memory", self.const(1)), ("parallel", self.nan())):
            self.add("llm_layer_headroom_ratio", v, instance=inst, layer=layer, **{ENGINE: engine})

    def verdict(
        self,
        inst: str,
        cause: tuple[str, str] | None,
        confidence: float = 0.8,
        values: str | None = None,
        engine: str = "s",
    ) -> None:
        """The engine's state and primary cause (``cause`` None: healthy, no primary); ``engine`` is its name."""
        degraded = values or (self.const(1) if cause else self.const(0))
        self.add("llm_service_state", degraded, instance=inst, state="degraded", **{ENGINE: engine})
        self.add("llm_service_state", self.const(0), instance=inst, state="unknown", **{ENGINE: engine})
        if cause:
            layer, name = cause
            self.add("llm_bottleneck_primary", degraded, instance=inst, layer=layer, cause=name, **{ENGINE: engine})
            self.add(
                "llm_bottleneck_confidence", self.const(confidence), instance=inst, layer=layer, cause=name, **{ENGINE: engine}
            )

    def histogram(self, name: str, eng: dict[str, str], per_minute: dict[str, float]) -> None:
        """Cumulative buckets growing by ``per_minute[le]`` a minute (le "+Inf" included)."""
        for le, inc in per_minute.items():
            self.add(f"{name}_bucket", f"0+{inc:g}x{self.n}", **eng, le=le)


def _cause(name: str) -> tuple[str, str]:
    c = next(c for c in CAUSES if c.cause == name)
    return (c.layer, c.cause)


#: TTFT bucket increments a minute for a replica whose requests all land in one bucket
_TTFT_LES = ("0.25", "0.5", "1", "2.5", "+Inf")


def _ttft_in(upper: str, per_minute: float = 60) -> dict[str, float]:
    """Every request in the bucket ending at ``upper`` (0 below it, all of them from it on)."""
    i = _TTFT_LES.index(upper)
    return {le: (per_minute if j >= i else 0) for j, le in enumerate(_TTFT_LES)}


# --------------------------------------------------------------------------- alerts


def _minutes(for_: str, extra: int) -> str:
    return f"{int(duration_seconds(for_) // 60) + extra}m"


def _n(for_: str, extra: int = 8) -> int:
    return int(duration_seconds(for_) // 60) + extra + 2


def _imbalance_alerts(s: Settings, f: FleetSettings) -> list[Alert]:
    """LLMFleetReplicaImbalance: one replica far above the fleet median while the fleet has headroom."""
    w, job = s.rate_window, s.exporter_job
    n = _n(f.imbalance_for)
    guard = (
        f"and on (model)\nmodel:llm_serving_replicas:count >= {f.min_replicas}\n"
        f"and on (model)\nmodel:llm_layer_headroom:median > {f.min_headroom:g}"
    )
    labels = {"severity": s.severity_ticket, "layer": "application", "kind": KIND, "cause": "replica_imbalance"}
    common = (
        f"while the rest of the fleet has room to spare (at least {f.min_replicas} replicas, the median one with over "
        f"{f.min_headroom:.0%} headroom in its tightest layer): requests are not spread evenly "
        "(load-balancer skew, sticky sessions or a bad node). Confirm on 'LLM / Fleet' (the Replicas table and the "
        "per-replica panels against the fleet median), then the replica's own verdict at http://{{ $labels.instance }}/diagnosis?engine={{ $labels.server }}."
    )

    def expect(inst: str, model: str) -> dict[str, str]:
        return {"job": job, "instance": inst, "server": "s", "model": model}

    # --- signal=queue
    fire = _Fleet(job, n)
    for i, (waiting, room) in enumerate(((0, 0.8), (1, 0.7), (20, 0.0)), 1):
        eng = fire.replica(_inst(f"1.{i}"), "m")
        fire.gauge("llm_scheduler_requests_waiting", eng, waiting)
        fire.headroom(_inst(f"1.{i}"), room)
    for i, waiting in enumerate((0, 30), 1):  # two replicas: below min_replicas (and no replica of two is 3x their median)
        eng = fire.replica(_inst(f"2.{i}"), "pair")
        fire.gauge("llm_scheduler_requests_waiting", eng, waiting)
        fire.headroom(_inst(f"2.{i}"), 0.9)
    quiet = _Fleet(job, n)
    blip = " ".join(["0", "20", "20"] + ["0"] * (n - 3))
    fleets: dict[str, tuple[tuple[float | str, float], ...]] = {
        "even": ((10, 0.8), (12, 0.8), (11, 0.8)),  # everyone queues alike: load, not skew
        "full": ((0, 0.1), (1, 0.05), (20, 0.0)),  # no headroom anywhere: capacity, not imbalance
        "small": ((0, 0.8), (0, 0.8), (3, 0.8)),  # skewed but below min_waiting
        "blip": ((0, 0.8), (0, 0.8), (blip, 0.8)),  # shorter than for:
    }
    for m, (model, reps) in enumerate(fleets.items(), 3):
        for i, (queued, room) in enumerate(reps, 1):
            eng = quiet.replica(_inst(f"{m}.{i}"), model)
            quiet.gauge("llm_scheduler_requests_waiting", eng, queued)
            quiet.headroom(_inst(f"{m}.{i}"), room)
    queue = Alert(
        name=IMBALANCE,
        expr=(
            "server_model:llm_scheduler_requests_waiting:sum\n> on (model) group_left ()\n"
            f"({f.queue_factor:g} * model:llm_scheduler_requests_waiting:median)\n"
            f"and\nserver_model:llm_scheduler_requests_waiting:sum >= {f.min_waiting:g}\n{guard}"
        ),
        for_=f.imbalance_for,
        labels={**labels, "signal": "queue"},
        summary="Replica {{ $labels.server }} ({{ $labels.instance }}) queues far more than the rest of {{ $labels.model }}",
        description=(
            f"Replica {{{{ $labels.server }}}} on exporter {{{{ $labels.instance }}}} has more than {f.queue_factor:g}x the "
            f"median waiting requests of the {{{{ $labels.model }}}} fleet (and at least {f.min_waiting:g}) " + common
        ),
        fire=Case(tuple(fire.series), (expect(_inst("1.3"), "m"),)),
        quiet=Case(tuple(quiet.series)),
        eval_time=_minutes(f.imbalance_for, 4),
    )

    # --- signal=ttft (the per-replica p95 record comes from recording_rules.yml)
    fire = _Fleet(job, n)
    for i, (upper, room) in enumerate((("0.5", 0.8), ("0.5", 0.7), ("2.5", 0.05)), 1):
        eng = fire.replica(_inst(f"1.{i}"), "m")
        fire.histogram("llm_request_ttft_seconds", eng, _ttft_in(upper))
        fire.headroom(_inst(f"1.{i}"), room)
    quiet = _Fleet(job, n)
    fleets_ttft: dict[str, tuple[str | None, ...]] = {
        "fast": ("0.25", "0.25", "1"),  # 4x the median, but under min_ttft_seconds
        "slow": ("2.5", "2.5", "2.5"),  # slow alike: not imbalance
        "idle": (None, None, "2.5"),  # two replicas without requests: no p95, no median of three
    }
    for m, (model, uppers) in enumerate(fleets_ttft.items(), 3):
        for i, bucket in enumerate(uppers, 1):
            eng = quiet.replica(_inst(f"{m}.{i}"), model)
            quiet.histogram("llm_request_ttft_seconds", eng, _ttft_in(bucket or "+Inf", 60 if bucket else 0))
            quiet.headroom(_inst(f"{m}.{i}"), 0.8)
    ttft = Alert(
        name=IMBALANCE,
        expr=(
            f"{REPLICA_TTFT_P95.format(w=w)}\n> on (model) group_left ()\n"
            f"({f.ttft_factor:g} * model:llm_request_ttft_seconds:median_p95_rate{w})\n"
            f"and\n{REPLICA_TTFT_P95.format(w=w)} > {f.min_ttft_seconds:g}\n{guard}"
        ),
        for_=f.imbalance_for,
        labels={**labels, "signal": "ttft"},
        summary="Replica {{ $labels.server }} ({{ $labels.instance }}) answers far slower than the rest of {{ $labels.model }}",
        description=(
            f"The TTFT p95 of replica {{{{ $labels.server }}}} on exporter {{{{ $labels.instance }}}} is more than "
            f"{f.ttft_factor:g}x the median replica's of the {{{{ $labels.model }}}} fleet (and over {f.min_ttft_seconds:g}s) "
            + common
        ),
        fire=Case(tuple(fire.series), (expect(_inst("1.3"), "m"),)),
        quiet=Case(tuple(quiet.series)),
        eval_time=_minutes(f.imbalance_for, 4),
    )
    return [queue, ttft]


def _capacity_alerts(s: Settings, f: FleetSettings) -> list[Alert]:
    """LLMFleetCapacityShort, one rule per capacity kind (its ``capacity`` label says what to add)."""
    job = s.exporter_job
    n = _n(f.capacity_for)
    # fire: one fleet per kind, most of its replicas degraded with a cause of that kind
    fire = _Fleet(job, n)
    expected: list[dict[str, str]] = []
    fleets: dict[str, tuple[str | None, ...]] = {
        "kv": ("kv_cache_pressure", "kv_cache_pressure", None),
        "gpu": ("compute_bound", "compute_bound"),
        "host": ("serial_host_ceiling",) * 3,
        "busy": ("queue_backlog", "queue_backlog", "queue_backlog"),
    }
    for m, (model, causes) in enumerate(fleets.items(), 1):
        for i, cause in enumerate(causes, 1):
            fire.replica(_inst(f"{m}.{i}"), model)
            fire.verdict(_inst(f"{m}.{i}"), _cause(cause) if cause else None)
        layer, cause = _cause(next(c for c in causes if c))
        expected.append({"model": model, "layer": layer, "cause": cause, "replica_cause": cause})
    # three engines of one exporter (issue 20: a replica is an engine, with its own verdict): two of
    # the three short of KV memory is most of the fleet
    for server, cause in (("e1", "kv_cache_pressure"), ("e2", "kv_cache_pressure"), ("e3", None)):
        fire.replica(_inst("9.1"), "node", server=server)
        fire.verdict(_inst("9.1"), _cause(cause) if cause else None, engine=server)
    expected.append({"model": "node", "layer": "memory", "cause": "kv_cache_pressure", "replica_cause": "kv_cache_pressure"})
    quiet = _Fleet(job, n)
    brief = " ".join(["0", "1", "1"] + ["0"] * (n - 3))
    quiet_fleets: dict[str, tuple[tuple[str | None, str | None], ...]] = {
        "mixed": (("kv_cache_pressure", None), ("compute_bound", None), (None, None)),  # no cause holds most
        "half": (("kv_cache_pressure", None),) * 2 + ((None, None),) * 2,  # half is not most
        "one": (("kv_cache_pressure", None),),  # a single replica pages alone
        "hot": (("power_or_thermal_throttling", None),) * 2,  # a fault, not a shortage
        "brief": (("kv_cache_pressure", brief),) * 2,  # shorter than for:
    }
    for m, (model, reps) in enumerate(quiet_fleets.items(), 5):
        for i, (cause, values) in enumerate(reps, 1):
            quiet.replica(_inst(f"{m}.{i}"), model)
            quiet.verdict(_inst(f"{m}.{i}"), _cause(cause) if cause else None, values=values)
    # two engines of one exporter, one short of KV memory, one healthy: half, not most (one exporter's
    # verdict copied onto both would read "both")
    for server, cause in (("e1", "kv_cache_pressure"), ("e2", None)):
        quiet.replica(_inst("9.2"), "shared", server=server)
        quiet.verdict(_inst("9.2"), _cause(cause) if cause else None, engine=server)
    out = []
    for kind, (what, causes) in CAPACITY.items():
        out.append(
            Alert(
                name=CAPACITY_SHORT,
                expr=(
                    "label_replace(\n"
                    f'model_cause:llm_bottleneck_primary:replicas{{cause=~"{"|".join(causes)}"}}\n'
                    "/ on (model) group_left ()\nmodel:llm_serving_replicas:count\n"
                    f"> {f.capacity_share:g}\nand on (model)\nmodel:llm_serving_replicas:count >= {f.capacity_min_replicas},\n"
                    '"replica_cause", "$1", "cause", "(.*)"\n)'
                ),
                for_=f.capacity_for,
                labels={"severity": s.severity_ticket, "kind": KIND, "cause": "fleet_capacity_short", "capacity": kind},
                summary="The {{ $labels.model }} fleet is short of "
                + what.split(":")[0]
                + " ({{ $labels.replica_cause }} on most replicas)",
                description=(
                    f"More than {f.capacity_share:.0%} of the replicas of {{{{ $labels.model }}}} are degraded with the same primary "
                    "cause, {{ $labels.layer }}/{{ $labels.replica_cause }}: the fleet as a whole lacks capacity, and balancing "
                    f"cannot help. Scale out; what to add: {what}. Each of those replicas pages on its own "
                    "(LLMServiceDegraded); this ticket says it is one shortage. Confirm on 'LLM / Fleet' (replicas per primary cause)."
                ),
                # every kind's rule is proven by the one case: each fleet fires exactly its own kind
                fire=Case(tuple(fire.series), tuple(e for e in expected if e["cause"] in causes)),
                quiet=Case(tuple(quiet.series)),
                eval_time=_minutes(f.capacity_for, 4),
            )
        )
    return out + [_measured_capacity_alert(s, f)]


def _profiled(fx: _Fleet, inst: str, model: str, rps: float, conc: float, finished_per_s: float, running: float | str) -> None:
    """A replica with a capacity profile (``rps``, ``conc`` at SLO) carrying the given load."""
    eng = fx.replica(inst, model)
    fx.add("llm_capacity_requests_per_second_at_slo", fx.const(rps), instance=inst, **{ENGINE: "s"})
    fx.add("llm_capacity_concurrency_at_slo", fx.const(conc), instance=inst, **{ENGINE: "s"})
    fx.add("llm_requests_finished_total", f"0+{finished_per_s * 60:g}x{fx.n}", **eng, reason="stop")
    fx.gauge("llm_scheduler_requests_running", eng, running)
    fx.gauge("llm_scheduler_requests_waiting", eng, 0)


def _measured_capacity_alert(s: Settings, f: FleetSettings) -> Alert:
    """LLMFleetCapacityShort capacity=measured: the demand of the profiled replicas over their summed capacity at SLO.

    Why beside the cause-based rules: those need most replicas already degraded; a fleet with
    capacity profiles (issue 22) says it is short while the SLO still holds, from numbers.
    """
    job, limit = s.exporter_job, f.capacity_measured_ratio
    # the demand is a rate: it reaches its level one rate window after the counters start
    for_min, w_min = int(duration_seconds(f.capacity_for) // 60), int(duration_seconds(s.rate_window) // 60)
    eval_min = for_min + w_min + 4
    n = eval_min + 4
    over, under = round(limit * 1.5, 4), round(limit * 0.6, 4)
    fire = _Fleet(job, n)
    # "rps": two replicas of capacity 1 req/s each finish 1.5x that; "conc": requests in flight over the concurrency
    for i in (1, 2):
        _profiled(fire, _inst(f"1.{i}"), "rps", rps=1, conc=100, finished_per_s=over, running=1)
        _profiled(fire, _inst(f"2.{i}"), "conc", rps=100, conc=4, finished_per_s=1, running=4 * over)
    quiet = _Fleet(job, n)
    late = eval_min - max(1, for_min // 2)  # over only since half of for: at the evaluation
    for i in (1, 2):
        _profiled(quiet, _inst(f"3.{i}"), "under", rps=1, conc=4, finished_per_s=under, running=4 * under)
        # over only lately: shorter than for:
        _profiled(
            quiet, _inst(f"4.{i}"), "brief", rps=100, conc=4, finished_per_s=1, running=f"1x{late} {4 * over:g}x{n - late - 1}"
        )
        # no profile at all: no measured capacity, whatever the load (the cause-based rules judge it)
        eng = quiet.replica(_inst(f"5.{i}"), "unprofiled")
        quiet.add("llm_requests_finished_total", f"0+600x{n}", **eng, reason="stop")
        quiet.gauge("llm_scheduler_requests_running", eng, 50)
    # a single profiled replica over its capacity: its own LLMCapacityHeadroomLow, not a fleet shortage
    _profiled(quiet, _inst("6.1"), "one", rps=1, conc=4, finished_per_s=over, running=1)
    # two profiled replicas with room and one without a profile carrying a flood: only the profiled count
    for i in (1, 2):
        _profiled(quiet, _inst(f"7.{i}"), "partial", rps=1, conc=4, finished_per_s=under, running=1)
    eng = quiet.replica(_inst("7.3"), "partial")
    quiet.add("llm_requests_finished_total", f"0+600x{n}", **eng, reason="stop")
    quiet.gauge("llm_scheduler_requests_running", eng, 50)
    return Alert(
        name=CAPACITY_SHORT,
        expr=(f"{MEASURED_USED} > {limit:g}\nand on (model)\nmodel:llm_serving_replicas:count >= {f.capacity_min_replicas}"),
        for_=f.capacity_for,
        labels={
            "severity": s.severity_ticket,
            "layer": "application",
            "kind": KIND,
            "cause": "fleet_capacity_short",
            "capacity": "measured",
        },
        summary="The {{ $labels.model }} fleet carries more than its measured capacity at SLO",
        description=(
            f"The demand on the profiled replicas of {{{{ $labels.model }}}} is above {limit:.0%} of their summed capacity at "
            "SLO (issue 22: serve --capacity-profile), on the larger of two sides (finished requests per second against "
            "requests/s at SLO, requests in flight against the concurrency at SLO): the fleet as a whole is past the "
            "load its profiles measured within the SLO, and balancing cannot help. Add replicas for the demand over the "
            "measured capacity per replica, with headroom, and cap each at the gateway to llm_capacity_recommended_max_concurrency. "
            "Confirm on 'LLM / Fleet' (row Measured capacity at SLO)."
        ),
        fire=Case(
            tuple(fire.series),
            ({"model": "rps"}, {"model": "conc"}),
        ),
        quiet=Case(tuple(quiet.series)),
        eval_time=f"{eval_min}m",
    )


def _group_skew_alert(s: Settings, f: FleetSettings) -> Alert:
    """LLMFleetGroupSkew: a node of a multi-node parallel group holds its busiest GPU far above the group mean."""
    w, job = s.rate_window, s.exporter_job
    n = _n(f.skew_for)
    fire = _Fleet(job, n)
    quiet = _Fleet(job, n)

    def node(fx: _Fleet, inst: str, group: str | None, sm: tuple[float, ...]) -> None:
        if group:
            fx.add("llm_parallel_node_group_info", fx.const(1), instance=inst, group=group)
        for g, v in enumerate(sm):
            fx.add("llm_gpu_sm_active_ratio", fx.const(v), instance=inst, gpu=str(g), uuid=f"GPU-{inst}-{g}")

    node(fire, _inst("1.1"), "pp0", (0.4, 0.4))
    node(fire, _inst("1.2"), "pp0", (0.9, 0.3))  # busiest GPU 0.9 over a group mean of 0.5
    node(quiet, _inst("2.1"), "even", (0.5, 0.5))
    node(quiet, _inst("2.2"), "even", (0.55, 0.5))
    node(quiet, _inst("3.1"), "idle", (0.02, 0.0))  # skewed, but the group idles
    node(quiet, _inst("3.2"), "idle", (0.08, 0.0))
    node(quiet, _inst("4.1"), "single", (0.9, 0.1))  # one node: the node's own LLMGPUImbalance covers it
    node(quiet, _inst("5.1"), None, (0.9, 0.1))  # no --parallel-group: not in any group
    return Alert(
        name=GROUP_SKEW,
        expr=(
            f"group_instance:llm_gpu_sm_active:max_avg_over_time{w}\n/ on (group) group_left ()\n"
            f"(group:llm_gpu_sm_active:avg_over_time{w} >= {f.skew_min_sm_active:g})\n> {f.skew_ratio:g}\n"
            "and on (group)\ngroup:llm_parallel_node_group_info:nodes >= 2"
        ),
        for_=f.skew_for,
        labels={"severity": s.severity_ticket, "layer": "parallel", "kind": KIND, "cause": "group_skew"},
        summary="Node {{ $labels.instance }} is the straggler of parallel group {{ $labels.group }}",
        description=(
            f"The busiest GPU of node {{{{ $labels.instance }}}} averages more than {f.skew_ratio:g}x the mean SM activity of "
            f"the GPUs of multi-node parallel group {{{{ $labels.group }}}} over {w}: the whole group runs at that node's pace. "
            "Confirm on 'LLM / Fleet' (multi-node parallel groups), then that node's 'LLM / Hardware' (throttling, clocks) "
            "and 'LLM / Parallelism'."
        ),
        fire=Case(tuple(fire.series), ({"group": "pp0", "job": job, "instance": _inst("1.2")},)),
        quiet=Case(tuple(quiet.series)),
        eval_time=_minutes(f.skew_for, 4),
    )


def alerts(s: Settings, for_override: str | None = None) -> list[Alert]:
    """Every fleet alerting rule (one alert name may have several rules: one per signal or capacity kind)."""
    f = fleet_settings(s, for_override)
    return _imbalance_alerts(s, f) + _capacity_alerts(s, f) + [_group_skew_alert(s, f)]


def groups(s: Settings, for_override: str | None = None) -> list[dict[str, Any]]:
    """The two groups of alerts/fleet_rules.yml: records first (the alerts read them)."""

    def rule(a: Alert) -> dict[str, Any]:
        return {
            "alert": a.name,
            "expr": a.expr,
            "for": a.for_,
            "labels": dict(a.labels),
            "annotations": {"summary": a.summary, "description": a.description, "runbook_url": runbook_url(s, a)},
        }

    return [
        {"name": "llm-layer-exporter.fleet", "rules": [{"record": r.record, "expr": r.expr} for r in recording_rules(s)]},
        {"name": "llm-layer-exporter.fleet.alerts", "rules": [rule(a) for a in alerts(s, for_override)]},
    ]


# --------------------------------------------------------------------------- promtool tests


def _round(expr: str) -> str:
    """Compare at 0.001: promtool wants exact floats, and rates and averages carry rounding."""
    return f"round({expr}, 0.001)"


def _value_tests(s: Settings) -> list[dict[str, object]]:
    """Every recording rule with known inputs and exact outputs, absent series included."""
    w, job = s.rate_window, s.exporter_job
    fx = _Fleet(job, VALUE_SAMPLES)
    # fleet m: three replicas; fleet solo: one replica with no requests and no known headroom;
    # fleet duo: two engines on one exporter (issue 20), a degraded with kv_cache_pressure, b healthy
    waiting: tuple[float, ...] = (0, 2, 30)
    running, usage, capacity, gen = (8, 8, 8), (0.2, 0.4, 0.9), (1000, 1000, 2000), (60, 120, 180)
    ttft = ("0.5", "0.5", "2.5")
    rooms = (0.8, 0.6, 0.05)
    verdicts: tuple[tuple[str, str] | None, ...] = (None, None, _cause("kv_cache_pressure"))
    reps = [_inst(f"1.{i}") for i in (1, 2, 3)]
    for i, inst in enumerate(reps):
        eng = fx.replica(inst, "m")
        fx.gauge("llm_scheduler_requests_waiting", eng, waiting[i])
        fx.gauge("llm_scheduler_requests_running", eng, running[i])
        fx.gauge("llm_kv_cache_usage_ratio", eng, usage[i])
        fx.gauge("llm_kv_cache_capacity_tokens", eng, capacity[i])
        fx.add("llm_generation_tokens_total", f"0+{gen[i]}x{fx.n}", **eng)
        fx.add("llm_prompt_tokens_total", f"0+120x{fx.n}", **eng)
        fx.add("llm_requests_finished_total", f"0+60x{fx.n}", **eng, reason="stop")
        fx.histogram("llm_request_ttft_seconds", eng, _ttft_in(ttft[i]))
        fx.headroom(inst, rooms[i])
        fx.verdict(inst, verdicts[i], confidence=0.75)
    fx.add(
        "llm_requests_finished_total",
        f"0+60x{fx.n}",
        **{"instance": reps[2], "server": "s", "engine": "vllm", "model": "m", "rank": "0"},
        reason="abort",
    )
    # ITL of one replica only: rates 1, 2, 2, 2 a second per bucket
    itl = {"0.05": 60.0, "0.1": 120.0, "0.2": 120.0, "+Inf": 120.0}
    fx.histogram(
        "llm_request_inter_token_seconds", {"instance": reps[0], "server": "s", "engine": "vllm", "model": "m", "rank": "0"}, itl
    )
    solo = _inst("1.4")
    eng = fx.replica(solo, "solo")
    fx.gauge("llm_scheduler_requests_waiting", eng, 5)
    fx.gauge("llm_kv_cache_usage_ratio", eng, 0.5)  # no capacity published: the mean usage
    fx.histogram("llm_request_ttft_seconds", eng, _ttft_in("+Inf", 0))
    for layer in ("hardware", "memory"):
        fx.add("llm_layer_headroom_ratio", fx.nan(), instance=solo, layer=layer, **{ENGINE: "s"})
    fx.add("llm_service_state", fx.const(0), instance=solo, state="degraded", **{ENGINE: "s"})
    fx.add("llm_service_state", fx.const(1), instance=solo, state="unknown", **{ENGINE: "s"})
    duo = _inst("1.5")
    for server, queued, room, verdict in (("a", 6.0, 0.1, _cause("kv_cache_pressure")), ("b", 0.0, 0.7, None)):
        eng = fx.replica(duo, "duo", server=server)
        fx.gauge("llm_scheduler_requests_waiting", eng, queued)
        fx.headroom(duo, room, engine=server)
        fx.verdict(duo, verdict, confidence=0.9, engine=server)

    def rep(inst: str, server: str = "s", verdict: bool = False, **extra: str) -> str:
        """A replica's labels; ``verdict``: a record from its engine's verdict, which also carries ``engine``."""
        labels = {"job": job, "instance": inst, "server": server, "model": extra.pop("model", "m")}
        if verdict:
            labels[ENGINE] = server
        return "{" + ", ".join(f'{k}="{v}"' for k, v in {**labels, **extra}.items()) + "}"

    def duo_rep(server: str, verdict: bool = False, **extra: str) -> str:
        return rep(duo, server, verdict, model="duo", **extra)

    def model(m: str, **extra: str) -> str:
        return "{" + ", ".join(f'{k}="{v}"' for k, v in {"model": m, **extra}.items()) + "}"

    p95 = _bucket_quantile(0.95, {"0.25": 0, "0.5": 2, "1": 2, "2.5": 3, "+Inf": 3})
    exprs: list[tuple[str, list[tuple[str, float]]]] = [
        (
            "server_model:llm_scheduler_requests_waiting:sum",
            [(rep(r), v) for r, v in zip(reps, waiting)] + [(rep(solo, model="solo"), 5), (duo_rep("a"), 6), (duo_rep("b"), 0)],
        ),
        # NaN layers ignored; the solo exporter knows no layer (NaN, dropped by ">= 0"); each duo engine its own
        (
            "server_model:llm_layer_headroom:min >= 0",
            [(rep(r, verdict=True), v) for r, v in zip(reps, rooms)] + [(duo_rep("a", True), 0.1), (duo_rep("b", True), 0.7)],
        ),
        (
            "server_model:llm_service_state:code",
            [
                (rep(reps[0], verdict=True), 0),
                (rep(reps[1], verdict=True), 0),
                (rep(reps[2], verdict=True), 2),
                (rep(solo, verdict=True, model="solo"), 1),
                (duo_rep("a", True), 2),
                (duo_rep("b", True), 0),
            ],
        ),
        (
            "server_model_cause:llm_bottleneck_confidence:primary",
            [
                (rep(reps[0], verdict=True, layer="none", cause="none"), 0),
                (rep(reps[1], verdict=True, layer="none", cause="none"), 0),
                (rep(reps[2], verdict=True, layer="memory", cause="kv_cache_pressure"), 0.75),
                (rep(solo, verdict=True, model="solo", layer="none", cause="none"), 0),
                # two engines on one exporter: two replicas, each with its own engine's verdict
                (duo_rep("a", True, layer="memory", cause="kv_cache_pressure"), 0.9),
                (duo_rep("b", True, layer="none", cause="none"), 0),
            ],
        ),
        ("model:llm_serving_replicas:count", [(model("m"), 3), (model("solo"), 1), (model("duo"), 2)]),
        (f"model:llm_generation_tokens:rate{w}", [(model("m"), 6)]),
        (f"model:llm_prompt_tokens:rate{w}", [(model("m"), 6)]),
        (f"model:llm_requests_finished:rate{w}", [(model("m"), 4)]),
        ("model:llm_scheduler_requests_running:sum", [(model("m"), 24)]),
        ("model:llm_scheduler_requests_waiting:sum", [(model("m"), 32), (model("solo"), 5), (model("duo"), 6)]),
        # summed buckets: 2.275 s; the mean of the replicas' p95s (0.4875, 0.4875, 2.425) would be 1.13 s
        (f'model:llm_request_ttft_seconds:p95_rate{w}{{model="m"}}', [(model("m"), p95)]),
        (
            f"model:llm_request_inter_token_seconds:p95_rate{w}",
            [(model("m"), _bucket_quantile(0.95, {"0.05": 1, "0.1": 2, "0.2": 2, "+Inf": 2}))],
        ),
        # (0.2 * 1000 + 0.4 * 1000 + 0.9 * 2000) / 4000; solo publishes no capacity: its mean usage
        ("model:llm_kv_cache_usage:ratio", [(model("m"), 0.6), (model("solo"), 0.5)]),
        ("model:llm_kv_cache_usage:max", [(model("m"), 0.9), (model("solo"), 0.5)]),
        (
            "model_cause:llm_bottleneck_primary:replicas",
            [
                (model("m", layer="none", cause="none"), 2),
                (model("m", layer="memory", cause="kv_cache_pressure"), 1),
                (model("solo", layer="none", cause="none"), 1),
                (model("duo", layer="memory", cause="kv_cache_pressure"), 1),
                (model("duo", layer="none", cause="none"), 1),
            ],
        ),
        ("model:llm_service_degraded:replicas", [(model("m"), 1), (model("solo"), 0), (model("duo"), 1)]),
        ("model:llm_scheduler_requests_waiting:median", [(model("m"), 2), (model("solo"), 5), (model("duo"), 3)]),
        # the median replica's p95 (0.4875 s); solo has none (no requests): no series, not NaN
        (f"model:llm_request_ttft_seconds:median_p95_rate{w}", [(model("m"), _bucket_quantile(0.95, _rates(_ttft_in("0.5"))))]),
        ("model:llm_layer_headroom:median", [(model("m"), 0.6), (model("duo"), 0.4)]),
    ]

    gx = _Fleet(job, VALUE_SAMPLES)
    for inst, group, sm in (
        (_inst("2.1"), "pp0", (0.5, 0.5)),
        (_inst("2.2"), "pp0", (0.9, 0.1)),
        (_inst("3.1"), "idle", (0.0, 0.0)),
        (_inst("3.2"), "idle", (0.0, 0.0)),
        (_inst("4.1"), None, (0.7, 0.7)),
    ):
        if group:
            gx.add("llm_parallel_node_group_info", gx.const(1), instance=inst, group=group)
        for g, v in enumerate(sm):
            gx.add("llm_gpu_sm_active_ratio", gx.const(v), instance=inst, gpu=str(g), uuid=f"GPU-{inst}-{g}")

    def node(inst: str, group: str) -> str:
        return f'{{group="{group}", job="{job}", instance="{inst}"}}'

    group_exprs: list[tuple[str, list[tuple[str, float]]]] = [
        ("group:llm_parallel_node_group_info:nodes", [('{group="pp0"}', 2), ('{group="idle"}', 2)]),
        (
            f"group_instance:llm_gpu_sm_active:max_avg_over_time{w}",
            [
                (node(_inst("2.1"), "pp0"), 0.5),
                (node(_inst("2.2"), "pp0"), 0.9),
                (node(_inst("3.1"), "idle"), 0),
                (node(_inst("3.2"), "idle"), 0),
            ],
        ),
        (f"group:llm_gpu_sm_active:avg_over_time{w}", [('{group="pp0"}', 0.5), ('{group="idle"}', 0)]),
        # 0.9 / 0.5; an idle group is balanced (1), not infinitely skewed
        ("group:llm_gpu_sm_active:skew_ratio", [('{group="pp0"}', 1.8), ('{group="idle"}', 1)]),
    ]

    def tests(pairs: list[tuple[str, list[tuple[str, float]]]]) -> list[dict[str, object]]:
        return [
            {
                "eval_time": "10m",
                "expr": _round(expr),
                "exp_samples": [{"labels": labels, "value": _go_round(value)} for labels, value in expected],
            }
            for expr, expected in pairs
        ]

    return [
        _capacity_value_test(s),
        {
            "name": "fleet records: per replica and per model, quantiles from summed buckets",
            "interval": "1m",
            "input_series": unittests._series(tuple(fx.series)),
            "promql_expr_test": tests(exprs),
        },
        {
            "name": "fleet records: multi-node parallel groups",
            "interval": "1m",
            "input_series": unittests._series(tuple(gx.series)),
            "promql_expr_test": tests(group_exprs),
        },
    ]


def _capacity_value_test(s: Settings) -> dict[str, object]:
    """The measured capacity records (issue 22): per replica by its engine's name, per model over profiled replicas only.

    Fleet m: two profiled replicas and one without a profile carrying the most load (left out of
    both sides); fleet duo: two engines of one exporter, each with its own profile.
    """
    w, job = s.rate_window, s.exporter_job
    fx = _Fleet(job, VALUE_SAMPLES)
    #: (instance, server, model, profile gauges or None, finished/s, running, waiting or None)
    replicas: list[tuple[str, str, str, tuple[float, ...] | None, float, float, float | None]] = [
        (_inst("8.1"), "s", "m", (8, 2, 0.5, 6, 3600, 0), 1, 3, 1),
        (_inst("8.2"), "s", "m", (16, 4, 0.25, 12, 7200, 1), 2, 4, 0),
        (_inst("8.3"), "s", "m", None, 5, 10, 5),
        (_inst("8.4"), "e1", "duo", (2, 1, 0.9, 1, 60, 0), 0.5, 2, None),  # no waiting series: running alone
        (_inst("8.4"), "e2", "duo", (6, 3, 0.1, 4, 60, 0), 1.5, 5, 1),
    ]
    per_replica: dict[str, list[tuple[str, float]]] = {f"server_model:{g}:max": [] for g in CAPACITY_GAUGES}
    in_flight: list[tuple[str, float]] = []
    for inst, server, fleet_model, profile, finished, running, waiting in replicas:
        eng = fx.replica(inst, fleet_model, server=server)
        fx.add("llm_requests_finished_total", f"0+{finished * 60:g}x{fx.n}", **eng, reason="stop")
        fx.gauge("llm_scheduler_requests_running", eng, running)
        if waiting is not None:
            fx.gauge("llm_scheduler_requests_waiting", eng, waiting)
        labels = {"job": job, "instance": inst, "server": server, "model": fleet_model}
        in_flight.append(("{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}", running + (waiting or 0)))
        if profile is None:
            continue
        named = "{" + ", ".join(f'{k}="{v}"' for k, v in {**labels, ENGINE: server}.items()) + "}"
        for gauge, value in zip(CAPACITY_GAUGES, profile):
            fx.add(gauge, fx.const(value), instance=inst, **{ENGINE: server})
            per_replica[f"server_model:{gauge}:max"].append((named, value))

    def model(m: str) -> str:
        return f'{{model="{m}"}}'

    exprs: list[tuple[str, list[tuple[str, float]]]] = list(per_replica.items()) + [
        ("server_model:llm_scheduler_requests_in_flight:sum", in_flight),
        ("model:llm_capacity_profiled_replicas:count", [(model("m"), 2), (model("duo"), 2)]),
        ("model:llm_capacity_requests_per_second_at_slo:sum", [(model("m"), 6), (model("duo"), 4)]),
        ("model:llm_capacity_concurrency_at_slo:sum", [(model("m"), 24), (model("duo"), 8)]),
        # the unprofiled replica's 5 req/s and 15 in flight count on neither side
        (f"model:llm_capacity_requests_finished:rate{w}", [(model("m"), 3), (model("duo"), 2)]),
        ("model:llm_capacity_requests_in_flight:sum", [(model("m"), 8), (model("duo"), 8)]),
        # m: requests 3/6 over in flight 8/24; duo: in flight 8/8 over requests 2/4
        (MEASURED_USED, [(model("m"), 0.5), (model("duo"), 1)]),
    ]
    return {
        "name": "fleet records: measured capacity at SLO against the demand of the profiled replicas",
        "interval": "1m",
        "input_series": unittests._series(tuple(fx.series)),
        "promql_expr_test": [
            {
                "eval_time": "10m",
                "expr": _round(expr),
                "exp_samples": [{"labels": labels, "value": _go_round(value)} for labels, value in expected],
            }
            for expr, expected in exprs
        ],
    }


def _go_round(value: float) -> float:
    """PromQL's round(v, 0.001): half up (Python's round() is half-even)."""
    return math.floor(value * 1000 + 0.5) / 1000


def _rates(per_minute: dict[str, float]) -> dict[str, float]:
    return {le: v / 60 for le, v in per_minute.items()}


def _bucket_quantile(q: float, rates: dict[str, float]) -> float:
    """histogram_quantile of Prometheus 2.42 on per-second bucket rates (linear within the bucket)."""
    bounds = [(math.inf if le == "+Inf" else float(le), c) for le, c in rates.items()]
    rank = q * bounds[-1][1]
    for i, (upper, count) in enumerate(bounds):
        if count >= rank:
            start, below = (0.0, 0.0) if i == 0 else (bounds[i - 1][0], bounds[i - 1][1])
            return start + (upper - start) * ((rank - below) / (count - below))
    raise ValueError("no bucket holds the rank")


def _alert_tests(s: Settings, for_override: str | None = None) -> list[dict[str, object]]:
    """One promtool test per distinct input case of an alert name.

    Why per name and not per rule: promtool checks every alert of a name at once, so a case
    expects what *each* rule of that name makes of it (LLMFleetCapacityShort's four rules share
    one firing case in which every rule fires for its own fleet).
    """
    by_name: dict[str, list[Alert]] = {}
    for a in alerts(s, for_override):
        by_name.setdefault(a.name, []).append(a)
    out: list[dict[str, object]] = []
    for name, rules in by_name.items():
        for kind in ("fires", "stays quiet"):
            cases: dict[tuple[tuple[str, str], ...], list[tuple[Alert, Case]]] = {}
            for a in rules:
                case = a.fire if kind == "fires" else a.quiet
                cases.setdefault(case.series, []).append((a, case))
            for series, members in cases.items():
                which = sorted({a.labels.get("signal") or a.labels.get("capacity") or "" for a, _ in members} - {""})
                expected = [unittests._expected(a, s, e) for a, case in members for e in case.expect]
                out.append(
                    {
                        "name": f"{name}{' ' + ', '.join(which) if which else ''} {kind}",
                        "interval": members[0][0].interval,
                        "input_series": unittests._series(series),
                        "alert_rule_test": [{"eval_time": members[0][0].eval_time, "alertname": name, "exp_alerts": expected}],
                    }
                )
    return out


def test_document(s: Settings) -> dict[str, object]:
    """alerts/tests/fleet_test.yml: value tests of every record, and every alert rule both ways."""
    return {
        "rule_files": ["../recording_rules.yml", "../fleet_rules.yml"],
        "evaluation_interval": "1m",
        "tests": _value_tests(s) + _alert_tests(s),
    }


# --------------------------------------------------------------------------- checks for generate.py --check


def lint(s: Settings, sections: dict[str, str], other_alerts: set[str]) -> list[str]:
    """Runbook sections (with the concept's anchor), known causes, no clash with the other alert names."""
    errors: list[str] = []
    known_causes = {c.cause for c in CAUSES}
    for kind, (_, causes) in CAPACITY.items():
        errors += [f"fleet capacity {kind}: unknown diagnosis cause {c}" for c in causes if c not in known_causes]
    names = {a.name for a in alerts(s)}
    errors += [f"{name}: also an alert of alerts/alerting.py" for name in sorted(names & other_alerts)]
    for concept, name in CONCEPTS.items():
        section = sections.get(name.lower())
        if section is None:
            errors.append(f"{name}: no '### {name}' section in alerts/runbooks.md")
            continue
        for heading in ("Means", "Confirm", "Change"):
            if f"**{heading}**" not in section:
                errors.append(f"{name}: runbook section lacks **{heading}**")
        if f'<a id="{concept}"></a>' not in section:
            errors.append(f'{name}: runbook section lacks <a id="{concept}"></a>')
    if names != set(CONCEPTS.values()):
        errors.append(f"fleet alerts {sorted(names)} differ from the concepts {sorted(CONCEPTS.values())}")
    return errors
