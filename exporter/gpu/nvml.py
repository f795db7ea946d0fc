"""``nvml``: GPU telemetry through nvidia-ml-py (``import pynvml``), GPM included.

Why NVML: it ships with every driver, needs no daemon and, on Hopper and newer,
GPM gives the SM / tensor / DRAM activity that NVML's "GPU util" hides
(proven on an H200 with no DCGM installed, exporter/data/traces/README.md).

Per sample and GPU: utilization rates, memory info, power and enforced limit,
SM and memory clocks, clocks-event reasons, temperature, the PCIe link's current
generation and width (each 2-10 us), GPM metrics over the previous sample
(~75 us). Maximum SM clock, the PCIe link's maximum generation and width, the
architecture, name and UUID are read once. Which NVLinks are up (one call per
link) is read every ``link_interval`` seconds (30 by default): link state only
changes on a fault or a reset. The current PCIe generation is read every sample
because an idle GPU trains its link down to save power and back up under load. Total energy costs 3-16 ms, so it is read every
``energy_interval`` seconds (30 by default) and the last value is repeated in
between; it is never read on the scrape path (a scrape never calls a source).

Faults, none of which stop the exporter:
- NVML library or driver missing -> ``SourceError("library_not_found")`` on
  every sample; initialisation is retried on the next sample, so installing
  the driver clears it.
- ``NVMLError_GpuIsLost`` on one GPU -> that GPU reports ``llm_gpu_up 0`` and a
  ``gpu_lost`` partial error; the others keep reporting; the lost GPU is
  re-opened every ``lost_retry`` seconds.
- ``NVMLError_NotSupported`` (or no permission) on a call -> that metric is
  absent and the call is not repeated for that GPU.
- GPM not supported -> ``llm_gpu_profiling_available 0`` and the profiling
  metrics absent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from exporter.gpu.fields import MIB, reading_points
from exporter.gpu.gpm import GpmPair, gpm_supported
from exporter.samples import Point, Sample, SampleResult, SourceError

log = logging.getLogger(__name__)

ENERGY_INTERVAL_S = 30.0
LINK_INTERVAL_S = 30.0
LOST_RETRY_S = 5.0

#: (function name, positional args after the handle, keyword args); a read
#: tries its candidates in order and keeps the first one the driver has.
Candidate = tuple[str, tuple[Any, ...], dict[str, Any]]


#: NVML's ``nvmlNvlinkVersion_t`` (nvml.h: 1 = 1.0, 2 = 2.0, 3 = 2.2, 4 = 3.0, 5 = 3.1, 6 = 4.0,
#: 7 = 5.0, 8 = 6.0) -> NVLink generation. An A100 answers 5 (3.1), not 3 (hwloc issue 658).
NVLINK_VERSION_GENERATION: dict[int, int] = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5, 8: 6}
#: GPU architecture (``nvmlDeviceGetArchitecture``: Pascal 4, Volta 5, Turing 6, Ampere 7, Hopper 9,
#: Blackwell 10) -> the NVLink generation it carries. It decides where known: drivers have answered
#: 5.0 for an H100's links, which would double its capacity.
ARCH_NVLINK_GENERATION: dict[int, int] = {4: 1, 5: 2, 6: 2, 7: 3, 9: 4, 10: 5}


def _error_classes(nvml: Any, *names: str) -> tuple[type[BaseException], ...]:
    """The named NVMLError_* classes this nvidia-ml-py version defines."""
    return tuple(c for c in (getattr(nvml, n, None) for n in names) if isinstance(c, type))


class _LibraryGone(Exception):
    """NVML itself stopped answering (driver unloaded, NVML shut down)."""


@dataclass
class _Device:
    """What the source keeps per GPU between samples."""

    index: int
    handle: Any = None
    uuid: str = ""
    name: str = ""
    sm_clock_max_mhz: float | None = None
    pcie_gen_max: float | None = None
    pcie_width_max: float | None = None
    #: nvmlDeviceGetArchitecture (None: unknown)
    arch: int | None = None
    nvlink_links: int | None = None
    nvlink_version: int | None = None
    link_due: float = 0.0
    gpm: GpmPair | None = None
    lost: bool = False
    retry_at: float = 0.0
    energy_mj: float | None = None
    energy_due: float = 0.0
    #: reads that answered NotSupported: never asked again on this GPU
    unsupported: set[str] = field(default_factory=set)
    #: read key -> index of the candidate function that worked
    choice: dict[str, int] = field(default_factory=dict)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _number(value: Any) -> float | None:
    """An NVML count or generation; None when absent (the NVML_VALUE_NOT_AVAILABLE sentinels included)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value >= 0xFFFFFFFF:
        return None
    return float(value)


class NvmlSource:
    """GPU source over NVML; ``nvml`` is the pynvml module (tests pass a fake)."""

    name = "gpu"

    def __init__(
        self,
        interval: float,
        timeout: float,
        nvml: Any = None,
        *,
        energy_interval: float = ENERGY_INTERVAL_S,
        lost_retry: float = LOST_RETRY_S,
        clock: Callable[[], float] = time.monotonic,
        link_interval: float = LINK_INTERVAL_S,
    ) -> None:
        self.interval = interval
        self.timeout = timeout
        self.energy_interval = energy_interval
        self.link_interval = link_interval
        self.lost_retry = lost_retry
        self._clock = clock
        self._nvml = nvml
        self._devices: list[_Device] | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> int:
        """Initialise NVML and open every GPU (no-op once done); returns the GPU count.

        Raises SourceError("library_not_found") when NVML cannot be loaded now.
        """
        if self._devices is not None:
            return len(self._devices)
        nvml = self._module()
        library = _error_classes(nvml, "NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded", "NVMLError_FunctionNotFound")
        try:
            nvml.nvmlInit()
        except library as err:
            raise SourceError("library_not_found", f"NVML: {err}") from None
        except nvml.NVMLError as err:
            raise SourceError("internal", f"nvmlInit: {err}") from None
        try:
            count: int = nvml.nvmlDeviceGetCount()
            devices = [self._open(_Device(index=i)) for i in range(count)]
        except _LibraryGone as gone:
            self._shutdown()
            raise SourceError("library_not_found", f"NVML stopped answering: {gone}") from None
        except nvml.NVMLError as err:
            self._shutdown()
            raise SourceError("internal", f"NVML device enumeration: {err}") from None
        self._devices = devices
        return count

    def _module(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError:
                raise SourceError("library_not_found", "nvidia-ml-py (pynvml) is not installed") from None
            self._nvml = pynvml
        return self._nvml

    def _open(self, dev: _Device) -> _Device:
        """(Re)acquire the handle and the static facts of one GPU; a lost GPU stays lost."""
        nvml = self._nvml
        if dev.gpm is not None:
            dev.gpm.free()
            dev.gpm = None
        try:
            dev.handle = nvml.nvmlDeviceGetHandleByIndex(dev.index)
            dev.uuid = _text(nvml.nvmlDeviceGetUUID(dev.handle))
            dev.name = _text(nvml.nvmlDeviceGetName(dev.handle))
            dev.unsupported.clear()
            dev.choice.clear()
            clock = self._read(dev, "sm_clock_max", [("nvmlDeviceGetMaxClockInfo", (nvml.NVML_CLOCK_SM,), {})], [])
            dev.sm_clock_max_mhz = float(clock) if clock is not None else None
            dev.pcie_gen_max = _number(self._read(dev, "pcie_gen_max", [("nvmlDeviceGetMaxPcieLinkGeneration", (), {})], []))
            dev.pcie_width_max = _number(self._read(dev, "pcie_width_max", [("nvmlDeviceGetMaxPcieLinkWidth", (), {})], []))
            arch = self._read(dev, "architecture", [("nvmlDeviceGetArchitecture", (), {})], [])
            dev.arch = int(arch) if isinstance(arch, int) else None
            dev.nvlink_links = dev.nvlink_version = None
            dev.link_due = 0.0
            if gpm_supported(nvml, dev.handle):
                try:
                    dev.gpm = GpmPair(nvml, dev.handle)
                except self._lost_errors():
                    raise
                except nvml.NVMLError as err:
                    log.info("GPU %d: GPM buffers unavailable (%s); profiling metrics absent", dev.index, err)
            dev.lost = False
            dev.energy_due = 0.0
        except self._lost_errors() as err:
            if not dev.lost:
                log.warning("GPU %d lost: %s; retrying every %gs", dev.index, err, self.lost_retry)
            dev.lost = True
            dev.retry_at = self._clock() + self.lost_retry
        return dev

    def close(self) -> None:
        """Free GPM buffers and shut NVML down; safe to call twice."""
        for dev in self._devices or []:
            if dev.gpm is not None:
                dev.gpm.free()
                dev.gpm = None
        if self._devices is not None:
            self._shutdown()
        self._devices = None

    def _shutdown(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass

    # ------------------------------------------------------------------ sampling

    def sample(self) -> SampleResult:
        self.start()
        assert self._devices is not None
        now = self._clock()
        points: list[Point] = []
        partial: list[SourceError] = []
        try:
            for dev in self._devices:
                points.extend(self._sample_device(dev, now, partial))
        except _LibraryGone as gone:
            self.close()
            raise SourceError("library_not_found", f"NVML stopped answering: {gone}") from None
        return SampleResult(points, partial)

    def _sample_device(self, dev: _Device, now: float, partial: list[SourceError]) -> list[Sample]:
        """Points of one GPU; a lost GPU is retried on its own cadence and reports up=0."""
        if dev.lost and now >= dev.retry_at:
            self._open(dev)
            if not dev.lost:
                log.info("GPU %d (%s) answers again", dev.index, dev.uuid)
        if not dev.lost:
            try:
                reading, errors = self._reading(dev, now)
            except self._lost_errors() as err:
                self._mark_lost(dev, now, err)
            else:
                partial.extend(errors)
                return reading_points(dev.index, reading, "nvml", profiling=dev.gpm is not None)
        partial.append(SourceError("gpu_lost", f"GPU {dev.index} ({dev.uuid or 'unknown uuid'}) is lost"))
        return reading_points(dev.index, {"uuid": dev.uuid, "gpu_name": dev.name}, "nvml", up=False)

    def _mark_lost(self, dev: _Device, now: float, err: BaseException) -> None:
        log.warning("GPU %d (%s) lost: %s; retrying every %gs", dev.index, dev.uuid, err, self.lost_retry)
        dev.lost = True
        dev.retry_at = now + self.lost_retry
        if dev.gpm is not None:
            dev.gpm.free()
            dev.gpm = None

    def _lost_errors(self) -> tuple[type[BaseException], ...]:
        return _error_classes(self._nvml, "NVMLError_GpuIsLost", "NVMLError_GpuNotFound", "NVMLError_ResetRequired")

    def _reading(self, dev: _Device, now: float) -> tuple[dict[str, object], list[SourceError]]:
        """One reading (replay CSV keys and units) of one GPU, plus per-field faults."""
        nvml = self._nvml
        errors: list[SourceError] = []
        r: dict[str, object] = {"uuid": dev.uuid, "gpu_name": dev.name}

        def read(key: str, *candidates: Candidate) -> Any:
            return self._read(dev, key, list(candidates), errors)

        util = read("utilization", ("nvmlDeviceGetUtilizationRates", (), {}))
        if util is not None:
            r["nvml_gpu_util"] = util.gpu
            r["nvml_mem_util"] = util.memory
        memory_v2 = getattr(nvml, "nvmlMemory_v2", None)
        mem = read(
            "memory",
            *([("nvmlDeviceGetMemoryInfo", (), {"version": memory_v2})] if memory_v2 is not None else []),
            ("nvmlDeviceGetMemoryInfo", (), {}),
        )
        if mem is not None:
            r["fb_used_mib"] = mem.used / MIB
            r["fb_total_mib"] = mem.total / MIB
        power = read("power", ("nvmlDeviceGetPowerUsage", (), {}))
        if power is not None:
            r["power_w"] = power / 1000.0  # milliwatts
        limit = read("power_limit", ("nvmlDeviceGetEnforcedPowerLimit", (), {}))
        if limit is not None:
            r["power_limit_w"] = limit / 1000.0
        r["sm_clock_mhz"] = read("sm_clock", ("nvmlDeviceGetClockInfo", (nvml.NVML_CLOCK_SM,), {}))
        r["mem_clock_mhz"] = read("mem_clock", ("nvmlDeviceGetClockInfo", (nvml.NVML_CLOCK_MEM,), {}))
        r["sm_clock_max_mhz"] = dev.sm_clock_max_mhz
        r["throttle_reasons"] = read(
            "throttle",
            ("nvmlDeviceGetCurrentClocksEventReasons", (), {}),
            ("nvmlDeviceGetCurrentClocksThrottleReasons", (), {}),
        )
        r["temp_c"] = read(
            "temperature",
            ("nvmlDeviceGetTemperatureV", (nvml.NVML_TEMPERATURE_GPU,), {}),
            ("nvmlDeviceGetTemperature", (nvml.NVML_TEMPERATURE_GPU,), {}),
        )
        if now >= dev.energy_due:  # 3-16 ms per call: slow cadence only
            dev.energy_due = now + self.energy_interval
            energy = read("energy", ("nvmlDeviceGetTotalEnergyConsumption", (), {}))
            if energy is not None:
                dev.energy_mj = float(energy)
        r["energy_mj"] = dev.energy_mj
        r["pcie_link_gen"] = _number(read("pcie_gen", ("nvmlDeviceGetCurrPcieLinkGeneration", (), {})))
        r["pcie_link_width"] = _number(read("pcie_width", ("nvmlDeviceGetCurrPcieLinkWidth", (), {})))
        r["pcie_link_gen_max"] = dev.pcie_gen_max
        r["pcie_link_width_max"] = dev.pcie_width_max
        if now >= dev.link_due:  # one call per link: slow cadence only
            dev.link_due = now + self.link_interval
            self._nvlinks(dev, errors)
        r["nvlink_links"] = dev.nvlink_links
        r["nvlink_version"] = dev.nvlink_version
        if dev.gpm is not None:
            r.update(self._gpm(dev, errors))
        return r, errors

    def _nvlinks(self, dev: _Device, errors: list[SourceError]) -> None:
        """How many NVLinks are up, and their generation. Links are asked in index order until the GPU
        has no more (InvalidArgument past its last link, as a GB200 answers at 18); NotSupported on link
        0 means no NVLink at all (a PCIe card): absent, not asked again. A failed look keeps the last."""
        if "nvlink" in dev.unsupported:
            return
        nvml = self._nvml
        state = getattr(nvml, "nvmlDeviceGetNvLinkState", None)
        if state is None:
            dev.unsupported.add("nvlink")
            return
        absent = _error_classes(nvml, "NVMLError_NotSupported", "NVMLError_NoPermission", "NVMLError_FunctionNotFound")
        past_end = _error_classes(nvml, "NVMLError_InvalidArgument", "NVMLError_NotFound")
        gone = _error_classes(nvml, "NVMLError_Uninitialized", "NVMLError_DriverNotLoaded", "NVMLError_LibraryNotFound")
        active: list[int] = []
        for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
            try:
                on = state(dev.handle, link)
            except past_end:
                break
            except absent:
                if link == 0:
                    dev.unsupported.add("nvlink")
                    dev.nvlink_links = dev.nvlink_version = None
                    return
                break
            except gone as err:
                raise _LibraryGone(f"nvmlDeviceGetNvLinkState: {err}") from None
            except self._lost_errors():
                raise
            except nvml.NVMLError as err:
                errors.append(SourceError("internal", f"GPU {dev.index}: nvmlDeviceGetNvLinkState({link}): {err}"))
                return
            if on == getattr(nvml, "NVML_FEATURE_ENABLED", 1):
                active.append(link)
        dev.nvlink_links = len(active)
        dev.nvlink_version = self._nvlink_generation(dev, active[0], errors) if active else None

    def _nvlink_generation(self, dev: _Device, link: int, errors: list[SourceError]) -> int | None:
        """The NVLink generation of an active link: the architecture's where it has one, else NVML's version."""
        if dev.arch in ARCH_NVLINK_GENERATION:
            return ARCH_NVLINK_GENERATION[dev.arch]
        version = self._read(dev, "nvlink_version", [("nvmlDeviceGetNvLinkVersion", (link,), {})], errors)
        return NVLINK_VERSION_GENERATION.get(version) if isinstance(version, int) else None

    def _gpm(self, dev: _Device, errors: list[SourceError]) -> dict[str, float]:
        nvml = self._nvml
        assert dev.gpm is not None
        try:
            return dev.gpm.read()
        except self._lost_errors():
            raise
        except _error_classes(nvml, "NVMLError_NotSupported", "NVMLError_FunctionNotFound", "NVMLError_NoPermission") as err:
            log.info("GPU %d: GPM stopped (%s); profiling metrics absent", dev.index, err)
            dev.gpm.free()
            dev.gpm = None
        except nvml.NVMLError as err:
            dev.gpm.reset()
            errors.append(SourceError("internal", f"GPU {dev.index}: GPM: {err}"))
        return {}

    def _read(self, dev: _Device, key: str, candidates: list[Candidate], errors: list[SourceError]) -> Any:
        """Call the first candidate the driver has; None when unsupported or failed.

        Lost-GPU errors propagate; library-level errors become _LibraryGone.
        """
        if key in dev.unsupported:
            return None
        nvml = self._nvml
        missing = _error_classes(nvml, "NVMLError_FunctionNotFound", "NVMLError_ArgumentVersionMismatch")
        absent = _error_classes(nvml, "NVMLError_NotSupported", "NVMLError_NoPermission")
        gone = _error_classes(nvml, "NVMLError_Uninitialized", "NVMLError_DriverNotLoaded", "NVMLError_LibraryNotFound")
        for i in range(dev.choice.get(key, 0), len(candidates)):
            name, args, kwargs = candidates[i]
            fn = getattr(nvml, name, None)
            if fn is None:
                continue
            try:
                value = fn(dev.handle, *args, **kwargs)
            except missing:
                continue
            except absent:
                dev.unsupported.add(key)
                return None
            except gone as err:
                raise _LibraryGone(f"{name}: {err}") from None
            except self._lost_errors():
                raise
            except nvml.NVMLError as err:
                errors.append(SourceError("internal", f"GPU {dev.index}: {name}: {err}"))
                return None
            dev.choice[key] = i
            return value
        dev.unsupported.add(key)  # no candidate exists in this library/driver
        return None
