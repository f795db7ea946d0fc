"""GPU -> pod attribution: ``llm_gpu_pod_info`` and ``llm_gpu_process_memory_used_bytes``.

Why an info series: a GPU's telemetry is per GPU, its owner per container; one
``llm_gpu_pod_info{gpu,uuid,namespace,pod,container} 1`` per allocation joins in
PromQL (``llm_gpu_pod_info * on(uuid) group_left llm_gpu_utilization_ratio``) and
adds one series per allocation instead of multiplying every GPU series by the
pod labels. ``uuid`` is the physical GPU's, the one the GPU series carry: a MIG
device reports its parent GPU's index and UUID (several pods then share a GPU,
each with its own info series), and so does a time-sliced replica.

Why per process: on a shared (time-sliced) GPU the allocation says only that
several pods may use it. NVML's running compute processes (host PID, used
memory) say who does: each PID's ``/proc/<pid>/cgroup`` names its pod UID and
container runtime ID (``exporter/kubernetes/cgroup.py``), the node's pod list
names the pod and container (``exporter/kubernetes/pods.py``). Memory is summed
per (gpu, namespace, pod, container); processes in no known pod are published
with those three labels empty. PIDs are host PIDs: this needs ``hostPID: true``.
On a MIG GPU each MIG device's processes are read from its own handle (the
parent's aggregate needs privileges NVML rarely grants a container).

Opt-in (``--kubernetes-gpu-labels``), ``GpuSeriesLabels`` wraps the GPU source and
adds namespace/pod/container to the GPU series of every GPU held by exactly one
container (not shared, not split by MIG); the others keep those labels empty,
as one series cannot name several owners.

Faults: the PodResources call failing fails this source (its ``SourceError``);
NVML missing, a lost GPU or the pod list failing are partial errors: the
allocations are still published, with what could not be resolved left empty.
Bounded: at most ``MAX_PROCESSES`` processes per GPU are read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from exporter.kubernetes.cgroup import CgroupIdentity, read_identity
from exporter.kubernetes.podresources import PodResourcesClient
from exporter.kubernetes.pods import PodDirectory, PodList
from exporter.kubernetes.settings import gpu_series_names
from exporter.samples import HistogramSample, Point, Sample, SampleResult, SourceError
from exporter.sources import Source

log = logging.getLogger(__name__)

INFO = "llm_gpu_pod_info"
PROCESS_MEMORY = "llm_gpu_process_memory_used_bytes"
MAX_PROCESSES = 1024
#: seconds between two enumerations of GPUs and MIG devices (MIG is reconfigured rarely)
DEVICE_REFRESH_S = 60.0
#: a pod list older than this is refreshed before attributing processes
POD_LIST_MAX_AGE_S = 30.0


def _errors(nvml: Any, *names: str) -> tuple[type[BaseException], ...]:
    return tuple(c for c in (getattr(nvml, n, None) for n in names) if isinstance(c, type))


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


@dataclass
class _Gpu:
    index: int
    uuid: str
    handle: Any
    #: (MIG device UUID, handle) of each MIG device; empty when MIG is off
    mig: list[tuple[str, Any]] = field(default_factory=list)


class NvmlDevices:
    """GPU index, UUID and MIG devices by NVML, and their running compute processes.

    Why its own NVML session rather than the GPU source's: the GPU source may be
    DCGM, a replay or none, and NVML sessions are reference-counted, so two in
    one process are safe. Enumerated once per ``refresh_every`` seconds (or
    after a GPU is lost); ``nvml`` replaces ``pynvml`` in tests.
    """

    def __init__(
        self, nvml: Any = None, refresh_every: float = DEVICE_REFRESH_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._nvml = nvml
        self.refresh_every = refresh_every
        self._clock = clock
        self._gpus: list[_Gpu] | None = None
        self._listed_at = 0.0
        self._initialised = False
        self._quiet: set[tuple[str, str]] = set()

    def _module(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError:
                raise SourceError("library_not_found", "nvidia-ml-py (pynvml) is not installed") from None
            self._nvml = pynvml
        return self._nvml

    def gpus(self) -> list[_Gpu]:
        """Every GPU with its MIG devices; raises SourceError("library_not_found") without NVML."""
        now = self._clock()
        if self._gpus is not None and now - self._listed_at < self.refresh_every:
            return self._gpus
        nvml = self._module()
        if not self._initialised:
            try:
                nvml.nvmlInit()
            except nvml.NVMLError as err:
                raise SourceError("library_not_found", f"NVML: {err}") from None
            self._initialised = True
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as err:
            self.close()
            raise SourceError("library_not_found", f"NVML stopped answering: {err}") from None
        gpus: list[_Gpu] = []
        for i in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                gpus.append(_Gpu(i, _text(nvml.nvmlDeviceGetUUID(handle)), handle, self._mig_devices(handle)))
            except nvml.NVMLError as err:  # a lost GPU: left out until the next enumeration
                self._note(("lost", str(i)), f"GPU {i} not enumerated: {err}")
        self._gpus, self._listed_at = gpus, now
        return gpus

    def _mig_devices(self, handle: Any) -> list[tuple[str, Any]]:
        nvml = self._nvml
        unsupported = _errors(nvml, "NVMLError_NotSupported", "NVMLError_FunctionNotFound", "NVMLError_NoPermission")
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        except unsupported:
            return []
        if current != getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
            return []
        out: list[tuple[str, Any]] = []
        slots = nvml.nvmlDeviceGetMaxMigDeviceCount(handle)
        for slot in range(slots):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except _errors(nvml, "NVMLError_NotFound", "NVMLError_InvalidArgument"):
                continue  # an empty slot
            out.append((_text(nvml.nvmlDeviceGetUUID(mig)), mig))
        return out

    def resolve(self, device_id: str) -> tuple[str, str] | None:
        """(gpu index, physical UUID) of a device-plugin device ID; None when not on this node's NVML."""
        for gpu in self._gpus or []:
            if (
                device_id == gpu.uuid
                or device_id == str(gpu.index)
                or device_id.partition(":")[0] == str(gpu.index)
                and ":" in device_id
            ):
                return str(gpu.index), gpu.uuid
            if any(device_id == mig_uuid for mig_uuid, _ in gpu.mig):
                return str(gpu.index), gpu.uuid
        return None

    def is_mig(self, device_id: str) -> bool:
        return device_id.startswith("MIG-") or any(device_id == m for g in self._gpus or [] for m, _ in g.mig)

    def processes(self, errors: list[SourceError]) -> list[tuple[str, int, float]]:
        """(gpu index, host PID, used bytes) of every running compute process NVML reports."""
        nvml = self._nvml
        if nvml is None or self._gpus is None:
            return []
        quiet = _errors(nvml, "NVMLError_NotSupported", "NVMLError_NoPermission", "NVMLError_FunctionNotFound")
        lost = _errors(nvml, "NVMLError_GpuIsLost", "NVMLError_GpuNotFound", "NVMLError_InvalidArgument")
        out: list[tuple[str, int, float]] = []
        for gpu in self._gpus:
            handles = [h for _, h in gpu.mig] if gpu.mig else [gpu.handle]
            for handle in handles:
                try:
                    procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
                except quiet as err:
                    self._note(
                        ("procs", str(gpu.index)),
                        f"GPU {gpu.index}: running processes not readable ({err}); no per-process memory",
                    )
                    continue
                except lost as err:
                    self._listed_at = -self.refresh_every  # enumerate again next time
                    errors.append(SourceError("gpu_lost", f"GPU {gpu.index}: {err}"))
                    continue
                except nvml.NVMLError as err:
                    errors.append(SourceError("internal", f"GPU {gpu.index}: nvmlDeviceGetComputeRunningProcesses: {err}"))
                    continue
                for proc in list(procs)[:MAX_PROCESSES]:
                    used = getattr(proc, "usedGpuMemory", None)
                    if used is None:
                        continue  # NVML cannot say (e.g. WDDM, some vGPU)
                    out.append((str(gpu.index), int(proc.pid), float(used)))
        return out

    def _note(self, key: tuple[str, str], message: str) -> None:
        if key not in self._quiet:
            self._quiet.add(key)
            log.info("%s", message)

    def close(self) -> None:
        if self._initialised and self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
        self._initialised = False
        self._gpus = None


class GpuPodSource:
    """Source ``kubernetes:gpu``: which container holds which GPU, and GPU memory per container."""

    name = "kubernetes:gpu"

    def __init__(
        self,
        client: PodResourcesClient,
        *,
        devices: NvmlDevices | None = None,
        directory: PodDirectory | None = None,
        proc_root: str = "/proc",
        pod_labels: Iterable[tuple[str, str]] = (),
        interval: float = 10.0,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.devices = devices or NvmlDevices()
        self.directory = directory
        self.proc_root = proc_root
        #: (pod label key, Prometheus label name) copied from the pod (the allow-list)
        self.pod_labels = tuple(pod_labels)
        self.interval = interval
        self.timeout = timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._owners: dict[str, dict[str, str]] = {}
        self._owners_at: float | None = None
        self._identities: dict[int, CgroupIdentity | None] = {}

    # ------------------------------------------------------------------ Source protocol

    def sample(self) -> SampleResult:
        allocations = self.client.list()
        partial: list[SourceError] = []
        if allocations.skipped:
            partial.append(
                SourceError("too_many_series", f"{allocations.skipped} pod-resources allocation(s) over the limit not published")
            )
        nvml_ok = True
        try:
            self.devices.gpus()
        except SourceError as err:
            partial.append(err)
            nvml_ok = False
        pods = self._pods(partial)
        points: list[Point] = []
        holders: dict[str, set[tuple[str, str, str]]] = {}
        split: set[str] = set()
        seen: set[tuple[str, ...]] = set()
        for alloc in allocations.items:
            gpu, uuid = self._where(alloc.device_id, nvml_ok)
            labels = {"gpu": gpu, "uuid": uuid, "namespace": alloc.namespace, "pod": alloc.pod, "container": alloc.container}
            labels.update(self._copied(pods.by_name.get((alloc.namespace, alloc.pod)) if pods else None))
            key = tuple(labels.values())
            if key in seen:
                continue
            seen.add(key)
            points.append(Sample(INFO, labels, 1.0))
            if uuid:
                holders.setdefault(uuid, set()).add((alloc.namespace, alloc.pod, alloc.container))
                if alloc.shared or self.devices.is_mig(alloc.device_id):
                    split.add(uuid)
        if nvml_ok:
            points.extend(self._process_memory(pods, partial))
        owners = {}
        for uuid, who in holders.items():
            if len(who) == 1 and uuid not in split:
                ns, pod, container = next(iter(who))
                owners[uuid] = {
                    "namespace": ns,
                    "pod": pod,
                    "container": container,
                    **self._copied(pods.by_name.get((ns, pod)) if pods else None),
                }
        with self._lock:
            self._owners, self._owners_at = owners, self._clock()
        return SampleResult(points, partial)

    def close(self) -> None:
        self.client.close()
        self.devices.close()

    # ------------------------------------------------------------------ helpers

    def _pods(self, partial: list[SourceError]) -> PodList | None:
        if self.directory is None:
            return None
        try:
            return self.directory.current(POD_LIST_MAX_AGE_S)
        except SourceError as err:
            partial.append(err)
            return self.directory.latest()

    def _where(self, device_id: str, nvml_ok: bool) -> tuple[str, str]:
        found = self.devices.resolve(device_id) if nvml_ok else None
        if found is not None:
            return found
        if device_id.isdigit():
            return device_id, ""
        return "", device_id  # not resolvable now: the device plugin's ID as the uuid

    def _copied(self, pod: Any) -> dict[str, str]:
        labels = getattr(pod, "labels", None) or {}
        return {name: labels.get(key, "") for key, name in self.pod_labels}

    def _identity(self, pid: int) -> CgroupIdentity | None:
        if pid not in self._identities:
            self._identities[pid] = read_identity(pid, self.proc_root)
        return self._identities[pid]

    def _process_memory(self, pods: PodList | None, partial: list[SourceError]) -> list[Sample]:
        procs = self.devices.processes(partial)
        live = {pid for _, pid, _ in procs}
        self._identities = {pid: ident for pid, ident in self._identities.items() if pid in live}
        if pods is not None and self.directory is not None:
            unknown = any((ident := self._identity(pid)) is not None and ident.pod_uid not in pods.by_uid for pid in live)
            if unknown:  # a pod younger than the list: one refresh (rate-limited by the directory)
                try:
                    pods = self.directory.refresh()
                except SourceError:
                    pass
        sums: dict[tuple[str, ...], tuple[dict[str, str], float]] = {}
        for gpu, pid, used in procs:
            ident = self._identity(pid)
            pod = pods.by_uid.get(ident.pod_uid) if pods is not None and ident is not None else None
            labels = {"gpu": gpu, "namespace": "", "pod": "", "container": ""}
            if pod is not None and ident is not None:
                labels.update(namespace=pod.namespace, pod=pod.name, container=pod.container_by_runtime_id(ident.container_id))
            labels.update(self._copied(pod))
            key = tuple(labels.values())
            prev = sums.get(key)
            sums[key] = (labels, used + (prev[1] if prev else 0.0))
        return [Sample(PROCESS_MEMORY, labels, total) for labels, total in sums.values()]

    def owners(self, max_age: float | None = None) -> dict[str, dict[str, str]]:
        """uuid -> owner labels of each exclusively held GPU; {} once the last success is older than ``max_age``."""
        limit = 2 * self.interval if max_age is None else max_age
        with self._lock:
            if self._owners_at is None or self._clock() - self._owners_at > limit:
                return {}
            return self._owners


class GpuSeriesLabels:
    """The GPU source, its GPU series labelled with the owner of each exclusively held GPU (opt-in).

    Same name, interval and timeout as the source it wraps, so nothing else
    changes; a point of a GPU without a single owner is passed through as is.
    """

    def __init__(self, inner: Source, attribution: GpuPodSource) -> None:
        self.inner = inner
        self.attribution = attribution
        self.name = inner.name
        self.interval = inner.interval
        self.timeout = inner.timeout
        self._names = frozenset(gpu_series_names())

    def sample(self) -> SampleResult:
        result = self.inner.sample()
        owners = self.attribution.owners()
        if not owners:
            return result
        points: list[Point] = []
        for p in result.points:
            owner = owners.get(str(p.labels.get("uuid", ""))) if p.name in self._names else None
            if owner is None:
                points.append(p)
            elif isinstance(p, HistogramSample):
                points.append(replace(p, labels={**p.labels, **owner}))
            else:
                points.append(Sample(p.name, {**p.labels, **owner}, p.value))
        return SampleResult(points, result.partial_errors)

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:  # e.g. NvmlSource.start() used by callers of the GPU source
        return getattr(self.inner, name)


__all__ = ["GpuPodSource", "GpuSeriesLabels", "NvmlDevices", "gpu_series_names"]
