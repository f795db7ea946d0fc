"""The measured capacity at SLO inside ``serve``: a profile per engine against its live load.

``tune`` and ``ramp`` measure what one configuration carries within its SLO;
this package carries that number into production (issue 22, docs/capacity.md):

* ``profile.py`` — a tune.json or ramp report.json into a frozen ``Profile``;
* ``fingerprint.py`` — the configuration measured, against the live one (staleness);
* ``watch.py`` — the file re-read when it changes, the last good profile kept;
* ``live.py`` — an engine's in-flight requests, finished rate, output tokens/s and mean lengths;
* ``layout.py`` — TP x PP x DP and the GPUs, per-GPU / per-user figures, the scaling efficiency;
* ``source.py`` — the ``capacity_profile`` step (exporter/derive.py) publishing ``llm_capacity_*``;
* ``config.py`` — ``--capacity-profile``, ``--capacity-headroom``, ``engines[].capacity_profile``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from exporter.capacity.config import ProfiledEngine
    from exporter.capacity.profile import Profile
    from exporter.capacity.source import CapacityProfileStep


def build_capacity_steps(
    profiles: Mapping[str, Profile], engines: Sequence[ProfiledEngine], headroom: float
) -> list[CapacityProfileStep]:
    """The ``capacity_profile`` step of the derive stage when any engine has a profile (none otherwise).

    ``profiles``: engine name -> its loaded profile (``apply_capacity_flags`` in config.py), published
    in the order of ``engines``; ``headroom``: ``--capacity-headroom``.
    """
    if not profiles:
        return []
    from exporter.capacity.source import CapacityProfileStep

    return [CapacityProfileStep([(e.name, profiles[e.name]) for e in engines if e.name in profiles], headroom=headroom)]


__all__ = ["build_capacity_steps"]
