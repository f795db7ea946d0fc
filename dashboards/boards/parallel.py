"""LLM / Parallelism: are the GPUs of a tensor/pipeline group evenly loaded, and how busy are the links?

Why skew: a parallel group runs at the pace of its slowest GPU; max over mean of
SM active names an imbalance in one number, per group. Why the links against their
capacity: a group whose link runs near what it can carry while its SMs wait is
communication-bound (diagnosis ``parallel/communication_bound``), the same traffic on
a link with room is not.
"""

from __future__ import annotations

from alerts.settings import Settings
from dashboards.grafana import ENGINE, GPU, INSTANCE, Dashboard, Panel, Row, Target, dashed_lines

UID = "llm-parallel"


def _busier(link: str) -> str:
    """Per GPU, the busier direction of ``link`` (a collective pushes both; the busier one meets the capacity first)."""
    tx = f"llm_gpu_{link}_transmit_bytes_per_second{{{GPU}}}"
    rx = f"llm_gpu_{link}_receive_bytes_per_second{{{GPU}}}"
    return f"({tx} > {rx} or {rx})"


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
            "Link use against capacity",
            "Per GPU, the busier direction of PCIe and of NVLink over that link's capacity per direction "
            "(llm_gpu_pcie_link_bandwidth_bytes_per_second: generation x lanes; llm_gpu_nvlink_bandwidth_bytes_per_second: "
            "active links x the per-link rate). From 0.7 (diagnosis.communication_link_use) with the SMs waiting, the "
            "group is communication-bound; a saturated link reads 0.85-0.95 (packet headers count, line encoding does not).",
            [
                Target(
                    f"{_busier('pcie')} / llm_gpu_pcie_link_bandwidth_bytes_per_second{{{GPU}}}", "pcie {{instance}} gpu {{gpu}}"
                ),
                Target(
                    f"{_busier('nvlink')} / llm_gpu_nvlink_bandwidth_bytes_per_second{{{GPU}}}", "nvlink {{instance}} gpu {{gpu}}"
                ),
            ],
            unit="percentunit",
            min=0,
            thresholds=[(0.7, "orange"), (0.9, "red")],
            threshold_lines=True,
        ),
        Panel(
            "Link traffic and capacity per GPU",
            "The busier direction of each GPU's PCIe and NVLink traffic, with the link's capacity per direction dashed. An "
            "idle GPU trains its PCIe link down (Gen1) to save power, so its capacity line drops at idle and comes back "
            "under load; one that stays below the others under load is a link trained narrower or slower than its maximum.",
            [
                Target(_busier("pcie"), "pcie {{instance}} gpu {{gpu}}"),
                Target(f"llm_gpu_pcie_link_bandwidth_bytes_per_second{{{GPU}}}", "capacity pcie {{instance}} gpu {{gpu}}"),
                Target(_busier("nvlink"), "nvlink {{instance}} gpu {{gpu}}"),
                Target(f"llm_gpu_nvlink_bandwidth_bytes_per_second{{{GPU}}}", "capacity nvlink {{instance}} gpu {{gpu}}"),
            ],
            unit="Bps",
            min=0,
            field_overrides=[dashed_lines("^capacity .*")],
        ),
        Panel(
            "Collectives' share of the last profile",
            "Share of the GPU kernel time of each engine's last on-demand profile (POST /profile) spent in communication "
            "kernels (NCCL all-reduce, all-gather, ...). From 0.3 (diagnosis.communication_time_share) while the GPUs are "
            "busy and their SMs wait, the group is communication-bound even with room on the link (latency-bound "
            "collectives). Absent until a profile was taken.",
            [
                Target(
                    f'max by (instance, engine) (llm_operator_time_share{{{INSTANCE}, kind="communication"}})',
                    "{{instance}} {{engine}}",
                )
            ],
            unit="percentunit",
            min=0,
            max=1,
            thresholds=[(0.3, "orange")],
            threshold_lines=True,
        ),
        Panel(
            "PCIe link per GPU: now and at most",
            "Generation and lanes each GPU's PCIe link runs at now, and the most the GPU and its slot support. Under load "
            "now below the maximum: the link trained down (a riser, a slot, a BIOS setting) and carries less.",
            [
                Target(f"llm_gpu_pcie_link_generation{{{GPU}}}", "gen {{instance}} gpu {{gpu}}", instant=True),
                Target(f"llm_gpu_pcie_link_max_generation{{{GPU}}}", "max gen {{instance}} gpu {{gpu}}", instant=True),
                Target(f"llm_gpu_pcie_link_width{{{GPU}}}", "lanes {{instance}} gpu {{gpu}}", instant=True),
                Target(f"llm_gpu_pcie_link_max_width{{{GPU}}}", "max lanes {{instance}} gpu {{gpu}}", instant=True),
            ],
            kind="stat",
            height=6,
            width=12,
        ),
        Panel(
            "Active NVLinks per GPU",
            "NVLinks up on each GPU (an H100/H200 SXM has 18, an A100 12); fewer than its siblings is a link down, and "
            "its group's collectives slow to it. Absent on a GPU without NVLink.",
            [Target(f"llm_gpu_nvlink_links_active{{{GPU}}}", "{{instance}} gpu {{gpu}}", instant=True)],
            kind="stat",
            height=6,
            width=12,
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
