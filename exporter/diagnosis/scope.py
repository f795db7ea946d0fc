"""Scope: which GPUs, process and series belong to one engine, and the snapshot it is judged on.

Why: a DaemonSet node serves several engines, each on its own GPUs. Judged as one
service, engine B's hot GPU became engine A's primary, and two single-GPU pods read
as one tensor-parallel group with an "imbalance". Each engine is therefore judged on
a *scoped* snapshot: its own series (``server`` label = its name), its own GPUs'
series (``gpu`` index label), its own process series, and nothing of another engine.

An engine's GPUs come from, in order:

1. ``config``: ``engines[].gpus`` / ``--engine-gpus`` (GPU indexes or UUIDs);
2. ``kubernetes``: the GPUs the pod holds (``llm_gpu_pod_info{namespace,pod}``,
   exporter/kubernetes/attribution.py) or on which NVML saw the pod's processes
   (``llm_gpu_process_memory_used_bytes``);
3. ``process``: the GPUs on which NVML lists the engine's process tree, else its
   ``CUDA_VISIBLE_DEVICES`` (``/proc/PID/environ``);
4. ``node``: every GPU of the node, with a notice saying so (when the node has more than one).

A GPU no engine uses is judged for hardware warnings only (``DiagnosisFleet``,
exporter/diagnosis/fanout.py) and never becomes an engine's primary.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from exporter.diagnosis.signals import live_gpus
from exporter.samples import Point
from exporter.store import Snapshot

log = logging.getLogger(__name__)

#: source kinds whose name ends in an engine's name (``engine:NAME``, ``process:NAME``, ``probe:NAME``)
PER_ENGINE_SOURCES = ("engine", "process", "probe")
#: seconds between two looks for an engine process's GPUs (a process rarely changes its devices)
PROCESS_REFRESH_S = 30.0
POD_INFO = "llm_gpu_pod_info"
POD_PROCESS_MEMORY = "llm_gpu_process_memory_used_bytes"


@dataclass(frozen=True)
class EngineSpec:
    """What the configuration says of one engine's placement."""

    name: str
    #: configured GPUs: index labels ("0") or UUIDs ("GPU-...")
    gpus: tuple[str, ...] = ()
    pid: int | None = None
    process: str | None = None


@dataclass(frozen=True)
class Scope:
    """One engine's GPUs (index labels, sorted) and where they came from."""

    engine: str
    gpus: tuple[str, ...]
    origin: str
    notice: str | None = None


# --------------------------------------------------------------------------- process GPUs


def parse_visible_devices(value: str, uuids: Mapping[str, str]) -> tuple[str, ...]:
    """``CUDA_VISIBLE_DEVICES`` -> GPU index labels. Entries are indexes or (prefixes of) UUIDs;
    CUDA stops at the first invalid entry, and so do we. ``uuids``: UUID -> index label."""
    out: list[str] = []
    for raw in value.split(","):
        item = raw.strip()
        if item.isdigit():
            out.append(str(int(item)))
            continue
        found = [idx for uuid, idx in uuids.items() if item and uuid.startswith(item)]
        if len(found) != 1:
            break  # "-1", "NoDevFiles", an unknown or ambiguous UUID: CUDA sees nothing past it
        out.append(found[0])
    return tuple(dict.fromkeys(out))


def read_visible_devices(pid: int) -> str | None:
    """The process's ``CUDA_VISIBLE_DEVICES`` (None: unset or unreadable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read(1 << 20)
    except OSError:
        return None
    for entry in data.split(b"\0"):
        if entry.startswith(b"CUDA_VISIBLE_DEVICES="):
            return entry.partition(b"=")[2].decode(errors="replace")
    return None


def process_tree(pid: int) -> list[int]:
    """The PID and its descendants (just the PID when psutil cannot list them)."""
    try:
        import psutil

        return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
    except Exception:  # noqa: BLE001 - gone or unreadable: the root alone
        return [pid]


class ProcessGpus:
    """The GPUs an engine's process tree uses: NVML's running compute processes, else the
    root's ``CUDA_VISIBLE_DEVICES``. Looked up at most every ``refresh`` seconds per engine.

    ``nvml``: a pynvml-like module (tests pass tests/fakes/pynvml_fake.py); None imports pynvml
    when it is installed, and a node without NVML simply skips that step.
    """

    def __init__(
        self,
        nvml: Any = None,
        use_nvml: bool = True,
        refresh: float = PROCESS_REFRESH_S,
        clock: Callable[[], float] = time.monotonic,
        find_pid: Callable[[EngineSpec], int | None] | None = None,
    ) -> None:
        self._nvml = nvml
        self._use_nvml = use_nvml
        self._devices: Any = None
        self.refresh = refresh
        self._clock = clock
        self._find_pid = find_pid or _pid_of
        self._cache: dict[str, tuple[float, tuple[tuple[str, ...], str] | None]] = {}

    def gpus(self, spec: EngineSpec, uuids: Mapping[str, str]) -> tuple[tuple[str, ...], str] | None:
        """(GPU index labels, how they were found) or None when the process's GPUs are unknown."""
        now = self._clock()
        cached = self._cache.get(spec.name)
        if cached is not None and now - cached[0] < self.refresh:
            return cached[1]
        found = self._look(spec, uuids)
        self._cache[spec.name] = (now, found)
        return found

    def _look(self, spec: EngineSpec, uuids: Mapping[str, str]) -> tuple[tuple[str, ...], str] | None:
        pid = self._find_pid(spec)
        if pid is None:
            return None
        tree = set(process_tree(pid))
        on = self._nvml_gpus(tree)
        if on:
            return on, f"NVML lists process {pid} on them"
        visible = read_visible_devices(pid)
        if visible is not None:
            return parse_visible_devices(visible, uuids), f"CUDA_VISIBLE_DEVICES={visible[:64]} of process {pid}"
        return None

    def _nvml_gpus(self, pids: set[int]) -> tuple[str, ...]:
        if not self._use_nvml:
            return ()
        try:
            if self._devices is None:
                from exporter.kubernetes.attribution import NvmlDevices

                self._devices = NvmlDevices(self._nvml)
            self._devices.gpus()
            procs = self._devices.processes([])
        except Exception as err:  # noqa: BLE001 - no NVML here (replay, DCGM-only, CI): not an error
            log.debug("scope: NVML process list unavailable: %s", err)
            self._use_nvml = False
            return ()
        return tuple(sorted({gpu for gpu, pid, _ in procs if pid in pids}, key=_gpu_order))

    def close(self) -> None:
        if self._devices is not None:
            self._devices.close()


def _pid_of(spec: EngineSpec) -> int | None:
    """The engine's root PID: as configured, else the oldest process whose command line holds it."""
    if spec.pid is not None:
        return spec.pid
    if not spec.process:
        return None
    from exporter.process.sampler import find_by_substring, own_family

    proc = find_by_substring(spec.process, own_family())
    return None if proc is None else int(proc.pid)


# --------------------------------------------------------------------------- resolution


def _gpu_order(g: str) -> tuple[int, str]:
    return (len(g), g)


def gpu_uuids(part: Partition) -> dict[str, str]:
    """UUID -> GPU index label, from the GPU series that carry both (one look per GPU suffices)."""
    out: dict[str, str] = {}
    for gpu, points in part.by_gpu.items():
        for p in points:
            if p.name.startswith("llm_gpu_") and (u := p.labels.get("uuid")):
                out.setdefault(u, gpu)
                break
    return out


def _pod_of(part: Partition, engine: str) -> tuple[str, str] | None:
    """(namespace, pod) of an engine: from its series' labels (discovery labels them), else its name."""
    for p in part.by_server.get(engine, []):
        if p.labels.get("pod"):
            return p.labels.get("namespace", ""), p.labels["pod"]
    ns, sep, pod = engine.partition("/")
    return (ns, pod) if sep and pod and "/" not in pod else None


def kubernetes_gpus(part: Partition, engine: str) -> tuple[str, ...]:
    """GPUs the engine's pod holds or runs processes on (empty: no attribution for it)."""
    pod = _pod_of(part, engine)
    if pod is None:
        return ()
    found = {
        p.labels["gpu"]
        for name in (POD_INFO, POD_PROCESS_MEMORY)
        for p in part.snap.find(name)
        if "gpu" in p.labels and (p.labels.get("namespace", ""), p.labels.get("pod", "")) == pod
    }
    return tuple(sorted(found, key=_gpu_order))


def live_of(part: Partition) -> tuple[str, ...]:
    """The live GPUs of the partitioned snapshot (``signals.live_gpus`` over its GPU series only)."""
    return tuple(live_gpus(Snapshot(part.snap.timestamp, [p for ps in part.by_gpu.values() for p in ps], {})))


def resolve(specs: Sequence[EngineSpec], snap: Snapshot | Partition, process_gpus: ProcessGpus | None = None) -> dict[str, Scope]:
    """Each engine's scope, by the order in the module docstring."""
    part = snap if isinstance(snap, Partition) else partition(snap)
    uuids = gpu_uuids(part)
    every = live_of(part)
    out: dict[str, Scope] = {}
    for spec in specs:
        out[spec.name] = _resolve_one(spec, part, uuids, every, process_gpus)
    return out


def _resolve_one(
    spec: EngineSpec, part: Partition, uuids: Mapping[str, str], every: tuple[str, ...], process_gpus: ProcessGpus | None
) -> Scope:
    if spec.gpus:
        mapped = [g if g.isdigit() else uuids.get(g) for g in spec.gpus]
        gpus = tuple(sorted({g for g in mapped if g is not None}, key=_gpu_order))
        missing = [g for g, m in zip(spec.gpus, mapped) if m is None or m not in every]
        notice = None
        if missing and every:
            notice = f"engine {spec.name}: configured GPU(s) {', '.join(missing)} not reported by the GPU source"
        return Scope(spec.name, gpus, "config", notice)
    k8s = kubernetes_gpus(part, spec.name)
    if k8s:
        return Scope(spec.name, k8s, "kubernetes")
    if process_gpus is not None and (spec.pid is not None or spec.process):
        found = process_gpus.gpus(spec, uuids)
        if found is not None:
            gpus, how = found
            notice = None if gpus else f"engine {spec.name}: its process uses no GPU ({how})"
            return Scope(spec.name, gpus, "process", notice)
    notice = None
    if len(every) > 1:  # one GPU: "every GPU" is no guess worth a notice
        notice = (
            f"engine {spec.name}: judged over every GPU of the node ({', '.join(every)}): set engines[].gpus "
            "(--engine-gpus), or let Kubernetes or the process sampler tell its GPUs"
        )
    return Scope(spec.name, every, "node", notice)


# --------------------------------------------------------------------------- the scoped snapshot


def _foreign_source(name: str, engine: str | None, engines: Iterable[str]) -> bool:
    kind, sep, owner = name.partition(":")
    return bool(sep) and kind in PER_ENGINE_SOURCES and owner != engine and owner in set(engines)


@dataclass(frozen=True)
class Partition:
    """A snapshot's points split once per cycle: by engine (``server``), by GPU, the rest.

    Why: a node can serve dozens of engines (Kubernetes discovery), each with thousands of
    series; cutting one scope must not walk every point of every other engine again.
    """

    snap: Snapshot
    by_server: dict[str, list[Point]]
    by_gpu: dict[str, list[Point]]
    node: list[Point]


#: families labelled ``engine`` (the engine's name) rather than ``server``: they belong to that engine's scope
ENGINE_KEYED_PREFIXES: tuple[str, ...] = ("llm_capacity_", "llm_operator_")


def partition(snap: Snapshot) -> Partition:
    by_server: dict[str, list[Point]] = {}
    by_gpu: dict[str, list[Point]] = {}
    node: list[Point] = []
    for p in snap.points:
        server = p.labels.get("server")
        if server is None and p.name.startswith(ENGINE_KEYED_PREFIXES):
            server = p.labels.get("engine")  # published per engine under its name (exporter/capacity, exporter/profile)
        if server is not None:
            by_server.setdefault(server, []).append(p)
            continue
        gpu = p.labels.get("gpu")
        if gpu is not None:
            by_gpu.setdefault(gpu, []).append(p)
        elif not p.name.startswith("llm_parallel_"):
            node.append(p)
    return Partition(snap, by_server, by_gpu, node)


def scoped(snap: Snapshot | Partition, engine: str | None, gpus: Iterable[str], engines: Iterable[str]) -> Snapshot:
    """The snapshot with only what belongs to ``engine`` (None: no engine, GPU series only) on ``gpus``.

    Kept: series of the engine (``server`` = its name), series of its GPUs (``gpu`` label), and
    node series that name neither; dropped: every other engine's and GPU's series and the
    published parallel-group series (the scope's group is recomputed from its own GPUs).
    Sources of other engines (``engine:B``, ``process:B``, ``probe:B``) are left out too, so
    their faults are not this engine's notices.
    """
    part = snap if isinstance(snap, Partition) else partition(snap)
    whole = part.snap
    points = [*(part.by_server.get(engine, []) if engine is not None else []), *part.node]
    for g in gpus:
        points += part.by_gpu.get(g, [])
    names = set(engines)
    sources = {n: st for n, st in (whole.sources or {}).items() if not _foreign_source(n, engine, names)}
    return Snapshot(
        whole.timestamp, points, sources, monotonic=whole.monotonic, valid_until=whole.valid_until, version=whole.version
    )


def scope_groups(configured: Mapping[str, list[int]], gpus: Sequence[str]) -> dict[str, list[int]]:
    """The engine's parallel groups: the configured groups cut to its GPUs (two engines are never
    one group); none configured or none overlapping: one group of its own GPUs."""
    own = {int(g) for g in gpus if g.isdigit()}
    out = {name: [g for g in members if g in own] for name, members in configured.items()}
    out = {name: members for name, members in out.items() if members}
    if not out and own:
        out = {"all": sorted(own)}
    return out


def specs_from(engines: Iterable[Any]) -> list[EngineSpec]:
    """EngineSpecs from the config's engines (exporter/config.py EngineConfig)."""
    return [
        EngineSpec(e.name, tuple(getattr(e, "gpus", ()) or ()), getattr(e, "pid", None), getattr(e, "process", None))
        for e in engines
    ]
