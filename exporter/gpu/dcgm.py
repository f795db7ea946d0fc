"""``dcgm`` / ``dcgm:HOST[:PORT]``: GPU telemetry through DCGM's Python bindings.

Why DCGM first: where it runs it already samples profiling fields (SM, tensor,
DRAM activity) for every GPU generation it supports, and a shared
``nv-hostengine`` lets us sit beside dcgm-exporter instead of starting a
second profiler.

The bindings (``pydcgm``, ``dcgm_fields``, ``dcgm_structs``) ship with DCGM,
not on PyPI. They are imported only when this source is selected, from
``sys.path`` plus :data:`DEFAULT_BINDING_PATHS`. ``dcgm`` starts an embedded
host engine; ``dcgm:HOST[:PORT]`` connects to a standalone ``nv-hostengine``
(default port 5555).

Fields are keyed by numeric id because DCGM 4.6 renamed the symbolic
constants (ids unchanged; docs/reference/hardware-metrics.md).
:func:`reading_from_dcgm` is pure: it turns ``{field_id: value}`` into a
reading (replay CSV keys and units), dropping DCGM's blank sentinels, so it is
tested without DCGM. The code that talks to DCGM stays thin.

Faults: bindings missing, no GPU or the host engine unreachable ->
``SourceError("dcgm_unavailable")`` (``connection`` once a connection drops);
the next sample tries again, so installing DCGM or starting nv-hostengine
clears the fault.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from exporter.gpu.fields import MIB, reading_points
from exporter.samples import Point, SampleResult, SourceError

log = logging.getLogger(__name__)

DEFAULT_BINDING_PATHS: tuple[str, ...] = (
    "/usr/share/datacenter-gpu-manager-4/bindings/python3",
    "/usr/local/dcgm/bindings/python3",
)

#: field id -> (reading key, factor from DCGM's unit to the reading's unit).
DCGM_FIELDS: dict[int, tuple[str, float]] = {
    203: ("nvml_gpu_util", 1.0),  # percent
    204: ("nvml_mem_util", 1.0),  # percent
    1002: ("sm_util", 100.0),  # ratio -> percent
    1003: ("sm_occupancy", 100.0),
    1004: ("tensor_util", 100.0),
    1005: ("dram_bw_util", 100.0),
    252: ("fb_used_mib", 1.0),
    250: ("fb_total_mib", 1.0),
    155: ("power_w", 1.0),
    164: ("power_limit_w", 1.0),
    100: ("sm_clock_mhz", 1.0),
    101: ("mem_clock_mhz", 1.0),
    113: ("sm_clock_max_mhz", 1.0),
    150: ("temp_c", 1.0),
    1009: ("pcie_tx_mib_s", 1.0 / MIB),  # bytes/s -> MiB/s
    1010: ("pcie_rx_mib_s", 1.0 / MIB),
    1011: ("nvlink_tx_mib_s", 1.0 / MIB),
    1012: ("nvlink_rx_mib_s", 1.0 / MIB),
    156: ("energy_mj", 1.0),
    # the PCIe link (DCGM_FI_DEV_PCIE_LINK_GEN / _WIDTH, _MAX_LINK_GEN / _WIDTH); DCGM has no NVLink
    # state field (dcgmGetNvLinkLinkStatus is an API call): the NVLink capacity stays absent here
    237: ("pcie_link_gen", 1.0),
    238: ("pcie_link_width", 1.0),
    235: ("pcie_link_gen_max", 1.0),
    236: ("pcie_link_width_max", 1.0),
}
THROTTLE_FIELD = 112  # clocks-event reasons bitmask, same bits as NVML
NAME_FIELD = 50
UUID_FIELD = 54
ENERGY_FIELD = 156
#: profiling (DCP / GPM) fields: watched separately because they may be refused
PROFILING_FIELDS: tuple[int, ...] = (1002, 1003, 1004, 1005, 1009, 1010, 1011, 1012)
BASE_FIELDS: tuple[int, ...] = tuple(
    f for f in (*DCGM_FIELDS, THROTTLE_FIELD, NAME_FIELD, UUID_FIELD) if f not in PROFILING_FIELDS and f != ENERGY_FIELD
)

# Blank sentinels (dcgmvalue.py / dcgm_structs.h): BLANK, NOT_FOUND, NOT_SUPPORTED, NOT_PERMISSIONED.
DCGM_INT64_BLANK = 0x7FFFFFFFFFFFFFF0
DCGM_FP64_BLANK = 140737488355328.0
DCGM_STR_BLANK_PREFIX = "<<<"
DCGM_ST_CONNECTION_NOT_VALID = -21
DEFAULT_PORT = 5555
ENERGY_INTERVAL_S = 30.0

#: a field value as the DCGM bindings hand it over (None: never reported)
DcgmValue = int | float | str | None


def is_blank(value: object) -> bool:
    """True for DCGM's "no value" sentinels (and None), which must never reach Prometheus."""
    if value is None:
        return True
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= DCGM_INT64_BLANK
    if isinstance(value, float):
        return value != value or value >= DCGM_FP64_BLANK
    if isinstance(value, str):
        return value.startswith(DCGM_STR_BLANK_PREFIX)
    return False


def reading_from_dcgm(values: Mapping[int, DcgmValue]) -> dict[str, object]:
    """A reading (replay CSV keys and units) from one GPU's ``{field_id: value}``."""
    reading: dict[str, object] = {}
    for field_id, value in values.items():
        if value is None or is_blank(value):
            continue
        if field_id in DCGM_FIELDS:
            key, factor = DCGM_FIELDS[field_id]
            # Decimal keeps a ratio of 0.92 at 92 percent, not 92.00000000000001
            reading[key] = float(Decimal(repr(float(value))) * Decimal(repr(factor)))
        elif field_id == THROTTLE_FIELD:
            reading["throttle_reasons"] = int(value)
        elif field_id == NAME_FIELD:
            reading["gpu_name"] = str(value)
        elif field_id == UUID_FIELD:
            reading["uuid"] = str(value)
    return reading


def import_bindings(paths: tuple[str, ...] = DEFAULT_BINDING_PATHS) -> tuple[Any, Any]:
    """Import (pydcgm, dcgm_structs), adding existing binding folders to sys.path."""
    for path in paths:
        if os.path.isdir(path) and path not in sys.path:
            sys.path.append(path)
    importlib.invalidate_caches()  # DCGM may have been installed since the last attempt
    try:
        pydcgm = importlib.import_module("pydcgm")
        dcgm_structs = importlib.import_module("dcgm_structs")
        importlib.import_module("dcgm_fields")
    except ImportError as err:
        where = ", ".join(paths) or "sys.path"
        raise SourceError("dcgm_unavailable", f"DCGM Python bindings not found ({err}); looked in sys.path and {where}") from None
    return pydcgm, dcgm_structs


class _Session:
    """One connection to DCGM: handle, GPU group and watched field groups."""

    def __init__(self, pydcgm: Any, structs: Any, host: str | None, interval: float, energy_interval: float) -> None:
        self.handle = pydcgm.DcgmHandle(ipAddress=host, opMode=structs.DCGM_OPERATION_MODE_AUTO)
        try:
            system = self.handle.GetSystem()
            self.gpu_ids = list(system.discovery.GetAllSupportedGpuIds())
            if not self.gpu_ids:
                raise SourceError("dcgm_unavailable", "DCGM sees no supported GPU")
            tag = f"llm_exporter_{os.getpid()}_{id(self)}"
            self.group = system.GetGroupWithGpuIds(tag, self.gpu_ids)
            usec = max(1, int(interval * 1_000_000))
            keep = max(10.0, 4 * interval)
            self.field_groups = [self._watch(pydcgm, f"{tag}_base", BASE_FIELDS, usec, keep)]
            self.profiling = True
            try:
                self.field_groups.append(self._watch(pydcgm, f"{tag}_prof", PROFILING_FIELDS, usec, keep))
            except structs.DCGMError as err:  # not supported, needs root, module not loaded, ...
                log.info("DCGM profiling fields unavailable (%s); SM/tensor/DRAM activity absent", err)
                self.profiling = False
            energy_usec = max(usec, int(energy_interval * 1_000_000))
            self.field_groups.append(self._watch(pydcgm, f"{tag}_energy", (ENERGY_FIELD,), energy_usec, keep + energy_interval))
            self.handle.UpdateAllFields(True)  # else the first values wait for the next update cycle
        except BaseException:
            self.close()
            raise

    def _watch(self, pydcgm: Any, name: str, fields: tuple[int, ...], usec: int, keep: float) -> Any:
        fg = pydcgm.DcgmFieldGroup(self.handle, name, list(fields))
        try:
            self.group.samples.WatchFields(fg, usec, keep, 0)
        except BaseException:
            fg.Delete()
            raise
        return fg

    def latest(self) -> dict[int, dict[int, DcgmValue]]:
        """{gpu_id: {field_id: value}} of the newest non-blank value of every watched field."""
        out: dict[int, dict[int, DcgmValue]] = {gpu: {} for gpu in self.gpu_ids}
        for fg in self.field_groups:
            values = self.group.samples.GetLatest(fg).values
            for gpu_id, fields in values.items():
                for field_id, series in fields.items():
                    if len(series) and not series[-1].isBlank:
                        out.setdefault(gpu_id, {})[field_id] = series[-1].value
        return out

    def close(self) -> None:
        """Unwatch and delete what we created; errors ignored (the engine may be gone)."""
        for fg in getattr(self, "field_groups", []):
            for step in (lambda fg=fg: self.group.samples.UnwatchFields(fg), fg.Delete):
                try:
                    step()
                except Exception:
                    pass
        for step in (lambda: self.group.Delete(), self.handle.Shutdown):
            try:
                step()
            except Exception:
                pass


class DcgmSource:
    """GPU source over DCGM; connects lazily and reconnects after a fault."""

    name = "gpu"

    def __init__(
        self,
        interval: float,
        timeout: float,
        host: str | None = None,
        *,
        binding_paths: tuple[str, ...] = DEFAULT_BINDING_PATHS,
        energy_interval: float = ENERGY_INTERVAL_S,
    ) -> None:
        self.interval = interval
        self.timeout = timeout
        self.host = host
        self.binding_paths = binding_paths
        self.energy_interval = energy_interval
        self._session: _Session | None = None
        self._structs: Any = None

    def start(self) -> int:
        """Connect (no-op once connected); returns the GPU count or raises SourceError."""
        if self._session is None:
            pydcgm, structs = import_bindings(self.binding_paths)
            self._structs = structs
            try:
                self._session = _Session(pydcgm, structs, self.host, self.interval, self.energy_interval)
            except structs.DCGMError as err:
                where = f"nv-hostengine at {self.host}" if self.host else "embedded host engine"
                raise SourceError("dcgm_unavailable", f"DCGM {where}: {err}") from None
        return len(self._session.gpu_ids)

    def sample(self) -> SampleResult:
        self.start()
        assert self._session is not None
        try:
            latest = self._session.latest()
        except self._structs.DCGMError as err:
            self.close()
            lost = getattr(self._structs, "DCGM_ST_CONNECTION_NOT_VALID", DCGM_ST_CONNECTION_NOT_VALID)
            reason = "connection" if getattr(err, "value", None) == lost else "dcgm_unavailable"
            raise SourceError(reason, f"DCGM: {err}") from None
        points: list[Point] = []
        for gpu_id in sorted(latest):
            reading = reading_from_dcgm(latest[gpu_id])
            points.extend(reading_points(gpu_id, reading, "dcgm", profiling=self._session.profiling))
        return SampleResult(points)

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
