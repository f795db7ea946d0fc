"""LLM / Overview: state, primary cause and chain first, then the seven-layer verdict,
then what users feel against queue depth.

Why this order: on-call arrives from the one page (LLMServiceDegraded); the first row
answers its questions (is the service degraded, which cause, how sure, which symptoms,
which layer is out of headroom) and links to the exporter's chain sentence; the verdict
says which layer dashboard to open next, and the latency-vs-queue panels tell load from a fault.
"""

from __future__ import annotations

from alerts.settings import Settings
from dashboards.boards import capacity
from dashboards.grafana import (
    ENGINE,
    INSTANCE,
    VERDICT,
    Dashboard,
    Panel,
    Row,
    Target,
    dashboard_link,
)
from dashboards.layers import LAYER_LINKS

UID = "llm-overview"

#: llm_service_state as one number per engine of each exporter: 0 healthy, 1 unknown, 2 degraded
_STATE = (
    f'2 * max by (instance, engine) (llm_service_state{{{VERDICT}, state="degraded"}})\n'
    f'+ max by (instance, engine) (llm_service_state{{{VERDICT}, state="unknown"}})'
)
_STATE_MAPPINGS = [
    {
        "type": "value",
        "options": {
            "0": {"text": "healthy", "color": "green", "index": 0},
            "1": {"text": "unknown", "color": "text", "index": 1},
            "2": {"text": "degraded", "color": "red", "index": 2},
        },
    }
]
_YES_NO = [
    {
        "type": "value",
        "options": {"0": {"text": "no", "color": "green", "index": 0}, "1": {"text": "yes", "color": "red", "index": 1}},
    }
]
_NAN_UNKNOWN = [{"type": "special", "options": {"match": "nan", "result": {"text": "unknown", "color": "text", "index": 0}}}]
#: the exporter's own pages; the instance label is the address Prometheus scrapes
_EXPORTER_PAGE = "http://${__field.labels.instance}/"
_ENGINE_DIAGNOSIS = "http://${__field.labels.instance}/diagnosis?engine=${__field.labels.engine}"
_CHAIN = """The **chain** says in one sentence why the service is degraded, symptom first, cause last,
with numbers (`TTFT p95 3.3 s > SLO 2 s ← KV cache 100 % full, 2.7 preemptions/s`). It is text,
not a metric: the exporter serves it.

* Exporter page (verdict, chain, contributing causes, advice): [http://${instance}/](http://${instance}/)
* JSON: [http://${instance}/diagnosis](http://${instance}/diagnosis) (`primary.chain`, `contributing`, `symptoms`;
  with several engines, `engines` holds each one's verdict)
* One engine's verdict: [http://${instance}/diagnosis?engine=${engine}](http://${instance}/diagnosis?engine=${engine})

The verdict is one per engine: each engine is judged over its own GPUs and process. Select one
exporter (and one engine) above for these links, or use the links on "Service state" and "Primary
cause" (one per engine). The page LLMServiceDegraded fires per engine on its primary cause and
links to its runbook section."""


def build(s: Settings) -> Dashboard:
    score = f"max by (engine, layer) (llm_bottleneck_score{{{VERDICT}}})"
    waiting = Target(f"sum by (server, model) (llm_scheduler_requests_waiting{{{ENGINE}}})", "waiting {{server}} {{model}}")
    items: list[Panel | Row] = [
        Row("Service state, primary cause and chain"),
        Panel(
            "Service state",
            "Per engine of each exporter (each engine is judged on its own GPUs and process): degraded (its users are "
            "affected: a symptom holds), healthy (no symptom and the data to judge is there) or unknown (the diagnosis "
            "lacks data: check 'Exporter sources up'). Degraded with a primary cause for a few minutes is that engine's "
            "LLMServiceDegraded page. Click a value for the exporter's page or that engine's /diagnosis.",
            [Target(_STATE, "{{instance}} {{engine}}", instant=True)],
            kind="stat",
            width=4,
            height=6,
            thresholds=[(1, "text"), (2, "red")],
            value_mappings=_STATE_MAPPINGS,
            links=[
                {"title": "Exporter page: verdict and chain", "url": _EXPORTER_PAGE, "targetBlank": True},
                {"title": "/diagnosis of this engine", "url": _ENGINE_DIAGNOSIS, "targetBlank": True},
            ],
        ),
        Panel(
            "Primary cause",
            "Per engine of each exporter, the one cause that best explains its symptoms (llm_bottleneck_primary == 1) "
            "with the diagnosis's confidence in it (0-1: how complete, independent and lasting its evidence is); 'none' "
            "while that engine is not degraded. The cause names the runbook section (alerts/runbooks.md) the page links "
            "to. Click a row for that engine's /diagnosis (chain and contributing causes).",
            [Target(f"instance_cause:llm_bottleneck_confidence:primary{{{VERDICT}}}", instant=True)],
            kind="table",
            unit="percentunit",
            width=8,
            height=6,
            min=0,
            max=1,
            links=[
                {
                    "title": "/diagnosis of this engine",
                    "url": "http://${__data.fields.instance}/diagnosis?engine=${__data.fields.engine}",
                    "targetBlank": True,
                }
            ],
            transformations=[
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True, "__name__": True, "job": True},
                        "indexByName": {"instance": 0, "engine": 1, "layer": 2, "cause": 3, "Value": 4},
                        "renameByName": {"Value": "confidence"},
                    },
                }
            ],
        ),
        Panel(
            "Active symptoms",
            "What users feel now, as the diagnosis judges it (llm_symptom_active): TTFT or ITL p95 over the SLO, "
            "sustained queueing, saturated throughput, failures; per engine, 'yes' on any selected exporter. A symptom "
            "with no primary cause means nothing explains it yet: the burn alerts page then, read /diagnosis.",
            [Target(f"max by (engine, symptom) (llm_symptom_active{{{VERDICT}}})", "{{engine}} {{symptom}}", instant=True)],
            kind="stat",
            width=6,
            height=6,
            thresholds=[(1, "red")],
            value_mappings=_YES_NO,
        ),
        Panel(
            "Layer headroom",
            "How far each layer is from its nearest limit (1 = idle, 0 = at the limit) per engine, the tightest over the "
            "selected exporters. Red below 10 %: that layer sets the engine's ceiling, and more load turns into queueing; "
            "open its dashboard from the links above. 'unknown': the exporter lacks the data to measure it.",
            [Target(f"min by (engine, layer) (llm_layer_headroom_ratio{{{VERDICT}}})", "{{engine}} {{layer}}", instant=True)],
            kind="bargauge",
            unit="percentunit",
            width=6,
            height=6,
            min=0,
            max=1,
            base_color="red",
            thresholds=[(0.1, "orange"), (0.3, "green")],
            value_mappings=_NAN_UNKNOWN,
        ),
        Panel(
            "Chain: symptom to cause",
            "Where to read the chain sentence (symptom to cause, with numbers) and the contributing causes: the "
            "exporter's own / page and its /diagnosis JSON; a sentence is not a metric, so no panel can draw it.",
            [],
            kind="text",
            width=24,
            height=5,
            content=_CHAIN,
        ),
        Row("Verdict: which layer limits the service"),
        Panel(
            "Layer scores",
            "How strongly each of the seven layers limits each engine now (0 = not at all, 1 = certain). "
            "Orange from 0.5, red from 0.8. A red layer is the bottleneck: open its dashboard from the links above "
            "and read the active cause below. 'unknown': the exporter lacks the data to judge that layer (no profiling, no "
            "spec decoding). All layers green while latency is bad: check 'Exporter sources up'.",
            [Target(score, "{{engine}} {{layer}}", instant=True)],
            kind="stat",
            width=24,
            height=5,
            min=0,
            max=1,
            thresholds=[(0.5, "orange"), (0.8, "red")],
            # the diagnosis publishes NaN for a layer it lacks the data to judge: unknown, never ok
            value_mappings=_NAN_UNKNOWN,
        ),
        Panel(
            "Active causes",
            "Each cause the diagnosis reports for each engine over time (primary, contributing, warnings); red while it holds "
            "(llm_bottleneck_active == 1). Every cause has a ticket alert and a runbook section in alerts/runbooks.md "
            "named after it; only the primary pages (LLMServiceDegraded). Several causes at once: fix the primary "
            "first; the others are often its consequences.",
            [Target(f"max by (engine, layer, cause) (llm_bottleneck_active{{{VERDICT}}})", "{{engine}} / {{layer}} / {{cause}}")],
            kind="state-timeline",
            width=24,
            height=12,
            thresholds=[(1, "red")],
            value_mappings=[
                {
                    "type": "value",
                    "options": {
                        "0": {"text": "ok", "color": "green", "index": 0},
                        "1": {"text": "active", "color": "red", "index": 1},
                    },
                }
            ],
        ),
        Panel(
            "Layer scores over time",
            "The same scores as a history: when did a layer start limiting the service, and did it move when the load changed? "
            "A score that rises with load and falls with it is capacity; one that stays high at low load is a fault.",
            [Target(score, "{{engine}} {{layer}}")],
            width=24,
            min=0,
            max=1,
            thresholds=[(0.5, "orange"), (0.8, "red")],
            threshold_lines=True,
        ),
        Row("What users feel, against queue depth"),
        Panel(
            "TTFT p95 vs queue depth",
            "Time to first token p95 (left) and queued requests (right, dashed). TTFT rising with the queue means load "
            "exceeds capacity (Scheduler dashboard); TTFT high with an empty queue means slow prefill or a batching window "
            "(Hardware, Application & SLO).",
            [
                Target(
                    f"server_model:llm_request_ttft_seconds:p95_rate{s.rate_window}{{{ENGINE}}}", "TTFT p95 {{server}} {{model}}"
                ),
                waiting,
            ],
            unit="s",
            right_axis=("^waiting.*", "short"),
        ),
        Panel(
            "ITL p95 vs queue depth",
            "Inter-token latency p95 (left) and queued requests (right). ITL rising while the queue is flat points at "
            "preemptions (Memory / KV cache), throttling (Hardware) or low spec acceptance (Speculative decoding).",
            [
                Target(
                    f"server_model:llm_request_inter_token_seconds:p95_rate{s.rate_window}{{{ENGINE}}}",
                    "ITL p95 {{server}} {{model}}",
                ),
                waiting,
            ],
            unit="s",
            right_axis=("^waiting.*", "short"),
        ),
        Panel(
            "Throughput vs queue depth",
            "Output tokens per second (left) and queued requests (right). Throughput flat while the queue grows is the "
            "saturation point: the layer with the highest score sets it. Throughput falling as the queue grows points at "
            "preemption thrash (Memory / KV cache).",
            [
                Target(
                    f"sum by (server, model) (rate(llm_generation_tokens_total{{{ENGINE}}}[$__rate_interval]))",
                    "output tok/s {{server}} {{model}}",
                ),
                waiting,
            ],
            right_axis=("^waiting.*", "short"),
        ),
        Panel(
            "Requests running and finished / s",
            "Running batch size and finished requests per second. Running flat at a round number is an admission limit "
            "(max-num-seqs); finished falling while running stays high means each request got slower.",
            [
                Target(f"sum by (server, model) (llm_scheduler_requests_running{{{ENGINE}}})", "running {{server}} {{model}}"),
                Target(
                    f"sum by (server, model) (rate(llm_requests_finished_total{{{ENGINE}}}[$__rate_interval]))",
                    "finished/s {{server}} {{model}}",
                ),
            ],
        ),
        Panel(
            "Canary probe success ratio",
            f"Share of the canary probes (exporter probe: a small streaming completion per engine, as a client sees it) "
            f"that got a complete answer ({s.rate_window} window). Below 1 while the engine's own metrics look fine means "
            "clients fail where the engine does not see it (a gateway, a hung engine core: LLMEngineUnresponsive). No "
            "value: no probe is configured (probe: in the exporter config).",
            [
                Target(
                    f"server_model:llm_probe_success:ratio_rate{s.rate_window}{{{ENGINE}}}", "{{server}} {{model}}", instant=True
                )
            ],
            kind="stat",
            unit="percentunit",
            width=24,
            height=5,
            min=0,
            max=1,
            base_color="red",
            thresholds=[(0.95, "orange"), (0.99, "green")],
        ),
        # issue 22: the measured capacity at SLO (dashboards/boards/capacity.py)
        *capacity.overview_panels(s),
        Row("Exporter health"),
        Panel(
            "Exporter sources up",
            "1 while each exporter source (GPU, engine, process) samples successfully. A red source leaves its layer "
            "unknown and its panels stale: see the LLMExporterSourceDown runbook.",
            [Target(f"llm_exporter_source_up{{{INSTANCE}}}", "{{instance}} {{source}}")],
            kind="state-timeline",
            width=24,
            height=6,
            thresholds=[(1, "green")],
            value_mappings=[
                {
                    "type": "value",
                    "options": {
                        "0": {"text": "down", "color": "red", "index": 0},
                        "1": {"text": "up", "color": "green", "index": 1},
                    },
                }
            ],
        ),
    ]
    return Dashboard(
        UID,
        "LLM / Overview",
        "Service state, primary cause and chain, then the seven-layer bottleneck verdict of the LLM inference service, "
        "with links to every layer.",
        items,
        links=[dashboard_link(uid, title) for uid, title in LAYER_LINKS],
    )
