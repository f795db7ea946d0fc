"""LLM / Parallelism: are the GPUs of a tensor/pipeline group evenly loaded, and how busy are the links?

Why skew: a parallel group runs at the pace of its slowest GPU; max over mean of
SM active names an imbalance in one number, per group.
"""

from __future__ import annotations

from alerts.settings import Settings
from dashboards.grafana import ENGINE, GPU, INSTANCE, Dashboard, Panel, Row, Target

UID = "llm-parallel"


def build(s: Settings) -> Dashboard:
    items: list[Panel | Row] = [
        Row("Balance"),
        Panel(
            "SM active skew",
            "Max over mean of SM active across each group's GPUs (1.0 = balanced). Above ~1.3 one GPU does more work than "
            "the rest: find it in 'SM active per GPU' and check its throttling and memory on LLM / Hardware.",
            [Target(f"llm_parallel_sm_active_skew_ratio{{{INSTANCE}}}", "{{instance}} {{group}}")],
            min=1,
            thresholds=[(1.3, "orange"), (2, "red")],
            threshold_lines=True,
        ),
        Panel(
            "SM active per GPU",
            "SM active of every GPU; in a balanced group the lines overlap. One line above the others is the straggler "
            "(pipeline split, expert imbalance); one below may be waiting on a slow link.",
            [Target(f"llm_gpu_sm_active_ratio{{{GPU}}}", "{{instance}} gpu {{gpu}}")],
            unit="percentunit",
            min=0,
            max=1,
        ),
        Panel(
            "GPUs per group",
            "GPUs in each parallel group as configured (groups: in the exporter config; default one group of all GPUs). "
            "A wrong grouping makes the skew meaningless.",
            [Target(f"llm_parallel_group_gpus{{{INSTANCE}}}", "{{instance}} {{group}}", instant=True)],
            kind="stat",
            height=6,
            width=8,
        ),
        Panel(
            "Running requests per rank",
            "Running requests per engine rank (data-parallel engines). One rank far above the others means the router or "
            "DP balancing sends it more work.",
            [Target(f"sum by (server, rank) (llm_scheduler_requests_running{{{ENGINE}}})", "{{server}} rank {{rank}}")],
            min=0,
            height=6,
            width=16,
        ),
        Row("Interconnect"),
        Panel(
            "Interconnect traffic per group",
            "Transmit plus receive traffic of each group's GPUs by link type. NVLink traffic near the link's capacity during "
            "decode means all-reduce limits tensor parallelism: fewer TP ranks or more replicas.",
            [Target(f"llm_parallel_interconnect_bytes_per_second{{{INSTANCE}}}", "{{instance}} {{group}} {{link}}")],
            unit="Bps",
            min=0,
        ),
        Panel(
            "NVLink throughput per GPU",
            "NVLink transmit and receive rate of every GPU. Uneven traffic between GPUs of one group points at a topology or "
            "placement problem (a rank on a PCIe-only path).",
            [
                Target(f"llm_gpu_nvlink_transmit_bytes_per_second{{{GPU}}}", "tx {{instance}} gpu {{gpu}}"),
                Target(f"llm_gpu_nvlink_receive_bytes_per_second{{{GPU}}}", "rx {{instance}} gpu {{gpu}}"),
            ],
            unit="Bps",
            min=0,
        ),
    ]
    return Dashboard(UID, "LLM / Parallelism", "Balance of parallel groups and interconnect traffic.", items)
