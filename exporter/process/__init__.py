"""Process sampler: per-thread CPU of each engine's serving process tree.

``build_process_sources(engines, interval)`` makes one ``ProcessSource`` per engine that
names its process (``pid`` or ``process``, a command-line substring). In
Kubernetes, run the exporter as a sidecar with ``shareProcessNamespace: true``
or as a DaemonSet with ``hostPID: true`` so it can see the server's process
(docs/diagnosis.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from exporter.process.sampler import ProcessSource

if TYPE_CHECKING:
    from exporter.engines.config import EngineConfig
    from exporter.sources import Source


def build_process_sources(engines: Sequence[EngineConfig], interval: float) -> list[Source]:
    """One source per engine with ``pid`` or ``process`` set, named ``process:<engine name>``,
    sampled every ``interval`` (--process-interval)."""
    return [
        ProcessSource(e.name, pid=e.pid, substring=e.process, interval=interval, timeout=max(1.0, interval))
        for e in engines
        if e.pid or e.process
    ]


__all__ = ["ProcessSource", "build_process_sources"]
