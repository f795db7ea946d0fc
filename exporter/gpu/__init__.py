"""GPU sources, chosen by ``--gpu-source``; every one is named ``gpu``.

``auto`` (default): DCGM when its bindings import and it sees a GPU, else NVML
when it initialises and finds a GPU, else no GPU source (one warning line).
``dcgm``: embedded DCGM host engine. ``dcgm:HOST[:PORT]``: standalone
``nv-hostengine``. ``nvml``: nvidia-ml-py with GPM. ``none``: no GPU metrics.
``replay:PATH[,PATH...]``: recorded CSV traces, one per GPU (``kernels`` and
``serving`` name the bundled H200 traces). ``sim:BASE_URL``: the simulator's
``/sim/gpu`` JSON.

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
from exporter.gpu.nvml import NvmlSource
from exporter.gpu.replay import BUNDLED_TRACES, ReplaySource, bundled_trace
from exporter.gpu.sim import SimSource
from exporter.samples import SourceError
from exporter.sources import Source

__all__ = ["build_gpu_source", "bundled_trace", "parse_spec"]

log = logging.getLogger(__name__)

SPEC_HELP = "auto, dcgm, dcgm:HOST[:PORT], nvml, none, replay:PATH[,PATH...] or sim:BASE_URL"


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
) -> Source | None:
    """The GPU source for ``spec``, or None for ``none`` and for ``auto`` without a GPU.

    ``nvml_module`` replaces ``pynvml`` (tests pass a fake); ``dcgm_binding_paths``
    replaces the default DCGM binding folders.
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
    if kind == "nvml":
        return NvmlSource(interval, timeout, nvml=nvml_module)
    return _auto(interval, timeout, nvml_module, dcgm_binding_paths)


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
