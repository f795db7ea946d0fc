"""LLM / Scheduler: is the host-side serial loop or the queue the limit?

Why the busiest thread: the engine's scheduler loop is one Python thread; the
process total hides it, but one thread at a full core while SMs idle is the
serial host ceiling that no GPU upgrade fixes.
"""

from __future__ import annotations

from alerts.settings import Settings
from dashboards.grafana import ENGINE, GPU, SERVER, Dashboard, Panel, Row, Target

UID = "llm-scheduler"
LEGEND = "{{server}} {{model}}"


def build(s: Settings) -> Dashboard:
    items: list[Panel | Row] = [
        Row("Queue"),
        Panel(
            "Running / waiting",
            "Requests in the running batch and in the queue. Waiting growing steadily means arrivals exceed capacity "
            "(queue backlog); running flat at a round number is an admission limit (max-num-seqs).",
            [
                Target(f"sum by (server, model) (llm_scheduler_requests_running{{{ENGINE}}})", "running " + LEGEND),
                Target(f"sum by (server, model) (llm_scheduler_requests_waiting{{{ENGINE}}})", "waiting " + LEGEND),
            ],
            min=0,
        ),
        Panel(
            "Queue time p95",
            "Time requests wait before first being scheduled (p95). Rising queue time with flat throughput is backlog: add "
            "capacity or shed load; high with an empty queue is a batching window (Application & SLO).",
            [Target(f"server_model:llm_scheduler_queue_seconds:p95_rate{s.rate_window}{{{ENGINE}}}", LEGEND)],
            unit="s",
            min=0,
        ),
        Row("Host CPU of the serving process"),
        Panel(
            "Busiest thread CPU",
            "CPU of the busiest thread of the serving process tree (1.0 = one full core). At ~1.0 while 'SM active (mean)' "
            "is low and requests wait, the serial scheduler loop is the ceiling: use the engine's multi-process front end "
            "or bigger batches.",
            [Target(f"llm_process_busiest_thread_cpu_ratio{{{SERVER}}}", "{{server}}")],
            unit="percentunit",
            min=0,
            thresholds=[(0.9, "red")],
            threshold_lines=True,
        ),
        Panel(
            "SM active (mean)",
            "Mean SM active over the exporter's GPUs, to read beside 'Busiest thread CPU'. Low SM activity with a saturated "
            "host thread means the GPU waits on the host.",
            [Target(f"avg by (instance) (llm_gpu_sm_active_ratio{{{GPU}}})", "{{instance}}")],
            unit="percentunit",
            min=0,
            max=1,
        ),
        Panel(
            "Process CPU",
            "CPU of the whole serving process tree (1.0 = one core). Far above the busiest thread means parallel host work "
            "(tokenisers, API workers); close to it means one thread does everything.",
            [Target(f"llm_process_cpu_ratio{{{SERVER}}}", "{{server}}")],
            unit="percentunit",
            min=0,
            width=8,
        ),
        Panel(
            "Resident memory",
            "Resident memory of the serving process tree. Steady growth is a leak (e.g. unbounded request state): restart "
            "planning and an engine bug report.",
            [Target(f"llm_process_resident_memory_bytes{{{SERVER}}}", "{{server}}")],
            unit="bytes",
            min=0,
            width=8,
        ),
        Panel(
            "Threads",
            "Threads in the serving process tree. A jump usually follows a config change (tokeniser parallelism, workers); "
            "thousands point at a thread leak.",
            [Target(f"llm_process_threads{{{SERVER}}}", "{{server}}")],
            min=0,
            width=8,
        ),
    ]
    return Dashboard(
        UID, "LLM / Scheduler", "Queue, queue time and the host CPU of the serving process (serial-loop ceiling).", items
    )
