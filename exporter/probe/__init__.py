"""The black-box canary: TTFT as clients see it, time outside the engine, a hung engine.

Opt-in per engine (``probe:`` in an ``engines:`` item, or ``--probe`` for a
single engine). One ``ProbeSource`` per probed engine, run by the runner like
every source (so never two probes in flight per engine). Modules, one job each:

* ``config.py`` — the ``probe:`` setting and the ``--probe`` / ``--probe-url`` flags;
* ``client.py`` — one HTTP exchange held to one wall-clock deadline;
* ``stream.py`` — the streaming completion and what it measured (``Outcome``);
* ``outside.py`` — the engine's own account of the same window (time outside the
  engine, a frozen engine);
* ``source.py`` — ``ProbeSource``: counters, histograms, last-probe gauges.

See docs/probe.md.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from exporter.engines.config import EngineConfig
    from exporter.probe.source import ProbeSource
    from exporter.store import SnapshotStore

log = logging.getLogger(__name__)


def build_probe_sources(engines: Sequence[EngineConfig], store: SnapshotStore) -> list[ProbeSource]:
    """One ``ProbeSource`` per engine whose config has ``probe:`` set (none otherwise)."""
    from exporter.probe.source import ProbeSource

    sources = [ProbeSource(e, store) for e in engines if e.probe is not None]
    for s in sources:
        log.info("%s", s.describe())
    return sources


__all__ = ["build_probe_sources"]
