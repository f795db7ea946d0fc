"""LLM / Overview: the seven-layer verdict first, then what users feel against queue depth.

Why this order: on-call opens one dashboard; the verdict says which layer
dashboard to open next, and the latency-vs-queue panels tell load from a fault.
"""

from __future__ import annotations

from alerts.settings import Settings
from dashboards.grafana import (
    ENGINE,
    INSTANCE,
    Dashboard,
    Panel,
    Row,
    Target,
    dashboard_link,
)
from dashboards.layers import LAYER_LINKS

UID = "llm-overview"


def build(s: Settings) -> Dashboard:
    score = f"max by (layer) (llm_bottleneck_score{{{INSTANCE}}})"
    waiting = Target(f"sum by (server, model) (llm_scheduler_requests_waiting{{{ENGINE}}})", "waiting {{server}} {{model}}")
    items: list[Panel | Row] = [
        Row("Verdict: which layer limits the service"),
        Panel(
            "Layer scores",
            "How strongly each of the seven layers limits the service now (0 = not at all, 1 = certain). "
            "Orange from 0.5, red from 0.8. A red layer is the bottleneck: open its dashboard from the links above "
            "and read the active cause below. 'unknown': the exporter lacks the data to judge that layer (no profiling, no "
            "spec decoding). All layers green while latency is bad: check 'Exporter sources up'.",
            [Target(score, "{{layer}}", instant=True)],
            kind="stat", width=24, height=5, min=0, max=1, thresholds=[(0.5, "orange"), (0.8, "red")],
            # the diagnosis publishes NaN for a layer it lacks the data to judge: unknown, never ok
            value_mappings=[{"type": "special", "options": {"match": "nan", "result": {"text": "unknown", "color": "text", "index": 0}}}],
        ),
        Panel(
            "Active causes",
            "Each diagnosis cause over time; red while it holds (llm_bottleneck_active == 1). Every cause has an "
            "alert and a runbook section in alerts/runbooks.md named after it. Several causes at once: fix the one "
            "that started first; the others are often its consequences.",
            [Target(f"max by (layer, cause) (llm_bottleneck_active{{{INSTANCE}}})", "{{layer}} / {{cause}}")],
            kind="state-timeline", width=24, height=12, thresholds=[(1, "red")],
            value_mappings=[{"type": "value", "options": {"0": {"text": "ok", "color": "green", "index": 0}, "1": {"text": "active", "color": "red", "index": 1}}}],
        ),
        Panel(
            "Layer scores over time",
            "The same scores as a history: when did a layer start limiting the service, and did it move when the load changed? "
            "A score that rises with load and falls with it is capacity; one that stays high at low load is a fault.",
            [Target(score, "{{layer}}")],
            width=24, min=0, max=1, thresholds=[(0.5, "orange"), (0.8, "red")], threshold_lines=True,
        ),
        Row("What users feel, against queue depth"),
        Panel(
            "TTFT p95 vs queue depth",
            "Time to first token p95 (left) and queued requests (right, dashed). TTFT rising with the queue means load "
            "exceeds capacity (Scheduler dashboard); TTFT high with an empty queue means slow prefill or a batching window "
            "(Hardware, Application & SLO).",
            [Target(f"server_model:llm_request_ttft_seconds:p95_rate{s.rate_window}{{{ENGINE}}}", "TTFT p95 {{server}} {{model}}"), waiting],
            unit="s", right_axis=("^waiting.*", "short"),
        ),
        Panel(
            "ITL p95 vs queue depth",
            "Inter-token latency p95 (left) and queued requests (right). ITL rising while the queue is flat points at "
            "preemptions (Memory / KV cache), throttling (Hardware) or low spec acceptance (Speculative decoding).",
            [Target(f"server_model:llm_request_inter_token_seconds:p95_rate{s.rate_window}{{{ENGINE}}}", "ITL p95 {{server}} {{model}}"), waiting],
            unit="s", right_axis=("^waiting.*", "short"),
        ),
        Panel(
            "Throughput vs queue depth",
            "Output tokens per second (left) and queued requests (right). Throughput flat while the queue grows is the "
            "saturation point: the layer with the highest score sets it. Throughput falling as the queue grows points at "
            "preemption thrash (Memory / KV cache).",
            [Target(f"sum by (server, model) (rate(llm_generation_tokens_total{{{ENGINE}}}[$__rate_interval]))", "output tok/s {{server}} {{model}}"), waiting],
            right_axis=("^waiting.*", "short"),
        ),
        Panel(
            "Requests running and finished / s",
            "Running batch size and finished requests per second. Running flat at a round number is an admission limit "
            "(max-num-seqs); finished falling while running stays high means each request got slower.",
            [
                Target(f"sum by (server, model) (llm_scheduler_requests_running{{{ENGINE}}})", "running {{server}} {{model}}"),
                Target(f"sum by (server, model) (rate(llm_requests_finished_total{{{ENGINE}}}[$__rate_interval]))", "finished/s {{server}} {{model}}"),
            ],
        ),
        Row("Exporter health"),
        Panel(
            "Exporter sources up",
            "1 while each exporter source (GPU, engine, process) samples successfully. A red source leaves its layer "
            "unknown and its panels stale: see the LLMExporterSourceDown runbook.",
            [Target(f"llm_exporter_source_up{{{INSTANCE}}}", "{{instance}} {{source}}")],
            kind="state-timeline", width=24, height=6, thresholds=[(1, "green")],
            value_mappings=[{"type": "value", "options": {"0": {"text": "down", "color": "red", "index": 0}, "1": {"text": "up", "color": "green", "index": 1}}}],
        ),
    ]
    return Dashboard(
        UID,
        "LLM / Overview",
        "Seven-layer bottleneck verdict of the LLM inference service, with links to every layer.",
        items,
        links=[dashboard_link(uid, title) for uid, title in LAYER_LINKS],
    )
