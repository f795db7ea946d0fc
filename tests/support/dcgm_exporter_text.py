"""What NVIDIA's dcgm-exporter serves, rendered from GPU readings (the replay CSV keys and units).

The shape follows dcgm-exporter's renderer as documented (docs/gpu-sources.md): one family per
collectors-CSV line, named after the DCGM field, ``# HELP`` and ``# TYPE`` from the CSV, and per
GPU the labels ``gpu``, ``UUID``, (4.x) ``pci_bus_id``, ``device``, ``modelName``, ``Hostname``
and, with Kubernetes mapping on, ``container``/``namespace``/``pod``. Units are DCGM's: percent for
``GPU_UTIL``/``MEM_COPY_UTIL``, ratios 0-1 for the DCP (``PROF``) fields, bytes/s for the PCIe and
NVLink ``PROF`` bytes, MiB for the framebuffer (used + free + reserved = total), W, MHz, mJ.

Field sets:

- ``default``: the lines ``etc/default-counters.csv`` leaves uncommented (no SM active, no SM
  occupancy, no throttle reasons, no power limit, no maximum clock; an unsupported
  ``DCGM_FI_DEV_MEMORY_TEMP`` served as DCGM's blank sentinel, as its README shows);
- ``full``: ``default`` plus the lines docs/gpu-sources.md asks operators to add.

Naming: ``3.x`` and ``4.x`` are dcgm-exporter's releases (both name metrics after the DCGM <= 4.5
constants; the throttle field is ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`` in 3.x and
``DCGM_FI_DEV_CLOCKS_EVENT_REASONS`` in 4.x); ``dcgm-4.6`` is a collectors CSV written with the
constants DCGM 4.6 renamed (``DCGM_FI_PROF_SM_UTIL_RATIO``, ``DCGM_FI_DEV_BOARD_POWER_WATTS``, ...).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal

Flavour = Literal["3.x", "4.x", "dcgm-4.6"]
FieldSet = Literal["default", "full"]

MIB = 1024 * 1024
#: DCGM_INT64_NOT_SUPPORTED, as dcgm-exporter's README shows it leaking into Prometheus
INT64_NOT_SUPPORTED = 9223372036854775794
RESERVED_MIB = 512.0


@dataclass(frozen=True)
class Line:
    """One collectors-CSV line: the reading key it renders, its names, type, help and unit factor."""

    key: str
    old: str
    new: str
    kind: str
    help: str
    #: reading unit -> DCGM unit: value * multiply / divide
    multiply: float = 1.0
    divide: float = 1.0
    default: bool = True


LINES: tuple[Line, ...] = (
    Line("sm_clock_mhz", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    Line("mem_clock_mhz", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    Line("temp_c", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS", "gauge", "GPU temperature (in C)."),
    Line("power_w", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS", "gauge", "Power draw (in W)."),
    Line(
        "energy_mj",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
    ),
    Line("nvml_gpu_util", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO", "gauge", "GPU utilization (in %)."),
    Line("nvml_mem_util", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    Line("fb_used_mib", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    Line(
        "tensor_util",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_TENSOR_UTIL_RATIO",
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        divide=100.0,
    ),
    Line(
        "dram_bw_util",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_DRAM_UTIL_RATIO",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        divide=100.0,
    ),
    Line(
        "pcie_tx_mib_s",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
        multiply=MIB,
    ),
    Line(
        "pcie_rx_mib_s",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
        multiply=MIB,
    ),
    # the lines docs/gpu-sources.md asks to add
    Line(
        "sm_util",
        "DCGM_FI_PROF_SM_ACTIVE",
        "DCGM_FI_PROF_SM_UTIL_RATIO",
        "gauge",
        "The ratio of cycles an SM has at least 1 warp assigned.",
        divide=100.0,
        default=False,
    ),
    Line(
        "sm_occupancy",
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "DCGM_FI_PROF_SM_OCCUPANCY_RATIO",
        "gauge",
        "The ratio of number of warps resident on an SM.",
        divide=100.0,
        default=False,
    ),
    Line(
        "power_limit_w",
        "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
        "DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS",
        "gauge",
        "Effective power limit (in W).",
        default=False,
    ),
    Line(
        "sm_clock_max_mhz",
        "DCGM_FI_DEV_MAX_SM_CLOCK",
        "DCGM_FI_DEV_MAX_SM_CLOCK",
        "gauge",
        "Maximum SM clock (in MHz).",
        default=False,
    ),
    Line(
        "nvlink_tx_mib_s",
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "gauge",
        "The rate of data transmitted over NVLink, not including protocol headers, in bytes per second.",
        multiply=MIB,
        default=False,
    ),
    Line(
        "nvlink_rx_mib_s",
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "gauge",
        "The rate of data received over NVLink, not including protocol headers, in bytes per second.",
        multiply=MIB,
        default=False,
    ),
)


@dataclass
class GpuRow:
    """One GPU of one answer: its reading and what dcgm-exporter labels it with."""

    reading: Mapping[str, object]
    index: int = 0
    #: (namespace, pod, container) the GPU is allocated to; None: no pod (labels served empty)
    pod: tuple[str, str, str] | None = None
    #: extra series of a MIG instance of this GPU (GPU_I_ID label) with these readings
    mig: list[Mapping[str, object]] = field(default_factory=list)


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _convert(value: float, line: Line) -> str:
    if line.divide != 1.0:
        return str(Decimal(repr(float(value))) / Decimal(repr(line.divide)))
    return _fmt(float(value) * line.multiply)


def _labels(row: GpuRow, flavour: Flavour, kubernetes: bool, mig: int | None = None) -> str:
    r = row.reading
    pairs = [("gpu", str(row.index)), ("UUID", str(r.get("uuid", "")))]
    if flavour != "3.x":
        pairs.append(("pci_bus_id", f"00000000:{0x19 + row.index:02X}:00.0"))
    pairs += [("device", f"nvidia{row.index}"), ("modelName", str(r.get("gpu_name", ""))), ("Hostname", "gpu-node-1")]
    if mig is not None:
        pairs += [("GPU_I_PROFILE", "1g.18gb"), ("GPU_I_ID", str(mig))]
    if kubernetes:
        ns, pod, container = row.pod or ("", "", "")
        pairs += [("container", container), ("namespace", ns), ("pod", pod)]
    return ",".join(f'{k}="{v}"' for k, v in pairs)


def render(rows: Sequence[GpuRow], flavour: Flavour = "4.x", fields: FieldSet = "full", kubernetes: bool = True) -> str:
    """The text dcgm-exporter serves for ``rows`` (absent reading keys are not served)."""
    out: list[str] = []
    throttle = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" if flavour == "3.x" else "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"
    families: list[tuple[str, str, str, list[str]]] = []
    for line in LINES:
        if fields == "default" and not line.default:
            continue
        name = line.new if flavour == "dcgm-4.6" else line.old
        samples = []
        for row in rows:
            value = row.reading.get(line.key)
            if value not in (None, ""):
                samples.append(f"{name}{{{_labels(row, flavour, kubernetes)}}} {_convert(float(value), line)}")  # type: ignore[arg-type]
            for i, mig in enumerate(row.mig):
                v = mig.get(line.key)
                if v not in (None, ""):
                    samples.append(f"{name}{{{_labels(row, flavour, kubernetes, i + 1)}}} {_convert(float(v), line)}")  # type: ignore[arg-type]
        families.append((name, line.kind, line.help, samples))
    free, reserved, blank = [], [], []
    for row in rows:
        labels = _labels(row, flavour, kubernetes)
        used, total = row.reading.get("fb_used_mib"), row.reading.get("fb_total_mib")
        if used not in (None, "") and total not in (None, ""):
            free.append(f"DCGM_FI_DEV_FB_FREE{{{labels}}} {_fmt(float(total) - float(used) - RESERVED_MIB)}")  # type: ignore[arg-type]
            reserved.append(f"DCGM_FI_DEV_FB_RESERVED{{{labels}}} {_fmt(RESERVED_MIB)}")
        blank.append(f"DCGM_FI_DEV_MEMORY_TEMP{{{labels}}} {INT64_NOT_SUPPORTED}")
    families += [
        ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", free),
        ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", reserved),
        ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", blank),
    ]
    if fields == "full":
        masks = []
        for row in rows:
            mask = row.reading.get("throttle_reasons")
            if mask not in (None, ""):
                masks.append(f"{throttle}{{{_labels(row, flavour, kubernetes)}}} {int(str(mask), 0)}")
        families.append((throttle, "gauge", "Current clock event reasons.", masks))
    for name, kind, text, samples in families:
        out += [f"# HELP {name} {text}", f"# TYPE {name} {kind}", *samples]
    return "\n".join(out) + "\n"
