"""``parallel/communication_bound`` on synthetic windows: the link near its capacity (or the collectives'
share of a profile) while the group's SMs wait, told apart from host copies (``pcie_transfer_bound``)
by the shape of the PCIe traffic, and not "TP > 1": the same layout on a link with room does not hold."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from exporter.diagnosis import communication as cm
from exporter.diagnosis import signals as sig
from exporter.diagnosis.engine import Verdict
from exporter.diagnosis.scope import partition
from exporter.diagnosis.thresholds import Thresholds
from exporter.diagnosis.window import Window
from exporter.gpu.fields import pcie_capacity
from exporter.samples import Point
from exporter.store import Snapshot
from tests.diagnosis.diag_points import ENG, _s, causes, engine, gpu, histogram, primary, run

GB = 1e9
#: a decode whose SMs wait: the kernels keep "GPU util" high, a third of the SMs hold warps
WAITING_SMS: dict[str, Any] = {"util": 0.95, "sm": 0.31, "tensor": 0.1, "dram": 0.3}


def link(
    index: int,
    *,
    pcie: tuple[float, float] | None = None,
    nvlink: tuple[float, float] | None = None,
    gen: int | None = 5,
    width: int | None = 16,
    gen_max: int | None = 5,
    width_max: int | None = 16,
    nvlinks: int | None = None,
    version: int = 4,
) -> list[Point]:
    """One GPU's link points as the GPU source publishes them (exporter/gpu/fields.py): traffic as
    (transmit, receive) bytes/s, the PCIe link, the NVLinks up."""
    labels = {"gpu": str(index), "uuid": f"GPU-{index}"}
    out: list[Point] = []
    for name, pair in (("pcie", pcie), ("nvlink", nvlink)):
        if pair is not None:
            out.append(_s(f"llm_gpu_{name}_transmit_bytes_per_second", labels, pair[0]))
            out.append(_s(f"llm_gpu_{name}_receive_bytes_per_second", labels, pair[1]))
    for name, x in (
        ("llm_gpu_pcie_link_generation", gen),
        ("llm_gpu_pcie_link_width", width),
        ("llm_gpu_pcie_link_max_generation", gen_max),
        ("llm_gpu_pcie_link_max_width", width_max),
    ):
        if x is not None:
            out.append(_s(name, labels, x))
    capacity = pcie_capacity(gen, width)
    if capacity is not None:
        out.append(_s("llm_gpu_pcie_link_bandwidth_bytes_per_second", labels, capacity))
    if nvlinks is not None:
        out.append(_s("llm_gpu_nvlink_links_active", labels, nvlinks))
        out.append(_s("llm_gpu_nvlink_version", labels, version))
        out.append(_s("llm_gpu_nvlink_bandwidth_bytes_per_second", labels, nvlinks * 25 * GB))
    return out


def group(n: int, sms: dict[str, Any] | None = None, **link_kw: Any) -> list[Point]:
    """``n`` GPUs doing the same work over the same links."""
    return [p for i in range(n) for p in gpu(i, **(sms or WAITING_SMS)) + link(i, **link_kw)]


def setting(name: str, value: float) -> Point:
    return _s("llm_engine_setting", {**ENG, "setting": name}, value)


def profile_share(share: float) -> list[Point]:
    """The engine's last on-demand profile (exporter/profile): the collectives' share of kernel time."""
    labels = {"engine": ENG["server"]}
    rest = 1.0 - share
    return [
        _s("llm_operator_time_share", {**labels, "kind": "communication"}, share),
        _s("llm_operator_time_share", {**labels, "kind": "gemm"}, rest),
    ]


def slow_decode(i: int, running: float = 32) -> list[Point]:
    """Users feel it: the inter-token p95 above its SLO (0.2 s)."""
    return engine(waiting=0, running=running, kv=0.4) + [histogram("llm_request_inter_token_seconds", [0.35] * (30 * i))]


def verdict(build: Callable[[int], list[Point]], cycles: int = 6) -> Verdict:
    return run([build(i) for i in range(cycles)])[-1]


# ------------------------------------------------------------------ the link


def test_tp4_over_pcie_near_capacity_with_waiting_sms_is_communication_bound() -> None:
    v = verdict(lambda i: group(4, pcie=(49 * GB, 49 * GB)) + [setting("tensor_parallel_size", 4)] + slow_decode(i))
    assert primary(v) == "communication_bound", (v.holding, v.notices)
    assert "pcie_transfer_bound" not in v.holding  # the same bytes are the group's collectives, not copies
    assert v.primary is not None
    assert v.primary.summary == "TP 4 over PCIe Gen5 x16: 49 GB/s of 63 GB/s per GPU while SM active 31 % in group all"
    assert v.primary.layer == "parallel" and "←" in v.primary.chain
    ev = v.primary.evidence
    assert ev['interconnect_use_ratio{group="all"}'] == pytest.approx(49 / 63.015384615, rel=1e-5)
    assert ev['llm_parallel_group_gpus{group="all"}'] == 4
    assert "data-parallel replicas" in v.primary.advice and "NCCL" in v.primary.advice


def test_the_same_layout_and_traffic_over_nvlink_has_room_and_does_not_hold() -> None:
    v = verdict(
        lambda i: (
            group(4, pcie=(0.1 * GB, 0.1 * GB), nvlink=(49 * GB, 49 * GB), nvlinks=18)
            + [setting("tensor_parallel_size", 4)]
            + slow_decode(i)
        )
    )
    assert "communication_bound" not in v.holding and "pcie_transfer_bound" not in v.holding, v.holding
    # judged all the same: the parallel layer says how near the link is
    assert v.signals.get(cm.TP) == 4


def test_nvlink_near_its_capacity_holds_and_names_the_links() -> None:
    v = verdict(
        lambda i: (
            group(2, pcie=(0.1 * GB, 0.1 * GB), nvlink=(330 * GB, 320 * GB), nvlinks=18)
            + [setting("tensor_parallel_size", 2)]
            + slow_decode(i)
        )
    )
    assert primary(v) == "communication_bound"
    assert v.primary is not None
    assert v.primary.summary == "TP 2 over NVLink (18 links): 330 GB/s of 450 GB/s per GPU while SM active 31 % in group all"


def test_busy_sms_are_not_waiting_on_the_link() -> None:
    busy: dict[str, Any] = {"util": 0.98, "sm": 0.9, "tensor": 0.7, "dram": 0.4}
    v = verdict(lambda i: group(4, busy, pcie=(49 * GB, 49 * GB)) + [setting("tensor_parallel_size", 4)] + slow_decode(i))
    assert "communication_bound" not in v.holding


def test_a_link_with_room_does_not_hold() -> None:
    v = verdict(lambda i: group(4, pcie=(20 * GB, 20 * GB)) + [setting("tensor_parallel_size", 4)] + slow_decode(i))
    assert "communication_bound" not in v.holding
    assert "pcie_transfer_bound" not in v.holding  # collectives all the same: not the host's copies


def test_without_the_tp_setting_the_group_and_the_shape_decide() -> None:
    v = verdict(lambda i: group(4, pcie=(47 * GB, 49 * GB)) + slow_decode(i))
    assert primary(v) == "communication_bound"
    assert v.primary is not None and v.primary.summary.startswith("4 GPUs over PCIe Gen5 x16: 49 GB/s of 63 GB/s")


def test_an_engine_that_runs_tp_1_is_not_communication_bound() -> None:
    v = verdict(lambda i: group(2, pcie=(49 * GB, 49 * GB)) + [setting("tensor_parallel_size", 1)] + slow_decode(i))
    assert "communication_bound" not in v.holding
    assert "pcie_transfer_bound" in v.holding  # its PCIe bytes are copies then


def test_a_link_trained_down_while_idle_is_judged_at_the_generation_that_carried_the_bytes() -> None:
    """Gen1 read at the end of the sample while 49 GB/s moved: the link came back up meanwhile."""
    v = verdict(lambda i: group(4, pcie=(49 * GB, 49 * GB), gen=1) + [setting("tensor_parallel_size", 4)] + slow_decode(i))
    assert primary(v) == "communication_bound"
    assert v.primary is not None and "PCIe Gen5 x16: 49 GB/s of 63 GB/s" in v.primary.summary
    # a link trained down under load (x8 of its x16) carries half: near its capacity at 26 GB/s
    v = verdict(lambda i: group(4, pcie=(26 * GB, 26 * GB), width=8) + [setting("tensor_parallel_size", 4)] + slow_decode(i))
    assert primary(v) == "communication_bound"
    assert v.primary is not None and "PCIe Gen5 x8: 26 GB/s of 32 GB/s" in v.primary.summary


def group_signals(points: list[Point]) -> dict[str, float]:
    """The signals of the default group ``all`` over one snapshot of ``points``."""
    window = Window(20.0)
    window.add(Snapshot(1000.0, points, {}))
    return sig.compute(window).scopes["group"]["all"]


def test_an_unknown_capacity_is_not_judged_on_the_link() -> None:
    pts = group(4, pcie=(49 * GB, 49 * GB), gen=None, gen_max=None) + [setting("tensor_parallel_size", 4)]
    g = group_signals(pts)
    assert g[cm.TRAFFIC] == 49 * GB and g[cm.ON_NVLINK] == 0.0
    assert cm.CAPACITY not in g and cm.USE not in g
    v = verdict(lambda i: pts + slow_decode(i))
    assert "communication_bound" not in v.holding
    # one GPU without its PCIe counters: neither the group's traffic nor its shape is told
    partial = [p for p in pts if not (p.labels.get("gpu") == "3" and p.name.startswith("llm_gpu_pcie_transmit"))]
    g = group_signals(partial)
    assert cm.TRAFFIC not in g and cm.SYMMETRY not in g and g[cm.PCIE_MAX] == 98 * GB


def test_the_shape_is_copied_to_each_gpu_of_the_group() -> None:
    window = Window(20.0)
    window.add(Snapshot(1000.0, group(2, pcie=(40 * GB, 30 * GB)), {}))
    scopes = sig.compute(window).scopes
    for g in ("0", "1"):
        assert scopes["gpu"][g][cm.SYMMETRY] == 0.75 and scopes["gpu"][g][cm.BALANCE] == 1.0
        assert scopes["gpu"][g][cm.GROUP_GPUS] == 2


# ------------------------------------------------------------------ told apart from host copies


def test_a_single_gpu_copying_over_pcie_is_pcie_transfer_bound_not_communication_bound() -> None:
    copying: dict[str, Any] = {"util": 0.99, "sm": 0.0, "tensor": 0.0, "dram": 0.1}
    v = verdict(lambda i: gpu(0, **copying) + link(0, pcie=(0.5 * GB, 58 * GB)) + profile_share(0.4) + slow_decode(i))
    assert primary(v) == "pcie_transfer_bound"
    assert "communication_bound" not in v.holding


def test_host_copies_on_every_rank_of_a_tp_group_are_pcie_transfer_bound() -> None:
    """KV offloaded by every rank of a TP 4 engine: one way (device to host), not a collective's shape;
    even a profile's large collective share does not make it communication_bound."""
    copying: dict[str, Any] = {"util": 0.9, "sm": 0.17, "tensor": 0.05, "dram": 0.2}
    v = verdict(
        lambda i: (
            group(4, copying, pcie=(50 * GB, 2 * GB))
            + [setting("tensor_parallel_size", 4)]
            + profile_share(0.45)
            + slow_decode(i)
        )
    )
    assert primary(v) == "pcie_transfer_bound"
    assert "communication_bound" not in v.holding


def test_one_rank_copying_beside_collectives_is_the_copy() -> None:
    """Three ranks all-reduce, the fourth also streams weights in (twice as much in as out): the group's
    PCIe traffic is no longer a collective's shape, so the copy is named and not the link."""

    def build(i: int) -> list[Point]:
        pts = [p for r in range(3) for p in gpu(r, **WAITING_SMS) + link(r, pcie=(30 * GB, 30 * GB))]
        pts += gpu(3, **WAITING_SMS) + link(3, pcie=(30 * GB, 60 * GB))
        return pts + [setting("tensor_parallel_size", 4)] + slow_decode(i)

    v = verdict(build)
    assert "communication_bound" not in v.holding
    assert "pcie_transfer_bound" in v.holding


def test_the_two_causes_never_hold_together() -> None:
    """Over a grid of shapes and loads, never both (they are told apart by the same test)."""
    for n in (1, 2, 4):
        for tx, rx in ((49, 49), (49, 10), (5, 60), (30, 28), (2, 2)):
            for tp in (None, 1, n):
                for share in (None, 0.45):

                    def build(
                        i: int, n: int = n, tx: float = tx, rx: float = rx, tp: float | None = tp, share: float | None = share
                    ) -> list[Point]:
                        pts = group(n, pcie=(tx * GB, rx * GB))
                        pts += [setting("tensor_parallel_size", tp)] if tp is not None else []
                        pts += profile_share(share) if share is not None else []
                        return pts + slow_decode(i)

                    held = set(verdict(build, cycles=3).holding)
                    assert not {"communication_bound", "pcie_transfer_bound"} <= held, (n, tx, rx, tp, share, held)


# ------------------------------------------------------------------ the profile


def test_a_high_collective_share_from_a_profile_holds_with_the_link_not_full() -> None:
    v = verdict(
        lambda i: (
            group(2, pcie=(0.1 * GB, 0.1 * GB), nvlink=(40 * GB, 40 * GB), nvlinks=18)
            + [setting("tensor_parallel_size", 2)]
            + profile_share(0.45)
            + slow_decode(i)
        )
    )
    assert primary(v) == "communication_bound"
    assert v.primary is not None
    assert v.primary.summary == (
        "TP 2 over NVLink (18 links): 40 GB/s of 450 GB/s per GPU; collectives 45 % of the last profile's GPU time "
        "while SM active 31 % in group all"
    )


def test_a_profile_alone_holds_without_link_figures_and_not_on_an_idle_group() -> None:
    def build(i: int, util: float = 0.95) -> list[Point]:
        pts = [p for g in range(4) for p in gpu(g, util=util, sm=0.31, tensor=0.1, dram=0.3)]
        return pts + [setting("tensor_parallel_size", 4)] + profile_share(0.5) + slow_decode(i)

    v = verdict(build)
    assert primary(v) == "communication_bound"
    assert v.primary is not None
    assert v.primary.summary == "TP 4: collectives 50 % of the last profile's GPU time while SM active 31 % in group all"
    idle = verdict(lambda i: build(i, util=0.1))
    assert "communication_bound" not in idle.holding
    low = verdict(lambda i: [p for p in build(i) if p.name != "llm_operator_time_share"] + profile_share(0.1))
    assert "communication_bound" not in low.holding


def test_the_profile_share_belongs_to_its_engine_scope() -> None:
    """``llm_operator_time_share{engine}`` is keyed by the engine's name, as the capacity series are."""
    snap = Snapshot(1.0, profile_share(0.4), {})
    part = partition(snap)
    assert len(part.by_server[ENG["server"]]) == 2 and not part.node


# ------------------------------------------------------------------ pipeline stages


def test_pipeline_stages_are_named_and_their_bubbles_said_unjudged_once() -> None:
    def build(i: int) -> list[Point]:
        pts = group(4, pcie=(49 * GB, 49 * GB))
        return pts + [setting("tensor_parallel_size", 2), setting("pipeline_parallel_size", 2)] + slow_decode(i)

    v = run([build(i) for i in range(6)], groups={"stage0": [0, 1], "stage1": [2, 3]})[-1]
    assert primary(v) == "communication_bound"
    assert v.primary is not None and v.primary.summary.startswith("TP 2 x PP 2 over PCIe Gen5 x16: 49 GB/s of 63 GB/s")
    bubbles = [n for n in v.notices if "pipeline bubbles" in n]
    assert bubbles == [
        "pipeline_parallel_size 2: pipeline bubbles (stages waiting on each other) cannot be judged, no engine "
        "publishes per-stage timings; communication_bound judges the links and the collectives only"
    ]
    one_stage = verdict(lambda i: group(4, pcie=(49 * GB, 49 * GB)) + [setting("pipeline_parallel_size", 1)] + slow_decode(i))
    assert not any("pipeline bubbles" in n for n in one_stage.notices)


# ------------------------------------------------------------------ thresholds


def test_the_lines_are_settings() -> None:
    def build(i: int) -> list[Point]:
        return group(4, pcie=(20 * GB, 20 * GB)) + [setting("tensor_parallel_size", 4)] + slow_decode(i)

    assert "communication_bound" not in verdict(build).holding  # 20 of 63: 0.32
    loose = run([build(i) for i in range(6)], thresholds=Thresholds(communication_link_use=0.3))[-1]
    assert "communication_bound" in loose.holding
    strict_sms = run(
        [build(i) for i in range(6)], thresholds=Thresholds(communication_link_use=0.3, communication_sm_active_max=0.3)
    )[-1]
    assert "communication_bound" not in strict_sms.holding


def test_causes_helper_sees_the_group_instance() -> None:
    v = verdict(lambda i: group(4, pcie=(49 * GB, 49 * GB)) + [setting("tensor_parallel_size", 4)])
    assert "communication_bound" in causes(v)  # GPU data alone: a candidate, not yet a bottleneck
