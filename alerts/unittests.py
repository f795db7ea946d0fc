"""Renders alerts/tests/alerts_test.yml, the `promtool test rules` input.

Why generated: each alert carries its own firing and quiet fixtures (alerts.alerting),
and the expected annotations must be the rendered text. The test does not become
a tautology: promtool evaluates the real rule expressions on the fixture series,
so a wrong metric name, window or threshold fails it. A few recording rules get
value tests here too, proving the ratios are rates of counters.
"""

from __future__ import annotations

from alerts.alerting import ENGINE_A, ENGINE_B, INSTANCE, OTHER_INSTANCE, Alert, alerts, render, runbook_url
from alerts.recording import ENGINE
from alerts.settings import Settings


def _series(pairs: tuple[tuple[str, str], ...]) -> list[dict[str, str]]:
    return [{"series": name, "values": values} for name, values in pairs]


def _expected(a: Alert, s: Settings, expr_labels: dict[str, str]) -> dict[str, object]:
    return {
        "exp_labels": {**expr_labels, **a.labels},
        "exp_annotations": {
            "summary": render(a.summary, expr_labels),
            "description": render(a.description, expr_labels),
            "runbook_url": render(runbook_url(s, a), expr_labels),
        },
    }


def alert_tests(s: Settings) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for a in alerts(s):
        for kind, case in (("fires", a.fire), ("stays quiet", a.quiet)):
            out.append(
                {
                    "name": f"{a.name} {kind}",
                    "interval": a.interval,
                    "input_series": _series(case.series),
                    "alert_rule_test": [
                        {
                            "eval_time": a.eval_time,
                            "alertname": a.name,
                            "exp_alerts": [_expected(a, s, labels) for labels in case.expect],
                        }
                    ],
                }
            )
    return out


def recording_tests(s: Settings) -> list[dict[str, object]]:
    """Value checks of shared ratios: known counter slopes in, exact ratios out."""
    job, w = s.exporter_job, s.rate_window
    eng = f'job="{job}", instance="{INSTANCE}", server="s1", model="m", engine="vllm", rank="0"'
    gpu0 = f'job="{job}", instance="{INSTANCE}", gpu="0", uuid="GPU-0"'
    gpu1 = f'job="{job}", instance="{INSTANCE}", gpu="1", uuid="GPU-1"'
    out_labels = f'job="{job}", instance="{INSTANCE}", server="s1", model="m"'
    le = repr(float(s.ttft_seconds))
    series = [
        # no hits for 10 minutes, then 60 a minute: the lifetime ratio is 0.25, the recent one 0.5
        (f"llm_prefix_cache_hit_tokens_total{{{eng}}}", "0x10 60+60x9"),
        (f"llm_prefix_cache_queried_tokens_total{{{eng}}}", "0+120x20"),
        (f"llm_spec_decode_accepted_tokens_total{{{eng}}}", "0+60x20"),
        (f"llm_spec_decode_draft_tokens_total{{{eng}}}", "0+120x20"),
        (f"llm_spec_decode_drafts_total{{{eng}}}", "0+30x20"),
        (f'llm_request_ttft_seconds_bucket{{{eng}, le="{le}"}}', "0+75x20"),
        (f"llm_request_ttft_seconds_count{{{eng}}}", "0+100x20"),
        (f'llm_gpu_throttle_reason_active{{{gpu0}, reason="sw_power_cap"}}', "1x20"),
        (f'llm_gpu_throttle_reason_active{{{gpu0}, reason="gpu_idle"}}', "0x20"),
        (f'llm_gpu_throttle_reason_active{{{gpu1}, reason="sw_power_cap"}}', "0x20"),
        (f'llm_gpu_throttle_reason_active{{{gpu1}, reason="gpu_idle"}}', "1x20"),
        (f"llm_gpu_power_watts{{{gpu0}}}", "350x20"),
        (f"llm_gpu_power_limit_watts{{{gpu0}}}", "700x20"),
    ]
    eng2 = eng.replace('server="s1"', 'server="s2"')
    out2 = out_labels.replace('server="s1"', 'server="s2"')
    series += [
        (f'llm_requests_finished_total{{{eng}, reason="stop"}}', "0+60x20"),
        (f'llm_requests_finished_total{{{eng}, reason="abort"}}', "0+20x20"),
        # no failure series at all must read 0, not "no data"
        (f'llm_requests_finished_total{{{eng2}, reason="stop"}}', "0+60x20"),
    ]
    exprs: list[tuple[str, list[tuple[str, float]]]] = [
        (f"server_model:llm_prefix_cache_hit:ratio_rate{w}", [(out_labels, 0.5)]),
        (f"server_model:llm_spec_decode_acceptance:ratio_rate{w}", [(out_labels, 0.5)]),
        (f"server_model:llm_spec_decode_acceptance_length:mean_rate{w}", [(out_labels, 3.0)]),
        (f"server_model:llm_request_ttft_seconds:slo_error_ratio_rate{s.slo_windows[0]}", [(out_labels, 0.25)]),
        (f"server_model:llm_requests_failed:ratio_rate{w}", [(out_labels, 0.25), (out2, 0.0)]),
        (f"instance_gpu:llm_gpu_throttled:avg_over_time{w}", [(gpu0, 1.0), (gpu1, 0.0)]),
        ("instance_gpu:llm_gpu_power:ratio_limit", [(gpu0, 0.5)]),
    ]
    tests = [
        {
            "eval_time": "20m",
            "expr": expr,
            "exp_samples": [{"labels": f"{expr}{{{labels}}}", "value": value} for labels, value in expected],
        }
        for expr, expected in exprs
    ]
    return [
        {
            "name": "shared ratios are rates of counters",
            "interval": "1m",
            "input_series": _series(tuple(series)),
            "promql_expr_test": tests,
        },
        _primary_confidence_test(s),
        _probe_recording_test(s),
    ]


def _probe_recording_test(s: Settings) -> dict[str, object]:
    """The canary probe's shared figures (alerts/recording.py probe_rules): the success ratio is a
    rate ratio over every result, 0 (not "no data") for an engine whose probes all fail, and the
    time outside the engine is averaged per server and model."""
    job, w = s.exporter_job, s.rate_window
    eng = f'job="{job}", instance="{INSTANCE}", server="s1", model="m", engine="vllm", rank=""'
    eng2 = eng.replace('server="s1"', 'server="s2"')
    out1 = f'job="{job}", instance="{INSTANCE}", server="s1", model="m"'
    out2 = out1.replace('server="s1"', 'server="s2"')
    series = [
        # s1: 3 probes a minute ok, 1 timing out, after ten minutes of only successes: the lifetime
        # ratio is 0.875, the rate ratio 0.75
        (f'llm_probe_requests_total{{{eng}, result="ok"}}', "0+4x10 40+3x10"),
        (f'llm_probe_requests_total{{{eng}, result="timeout"}}', "0x10 0+1x10"),
        (f'llm_probe_requests_total{{{eng}, result="http_error"}}', "0x20"),
        # s2: every probe refused
        (f'llm_probe_requests_total{{{eng2}, result="ok"}}', "0x20"),
        (f'llm_probe_requests_total{{{eng2}, result="refused"}}', "0+4x20"),
        (f"llm_probe_outside_engine_seconds{{{eng}}}", "0.2x10 0.6x10"),
    ]
    record = f"server_model:llm_probe_success:ratio_rate{w}"
    outside = f"server_model:llm_probe_outside_engine_seconds:avg_over_time{w}"
    return {
        "name": "canary probe: success ratio and time outside the engine",
        "interval": "1m",
        "input_series": _series(tuple(series)),
        "promql_expr_test": [
            {
                "eval_time": "20m",
                "expr": record,
                "exp_samples": [{"labels": f"{record}{{{out1}}}", "value": 0.75}, {"labels": f"{record}{{{out2}}}", "value": 0}],
            },
            {"eval_time": "20m", "expr": outside, "exp_samples": [{"labels": f"{outside}{{{out1}}}", "value": 0.6}]},
        ],
    }


def _primary_confidence_test(s: Settings) -> dict[str, object]:
    """The Overview's "Primary cause": per engine, the primary's confidence; "none" at 0 for an engine without one.

    Two engines on one exporter (issue 20): engine A degraded with kv_cache_pressure, engine B
    healthy while a warning cause holds there; each gets its own row, B's is "none".
    """
    job = s.exporter_job
    record = "instance_cause:llm_bottleneck_confidence:primary"

    def lab(instance: str, engine: str, layer: str, cause: str) -> str:
        return f'job="{job}", instance="{instance}", {ENGINE}="{engine}", layer="{layer}", cause="{cause}"'

    kv, queue = lab(INSTANCE, ENGINE_A, "memory", "kv_cache_pressure"), lab(INSTANCE, ENGINE_A, "scheduler", "queue_backlog")
    b_kv, b_hot = (
        lab(INSTANCE, ENGINE_B, "memory", "kv_cache_pressure"),
        lab(INSTANCE, ENGINE_B, "hardware", "power_or_thermal_throttling"),
    )
    other = lab(OTHER_INSTANCE, ENGINE_A, "memory", "kv_cache_pressure")
    series = [
        (f"llm_bottleneck_primary{{{kv}}}", "1x10"),
        (f"llm_bottleneck_confidence{{{kv}}}", "0.8x10"),
        # contributing: holds with a confidence, but is not the primary
        (f"llm_bottleneck_primary{{{queue}}}", "0x10"),
        (f"llm_bottleneck_confidence{{{queue}}}", "0.5x10"),
        # engine B of the same exporter: no primary; a warning holds with a confidence; A's primary is not B's
        (f"llm_bottleneck_primary{{{b_kv}}}", "0x10"),
        (f"llm_bottleneck_confidence{{{b_kv}}}", "0x10"),
        (f"llm_bottleneck_primary{{{b_hot}}}", "0x10"),
        (f"llm_bottleneck_confidence{{{b_hot}}}", "0.7x10"),
        # another exporter with no primary (a warning cause holds on its own): "none" at 0
        (f"llm_bottleneck_primary{{{other}}}", "0x10"),
        (f"llm_bottleneck_confidence{{{other}}}", "0.6x10"),
    ]
    for instance, engine, state in (
        (INSTANCE, ENGINE_A, "degraded"),
        (INSTANCE, ENGINE_B, "healthy"),
        (OTHER_INSTANCE, ENGINE_A, "healthy"),
    ):
        series += [
            (
                f'llm_service_state{{job="{job}", instance="{instance}", {ENGINE}="{engine}", state="{st}"}}',
                f"{int(st == state)}x10",
            )
            for st in ("degraded", "healthy", "unknown")
        ]
    return {
        "name": "the primary cause and its confidence, or none, per engine",
        "interval": "1m",
        "input_series": _series(tuple(series)),
        "promql_expr_test": [
            {
                "eval_time": "5m",
                "expr": record,
                "exp_samples": [
                    {"labels": f"{record}{{{kv}}}", "value": 0.8},
                    {"labels": f"{record}{{{lab(INSTANCE, ENGINE_B, 'none', 'none')}}}", "value": 0},
                    {"labels": f"{record}{{{lab(OTHER_INSTANCE, ENGINE_A, 'none', 'none')}}}", "value": 0},
                ],
            }
        ],
    }


def document(s: Settings) -> dict[str, object]:
    """The whole test file (paths relative to alerts/tests/)."""
    return {
        "rule_files": ["../recording_rules.yml", "../alerting_rules.yml"],
        "evaluation_interval": "1m",
        "tests": recording_tests(s) + alert_tests(s),
    }
