"""Recording rules: every ratio and percentile that dashboards and alerts share.

Why recording rules: a dashboard panel and the alert that pages on the same
quantity must compute it the same way. Names follow ``level:metric:operation``:
``server_model`` keeps (job, instance, server, model); ``instance_gpu`` keeps
(job, instance, gpu, uuid); ``instance_cause`` keeps (job, instance, engine, layer, cause).
The verdict is one per engine (issue 20): its families carry ``engine``, the engine's name
(the ``server`` label of that engine's series), and every rule that keeps the instance keeps
the engine too, so two engines on one node never merge into one verdict. The diagnosis rule
has one series per engine, so a panel never goes blank: the primary cause, or
``cause="none"`` while there is none. (The level keeps its name ``instance_cause``: the
record name is what dashboards and users' queries read.) Ratios divide rates of counters (never lifetime
counters), denominators are filtered with ``> 0`` so idle features draw no NaN,
and every histogram_quantile sums by ``le``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from alerts.promql import le_matcher
from alerts.settings import Settings
from exporter.schema import FAILED_FINISH_REASONS
from exporter.schema import HARMFUL_THROTTLE_REASONS as HARMFUL_THROTTLE_REASONS

SERVER_MODEL = "job, instance, server, model"
INSTANCE_GPU = "job, instance, gpu, uuid"
#: The label the diagnosis families carry (exporter/schema.py): the engine's name, equal to
#: the ``server`` label of that engine's own series (whose ``engine`` label is the family, vllm).
ENGINE = "engine"
#: One engine's verdict: the exporter (job, instance) and the engine it judged.
INSTANCE_ENGINE = f"job, instance, {ENGINE}"
INSTANCE_CAUSE = f"{INSTANCE_ENGINE}, layer, cause"
#: The diagnosis families, one verdict per engine; every rule that aggregates them and keeps
#: ``instance`` must keep ``engine`` (alerts/generate.py lint, dashboards/lint.py).
VERDICT_FAMILIES: tuple[str, ...] = (
    "llm_service_state",
    "llm_bottleneck_primary",
    "llm_bottleneck_confidence",
    "llm_symptom_active",
    "llm_layer_headroom_ratio",
    "llm_bottleneck_score",
    "llm_bottleneck_active",
)

# Throttle reasons that mean "slower than it could be": the schema's table (HARMFUL_THROTTLE_REASONS above).

#: Finish reasons that mean the user got no (complete) answer: the schema's one set, which
#: the diagnosis' failed share reads too (engine raw reasons are rewritten into it).
FAILED_REASONS = "|".join(FAILED_FINISH_REASONS)

#: Latency histograms that get p50/p95/p99 rules, and those that only need p95.
_QUANTILE_HISTOGRAMS = {
    "llm_request_ttft_seconds": ("50", "95", "99"),
    "llm_request_inter_token_seconds": ("50", "95", "99"),
    "llm_request_e2e_seconds": ("95",),
    "llm_scheduler_queue_seconds": ("95",),
    "llm_request_prefill_seconds": ("95",),
    "llm_request_decode_seconds": ("95",),
}


@dataclass(frozen=True)
class Rule:
    record: str
    expr: str


def _rate(metric: str, window: str, by: str = SERVER_MODEL, selector: str = "") -> str:
    return f"sum by ({by}) (rate({metric}{selector}[{window}]))"


def _ratio(num: str, den: str) -> str:
    return f"{num}\n/\n({den} > 0)"


def with_engine(expr: str) -> str:
    """``expr`` (of ``server_model`` level) with the engine's name copied from ``server`` into ``engine``.

    Why: the page (LLMServiceDegraded) is per engine and carries ``engine``; Alertmanager mutes
    an alert under it only when the ``equal`` labels match (job, instance, engine), so a symptom
    alert of one engine must say which engine it is, or the page of engine A would mute the
    burn alert of a healthy-looking engine B on the same exporter, or none at all.
    """
    return f'label_replace(\n{expr},\n"{ENGINE}", "$1", "server", "(.*)"\n)'


def slo_metrics(s: Settings) -> dict[str, tuple[str, float]]:
    """Short name -> (histogram, SLO threshold) for the burn-rate rules and alerts."""
    return {"TTFT": ("llm_request_ttft_seconds", s.ttft_seconds), "ITL": ("llm_request_inter_token_seconds", s.itl_seconds)}


def slo_error_ratio_record(histogram: str, window: str) -> str:
    return f"server_model:{histogram}:slo_error_ratio_rate{window}"


def groups(s: Settings) -> list[dict[str, Any]]:
    """The recording-rule groups, in file order."""
    w = s.rate_window
    app: list[Rule] = []
    for hist, quantiles in _QUANTILE_HISTOGRAMS.items():
        for q in quantiles:
            app.append(
                Rule(
                    f"server_model:{hist}:p{q}_rate{w}",
                    f"histogram_quantile(0.{q}, sum by (le, {SERVER_MODEL}) (rate({hist}_bucket[{w}])))",
                )
            )
    app += [
        Rule(f"server_model:llm_generation_tokens:rate{w}", _rate("llm_generation_tokens_total", w)),
        Rule(f"server_model:llm_prompt_tokens:rate{w}", _rate("llm_prompt_tokens_total", w)),
        Rule(f"server_model:llm_requests_finished:rate{w}", _rate("llm_requests_finished_total", w)),
        # "or 0 * total": no failed series yet must read 0, not "no data"
        Rule(
            f"server_model:llm_requests_failed:ratio_rate{w}",
            _ratio(
                "(\n"
                + _rate("llm_requests_finished_total", w, selector=f'{{reason=~"{FAILED_REASONS}"}}')
                + "\nor\n0 * "
                + _rate("llm_requests_finished_total", w)
                + "\n)",
                _rate("llm_requests_finished_total", w),
            ),
        ),
    ]

    slo: list[Rule] = []
    for hist, threshold in slo_metrics(s).values():
        for window in s.slo_windows:
            good = _rate(f"{hist}_bucket", window, selector=f'{{le=~"{le_matcher(threshold)}"}}')
            total = _rate(f"{hist}_count", window)
            slo.append(Rule(slo_error_ratio_record(hist, window), f"1 - (\n{good}\n/\n({total} > 0)\n)"))

    memory = [
        Rule("server_model:llm_kv_cache_usage:max", f"max by ({SERVER_MODEL}) (llm_kv_cache_usage_ratio)"),
        Rule(f"server_model:llm_kv_cache_preemptions:rate{w}", _rate("llm_kv_cache_preemptions_total", w)),
        Rule(
            f"server_model:llm_prefix_cache_hit:ratio_rate{w}",
            _ratio(_rate("llm_prefix_cache_hit_tokens_total", w), _rate("llm_prefix_cache_queried_tokens_total", w)),
        ),
    ]

    spec = [
        Rule(
            f"server_model:llm_spec_decode_acceptance:ratio_rate{w}",
            _ratio(_rate("llm_spec_decode_accepted_tokens_total", w), _rate("llm_spec_decode_draft_tokens_total", w)),
        ),
        Rule(
            f"server_model:llm_spec_decode_acceptance_length:mean_rate{w}",
            "1 + " + _ratio(_rate("llm_spec_decode_accepted_tokens_total", w), _rate("llm_spec_decode_drafts_total", w)),
        ),
    ]

    harmful = "|".join(HARMFUL_THROTTLE_REASONS)
    hardware = [
        Rule(
            "instance_gpu:llm_gpu_throttled:max",
            f'max by ({INSTANCE_GPU}) (llm_gpu_throttle_reason_active{{reason=~"{harmful}"}})',
        ),
        Rule(f"instance_gpu:llm_gpu_throttled:avg_over_time{w}", f"avg_over_time(instance_gpu:llm_gpu_throttled:max[{w}])"),
        Rule("instance_gpu:llm_gpu_power:ratio_limit", "llm_gpu_power_watts\n/\n(llm_gpu_power_limit_watts > 0)"),
        Rule("instance_gpu:llm_gpu_sm_clock:ratio_max", "llm_gpu_sm_clock_hertz\n/\n(llm_gpu_sm_clock_max_hertz > 0)"),
        Rule("instance_gpu:llm_gpu_memory_used:ratio", "llm_gpu_memory_used_bytes\n/\n(llm_gpu_memory_total_bytes > 0)"),
        Rule(
            "instance_gpu:llm_gpu_utilization_minus_sm_active:ratio",
            "clamp_min(llm_gpu_utilization_ratio - llm_gpu_sm_active_ratio, 0)",
        ),
    ]

    none = (
        f'label_replace(label_replace(0 * max by ({INSTANCE_ENGINE}) (llm_service_state), "layer", "none", "", ""), '
        '"cause", "none", "", "")'
    )
    diagnosis = [
        # the Overview's "Primary cause": per engine the diagnosis judges, its primary cause
        # valued by its confidence, or layer="none", cause="none" at 0 while it has none
        Rule(
            "instance_cause:llm_bottleneck_confidence:primary",
            f"(\nmax by ({INSTANCE_CAUSE}) (llm_bottleneck_confidence)\nand on ({INSTANCE_CAUSE})\n"
            f"(max by ({INSTANCE_CAUSE}) (llm_bottleneck_primary) == 1)\n)\nor on ({INSTANCE_ENGINE})\n{none}",
        ),
    ]

    def group(name: str, rules: list[Rule]) -> dict[str, Any]:
        return {"name": name, "rules": [{"record": r.record, "expr": r.expr} for r in rules]}

    return [
        group("llm-layer-exporter.application", app),
        group("llm-layer-exporter.slo", slo),
        group("llm-layer-exporter.memory", memory),
        group("llm-layer-exporter.speculative_decoding", spec),
        group("llm-layer-exporter.hardware", hardware),
        group("llm-layer-exporter.diagnosis", diagnosis),
        group("llm-layer-exporter.probe", probe_rules(s)),
    ]


def probe_rules(s: Settings) -> list[Rule]:
    """The canary probe (exporter/probe, docs/probe.md): client-seen TTFT, success ratio, time outside.

    The success ratio counts every result in the denominator (a timeout, an HTTP error and a
    refused connection are all probes a client would have lost); "or 0 * total" keeps an engine
    whose probes all fail at 0 instead of "no data".
    """
    w = s.rate_window
    total = _rate("llm_probe_requests_total", w)
    return [
        Rule(
            f"server_model:llm_probe_ttft_seconds:p{q}_rate{w}",
            f"histogram_quantile(0.{q}, sum by (le, {SERVER_MODEL}) (rate(llm_probe_ttft_seconds_bucket[{w}])))",
        )
        for q in ("50", "95")
    ] + [
        Rule(
            f"server_model:llm_probe_success:ratio_rate{w}",
            _ratio("(\n" + _rate("llm_probe_requests_total", w, selector='{result="ok"}') + "\nor\n0 * " + total + "\n)", total),
        ),
        Rule(
            f"server_model:llm_probe_outside_engine_seconds:avg_over_time{w}",
            f"avg by ({SERVER_MODEL}) (avg_over_time(llm_probe_outside_engine_seconds[{w}]))",
        ),
    ]


def record_names(s: Settings) -> set[str]:
    return {str(rule["record"]) for g in groups(s) for rule in g["rules"]}
