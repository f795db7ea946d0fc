"""GPU sources, chosen by ``--gpu-source``; every one is named ``gpu``.

``auto`` (default): DCGM when its bindings import and it sees a GPU, else NVML
when it initialises and finds a GPU, else no GPU source (one warning line).
``dcgm``: embedded DCGM host engine. ``dcgm:HOST[:PORT]``: standalone
``nv-hostengine``. ``nvml``: nvidia-ml-py with GPM. ``none``: no GPU metrics.
``replay:PATH[,PATH...]``: recorded CSV traces, one per GPU (``kernels`` and
``serving`` name the bundled H200 traces). ``sim:BASE_URL``: the simulator's
``/sim/gpu`` JSON. ``dcgm-exporter:URL``: the node's dcgm-exporter ``/metrics``
(exporter/gpu/dcgm_exporter.py): the GPU Operator's profiler, read rather than fought.

``auto`` with a dcgm-exporter URL configured (``--dcgm-exporter-url``,
``LLM_EXPORTER_DCGM_EXPORTER_URL``, the Helm chart's ``gpu.dcgmExporterUrl``) reads
it, and never falls back to DCGM or NVML: where dcgm-exporter runs, an embedded host
engine or GPM of ours would be a second profiler on the same GPUs (both DaemonSets
often start together, so a dcgm-exporter not answering yet is waited for: the source
retries every sample and says why meanwhile).

An explicit ``dcgm`` or ``nvml`` that cannot start now still yields a source:
its samples fail with ``dcgm_unavailable`` / ``library_not_found`` and it
retries on every sample, so the exporter serves its own health meanwhile and
recovers once the library appears. See docs/gpu-sources.md.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from exporter.gpu.dcgm import DEFAULT_BINDING_PATHS, DcgmSource
from exporter.gpu.dcgm_exporter import DcgmExporterSource, parse_url
from exporter.gpu.nvml import NvmlSource
from exporter.gpu.replay import BUNDLED_TRACES, ReplaySource, bundled_trace
from exporter.gpu.sim import SimSource
from exporter.samples import SourceError
from exporter.sources import Source

__all__ = ["build_gpu_source", "bundled_trace", "parse_spec"]

log = logging.getLogger(__name__)

SPEC_HELP = "auto, dcgm, dcgm:HOST[:PORT], dcgm-exporter:URL, nvml, none, replay:PATH[,PATH...] or sim:BASE_URL"


def parse_spec(spec: str) -> tuple[str, str]:
    """Split and check a ``--gpu-source`` value; ValueError says what is wrong."""
    kind, _, arg = spec.strip().partition(":")
    if kind in ("auto", "nvml", "none") and not arg:
        return kind, ""
    if kind == "dcgm":
        return kind, arg
    if kind == "replay" and any(p.strip() for p in arg.split(",")):
        return kind, arg
    if kind == "sim" and arg.startswith(("http://", "https://")):
        return kind, arg
    if kind == "dcgm-exporter":
        return kind, parse_url(arg)
    raise ValueError(f"expected {SPEC_HELP}, got {spec!r}")


def replay_paths(arg: str) -> list[Path]:
    """Paths of a replay spec; a bare bundled name (``kernels``) that is not a file means the bundled trace."""
    paths = []
    for part in (p.strip() for p in arg.split(",")):
        if not part:
            continue
        path = Path(part)
        if part in BUNDLED_TRACES and not path.exists():
            path = bundled_trace(part)
        paths.append(path)
    return paths


def build_gpu_source(
    spec: str,
    interval: float,
    timeout: float,
    *,
    nvml_module: Any = None,
    dcgm_binding_paths: tuple[str, ...] = DEFAULT_BINDING_PATHS,
    dcgm_exporter_url: str | None = None,
    pod_info: bool = True,
) -> Source | None:
    """The GPU source for ``spec``, or None for ``none`` and for ``auto`` without a GPU.

    ``nvml_module`` replaces ``pynvml`` (tests pass a fake); ``dcgm_binding_paths``
    replaces the default DCGM binding folders; ``dcgm_exporter_url`` is the node's
    dcgm-exporter that ``auto`` tries first; ``pod_info``: a dcgm-exporter source
    publishes the pods it names (off while the exporter's own Kubernetes attribution runs).
    """
    kind, arg = parse_spec(spec)
    if kind == "none":
        return None
    if kind == "replay":
        return ReplaySource(replay_paths(arg), interval, timeout)
    if kind == "sim":
        return SimSource(arg, interval, timeout)
    if kind == "dcgm":
        return DcgmSource(interval, timeout, host=arg or None, binding_paths=dcgm_binding_paths)
    if kind == "dcgm-exporter":
        return DcgmExporterSource(arg, interval, timeout, pod_info=pod_info)
    if kind == "nvml":
        return NvmlSource(interval, timeout, nvml=nvml_module)
    if dcgm_exporter_url:
        return _node_dcgm_exporter(DcgmExporterSource(dcgm_exporter_url, interval, timeout, pod_info=pod_info))
    return _auto(interval, timeout, nvml_module, dcgm_binding_paths)


def _node_dcgm_exporter(source: DcgmExporterSource) -> DcgmExporterSource:
    """``auto`` on a node whose dcgm-exporter is configured: that one, answering yet or not."""
    try:
        log.info("GPU source: dcgm-exporter at %s (%d GPUs)", source.url, source.start())
    except SourceError as err:
        log.warning("GPU source: dcgm-exporter at %s, not answering yet (%s); retried every sample", source.url, err.message)
    return source


def _auto(interval: float, timeout: float, nvml_module: Any, dcgm_binding_paths: tuple[str, ...]) -> Source | None:
    """DCGM, else NVML, else None; each probe must find at least one GPU."""
    reasons = []
    candidates: list[DcgmSource | NvmlSource] = [
        DcgmSource(interval, timeout, binding_paths=dcgm_binding_paths),
        NvmlSource(interval, timeout, nvml=nvml_module),
    ]
    for source in candidates:
        kind = type(source).__name__.removesuffix("Source").lower()
        try:
            if source.start() > 0:
                log.info("GPU source: %s", kind)
                return source
            reasons.append(f"{kind}: no GPU found")
        except SourceError as err:
            reasons.append(f"{kind}: {err.message}")
        except Exception as err:  # a broken library must not stop the exporter
            reasons.append(f"{kind}: {type(err).__name__}: {err}")
        source.close()
    log.warning("no GPU source available, GPU metrics disabled (%s)", "; ".join(reasons))
    return None
