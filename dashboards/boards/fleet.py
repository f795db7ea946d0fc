"""LLM / Fleet: every replica of a model at once, the fleet's latency and throughput, the imbalance view.

Why its own board: each exporter judges its own node, and the layer boards narrow to one
exporter. Here the unit is the fleet (every replica serving one ``model``) and the
multi-node parallel group, drawn from the fleet recording rules (alerts/fleet.py) that
LLMFleetReplicaImbalance, LLMFleetCapacityShort and LLMFleetGroupSkew read, so a panel and
its alert agree. Fleet quantiles come from summed histogram buckets, never averaged
quantiles; the imbalance panels draw every replica against the fleet median the alert uses.
"""

from __future__ import annotations

from alerts.fleet import fleet_settings
from alerts.settings import Settings
from dashboards.boards import capacity
from dashboards.grafana import ENGINE, INSTANCE, Dashboard, Panel, Row, Target, column, dashboard_link, dashed_lines

UID = "llm-fleet"
MODEL = 'model=~"$model"'
#: a replica's records from its engine's verdict carry ``engine`` (= its ``server``): filter by both
REPLICA_VERDICT = f'{ENGINE}, engine=~"$engine"'


def _named(record: str) -> str:
    """A replica record without ``engine`` (its own series), given one as the verdict records have it.

    Why: the Replicas table merges its queries into one row per replica by their common labels;
    the replica's server is its engine's name, so ``server=~"$engine"`` narrows it like the verdict.
    """
    return f'label_replace({record}{{{ENGINE}, server=~"$engine"}}, "engine", "$1", "server", "(.*)")'


#: server_model:llm_service_state:code: 0 healthy, 1 unknown, 2 degraded (as on LLM / Overview)
_STATE = {
    "type": "value",
    "options": {
        "0": {"text": "healthy", "color": "green", "index": 0},
        "1": {"text": "unknown", "color": "text", "index": 1},
        "2": {"text": "degraded", "color": "red", "index": 2},
    },
}
_NAN_UNKNOWN = {"type": "special", "options": {"match": "nan", "result": {"text": "unknown", "color": "text", "index": 0}}}


def build(s: Settings) -> Dashboard:
    w = s.rate_window
    f = fleet_settings(s)
    replica_table = [
        Target(f"server_model:llm_service_state:code{{{REPLICA_VERDICT}}}", instant=True),
        Target(f"server_model_cause:llm_bottleneck_confidence:primary{{{REPLICA_VERDICT}}}", instant=True),
        Target(f"server_model:llm_layer_headroom:min{{{REPLICA_VERDICT}}}", instant=True),
        Target(_named("server_model:llm_scheduler_requests_waiting:sum"), instant=True),
        Target(_named(f"server_model:llm_request_ttft_seconds:p95_rate{w}"), instant=True),
    ]
    items: list[Panel | Row] = [
        Row("Fleet per model"),
        Panel(
            "Replicas per model",
            "Engines serving each model, over every exporter (a replica is one engine on one exporter). Fewer than "
            f"{f.min_replicas} and LLMFleetReplicaImbalance stays quiet: a median of so few says little. A drop means an "
            "exporter or engine went away: check 'Exporter sources up' on LLM / Overview.",
            [Target(f"model:llm_serving_replicas:count{{{MODEL}}}", "{{model}}", instant=True)],
            kind="stat",
            width=6,
            height=5,
        ),
        Panel(
            "Degraded replicas per model",
            "Replicas whose engine's verdict reads degraded (users affected, a symptom holds). Most replicas degraded with one "
            "capacity cause is LLMFleetCapacityShort: scale out; one replica degraded alone is its own page "
            "(LLMServiceDegraded) or an imbalance.",
            [Target(f"model:llm_service_degraded:replicas{{{MODEL}}}", "{{model}}", instant=True)],
            kind="stat",
            width=6,
            height=5,
            thresholds=[(1, "red")],
        ),
        Panel(
            "Replicas per primary cause",
            "How many replicas of each model have each primary cause now ('none': not degraded). Most of a model's "
            "replicas on kv_cache_pressure, compute_bound, serial_host_ceiling or queue_backlog is a fleet capacity "
            "shortage (LLMFleetCapacityShort names which kind); a single replica on a cause is that replica's problem.",
            [Target(f"model_cause:llm_bottleneck_primary:replicas{{{MODEL}}}", instant=True)],
            kind="table",
            width=6,
            height=5,
            transformations=[
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True, "__name__": True},
                        "indexByName": {"model": 0, "layer": 1, "cause": 2, "Value": 3},
                        "renameByName": {"Value": "replicas"},
                    },
                }
            ],
        ),
        Panel(
            "Fleet alerts firing",
            "LLMFleetReplicaImbalance (the replica named, signal queue or ttft), LLMFleetCapacityShort (the capacity "
            "kind to add) and LLMFleetGroupSkew (the straggler node) as Prometheus evaluates them now. Empty is good; "
            "each row links to its runbook section through the alert's runbook_url.",
            [Target('ALERTS{alertname=~"LLMFleet.*", alertstate="firing"}', instant=True)],
            kind="table",
            width=6,
            height=5,
            transformations=[
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {
                            "Time": True,
                            "__name__": True,
                            "alertstate": True,
                            "Value": True,
                            "kind": True,
                            "job": True,
                        },
                        "indexByName": {"alertname": 0, "model": 1, "instance": 2, "server": 3, "cause": 4},
                    },
                }
            ],
        ),
        Row("Replicas"),
        Panel(
            "Replicas: state, primary cause, headroom",
            "One row per replica (model, exporter, engine): its engine's state (each engine is judged on its own GPUs "
            "and process), primary cause with the diagnosis's confidence ('none' while not degraded), the headroom of "
            "its tightest layer, waiting requests and TTFT p95. "
            "One replica degraded or queueing while the others keep headroom is LLMFleetReplicaImbalance; open that "
            "engine's verdict (http://INSTANCE/diagnosis?engine=ENGINE) for its chain.",
            replica_table,
            kind="table",
            width=24,
            height=9,
            transformations=[
                {"id": "merge", "options": {}},
                {
                    "id": "organize",
                    "options": {
                        # server: the same name as engine
                        "excludeByName": {"Time": True, "__name__": True, "job": True, "server": True},
                        "indexByName": {
                            "model": 0,
                            "instance": 1,
                            "engine": 2,
                            "Value #A": 3,
                            "layer": 4,
                            "cause": 5,
                            "Value #B": 6,
                            "Value #C": 7,
                            "Value #D": 8,
                            "Value #E": 9,
                        },
                        "renameByName": {
                            "Value #A": "state",
                            "Value #B": "confidence",
                            "Value #C": "headroom",
                            "Value #D": "waiting",
                            "Value #E": "TTFT p95",
                        },
                    },
                },
            ],
            field_overrides=[
                column("state", ("mappings", [_STATE]), ("custom.cellOptions", {"type": "color-text"})),
                column("confidence", ("unit", "percentunit")),
                column("headroom", ("unit", "percentunit"), ("mappings", [_NAN_UNKNOWN])),
                column("TTFT p95", ("unit", "s")),
            ],
        ),
        Row("Fleet latency and throughput"),
        Panel(
            "Fleet TTFT p95 (summed buckets)",
            "Time to first token p95 of all requests of each model, from the replicas' histogram buckets summed (a fleet "
            "quantile, not a mean of quantiles: one slow replica moves it as much as its share of requests), with the SLO "
            "as a dashed line and the median replica's p95 dashed. Fleet far above the median replica: a few replicas are slow.",
            [
                Target(f"model:llm_request_ttft_seconds:p95_rate{w}{{{MODEL}}}", "fleet {{model}}"),
                Target(f"model:llm_request_ttft_seconds:median_p95_rate{w}{{{MODEL}}}", "median replica {{model}}"),
            ],
            unit="s",
            thresholds=[(s.ttft_seconds, "red")],
            threshold_lines=True,
            field_overrides=[dashed_lines("^median .*")],
        ),
        Panel(
            "Fleet ITL p95 (summed buckets)",
            "Inter-token latency p95 of all tokens of each model, from summed buckets, with the SLO dashed. High on the "
            "fleet while TTFT is fine points at decode: preemptions, throttling or batch size (read the primary causes above).",
            [Target(f"model:llm_request_inter_token_seconds:p95_rate{w}{{{MODEL}}}", "fleet {{model}}")],
            unit="s",
            thresholds=[(s.itl_seconds, "red")],
            threshold_lines=True,
        ),
        Panel(
            "Fleet throughput",
            "Output and prompt tokens per second and finished requests per second of each model, over every replica. "
            "Flat while 'Fleet requests running and waiting' grows: the fleet is saturated (scale out); falling: replicas "
            "are failing or preempting.",
            [
                Target(f"model:llm_generation_tokens:rate{w}{{{MODEL}}}", "output tok/s {{model}}"),
                Target(f"model:llm_prompt_tokens:rate{w}{{{MODEL}}}", "prompt tok/s {{model}}"),
                Target(f"model:llm_requests_finished:rate{w}{{{MODEL}}}", "finished/s {{model}}"),
            ],
            right_axis=("^finished.*", "reqps"),
        ),
        Panel(
            "Fleet requests running and waiting",
            "Requests in the running batches and queued, summed over the replicas of each model. Waiting that keeps "
            "growing with every replica queueing is a shortage; waiting on one replica only is an imbalance (the panels below).",
            [
                Target(f"model:llm_scheduler_requests_running:sum{{{MODEL}}}", "running {{model}}"),
                Target(f"model:llm_scheduler_requests_waiting:sum{{{MODEL}}}", "waiting {{model}}"),
            ],
        ),
        Panel(
            "Fleet KV-cache usage",
            "Used over total KV cache of each model (weighted by each replica's capacity where the engine publishes it, "
            "else the mean usage), and the fullest replica dashed. Fleet near full: KV memory is short "
            "(LLMFleetCapacityShort capacity=kv_memory); one replica full alone: its load or its configuration.",
            [
                Target(f"model:llm_kv_cache_usage:ratio{{{MODEL}}}", "fleet {{model}}"),
                Target(f"model:llm_kv_cache_usage:max{{{MODEL}}}", "max replica {{model}}"),
            ],
            unit="percentunit",
            min=0,
            max=1,
            width=24,
            field_overrides=[dashed_lines("^max replica .*")],
        ),
        # issue 22: demand against the measured capacity at SLO (dashboards/boards/capacity.py)
        *capacity.fleet_panels(s, REPLICA_VERDICT, MODEL),
        Row("Imbalance: each replica against the fleet median"),
        Panel(
            "Waiting per replica vs fleet median",
            f"Queued requests of every replica with the fleet's median replica dashed: the view LLMFleetReplicaImbalance "
            f"(signal=queue) judges. One line far above the median (over {f.queue_factor:g}x, at least {f.min_waiting:g}) while "
            "the others sit near it: the load balancer, sticky sessions or that node.",
            [
                Target(f"server_model:llm_scheduler_requests_waiting:sum{{{ENGINE}}}", "{{model}} {{instance}} {{server}}"),
                Target(f"model:llm_scheduler_requests_waiting:median{{{MODEL}}}", "median {{model}}"),
            ],
            field_overrides=[dashed_lines("^median .*")],
        ),
        Panel(
            "TTFT p95 per replica vs fleet median",
            f"Time to first token p95 of every replica with the median replica's dashed (signal=ttft of "
            f"LLMFleetReplicaImbalance: over {f.ttft_factor:g}x the median and over {f.min_ttft_seconds:g} s). A replica slow "
            "without queueing is a slow node (LLM / Hardware for it); slow because it queues is the routing.",
            [
                Target(f"server_model:llm_request_ttft_seconds:p95_rate{w}{{{ENGINE}}}", "{{model}} {{instance}} {{server}}"),
                Target(f"model:llm_request_ttft_seconds:median_p95_rate{w}{{{MODEL}}}", "median {{model}}"),
            ],
            unit="s",
            field_overrides=[dashed_lines("^median .*")],
        ),
        Panel(
            "Tightest-layer headroom per replica",
            f"Headroom of each replica's tightest layer (its engine's verdict; 1 = idle, 0 = at a limit) with the median replica's dashed. The "
            f"imbalance alert needs the median above {f.min_headroom:.0%}: room elsewhere to move load to. All near 0: the "
            "fleet is short, not skewed.",
            [
                Target(f"server_model:llm_layer_headroom:min{{{REPLICA_VERDICT}}}", "{{model}} {{instance}} {{engine}}"),
                Target(f"model:llm_layer_headroom:median{{{MODEL}}}", "median {{model}}"),
            ],
            unit="percentunit",
            min=0,
            max=1,
            width=24,
            field_overrides=[dashed_lines("^median .*")],
        ),
        Row("Multi-node parallel groups"),
        Panel(
            "Group SM-active skew across nodes",
            f"Per multi-node parallel group (exporters started with the same --parallel-group): the busiest node's busiest "
            f"GPU over the mean of all the group's GPUs (SM active, mean over {w}); 1.0 = balanced, dashed at "
            f"{f.skew_ratio:g} where LLMFleetGroupSkew fires. The group runs at its slowest member's pace.",
            [Target("group:llm_gpu_sm_active:skew_ratio", "{{group}}")],
            thresholds=[(f.skew_ratio, "red")],
            threshold_lines=True,
        ),
        Panel(
            "Busiest GPU per node vs group mean",
            "SM active of each node's busiest GPU (mean over the rate window) with the group's mean dashed. The node far "
            "above the others is the straggler LLMFleetGroupSkew names: check its clocks and throttling on LLM / Hardware.",
            [
                Target(f"group_instance:llm_gpu_sm_active:max_avg_over_time{w}{{{INSTANCE}}}", "{{group}} {{instance}}"),
                Target(f"group:llm_gpu_sm_active:avg_over_time{w}", "mean {{group}}"),
            ],
            unit="percentunit",
            min=0,
            max=1,
            field_overrides=[dashed_lines("^mean .*")],
        ),
        Panel(
            "Nodes per group",
            "Exporters reporting each multi-node parallel group (llm_parallel_node_group_info). Fewer than the group's "
            "nodes: an exporter is down or started without --parallel-group, and the skew above misses that node.",
            [Target("group:llm_parallel_node_group_info:nodes", "{{group}}", instant=True)],
            kind="stat",
            width=24,
            height=4,
        ),
    ]
    return Dashboard(
        UID,
        "LLM / Fleet",
        "Every replica of a model at once: their state, primary cause and headroom, the fleet's latency and throughput from "
        "summed histograms, the imbalance view, and the skew of multi-node parallel groups.",
        items,
        links=[dashboard_link("llm-overview", "LLM / Overview", engine=True)],
    )
