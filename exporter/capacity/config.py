"""``--capacity-profile`` / ``--capacity-headroom``, their environment variables and ``engines[].capacity_profile``.

Why the profile is read while the configuration is loaded: a profile that is
missing or garbled at start-up is a usage error (one line naming the file,
exit status 2), before any thread starts; later changes of the file are the
source's business (exporter/capacity/watch.py) and never stop serve. A ramp
report is judged at the diagnosis's own SLO (``diagnosis.slo_ttft_p95_seconds``,
``slo_itl_p95_seconds``), so "at SLO" means the same thing in the profile and in
the verdict.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from exporter.errors import UsageError

if TYPE_CHECKING:
    from exporter.capacity.atslo import SLO
    from exporter.capacity.profile import Profile

ENV_PROFILE = "LLM_EXPORTER_CAPACITY_PROFILE"
FLAG_PROFILE = "--capacity-profile"


def headroom_ratio(value: Any) -> float:
    """``--capacity-headroom``: the share of the knee left free, 0 <= x < 1 (``20%`` reads as 0.2)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a ratio between 0 and 1 (such as 0.2), got {value!r}")
    text = str(value).strip()
    scale = 0.01 if text.endswith("%") else 1.0
    try:
        x = float(text.rstrip("%")) * scale
    except ValueError:
        raise ValueError(f"expected a ratio between 0 and 1 (such as 0.2), got {text[:40]!r}") from None
    if not math.isfinite(x) or not 0.0 <= x < 1.0:
        raise ValueError(f"expected a ratio from 0 up to (not including) 1, got {text[:40]!r}")
    return x


def profile_path(value: Any, where: str) -> str:
    """A profile path as written (read when the configuration is complete)."""
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{where}: expected the path of a tune.json or ramp report.json")
    return value.strip()


def add_capacity_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        FLAG_PROFILE,
        dest="capacity_profile",
        default=None,
        metavar="FILE",
        help="capacity profile of the engine: a tune.json (its recommendation, else its baseline) or a ramp "
        f"report.json; publishes llm_capacity_* (applies to the first engine; env {ENV_PROFILE}; docs/capacity.md)",
    )


class ProfiledEngine(Protocol):
    """What the flag touches of an engine (exporter/engines/config.py: EngineConfig)."""

    name: str
    capacity_profile: str | None


def apply_capacity_flags(
    engines: Sequence[ProfiledEngine], diagnosis: Mapping[str, Any], args: argparse.Namespace, env: Mapping[str, str]
) -> dict[str, Profile]:
    """The flag (else the environment) onto the first engine, then engine name -> its profile, every
    engine's file read now; UsageError naming the file for one that cannot be used."""
    from exporter.capacity.profile import ProfileError, load_profile

    flag = getattr(args, "capacity_profile", None)
    raw = flag if flag is not None else env.get(ENV_PROFILE)
    where = FLAG_PROFILE if flag is not None else ENV_PROFILE
    if raw:
        if not engines:
            raise UsageError(f"{where}: needs an --engine to attach to")
        engines[0].capacity_profile = profile_path(raw, where)
    slo = _slo(diagnosis)
    profiles: dict[str, Profile] = {}
    for i, e in enumerate(engines):
        if e.capacity_profile:
            named = where if i == 0 and raw else f"engines[{i}].capacity_profile"
            try:
                profiles[e.name] = load_profile(e.capacity_profile, slo)
            except ProfileError as err:
                raise UsageError(f"{named}: {err}") from None
    return profiles


def _slo(diagnosis: Mapping[str, Any]) -> SLO:
    """The SLO a ramp report is judged at: the diagnosis's (its section is validated elsewhere)."""
    from exporter.capacity.atslo import SLO
    from exporter.diagnosis.thresholds import Thresholds

    try:
        t = Thresholds.from_mapping(diagnosis or None)
    except ValueError:
        t = Thresholds()  # the diagnosis section's own check reports it
    return SLO(t.slo_ttft_p95_seconds, t.slo_itl_p95_seconds)


__all__ = ["ENV_PROFILE", "FLAG_PROFILE", "add_capacity_arguments", "apply_capacity_flags", "headroom_ratio", "profile_path"]
