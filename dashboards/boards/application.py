"""LLM / Application & SLO: what users feel, against the SLOs the burn-rate alerts watch.

Why the SLO error ratios come from recording rules: the alert and the panel must
read the same numbers; the thresholds and windows are those of alerts/config.yaml.
"""

from __future__ import annotations

from alerts.recording import slo_error_ratio_record, slo_metrics
from alerts.settings import Settings
from dashboards.grafana import ENGINE, Dashboard, Panel, Row, Target

UID = "llm-application"
LEGEND = "{{server}} {{model}}"


def _percentiles(s: Settings, name: str, hist: str, slo: float, what: str) -> Panel:
    return Panel(
        f"{name} percentiles",
        f"{what} p50/p95/p99 ({s.rate_window} window). Dashed line: the {slo:g}s SLO. p99 far above p95 means a few "
        "very slow requests (preemptions, long prompts); all percentiles rising together is load: see LLM / Overview.",
        [Target(f"server_model:{hist}:p{q}_rate{s.rate_window}{{{ENGINE}}}", f"p{q} {LEGEND}") for q in ("50", "95", "99")],
        unit="s",
        min=0,
        thresholds=[(slo, "red")],
        threshold_lines=True,
    )


def _slo_ratio(s: Settings, name: str, hist: str, slo: float) -> Panel:
    budget = s.error_budget
    fast = max(b.factor for b in s.burn_rates) * budget
    return Panel(
        f"{name} SLO error ratio",
        f"Share of {name} observations slower than {slo:g}s, per window the burn-rate alerts use. The error budget is "
        f"{budget:.2%} (orange); sustained above {fast:.1%} (red) on both windows of a pair pages. Next: the verdict "
        "on LLM / Overview.",
        [Target(f"{slo_error_ratio_record(hist, w)}{{{ENGINE}}}", f"{w} {LEGEND}") for w in s.slo_windows],
        unit="percentunit",
        min=0,
        thresholds=[(budget, "orange"), (fast, "red")],
        threshold_lines=True,
    )


def _probe_panels(s: Settings) -> list[Panel | Row]:
    """The canary probe (exporter/probe, docs/probe.md): TTFT as clients see it beside the engine's own."""
    w = s.rate_window
    outside_line = 0.5  # exporter/diagnosis/thresholds.py front_end_overhead_seconds (default)
    return [
        Row("Client-seen vs engine-seen (canary probe)"),
        Panel(
            "TTFT: client-seen (probe) vs engine-seen",
            f"TTFT p95 ({w} window) of the canary probe, measured as a client sees it through the URL it is pointed at "
            "(probe.url: the gateway clients use), beside the engine's own TTFT p95. Equal lines: nothing in front of the "
            "engine costs time. Client far above engine: time is spent outside the engine (gateway, proxy, API server); "
            "see 'Time outside the engine' and the LLMFrontEndOverhead runbook. No client line: no probe is configured.",
            [
                Target(f"server_model:llm_probe_ttft_seconds:p95_rate{w}{{{ENGINE}}}", "client (probe) p95 " + LEGEND),
                Target(f"server_model:llm_request_ttft_seconds:p95_rate{w}{{{ENGINE}}}", "engine p95 " + LEGEND),
            ],
            unit="s",
            min=0,
        ),
        Panel(
            "Time outside the engine",
            "Per engine, the last probe's client-seen TTFT minus the engine's own TTFT for that request (its reported "
            f"prefill, or its TTFT histogram over the probe's window). Near 0 with nothing in between; above the dashed "
            f"{outside_line:g}s line for a while, the diagnosis names application/front_end_overhead. Slightly negative "
            "values are measurement noise.",
            [Target(f"llm_probe_outside_engine_seconds{{{ENGINE}}}", LEGEND)],
            unit="s",
            thresholds=[(outside_line, "red")],
            threshold_lines=True,
        ),
        Panel(
            "Canary probe results / s",
            "Probes per second by result: ok, timeout (no complete answer within probe.timeout, a stalled stream "
            "included), http_error (the URL has no OpenAI route, or the server failed), bad_stream, refused. Timeouts "
            "while the engine's counters stand still are a hung engine: the LLMEngineUnresponsive page.",
            [
                Target(
                    f"sum by (server, model, result) (rate(llm_probe_requests_total{{{ENGINE}}}[$__rate_interval]))",
                    "{{result}} " + LEGEND,
                )
            ],
            min=0,
            stack=True,
        ),
        Panel(
            "Canary probe's own tokens / s",
            "Prompt and generated tokens per second the probe itself makes the engine process. Subtract them from "
            "'Tokens / s' to see the real load on a quiet engine; on a busy one they are noise.",
            [
                Target(
                    f"sum by (server, model, kind) (rate(llm_probe_tokens_total{{{ENGINE}}}[$__rate_interval]))",
                    "{{kind}} " + LEGEND,
                )
            ],
            min=0,
        ),
    ]


def build(s: Settings) -> Dashboard:
    slos = slo_metrics(s)
    ttft_hist, ttft = slos["TTFT"]
    itl_hist, itl = slos["ITL"]
    w = s.rate_window
    items: list[Panel | Row] = [
        Row("Latency against the SLOs"),
        _percentiles(s, "TTFT", ttft_hist, ttft, "Time to first token"),
        _slo_ratio(s, "TTFT", ttft_hist, ttft),
        _percentiles(s, "ITL", itl_hist, itl, "Inter-token latency"),
        _slo_ratio(s, "ITL", itl_hist, itl),
        Panel(
            "E2E latency p95",
            "End-to-end request latency p95. Rising with flat TTFT and ITL means longer outputs (traffic mix), not a slower "
            "service: check 'Tokens / s'.",
            [Target(f"server_model:llm_request_e2e_seconds:p95_rate{w}{{{ENGINE}}}", LEGEND)],
            unit="s",
            min=0,
        ),
        Panel(
            "Tokens / s",
            "Prompt and generated tokens per second. Prompt tokens rising faster than requests means longer prompts; a "
            "drop in generated tokens with steady requests means shorter outputs or aborts.",
            [
                Target(f"server_model:llm_prompt_tokens:rate{w}{{{ENGINE}}}", "prompt " + LEGEND),
                Target(f"server_model:llm_generation_tokens:rate{w}{{{ENGINE}}}", "generated " + LEGEND),
            ],
            min=0,
        ),
        Row("Requests"),
        Panel(
            "Finished requests by reason",
            "Finished requests per second by reason (stop, length, abort, error). Rising abort means clients time out and "
            "retry: check 'Failed share' and align client timeouts with p99 latency.",
            [
                Target(
                    f"sum by (server, model, reason) (rate(llm_requests_finished_total{{{ENGINE}}}[$__rate_interval]))",
                    "{{reason}} " + LEGEND,
                )
            ],
            min=0,
            stack=True,
        ),
        Panel(
            "Failed share",
            f"Share of finished requests that were aborted, errored, timed out or cancelled ({w} rate ratio). Above a few "
            "percent, retries add load that produces no answers: see the LLMRetriesAndTimeouts runbook.",
            [Target(f"server_model:llm_requests_failed:ratio_rate{w}{{{ENGINE}}}", LEGEND)],
            unit="percentunit",
            min=0,
            max=1,
            thresholds=[(0.02, "orange"), (0.1, "red")],
            threshold_lines=True,
        ),
        Panel(
            "Rejected requests / s",
            "Requests the engine refused at admission (queue full, overloaded), by reason. Any sustained value means clients "
            "get errors before being queued: add capacity or raise the queue limit, and check 'Failed share'.",
            [
                Target(
                    f"sum by (server, model, reason) (rate(llm_requests_rejected_total{{{ENGINE}}}[$__rate_interval]))",
                    "{{reason}} " + LEGEND,
                )
            ],
            min=0,
            width=24,
        ),
        *_probe_panels(s),
    ]
    return Dashboard(
        UID, "LLM / Application & SLO", "Latency percentiles and SLO error ratios, throughput and request outcomes.", items
    )
