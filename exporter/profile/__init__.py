"""The on-demand operator profile (issue 23 item 4, docs/profile.md).

``POST /profile?engine=NAME&seconds=N`` drives the engine's own profiler
(driver.py, each call under one deadline that shutdown brings forward: calls.py),
reads the Chrome traces it wrote under caps (trace.py), splits the
GPU kernel time into operator kinds by name (classify.py) and publishes
``llm_operator_time_share`` through the store (state.py); run.py is the one
procedure, api.py the routes, config.py the flags.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import APIRouter

    from exporter.engines.config import EngineConfig
    from exporter.profile.config import ProfileConfig
    from exporter.profile.run import Profiler
    from exporter.sources import Source
    from exporter.store import SnapshotStore


@dataclass
class ProfileBundle:
    """What ``serve`` wires in: the routes (always), the publishing source (when on)."""

    router: APIRouter
    sources: list[Source] = field(default_factory=list)
    profiler: Profiler | None = None


def build_profile(settings: ProfileConfig | None, engines: Sequence[EngineConfig], store: SnapshotStore) -> ProfileBundle:
    """The routes, and with ``--enable-profile`` the profiler and its source.

    ``settings``: the profile's flags (config.py; None: the defaults, off); ``engines``: those it may profile.
    """
    from exporter.profile.api import build_router
    from exporter.profile.config import ProfileConfig
    from exporter.profile.run import Profiler
    from exporter.profile.state import ProfileSource, ProfileState

    if settings is None:
        settings = ProfileConfig()
    if not settings.enabled:
        return ProfileBundle(build_router(None))
    state = ProfileState()
    profiler = Profiler(settings, engines, store, state)
    return ProfileBundle(build_router(profiler), [ProfileSource(state)], profiler)
