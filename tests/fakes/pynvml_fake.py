"""A fake ``pynvml`` (nvidia-ml-py) for tests: real names, structs and errors; fake GPUs.

Why: CI has no GPU, and a hand-written mock would let the source drift from the
real API. This fake takes every constant, ctypes struct (``c_nvmlMemory_t``,
``c_nvmlUtilization_t``, ``c_nvmlGpmMetricsGet_t``, ...) and exception class
(``NVMLError_GpuIsLost``, ...) from the installed nvidia-ml-py, and only the
functions that would call the driver are re-implemented. A function it does
not implement raises AttributeError, so new calls in the source fail loudly.

Programmable faults: library missing (``library_missing``), a GPU lost after n
device calls (``FakeGpu.lose_after``) and brought back (``recover``), calls
that answer NotSupported (``FakeGpu.not_supported``), GPM unsupported
(``FakeGpu.gpm=False``), an old driver without the clocks-event symbol
(``event_reasons_symbol=False``). ``calls`` counts every function called.

Links answer as nvml.h documents: the PCIe link's current and maximum generation and width,
the architecture, and per NVLink its state and version (``FakeGpu.nvlinks``: None is a board
without NVLink, whose link 0 answers NotSupported; a link index past the GPU's last link answers
InvalidArgument, as a GB200 does at 18; an inactive link's version is VERSION_INVALID).

Running compute processes (``FakeGpu.processes``) and MIG (``FakeGpu.mig_capable``,
``mig_enabled``, ``mig_devices``) answer as nvml.h documents: MIG calls raise
NotSupported on a GPU without MIG, an empty MIG slot raises NotFound, and on a
MIG-enabled GPU the parent handle's process list needs privileges (NoPermission)
while each MIG device handle lists its own processes.
"""

from __future__ import annotations

import ctypes
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pynvml as _real

_FORWARDED_PREFIXES = (
    "NVML_",
    "NVMLError",
    "c_nvml",
    "nvmlMemory_v",
    "nvmlTemperature_v",
    "nvmlClocksEventReason",
    "nvmlClocksThrottleReason",
)

MIB = 1024 * 1024
#: most MIG devices one GPU can hold (an A100/H100/H200 has 7 slots)
MAX_MIG_DEVICES = 7


@dataclass
class FakeMig:
    """One MIG device of a fake GPU: its own UUID and running compute processes."""

    uuid: str
    processes: list[tuple[int, int | None]] = field(default_factory=list)


@dataclass
class FakeGpu:
    """One fake device; defaults are an H200 under a bf16 GEMM (row of kernels.csv)."""

    name: str = "NVIDIA H200"
    uuid: str = "GPU-b291c692-64b4-34e2-62c0-d8362a374b32"
    gpm: bool = True
    util_gpu: int = 95
    util_memory: int = 31
    mem_total: int = 143771 * MIB
    mem_reserved: int = 512 * MIB
    mem_used: int = 80_000 * MIB  # allocated, excluding reserved (v2 semantics)
    power_mw: int = 651_234
    power_limit_mw: int = 700_000
    sm_clock: int = 1522
    mem_clock: int = 3201
    max_sm_clock: int = 1980
    reasons: int = 0x4
    temp: int = 61
    energy_mj: int = 123_456_789
    #: the PCIe link now (an idle GPU trains it down) and the most the GPU and its slot support
    pcie_gen: int = 5
    pcie_width: int = 16
    pcie_gen_max: int = 5
    pcie_width_max: int = 16
    arch: int = _real.NVML_DEVICE_ARCH_HOPPER
    #: per NVLink index, whether it is up; None: no NVLink on this board (the recorded H200 was a PCIe card)
    nvlinks: list[bool] | None = None
    #: what nvmlDeviceGetNvLinkVersion answers for an active link (nvmlNvlinkVersion_t: 6 = 4.0)
    nvlink_version: int = _real.NVML_NVLINK_VERSION_4_0
    #: GPM metric id -> value NVML reports over a sample pair (percent or MiB/s)
    gpm_values: dict[int, float] = field(
        default_factory=lambda: {
            _real.NVML_GPM_METRIC_SM_UTIL: 92.0,
            _real.NVML_GPM_METRIC_SM_OCCUPANCY: 14.0,
            _real.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 90.0,
            _real.NVML_GPM_METRIC_DRAM_BW_UTIL: 17.0,
            _real.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 1.5,
            _real.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 3.25,
        }
    )
    #: function names that raise NVMLError_NotSupported on this GPU
    not_supported: set[str] = field(default_factory=set)
    #: lose the GPU once this many device calls have been made (None = never)
    lose_after: int | None = None
    lost: bool = False
    device_calls: int = 0
    generation: int = 0
    #: running compute processes: (host PID, used bytes, or None where NVML says "not available")
    processes: list[tuple[int, int | None]] = field(default_factory=list)
    #: MIG: capable (A100 and newer), enabled, and the MIG devices in its slots
    mig_capable: bool = False
    mig_enabled: bool = False
    mig_devices: list[FakeMig] = field(default_factory=list)


@dataclass(frozen=True)
class _Handle:
    """Opaque device handle; goes stale when the GPU is recovered (like a reset)."""

    index: int
    generation: int


@dataclass(frozen=True)
class _MigHandle:
    """Handle of one MIG device: its parent's handle and its slot."""

    parent: _Handle
    slot: int


class _SampleBuffer(ctypes.Structure):
    _fields_ = [("serial", ctypes.c_uint64), ("device", ctypes.c_int64), ("taken", ctypes.c_int)]


def _err(name: str) -> BaseException:
    err: BaseException = getattr(_real, name)()
    return err


class FakeNvml:
    """Module-like object: pass it where the source would use ``pynvml``."""

    def __init__(self, gpus: list[FakeGpu], *, library_missing: bool = False, event_reasons_symbol: bool = True) -> None:
        self.gpus = gpus
        self.library_missing = library_missing
        self.event_reasons_symbol = event_reasons_symbol
        self.calls: Counter[str] = Counter()
        self.initialised = 0
        self._buffers: dict[int, _SampleBuffer] = {}
        self._serial = 0

    def __getattr__(self, name: str) -> Any:
        if name.startswith(_FORWARDED_PREFIXES):
            return getattr(_real, name)
        raise AttributeError(f"fake pynvml does not implement {name}")

    # ------------------------------------------------------------------ test controls

    def recover(self, index: int) -> None:
        """Bring a lost GPU back; handles taken before stay stale, as after a reset."""
        gpu = self.gpus[index]
        gpu.lost = False
        gpu.lose_after = None
        gpu.generation += 1

    def live_gpm_samples(self) -> int:
        """GPM buffers allocated and not yet freed (a leak check)."""
        return len(self._buffers)

    # ------------------------------------------------------------------ helpers

    def _count(self, name: str) -> None:
        self.calls[name] += 1
        if not self.initialised:
            raise _err("NVMLError_Uninitialized")

    def _device(self, name: str, handle: Any) -> FakeGpu:
        self._count(name)
        if not isinstance(handle, _Handle) or not 0 <= handle.index < len(self.gpus):
            raise _err("NVMLError_InvalidArgument")
        gpu = self.gpus[handle.index]
        gpu.device_calls += 1
        if gpu.lose_after is not None and gpu.device_calls > gpu.lose_after:
            gpu.lost = True
        if gpu.lost or handle.generation != gpu.generation:
            raise _err("NVMLError_GpuIsLost")
        if name in gpu.not_supported:
            raise _err("NVMLError_NotSupported")
        return gpu

    def _buffer(self, sample: Any) -> _SampleBuffer:
        try:
            address = ctypes.cast(sample, ctypes.c_void_p).value
        except ctypes.ArgumentError:
            raise _err("NVMLError_InvalidArgument") from None
        if address not in self._buffers:
            raise _err("NVMLError_InvalidArgument")
        return self._buffers[address]

    # ------------------------------------------------------------------ init

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.library_missing:
            raise _err("NVMLError_LibraryNotFound")
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._count("nvmlShutdown")
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._count("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._count("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise _err("NVMLError_InvalidArgument")
        gpu = self.gpus[index]
        if gpu.lost:
            raise _err("NVMLError_GpuIsLost")
        return _Handle(index, gpu.generation)

    # ------------------------------------------------------------------ device reads

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        if isinstance(handle, _MigHandle):
            return self._mig("nvmlDeviceGetUUID", handle).uuid
        return self._device("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._device("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        gpu = self._device("nvmlDeviceGetUtilizationRates", handle)
        return _real.c_nvmlUtilization_t(gpu=gpu.util_gpu, memory=gpu.util_memory)

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        gpu = self._device("nvmlDeviceGetMemoryInfo", handle)
        if not version:
            used = gpu.mem_used + gpu.mem_reserved  # v1: "Sum of Reserved and Allocated"
            return _real.c_nvmlMemory_t(total=gpu.mem_total, free=gpu.mem_total - used, used=used)
        if version != _real.nvmlMemory_v2:
            raise _err("NVMLError_ArgumentVersionMismatch")
        free = gpu.mem_total - gpu.mem_reserved - gpu.mem_used
        return _real.c_nvmlMemory_v2_t(
            version=version, total=gpu.mem_total, reserved=gpu.mem_reserved, free=free, used=gpu.mem_used
        )

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return self._device("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return self._device("nvmlDeviceGetEnforcedPowerLimit", handle).power_limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        return self._device("nvmlDeviceGetTotalEnergyConsumption", handle).energy_mj

    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int:
        gpu = self._device("nvmlDeviceGetClockInfo", handle)
        if type in (_real.NVML_CLOCK_SM, _real.NVML_CLOCK_GRAPHICS):
            return gpu.sm_clock
        if type == _real.NVML_CLOCK_MEM:
            return gpu.mem_clock
        raise _err("NVMLError_InvalidArgument")

    def nvmlDeviceGetMaxClockInfo(self, handle: Any, type: int) -> int:
        gpu = self._device("nvmlDeviceGetMaxClockInfo", handle)
        if type in (_real.NVML_CLOCK_SM, _real.NVML_CLOCK_GRAPHICS):
            return gpu.max_sm_clock
        raise _err("NVMLError_InvalidArgument")

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        if not self.event_reasons_symbol:  # driver older than the symbol
            self._count("nvmlDeviceGetCurrentClocksEventReasons")
            raise _err("NVMLError_FunctionNotFound")
        return self._device("nvmlDeviceGetCurrentClocksEventReasons", handle).reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        return self._device("nvmlDeviceGetCurrentClocksThrottleReasons", handle).reasons

    def nvmlDeviceGetTemperatureV(self, handle: Any, sensor: int, version: int = _real.nvmlTemperature_v1) -> int:
        gpu = self._device("nvmlDeviceGetTemperatureV", handle)
        if version != _real.nvmlTemperature_v1:
            raise _err("NVMLError_ArgumentVersionMismatch")
        if sensor != _real.NVML_TEMPERATURE_GPU:
            raise _err("NVMLError_InvalidArgument")
        return gpu.temp

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        gpu = self._device("nvmlDeviceGetTemperature", handle)
        if sensor != _real.NVML_TEMPERATURE_GPU:
            raise _err("NVMLError_InvalidArgument")
        return gpu.temp

    # ------------------------------------------------------------------ links

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return self._device("nvmlDeviceGetCurrPcieLinkGeneration", handle).pcie_gen

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return self._device("nvmlDeviceGetCurrPcieLinkWidth", handle).pcie_width

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return self._device("nvmlDeviceGetMaxPcieLinkGeneration", handle).pcie_gen_max

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return self._device("nvmlDeviceGetMaxPcieLinkWidth", handle).pcie_width_max

    def nvmlDeviceGetArchitecture(self, handle: Any) -> int:
        return self._device("nvmlDeviceGetArchitecture", handle).arch

    def _nvlink(self, name: str, handle: Any, link: int) -> tuple[FakeGpu, bool]:
        gpu = self._device(name, handle)
        if gpu.nvlinks is None:
            raise _err("NVMLError_NotSupported")
        if not 0 <= link < len(gpu.nvlinks):
            raise _err("NVMLError_InvalidArgument")
        return gpu, gpu.nvlinks[link]

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        _, up = self._nvlink("nvmlDeviceGetNvLinkState", handle, link)
        return int(_real.NVML_FEATURE_ENABLED if up else _real.NVML_FEATURE_DISABLED)

    def nvmlDeviceGetNvLinkVersion(self, handle: Any, link: int) -> int:
        gpu, up = self._nvlink("nvmlDeviceGetNvLinkVersion", handle, link)
        return gpu.nvlink_version if up else int(_real.NVML_NVLINK_VERSION_INVALID)

    # ------------------------------------------------------------------ GPM

    def nvmlGpmQueryDeviceSupport(self, handle: Any) -> Any:
        gpu = self._device("nvmlGpmQueryDeviceSupport", handle)
        support = _real.c_nvmlGpmSupport_t()
        support.version = _real.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = 1 if gpu.gpm else 0
        return support

    def nvmlGpmSampleAlloc(self) -> Any:
        self._count("nvmlGpmSampleAlloc")
        buf = _SampleBuffer()
        self._buffers[ctypes.addressof(buf)] = buf
        return ctypes.cast(ctypes.pointer(buf), _real.c_nvmlGpmSample_t)

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self._count("nvmlGpmSampleFree")
        buf = self._buffer(sample)
        del self._buffers[ctypes.addressof(buf)]

    def nvmlGpmSampleGet(self, handle: Any, sample: Any) -> Any:
        gpu = self._device("nvmlGpmSampleGet", handle)
        if not gpu.gpm:
            raise _err("NVMLError_NotSupported")
        buf = self._buffer(sample)
        self._serial += 1
        buf.serial, buf.device, buf.taken = self._serial, handle.index, 1
        return sample

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        self._count("nvmlGpmMetricsGet")
        if request.version != _real.NVML_GPM_METRICS_GET_VERSION:
            raise _err("NVMLError_ArgumentVersionMismatch")
        first, second = self._buffer(request.sample1), self._buffer(request.sample2)
        if not (first.taken and second.taken) or first.device != second.device or first.serial >= second.serial:
            raise _err("NVMLError_InvalidArgument")  # two distinct samples, in order, of one GPU
        gpu = self.gpus[first.device]
        if gpu.lost:
            raise _err("NVMLError_GpuIsLost")
        if not 0 < request.numMetrics <= _real.NVML_GPM_METRIC_MAX:
            raise _err("NVMLError_InvalidArgument")
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            if metric.metricId in gpu.gpm_values:
                metric.value = gpu.gpm_values[metric.metricId]
                metric.nvmlReturn = _real.NVML_SUCCESS
            else:
                metric.value = 0.0
                metric.nvmlReturn = _real.NVML_ERROR_NOT_SUPPORTED
        return request

    # ------------------------------------------------------------------ MIG and processes

    def _mig(self, name: str, handle: _MigHandle) -> FakeMig:
        gpu = self._device(name, handle.parent)
        if not gpu.mig_enabled or handle.slot >= len(gpu.mig_devices):
            raise _err("NVMLError_InvalidArgument")  # the MIG device is gone (MIG reconfigured)
        return gpu.mig_devices[handle.slot]

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        gpu = self._device("nvmlDeviceGetMigMode", handle)
        if not gpu.mig_capable:
            raise _err("NVMLError_NotSupported")
        mode = _real.NVML_DEVICE_MIG_ENABLE if gpu.mig_enabled else _real.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        gpu = self._device("nvmlDeviceGetMaxMigDeviceCount", handle)
        if not gpu.mig_capable:
            raise _err("NVMLError_NotSupported")
        return MAX_MIG_DEVICES

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> _MigHandle:
        gpu = self._device("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        if not gpu.mig_capable:
            raise _err("NVMLError_NotSupported")
        if not 0 <= index < MAX_MIG_DEVICES:
            raise _err("NVMLError_InvalidArgument")
        if not gpu.mig_enabled or index >= len(gpu.mig_devices):
            raise _err("NVMLError_NotFound")
        return _MigHandle(handle, index)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        name = "nvmlDeviceGetComputeRunningProcesses"
        if isinstance(handle, _MigHandle):
            found = self._mig(name, handle).processes
            instance = handle.slot
        else:
            gpu = self._device(name, handle)
            if gpu.mig_enabled:  # aggregate over MIG devices: only with privileges (nvml.h)
                raise _err("NVMLError_NoPermission")
            found, instance = gpu.processes, _real.NVML_VALUE_NOT_AVAILABLE_uint.value
        out = []
        for pid, used in found:
            info = _real.c_nvmlProcessInfo_v3_t(
                pid=pid,
                usedGpuMemory=_real.NVML_VALUE_NOT_AVAILABLE_ulonglong.value if used is None else used,
                gpuInstanceId=instance,
                computeInstanceId=0 if isinstance(handle, _MigHandle) else instance,
            )
            obj = _real.nvmlStructToFriendlyObject(info)
            if obj.usedGpuMemory == _real.NVML_VALUE_NOT_AVAILABLE_ulonglong.value:
                obj.usedGpuMemory = None  # as nvidia-ml-py does
            out.append(obj)
        return out
