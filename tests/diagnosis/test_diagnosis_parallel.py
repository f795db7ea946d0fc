"""The parallel layer's derived metrics, from GPU points in a real store."""

from __future__ import annotations

from collections.abc import Iterable

from exporter.diagnosis.parallel import ParallelStep, group_points
from exporter.samples import Point
from exporter.store import Snapshot, SnapshotStore
from tests.diagnosis.diag_points import gpu, samples


def values(points: Iterable[Point], name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(p.labels.items())): p.value for p in samples(points) if p.name == name}


def four_gpus() -> list[Point]:
    sms = (0.8, 0.2, 0.2, 0.2)
    return [p for i, sm in enumerate(sms) for p in gpu(i, util=0.9, sm=sm, tensor=0.1, dram=0.3, pcie=1e9, nvlink=4e9 * (i + 1))]


def test_default_group_is_every_gpu_seen() -> None:
    pts = group_points(Snapshot(0, four_gpus(), {}), None)
    assert values(pts, "llm_parallel_group_gpus") == {(("group", "all"),): 4.0}
    assert values(pts, "llm_parallel_sm_active_skew_ratio") == {(("group", "all"),): 0.8 / 0.35}
    assert values(pts, "llm_parallel_interconnect_bytes_per_second") == {
        (("group", "all"), ("link", "pcie")): 4e9,
        (("group", "all"), ("link", "nvlink")): 4e9 * (1 + 2 + 3 + 4),
    }


def test_configured_groups_and_absent_links() -> None:
    pts = [p for p in four_gpus() if "nvlink" not in p.name]
    out = group_points(Snapshot(0, pts, {}), {"tp0": [0, 1], "tp1": [2, 3], "ghost": [7]})
    skew = values(out, "llm_parallel_sm_active_skew_ratio")
    assert skew[(("group", "tp0"),)] == 0.8 / 0.5
    assert skew[(("group", "tp1"),)] == 1.0
    assert (("group", "ghost"),) not in skew  # no member reports: absent, not 0
    assert values(out, "llm_parallel_group_gpus")[(("group", "ghost"),)] == 1.0
    links = {dict(k)["link"] for k in values(out, "llm_parallel_interconnect_bytes_per_second")}
    assert links == {"pcie"}


def test_idle_group_is_balanced_not_infinite() -> None:
    idle = [p for i in range(2) for p in gpu(i, util=0.0, sm=0.0, tensor=0.0, dram=0.0)]
    assert values(group_points(Snapshot(0, idle, {}), None), "llm_parallel_sm_active_skew_ratio") == {(("group", "all"),): 1.0}


def test_no_gpus_no_groups() -> None:
    assert group_points(Snapshot(0, [], {}), None) == []


def test_source_reads_the_store() -> None:
    store = SnapshotStore()
    store.register("gpu", 1.0)
    store.record_success("gpu", four_gpus(), 0.01)
    src = ParallelStep(None)
    assert src.name == "parallel"
    names = {p.name for p in src.derive(store.snapshot()).points}
    assert names == {"llm_parallel_group_gpus", "llm_parallel_sm_active_skew_ratio", "llm_parallel_interconnect_bytes_per_second"}
