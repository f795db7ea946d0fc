"""Turn one GPU *reading* into schema points: the one place GPU units are decoded.

A reading is a flat mapping whose keys are the column names of the replay CSV
(see ``exporter/gpu/replay.py`` and docs/gpu-sources.md), in the units NVML
speaks: percent, MiB, MHz, W, mJ, a clocks-event bitmask, and the links' PCIe
generation and lane count and active NVLink count and generation. Every GPU source
(replay, sim, nvml, dcgm) builds one reading per GPU and hands it to
:func:`reading_points`.

Why one shape: the conversions (percent -> 0-1 ratio, MiB -> bytes, MHz -> Hz,
bitmask -> one 0/1 series per reason) and the rule "a missing value means the
metric is absent, never 0" live here once, so a trace recorded from NVML
replays exactly like the live source and a DCGM field cannot drift from its
NVML twin.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from exporter.samples import Sample
from exporter.schema import THROTTLE_REASON_BITS

MIB = 1024 * 1024
MHZ = 1_000_000.0

#: Reading keys that are text, not numbers.
NAME_KEY = "gpu_name"
UUID_KEY = "uuid"
#: Reading key of the clocks-event (throttle) bitmask: an int, or text such as "0x4".
THROTTLE_KEY = "throttle_reasons"
#: Keys that only profiling (GPM or DCGM DCP) can provide.
PROFILING_KEYS: tuple[str, ...] = ("sm_util", "sm_occupancy", "tensor_util", "dram_bw_util")


@dataclass(frozen=True)
class Column:
    """One numeric reading key, the metric it feeds and how to reach base units."""

    key: str
    metric: str
    #: base unit = value * multiply / divide (two factors so that MHz -> Hz and
    #: MiB -> bytes stay exact integers instead of dividing by 1e-6)
    multiply: float = 1.0
    divide: float = 1.0


#: Every numeric reading key the exporter understands, in exposition order.
COLUMNS: tuple[Column, ...] = (
    Column("nvml_gpu_util", "llm_gpu_utilization_ratio", divide=100.0),
    Column("nvml_mem_util", "llm_gpu_memory_utilization_ratio", divide=100.0),
    Column("sm_util", "llm_gpu_sm_active_ratio", divide=100.0),
    Column("sm_occupancy", "llm_gpu_sm_occupancy_ratio", divide=100.0),
    Column("tensor_util", "llm_gpu_tensor_active_ratio", divide=100.0),
    Column("dram_bw_util", "llm_gpu_dram_active_ratio", divide=100.0),
    Column("fb_used_mib", "llm_gpu_memory_used_bytes", multiply=MIB),
    Column("fb_total_mib", "llm_gpu_memory_total_bytes", multiply=MIB),
    Column("power_w", "llm_gpu_power_watts"),
    Column("power_limit_w", "llm_gpu_power_limit_watts"),
    Column("sm_clock_mhz", "llm_gpu_sm_clock_hertz", multiply=MHZ),
    Column("sm_clock_max_mhz", "llm_gpu_sm_clock_max_hertz", multiply=MHZ),
    Column("mem_clock_mhz", "llm_gpu_memory_clock_hertz", multiply=MHZ),
    Column("pcie_tx_mib_s", "llm_gpu_pcie_transmit_bytes_per_second", multiply=MIB),
    Column("pcie_rx_mib_s", "llm_gpu_pcie_receive_bytes_per_second", multiply=MIB),
    Column("nvlink_tx_mib_s", "llm_gpu_nvlink_transmit_bytes_per_second", multiply=MIB),
    Column("nvlink_rx_mib_s", "llm_gpu_nvlink_receive_bytes_per_second", multiply=MIB),
    Column("temp_c", "llm_gpu_temperature_celsius"),
    Column("energy_mj", "llm_gpu_energy_joules_total", divide=1000.0),
    # the links themselves (pcie_capacity / nvlink_capacity below turn them into per-direction capacities)
    Column("pcie_link_gen", "llm_gpu_pcie_link_generation"),
    Column("pcie_link_width", "llm_gpu_pcie_link_width"),
    Column("pcie_link_gen_max", "llm_gpu_pcie_link_max_generation"),
    Column("pcie_link_width_max", "llm_gpu_pcie_link_max_width"),
    Column("nvlink_links", "llm_gpu_nvlink_links_active"),
    Column("nvlink_version", "llm_gpu_nvlink_version"),
)
NUMERIC_KEYS: frozenset[str] = frozenset(c.key for c in COLUMNS)

GB = 1e9
#: PCIe data rate per lane and direction after line encoding, bytes/s, by generation: the transfer
#: rate (GT/s) x the encoding's payload share / 8 bits. Gen1/2: 2.5 / 5 GT/s with 8b/10b (0.25, 0.5
#: GB/s); Gen3/4/5: 8 / 16 / 32 GT/s with 128b/130b (0.985, 1.969, 3.938 GB/s); Gen6: 64 GT/s in
#: 256-byte FLITs of which 242 carry TLP and DLLP bytes, the rest CRC and FEC (7.563 GB/s). Packet headers are not taken
#: out: the PCIe counters (DCGM 1009/1010, GPM) count header and payload too, so a saturated link
#: reads close to this (the recorded H200 host-to-device copy: 58 GB/s of Gen5 x16's 63.0).
PCIE_LANE_BYTES_PER_SECOND: dict[int, float] = {
    1: 2.5 * GB * 8 / 10 / 8,
    2: 5.0 * GB * 8 / 10 / 8,
    3: 8.0 * GB * 128 / 130 / 8,
    4: 16.0 * GB * 128 / 130 / 8,
    5: 32.0 * GB * 128 / 130 / 8,
    6: 64.0 * GB * 242 / 256 / 8,
}
#: NVLink data rate per link and direction, bytes/s, by NVLink generation: NVLink 1 (P100) 20 GB/s;
#: NVLink 2 (V100, Turing), 3 (A100) and 4 (H100, H200) 25 GB/s (NVLink 3 doubled the lane rate and
#: halved the lanes per link; NVLink 4 keeps 25 GB/s per link and adds links: 18 x 25 = 450 GB/s per
#: direction, NVIDIA's "900 GB/s" counts both); NVLink 5 (B200, GB200) 50 GB/s (18 x 50 = 900 per
#: direction). Not in the table (NVLink 6 and later): the capacity is absent, never guessed. GA102
#: boards (RTX 3090, A40, A6000) run NVLink 3 at 14.06 GB/s per link: their capacity reads high.
NVLINK_LINK_BYTES_PER_SECOND: dict[int, float] = {1: 20 * GB, 2: 25 * GB, 3: 25 * GB, 4: 25 * GB, 5: 50 * GB}
PCIE_CAPACITY = "llm_gpu_pcie_link_bandwidth_bytes_per_second"
NVLINK_CAPACITY = "llm_gpu_nvlink_bandwidth_bytes_per_second"


def pcie_capacity(generation: float | None, width: float | None) -> float | None:
    """Per-direction capacity (bytes/s) of a PCIe link of ``generation`` and ``width`` lanes; None when
    either is unknown, the generation is not in the table, or the width is not a lane count."""
    if generation is None or width is None or not float(generation).is_integer() or width <= 0:
        return None
    lane = PCIE_LANE_BYTES_PER_SECOND.get(int(generation))
    return None if lane is None else lane * width


def nvlink_capacity(links: float | None, generation: float | None) -> float | None:
    """Per-direction capacity (bytes/s) of ``links`` active NVLinks of ``generation``; None without an
    active link (no NVLink carries anything) or for a generation not in the table."""
    if links is None or generation is None or links <= 0 or not float(generation).is_integer():
        return None
    per_link = NVLINK_LINK_BYTES_PER_SECOND.get(int(generation))
    return None if per_link is None else per_link * links


#: profiling reading key -> the metric it feeds (the ``metric`` label of llm_gpu_profiling_metric_available)
PROFILING_METRICS: dict[str, str] = {c.key: c.metric for c in COLUMNS if c.key in PROFILING_KEYS}


def to_base_unit(value: float, col: Column) -> float:
    """``value`` (reading unit) in the metric's base unit.

    Divisions go through Decimal on the shortest repr, so 93.15 % becomes
    0.9315 rather than 0.9315000000000001 (exact to the digits the source gave).
    """
    if col.divide == 1.0:
        return value * col.multiply
    return float(Decimal(repr(value)) * Decimal(repr(col.multiply)) / Decimal(repr(col.divide)))


class ReadingError(ValueError):
    """A reading value that is neither absent nor a number of the expected kind."""


def parse_number(key: str, value: object) -> float | None:
    """A float, or None when absent (None, empty text, NaN); ReadingError otherwise."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ReadingError(f"{key}: expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        f = float(value)
    elif isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            f = float(text)
        except ValueError:
            raise ReadingError(f"{key}: expected a number, got {value!r}") from None
    else:
        raise ReadingError(f"{key}: expected a number, got {type(value).__name__}")
    if math.isnan(f):
        return None
    if math.isinf(f):
        raise ReadingError(f"{key}: expected a finite number, got {value!r}")
    return f


def parse_bitmask(key: str, value: object) -> int | None:
    """An int bitmask from an int or text ("0x4", "4"); None when absent."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ReadingError(f"{key}: expected a bitmask, got {value!r}")
    if isinstance(value, int):
        mask = value
    elif isinstance(value, float) and value.is_integer():
        mask = int(value)
    elif isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        try:
            mask = int(text, 0)
        except ValueError:
            raise ReadingError(f"{key}: expected a bitmask such as 0x4, got {value!r}") from None
    else:
        raise ReadingError(f"{key}: expected a bitmask such as 0x4, got {value!r}")
    if mask < 0:
        raise ReadingError(f"{key}: expected a non-negative bitmask, got {value!r}")
    return mask


def normalise(raw: Mapping[str, object]) -> dict[str, float | int | str]:
    """Validate a raw reading (CSV cells, JSON values or library numbers).

    Keeps only known keys with a value: absent stays absent. Raises
    ReadingError naming the first bad key.
    """
    out: dict[str, float | int | str] = {}
    for key, value in raw.items():
        if key in NUMERIC_KEYS:
            num = parse_number(key, value)
            if num is not None:
                out[key] = num
        elif key == THROTTLE_KEY:
            mask = parse_bitmask(key, value)
            if mask is not None:
                out[key] = mask
        elif key in (NAME_KEY, UUID_KEY):
            if value is not None:
                if not isinstance(value, str):
                    raise ReadingError(f"{key}: expected text, got {type(value).__name__}")
                out[key] = value.strip()
    return out


def throttle_points(mask: int, labels: Mapping[str, str]) -> list[Sample]:
    """One 0/1 point per known clocks-event reason; unknown bits are dropped."""
    return [
        Sample("llm_gpu_throttle_reason_active", {**labels, "reason": reason}, 1.0 if mask & bit else 0.0)
        for bit, reason in THROTTLE_REASON_BITS.items()
    ]


def reading_points(
    index: int,
    raw: Mapping[str, object],
    source: str,
    *,
    up: bool = True,
    profiling: bool | None = None,
) -> list[Sample]:
    """Schema points of one GPU.

    ``source`` names the reader in ``llm_gpu_info{source}`` (nvml, dcgm, replay,
    sim). ``up=False`` (GPU lost) yields only info and ``llm_gpu_up 0``.
    ``profiling`` says whether SM/tensor/DRAM activity can be read; None infers
    it from the presence of any profiling key (replay, sim).
    """
    values = normalise(raw)
    uuid = str(values.get(UUID_KEY, ""))
    labels = {"gpu": str(index), "uuid": uuid}
    points = [
        Sample("llm_gpu_info", {**labels, "name": str(values.get(NAME_KEY, "")), "source": source}, 1.0),
        Sample("llm_gpu_up", labels, 1.0 if up else 0.0),
    ]
    if not up:
        return points
    # per metric: a source that knows (NVML GPM, a DCGM watch) says for all four; the others
    # (replay, sim, dcgm-exporter) carry what their input lists
    readable = {k: (k in values) if profiling is None else profiling for k in PROFILING_KEYS}
    if profiling is None:
        profiling = any(readable.values())
    points.append(Sample("llm_gpu_profiling_available", labels, 1.0 if profiling else 0.0))
    for key, metric in PROFILING_METRICS.items():
        points.append(Sample("llm_gpu_profiling_metric_available", {**labels, "metric": metric}, float(readable[key])))
    for col in COLUMNS:
        v = values.get(col.key)
        if v is not None:
            points.append(Sample(col.metric, labels, to_base_unit(float(v), col)))
    for metric, capacity in (
        (PCIE_CAPACITY, pcie_capacity(_num(values, "pcie_link_gen"), _num(values, "pcie_link_width"))),
        (NVLINK_CAPACITY, nvlink_capacity(_num(values, "nvlink_links"), _num(values, "nvlink_version"))),
    ):
        if capacity is not None:
            points.append(Sample(metric, labels, capacity))
    mask = values.get(THROTTLE_KEY)
    if isinstance(mask, int):
        points.extend(throttle_points(mask, labels))
    return points


def _num(values: Mapping[str, float | int | str], key: str) -> float | None:
    v = values.get(key)
    return float(v) if isinstance(v, (int, float)) else None
