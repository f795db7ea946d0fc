"""The measured capacity at SLO inside ``serve``: a profile per engine against its live load.

``tune`` and ``ramp`` measure what one configuration carries within its SLO;
this package carries that number into production (issue 22, docs/capacity.md):

* ``profile.py`` — a tune.json or ramp report.json into a frozen ``Profile``;
* ``fingerprint.py`` — the configuration measured, against the live one (staleness);
* ``watch.py`` — the file re-read when it changes, the last good profile kept;
* ``live.py`` — an engine's in-flight requests, finished rate and mean lengths;
* ``source.py`` — the ``capacity_profile`` step (exporter/derive.py) publishing ``llm_capacity_*``;
* ``config.py`` — ``--capacity-profile``, ``--capacity-headroom``, ``engines[].capacity_profile``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from exporter.capacity.source import CapacityProfileStep
    from exporter.config import Config


def build_capacity_steps(config: Config) -> list[CapacityProfileStep]:
    """The ``capacity_profile`` step of the derive stage when any engine has a profile (none otherwise)."""
    if not config.capacity_profiles:
        return []
    from exporter.capacity.source import CapacityProfileStep

    profiles = [(e.name, config.capacity_profiles[e.name]) for e in config.engines if e.name in config.capacity_profiles]
    return [CapacityProfileStep(profiles, headroom=config.capacity_headroom)]


__all__ = ["build_capacity_steps"]
