"""The parallel layer, derived from GPU points: group size, SM-active skew, interconnect.

Why derived and not read: no GPU library knows which GPUs form a tensor- or
pipeline-parallel group; the operator says so (``groups: {tp0: [0,1,2,3]}``)
or we assume one group of every GPU. A group is as fast as its busiest
member, so the skew (max over mean SM active) is the number that shows a
straggler; the interconnect traffic shows whether the group talks over PCIe or
NVLink at all.
"""

from __future__ import annotations

from collections.abc import Mapping

from exporter.diagnosis.finite import mean, total
from exporter.diagnosis.signals import resolve_groups, skew
from exporter.samples import Point, Sample, SampleResult
from exporter.store import Snapshot

_LINKS = {
    "pcie": ("llm_gpu_pcie_transmit_bytes_per_second", "llm_gpu_pcie_receive_bytes_per_second"),
    "nvlink": ("llm_gpu_nvlink_transmit_bytes_per_second", "llm_gpu_nvlink_receive_bytes_per_second"),
}


def group_points(snap: Snapshot, configured: Mapping[str, list[int]] | None) -> list[Point]:
    """Parallel-layer points for every group; a metric no member reports is absent."""
    points: list[Point] = []
    for name, members in resolve_groups(configured, snap).items():
        labels = {"group": name}
        points.append(Sample("llm_parallel_group_gpus", labels, float(len(members))))
        sm = [v for g in members if (v := snap.maximum("llm_gpu_sm_active_ratio", gpu=g)) is not None]
        average = mean(sm)  # None: no member reports, or one is not finite
        skew_ratio = skew(sm, average) if average is not None else None
        if skew_ratio is not None:  # the diagnosis's own figure (signals.skew), never published as NaN or +Inf
            points.append(Sample("llm_parallel_sm_active_skew_ratio", labels, skew_ratio))
        for link, names in _LINKS.items():
            values = [v for g in members for n in names if (v := snap.total(n, gpu=g)) is not None]
            traffic = total(values)  # None: none reported, or the sum overflowed (never published as +Inf)
            if traffic is not None:
                points.append(Sample("llm_parallel_interconnect_bytes_per_second", {**labels, "link": link}, traffic))
    return points


class ParallelStep:
    """Derived source ``parallel`` (exporter/derive.py): group metrics from the snapshot's GPU points."""

    name = "parallel"

    def __init__(self, groups: Mapping[str, list[int]] | None, node_group: str | None = None) -> None:
        self.groups = dict(groups or {})
        #: --parallel-group: the multi-node group this node is part of (issue 15, alerts/fleet.py)
        self.node_group = node_group

    def derive(self, snap: Snapshot) -> SampleResult:
        points = group_points(snap, self.groups)
        if self.node_group:
            # one constant series per exporter, not a label on every series: the fleet rules join on it
            points.append(Sample("llm_parallel_node_group_info", {"group": self.node_group}, 1.0))
        return SampleResult(points)

    def close(self) -> None:
        """Holds nothing."""
