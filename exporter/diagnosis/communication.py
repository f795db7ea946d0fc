"""Is a parallel group waiting on its interconnect? The signals and the test of ``parallel/communication_bound``.

Why its own evidence and not "TP > 1": a tensor-parallel group all-reduces twice per layer per
step, so every TP engine talks over its links; it is *bound* by them only when the link runs near
its capacity (or a profile shows the kernels spending their time in collectives) while the SMs of
the group wait. The same layout on NVLink, with room on the link, is not. What a link can carry
comes from the GPU (``llm_gpu_pcie_link_bandwidth_bytes_per_second``,
``llm_gpu_nvlink_bandwidth_bytes_per_second``: exporter/gpu/fields.py), what it carries from the
PCIe and NVLink counters.

Why the shape of the PCIe traffic matters: the same PCIe counters count host<->device copies
(``hardware/pcie_transfer_bound``) and the collectives of a group without NVLink. A collective moves
as much out of each GPU as into it (a ring all-reduce sends 2(n-1)/n of the buffer to the next rank
and receives as much from the previous one) and the same on every rank; host copies run one way
(weights or KV in, KV offloaded out). So a group's PCIe traffic counts as collective only where
every rank's transmit and receive are within ``communication_balance_min`` of each other and of the
other ranks', in a group of two or more GPUs of an engine not known to run TP 1; and the two causes
exclude each other by that test (``host_copies``): ``pcie_transfer_bound`` holds only on a GPU whose
PCIe traffic is not collective, and ``communication_bound`` never on a group where such a GPU moves
bulk data. docs/diagnosis.md, "parallel", says the same with the figures.
"""

from __future__ import annotations

from collections.abc import Mapping

from exporter.diagnosis.finite import mean, ratio
from exporter.diagnosis.thresholds import Thresholds
from exporter.gpu.fields import NVLINK_CAPACITY, PCIE_CAPACITY, pcie_capacity
from exporter.schema import reduce_series, reduced_name
from exporter.store import Snapshot

View = Mapping[str, float]

#: signals.GROUP_GPUS, signals.GROUP_SM_MEAN and signals.UTIL_MAX (named here: signals imports this module)
GROUP_GPUS = "llm_parallel_group_gpus"
GROUP_SM_MEAN = "avg(llm_gpu_sm_active_ratio)"
UTIL_MAX = reduced_name("llm_gpu_utilization_ratio")

SETTING_METRIC = "llm_engine_setting"
SHARE_METRIC = "llm_operator_time_share"
#: the families this module reads beyond the llm_gpu_ ones (the diagnosis window keeps them)
READS: frozenset[str] = frozenset({SHARE_METRIC})

# --- service: the engine's layout and its last profile -------------------------------------
TP = reduced_name(SETTING_METRIC, '{setting="tensor_parallel_size"}')
PP = reduced_name(SETTING_METRIC, '{setting="pipeline_parallel_size"}')
#: the share of the last on-demand profile's GPU kernel time spent in collectives (exporter/profile)
COMM_SHARE = reduced_name(SHARE_METRIC, '{kind="communication"}')

# --- group: the link that carries the group's traffic, against what it can carry -----------
#: 1 when NVLink carries more of the group's bytes than PCIe, 0 when PCIe does
ON_NVLINK = "interconnect_nvlink"
#: per GPU, the busier direction of that link (bytes/s), averaged over the group's GPUs
TRAFFIC = "interconnect_bytes_per_second_per_gpu"
#: that link's capacity per direction on the group's tightest GPU (bytes/s)
CAPACITY = "interconnect_capacity_bytes_per_second"
#: TRAFFIC / CAPACITY
USE = "interconnect_use_ratio"
#: the PCIe generation and lanes, or the active NVLinks, of the GPU whose capacity is CAPACITY
PCIE_GEN = reduced_name("llm_gpu_pcie_link_generation")
PCIE_WIDTH = reduced_name("llm_gpu_pcie_link_width")
NVLINK_LINKS = reduced_name("llm_gpu_nvlink_links_active")

# --- group, and per GPU for the GPU-scoped pcie_transfer_bound: the shape of the PCIe traffic ---
#: the lowest over the group's GPUs of min(transmit, receive) / max(transmit, receive) on PCIe
SYMMETRY = "pcie_transmit_receive_symmetry_ratio"
#: the least PCIe traffic (transmit + receive) of a GPU of the group over the most
BALANCE = "pcie_rank_balance_ratio"
#: the most PCIe traffic (transmit + receive) of a GPU of the group, bytes/s
PCIE_MAX = "max(llm_gpu_pcie_transmit_bytes_per_second + llm_gpu_pcie_receive_bytes_per_second)"

EVIDENCE: tuple[str, ...] = (
    USE,
    TRAFFIC,
    CAPACITY,
    COMM_SHARE,
    GROUP_SM_MEAN,
    GROUP_GPUS,
    TP,
    PP,
    PCIE_GEN,
    PCIE_WIDTH,
    NVLINK_LINKS,
    SYMMETRY,
    BALANCE,
    PCIE_MAX,
)

_LINKS = {
    "pcie": ("llm_gpu_pcie_transmit_bytes_per_second", "llm_gpu_pcie_receive_bytes_per_second"),
    "nvlink": ("llm_gpu_nvlink_transmit_bytes_per_second", "llm_gpu_nvlink_receive_bytes_per_second"),
}


def link_signals(
    snap: Snapshot,
    scopes: dict[str, dict[str, dict[str, float]]],
    groups: Mapping[str, list[str]],
) -> None:
    """Add the layout (service), each group's link figures and PCIe shape (group), and that shape to
    every member GPU (gpu scope), to ``scopes`` (``signals.compute``'s scopes, filled before)."""
    service = scopes["service"].setdefault("", {})
    for key, setting in ((TP, "tensor_parallel_size"), (PP, "pipeline_parallel_size")):
        _put(service, key, reduce_series(SETTING_METRIC, snap.values(SETTING_METRIC, setting=setting)))
    _put(service, COMM_SHARE, reduce_series(SHARE_METRIC, snap.values(SHARE_METRIC, kind="communication")))
    gpus = scopes["gpu"]
    for name, members in groups.items():
        live = [g for g in members if g in gpus]
        if len(live) < 2:
            continue
        v = scopes["group"].setdefault(name, {})
        v.update(_link(snap, live))
        shape = _pcie_shape(snap, live)
        v.update(shape)
        for g in live:
            for key, x in {**shape, GROUP_GPUS: float(len(live))}.items():
                gpus[g].setdefault(key, x)  # a GPU of two configured groups keeps the first one's


def _pair(snap: Snapshot, link: str, gpu: str) -> tuple[float, float] | None:
    tx, rx = (snap.total(n, gpu=gpu) for n in _LINKS[link])
    return None if tx is None or rx is None else (tx, rx)


def _link(snap: Snapshot, members: list[str]) -> dict[str, float]:
    """The link carrying the group's bytes, its traffic per GPU and its capacity (absent: unknown)."""
    pairs = {link: [p for g in members if (p := _pair(snap, link, g)) is not None] for link in _LINKS}
    moved = {link: sum(tx + rx for tx, rx in found) for link, found in pairs.items() if found}
    if not moved:
        return {}
    link = "nvlink" if moved.get("nvlink", 0.0) > moved.get("pcie", 0.0) else "pcie"
    out = {ON_NVLINK: 1.0 if link == "nvlink" else 0.0}
    if len(pairs[link]) < len(members):  # a rank without counters: the group's traffic is not known
        return out
    busier = {g: max(p) for g in members if (p := _pair(snap, link, g)) is not None}
    traffic = mean(list(busier.values()))
    if traffic is None:
        return out
    out[TRAFFIC] = traffic
    tightest: tuple[float, str] | None = None
    for g, moving in busier.items():
        cap = _capacity(snap, link, g, moving)
        if cap is None:
            return out  # one rank's capacity unknown: so is the group's
        if tightest is None or cap < tightest[0]:
            tightest = (cap, g)
    assert tightest is not None
    cap, g = tightest
    out[CAPACITY] = cap
    _put(out, USE, ratio(traffic, cap))
    if link == "nvlink":
        _put(out, NVLINK_LINKS, snap.maximum("llm_gpu_nvlink_links_active", gpu=g))
    else:
        gen, width = _pcie_link(snap, g, busier[g])
        _put(out, PCIE_GEN, gen)
        _put(out, PCIE_WIDTH, width)
    return out


def _pcie_link(snap: Snapshot, gpu: str, moving: float) -> tuple[float | None, float | None]:
    """The PCIe generation and width the capacity was taken at: the current ones, or the maximum ones
    where the current link cannot have carried what moved (see ``_capacity``)."""
    gen = snap.maximum("llm_gpu_pcie_link_generation", gpu=gpu)
    width = snap.maximum("llm_gpu_pcie_link_width", gpu=gpu)
    now = pcie_capacity(gen, width)
    if now is not None and moving <= now:
        return gen, width
    return snap.maximum("llm_gpu_pcie_link_max_generation", gpu=gpu), snap.maximum("llm_gpu_pcie_link_max_width", gpu=gpu)


def _capacity(snap: Snapshot, link: str, gpu: str, moving: float) -> float | None:
    """A GPU's per-direction capacity on ``link``. An idle GPU trains its PCIe link down (Gen1 to save
    power) and back up under load between two reads: where the busier direction moved more than the
    current link carries, the reading is from before the link came back up, and the capacity at the
    maximum generation and width is the one that carried it."""
    if link == "nvlink":
        return snap.maximum(NVLINK_CAPACITY, gpu=gpu)
    now = snap.maximum(PCIE_CAPACITY, gpu=gpu)
    if now is not None and moving <= now:
        return now
    best = pcie_capacity(
        snap.maximum("llm_gpu_pcie_link_max_generation", gpu=gpu), snap.maximum("llm_gpu_pcie_link_max_width", gpu=gpu)
    )
    return best if best is not None else now


def _moved(snap: Snapshot, gpu: str) -> float | None:
    """A GPU's PCIe transmit + receive, a missing direction read as 0 (None: neither reported)."""
    tx, rx = (snap.total(n, gpu=gpu) for n in _LINKS["pcie"])
    return None if tx is None and rx is None else (tx or 0.0) + (rx or 0.0)


def _pcie_shape(snap: Snapshot, members: list[str]) -> dict[str, float]:
    """The most PCIe traffic of a GPU of the group (as ``signals.PCIE`` adds it: one direction
    missing reads 0), and how alike each GPU's transmit and receive are and the GPUs' traffic: those
    two absent where a GPU misses a direction (the shape of a group is not told from part of it)."""
    out: dict[str, float] = {}
    moved = [m for g in members if (m := _moved(snap, g)) is not None]
    if moved:
        out[PCIE_MAX] = max(moved)
    pairs = [p for g in members if (p := _pair(snap, "pcie", g)) is not None]
    totals = [tx + rx for tx, rx in pairs]
    if len(pairs) < len(members) or not max(totals) > 0:
        return out
    _put(out, BALANCE, ratio(min(totals), max(totals)))
    symmetry = [ratio(min(p), max(p)) if max(p) > 0 else 0.0 for p in pairs]
    if None not in symmetry:
        out[SYMMETRY] = min(x for x in symmetry if x is not None)
    return out


# ------------------------------------------------------------------ the tests the rules apply


def layout_parallel(v: View) -> bool:
    """Two or more GPUs, in an engine not known to run tensor parallel 1."""
    return v.get(GROUP_GPUS, 0.0) >= 2 and v.get(TP, 2.0) >= 2


def collective_pcie(v: View, t: Thresholds) -> bool:
    """The group's PCIe traffic has the shape of collectives: every GPU moves about as much out as in,
    and about as much as the others (both within ``communication_balance_min``)."""
    return (
        layout_parallel(v)
        and v.get(SYMMETRY, 0.0) >= t.communication_balance_min
        and v.get(BALANCE, 0.0) >= t.communication_balance_min
    )


def host_copies(v: View, t: Thresholds) -> bool:
    """Some GPU of the group moves bulk data over PCIe (``pcie_busy_bytes_per_second``) that is not
    a collective's: host<->device copies, ``pcie_transfer_bound``'s evidence."""
    return v.get(PCIE_MAX, 0.0) >= t.pcie_busy_bytes_per_second and not collective_pcie(v, t)


def sms_wait(v: View, t: Thresholds) -> bool:
    return v[GROUP_SM_MEAN] < t.communication_sm_active_max


def by_link(v: View, t: Thresholds) -> bool:
    """The carrying link near its capacity: NVLink, or PCIe whose traffic is the group's collectives."""
    return v.get(USE, 0.0) >= t.communication_link_use and (v.get(ON_NVLINK) == 1.0 or collective_pcie(v, t))


def by_profile(v: View, t: Thresholds) -> bool:
    """The last profile spent ``communication_time_share`` of the GPU time in collectives, and the GPUs
    run kernels now ("GPU util" busy: a profile of yesterday says nothing of an idle group)."""
    return v.get(COMM_SHARE, 0.0) >= t.communication_time_share and v.get(UTIL_MAX, 0.0) >= t.busy_utilization


def communication_bound(v: View, t: Thresholds) -> bool:
    return layout_parallel(v) and sms_wait(v, t) and not host_copies(v, t) and (by_link(v, t) or by_profile(v, t))


def layout(v: View) -> str:
    """ "TP 4", "TP 4 x PP 2", or "4 GPUs" where the engine does not say its tensor-parallel size."""
    if TP not in v:
        return f"{v.get(GROUP_GPUS, 0.0):.0f} GPUs"
    pp = f" x PP {v[PP]:.0f}" if v.get(PP, 1.0) > 1 else ""
    return f"TP {v[TP]:.0f}{pp}"


def pipeline_notice(v: View) -> list[str]:
    """Pipeline bubbles (stages idle while they wait for the one before) need per-stage figures that no
    mapped engine publishes (exporter/engines/mappings: SGLang's pp_rank series are collapsed, vLLM,
    TGI, trtllm-serve and llama.cpp have none): said once, where the engine runs more than one stage."""
    if v.get(PP, 1.0) <= 1:
        return []
    return [
        f"pipeline_parallel_size {v[PP]:.0f}: pipeline bubbles (stages waiting on each other) cannot be judged, no "
        "engine publishes per-stage timings; communication_bound judges the links and the collectives only"
    ]


def _put(d: dict[str, float], key: str, value: float | None) -> None:
    if value is not None:
        d[key] = value
