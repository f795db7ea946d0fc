"""``dcgm-exporter:URL``: read the node's dcgm-exporter instead of starting a second profiler.

Why: on most Kubernetes GPU nodes NVIDIA's GPU Operator already runs dcgm-exporter,
usually with an embedded DCGM host engine. DCGM's profiling fields (SM active and
occupancy, tensor and DRAM activity) are collected by one profiler per GPU: a second
host engine, or a second process asking for profiling counters, fails or takes them
away from it. Reading what dcgm-exporter already publishes costs the node nothing.

What is read: one bounded GET of its ``/metrics`` per GPU interval (the engine
scrape's client, ``exporter/engines/fetch.py``: one deadline for the whole answer, a
byte cap) and the selective text parser (``exporter/engines/textparse.py``: only the
``DCGM_FI_*`` names below are materialised, a line budget). Each field is turned into
a *reading* (the replay CSV keys and units, ``exporter/gpu/fields.py``), so the series
published are exactly those of the ``dcgm`` and ``nvml`` sources.

Names: dcgm-exporter names a metric after the DCGM field constant in its collectors
CSV. DCGM 4.6 renamed many constants (``DCGM_FI_PROF_SM_ACTIVE`` became
``DCGM_FI_PROF_SM_UTIL_RATIO``, ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`` became
``DCGM_FI_DEV_CLOCKS_EVENT_REASONS``; the ids did not change), and a CSV may use either,
so both spellings map to the same reading key. ``DCGM_FI_DEV_GPU_UTIL_RATIO`` is still
DCGM's integer percent (the field kept its INT64 type), so it is read as percent like
the old name. The 1.x names of ``--use-old-namespace`` (``dcgm_gpu_utilization``) are
not read.

GPUs: one per ``UUID`` (or ``uuid``) label, indexed by its ``gpu`` label. Series of a
MIG instance (``GPU_I_ID``) are left out: the exporter's GPU series are per physical
GPU. DCGM's blank sentinels (a value at or over 2^63 - 16, e.g. an unsupported
``DCGM_FI_DEV_MEMORY_TEMP``) mean absent, never a number. Memory total is
``DCGM_FI_DEV_FB_TOTAL`` when listed, else used + free + reserved (NVML's total).

Profiling: dcgm-exporter's default CSV leaves ``DCGM_FI_PROF_SM_ACTIVE`` and
``DCGM_FI_PROF_SM_OCCUPANCY`` commented out. The source says which of the four
profiling classes the node's dcgm-exporter does not publish, once per change, in one
warning line that names the CSV lines to add, and per GPU in
``llm_gpu_profiling_metric_available{metric}``.

Pods: with Kubernetes mapping on, dcgm-exporter labels a GPU's series with the
``pod``/``namespace``/``container`` it is allocated to. When the exporter's own
Kubernetes attribution is off, those become ``llm_gpu_pod_info`` (one per GPU and
container), so ``llm_gpu_pod_info * on(uuid) group_left …`` works the same way; with it
on, the kubelet's answer is the one published.

Interval: dcgm-exporter samples every 30 s by default (``-c 30000``); the verdict
reads the GPU each diagnosis cycle, so set its ``-c`` to 1000-5000 ms on nodes this
exporter watches (docs/gpu-sources.md).

Faults: refused, reset, no answer in time, non-200, over the byte cap -> ``SourceError``
``connection``, ``timeout``, ``http_status``, ``too_large`` (the engine scrape's reasons);
not UTF-8 or not the text format -> ``parse``; over the line budget or ``MAX_GPUS`` ->
``too_many_series``; an answer with no ``DCGM_FI_*`` series of a GPU -> ``bad_response``.
Each sample tries again, so the source recovers when dcgm-exporter does.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass, field
from decimal import Decimal

from exporter.engines.fetch import Request, get
from exporter.engines.textparse import Labels, ParseError, SeriesLimitError, parse
from exporter.engines.urls import plain_http_url, safe_url
from exporter.gpu.dcgm import is_blank
from exporter.gpu.fields import MIB, PROFILING_KEYS, PROFILING_METRICS, reading_points
from exporter.samples import Point, Sample, SampleResult, SourceError

log = logging.getLogger(__name__)

#: the most bytes of one dcgm-exporter answer (8 GPUs with every DCP field and pod labels: ~60 KB)
MAX_BODY_BYTES = 4 * 1024 * 1024
#: the most sample lines read from one answer (per-link NVLink series included)
MAX_INPUT_SERIES = 50_000
#: the most GPUs one answer may describe; later ones are left out with a partial error
MAX_GPUS = 64

#: field name (every spelling) -> (reading key, factor from dcgm-exporter's unit to the reading's)
FIELDS: dict[str, tuple[str, float]] = {
    # percent
    "DCGM_FI_DEV_GPU_UTIL": ("nvml_gpu_util", 1.0),
    "DCGM_FI_DEV_GPU_UTIL_RATIO": ("nvml_gpu_util", 1.0),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("nvml_mem_util", 1.0),
    # profiling ratios 0-1 -> percent
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_util", 100.0),
    "DCGM_FI_PROF_SM_UTIL_RATIO": ("sm_util", 100.0),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("sm_occupancy", 100.0),
    "DCGM_FI_PROF_SM_OCCUPANCY_RATIO": ("sm_occupancy", 100.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_util", 100.0),
    "DCGM_FI_PROF_TENSOR_UTIL_RATIO": ("tensor_util", 100.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_bw_util", 100.0),
    "DCGM_FI_PROF_DRAM_UTIL_RATIO": ("dram_bw_util", 100.0),
    # MiB
    "DCGM_FI_DEV_FB_USED": ("fb_used_mib", 1.0),
    "DCGM_FI_DEV_FB_TOTAL": ("fb_total_mib", 1.0),
    # W
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_BOARD_POWER_WATTS": ("power_w", 1.0),
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": ("power_limit_w", 1.0),
    "DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS": ("power_limit_w", 1.0),
    # MHz
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", 1.0),
    "DCGM_FI_DEV_MAX_SM_CLOCK": ("sm_clock_max_mhz", 1.0),
    # Celsius
    "DCGM_FI_DEV_GPU_TEMP": ("temp_c", 1.0),
    "DCGM_FI_DEV_GPU_TEMP_CELSIUS": ("temp_c", 1.0),
    # bytes/s -> MiB/s
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("pcie_tx_mib_s", 1.0 / MIB),
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("pcie_rx_mib_s", 1.0 / MIB),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": ("nvlink_tx_mib_s", 1.0 / MIB),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": ("nvlink_rx_mib_s", 1.0 / MIB),
    # mJ since the driver loaded
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_mj", 1.0),
    # the PCIe link (not in dcgm-exporter's default CSV; the capacity is absent without them)
    "DCGM_FI_DEV_PCIE_LINK_GEN": ("pcie_link_gen", 1.0),
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": ("pcie_link_width", 1.0),
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": ("pcie_link_gen_max", 1.0),
    "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": ("pcie_link_width_max", 1.0),
}
THROTTLE_FIELDS: tuple[str, ...] = ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")
FB_FREE, FB_RESERVED = "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED"
WANTED: frozenset[str] = frozenset((*FIELDS, *THROTTLE_FIELDS, FB_FREE, FB_RESERVED))

#: profiling reading key -> the collectors CSV line that publishes it
PROFILING_CSV: dict[str, str] = {
    "sm_util": "DCGM_FI_PROF_SM_ACTIVE, gauge, The ratio of cycles an SM has at least 1 warp assigned.",
    "sm_occupancy": "DCGM_FI_PROF_SM_OCCUPANCY, gauge, The ratio of number of warps resident on an SM.",
    "tensor_util": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, gauge, Ratio of cycles the tensor (HMMA) pipe is active.",
    "dram_bw_util": (
        "DCGM_FI_PROF_DRAM_ACTIVE, gauge, Ratio of cycles the device memory interface is active sending or receiving data."
    ),
}

UUID_LABELS = ("UUID", "uuid")
NAME_LABELS = ("modelName", "model_name")
MIG_LABEL = "GPU_I_ID"
#: (namespace, pod, container) label spellings: dcgm-exporter's, then its ``-o`` 1.x ones
POD_LABELS: tuple[tuple[str, str, str], ...] = (
    ("namespace", "pod", "container"),
    ("pod_namespace", "pod_name", "container_name"),
)


def parse_url(arg: str) -> str:
    """The /metrics URL of a ``dcgm-exporter:`` spec (``/metrics`` added without a path; no user
    info: this source sends no credentials); ValueError says what is wrong."""
    return plain_http_url(arg, "dcgm-exporter", "/metrics")


@dataclass
class GpuSeries:
    """What one answer says about one physical GPU."""

    index: int
    uuid: str
    name: str = ""
    reading: dict[str, object] = field(default_factory=dict)
    extra: dict[str, float] = field(default_factory=dict)
    pods: set[tuple[str, str, str]] = field(default_factory=set)


def _first(labels: Labels, names: tuple[str, ...]) -> str:
    return next((labels[n] for n in names if labels.get(n)), "")


def _pod(labels: Labels) -> tuple[str, str, str] | None:
    for ns, pod, container in POD_LABELS:
        if labels.get(pod):
            return labels.get(ns, ""), labels[pod], labels.get(container, "")
    return None


def gpus_from_exposition(text: str, where: str) -> tuple[list[GpuSeries], list[SourceError]]:
    """The GPUs of one dcgm-exporter answer, by ``gpu`` index; SourceError for a bad body."""
    try:
        expo = parse(text, WANTED, max_series=MAX_INPUT_SERIES)
    except SeriesLimitError as err:
        raise SourceError("too_many_series", f"{where}: {err}") from None
    except ParseError as err:
        raise SourceError("parse", f"{where}: not the Prometheus text format: {err}") from None
    gpus: dict[str, GpuSeries] = {}
    partial: list[SourceError] = []
    left_out: set[str] = set()
    for metric, rows in expo.samples.items():
        for labels, value in rows:
            uuid = _first(labels, UUID_LABELS)
            if not uuid or labels.get(MIG_LABEL):
                continue
            gpu = gpus.get(uuid)
            if gpu is None:
                index = labels.get("gpu", "")
                if not index.isascii() or not index.isdigit() or len(index) > 4:
                    raise SourceError("parse", f"{where}: {metric}: gpu label {index[:20]!r} is not a GPU index")
                if len(gpus) >= MAX_GPUS:
                    if not left_out:  # one error for the answer, not one per series of every GPU past the cap
                        partial.append(SourceError("too_many_series", f"{where}: more than {MAX_GPUS} GPUs; the rest left out"))
                    left_out.add(uuid)
                    continue
                gpu = gpus[uuid] = GpuSeries(int(index), uuid, _first(labels, NAME_LABELS))
            pod = _pod(labels)
            if pod is not None:
                gpu.pods.add(pod)
            if is_blank(value):
                continue
            _take(gpu, metric, value)
    return sorted(gpus.values(), key=lambda g: (g.index, g.uuid)), partial[:1]


def _take(gpu: GpuSeries, metric: str, value: float) -> None:
    if metric in FIELDS:
        key, factor = FIELDS[metric]
        # Decimal keeps a ratio of 0.92 at 92 percent, not 92.00000000000001
        gpu.reading[key] = value if factor == 1.0 else float(Decimal(repr(value)) * Decimal(repr(factor)))
    elif metric in THROTTLE_FIELDS:
        if value >= 0 and value == int(value):
            gpu.reading["throttle_reasons"] = int(value)
    else:
        gpu.extra[metric] = value


def reading_of(gpu: GpuSeries) -> dict[str, object]:
    """The GPU's reading, with the memory total derived when dcgm-exporter lists only its parts."""
    reading = {**gpu.reading, "uuid": gpu.uuid, "gpu_name": gpu.name}
    used, free = reading.get("fb_used_mib"), gpu.extra.get(FB_FREE)
    if "fb_total_mib" not in reading and isinstance(used, float) and free is not None:
        reading["fb_total_mib"] = used + free + gpu.extra.get(FB_RESERVED, 0.0)
    return reading


def missing_profiling(gpus: list[GpuSeries]) -> list[str]:
    """Profiling reading keys no GPU of the answer carries, in PROFILING_KEYS order."""
    return [k for k in PROFILING_KEYS if not any(k in g.reading for g in gpus)]


def points_of(gpus: list[GpuSeries], pod_info: bool) -> list[Point]:
    """Schema points of every GPU (``reading_points``) and, with
    ``pod_info``, one ``llm_gpu_pod_info`` per GPU and container dcgm-exporter names."""
    points: list[Point] = []
    for gpu in gpus:
        reading = reading_of(gpu)
        points.extend(reading_points(gpu.index, reading, "dcgm-exporter"))
        if pod_info:
            for namespace, pod, container in sorted(gpu.pods):
                info = {"gpu": str(gpu.index), "uuid": gpu.uuid, "namespace": namespace, "pod": pod, "container": container}
                points.append(Sample("llm_gpu_pod_info", info, 1.0))
    return points


class DcgmExporterSource:
    """GPU source reading a dcgm-exporter's ``/metrics`` (see the module docstring)."""

    name = "gpu"

    def __init__(self, url: str, interval: float, timeout: float, *, pod_info: bool = True) -> None:
        self.url = parse_url(url)
        self.interval = interval
        self.timeout = timeout
        self.pod_info = pod_info
        self._shown = safe_url(self.url)
        self._tls = ssl.create_default_context() if self.url.startswith("https:") else None
        #: the profiling classes last said to be missing (None: nothing said yet)
        self._missing: list[str] | None = None

    def start(self) -> int:
        """GPUs in one answer now (``auto`` probes with it); raises SourceError like ``sample``."""
        return len(self._read()[0])

    def sample(self) -> SampleResult:
        gpus, partial = self._read()
        self._say_missing(missing_profiling(gpus))
        return SampleResult(points_of(gpus, self.pod_info), partial)

    def close(self) -> None:
        """Nothing is held between samples (one connection per answer)."""

    def _read(self) -> tuple[list[GpuSeries], list[SourceError]]:
        response = get(Request(self.url, self.timeout, MAX_BODY_BYTES, {"Accept": "text/plain"}, self._tls))
        if response.status != 200:
            raise SourceError("http_status", f"{self._shown}: HTTP {response.status}")
        try:
            text = response.body.decode("utf-8")
        except UnicodeDecodeError as err:
            raise SourceError("parse", f"{self._shown}: body is not UTF-8 text (byte {err.start})") from None
        gpus, partial = gpus_from_exposition(text, self._shown)
        if not gpus:
            raise SourceError("bad_response", f"{self._shown}: no DCGM_FI_* series with a UUID label (is it dcgm-exporter?)")
        return gpus, partial

    def _say_missing(self, missing: list[str]) -> None:
        """One warning line when the set of unpublished profiling classes changes (and at the first answer)."""
        if missing == self._missing:
            return
        first = self._missing is None
        self._missing = missing
        if missing:
            names = ", ".join(PROFILING_METRICS[k] for k in missing)
            lines = "; ".join(repr(PROFILING_CSV[k]) for k in missing)
            log.warning(
                "dcgm-exporter at %s does not publish %s (unknown to the verdict); add to its collectors CSV (-f): %s",
                self._shown,
                names,
                lines,
            )
        elif not first:
            log.info("dcgm-exporter at %s now publishes all four profiling classes", self._shown)
