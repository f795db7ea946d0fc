"""``/profile`` sits behind the exporter's basic auth like every path but /healthz and /readyz:
without the password nothing is profiled; with it the profile runs (a real server, a real engine)."""

from __future__ import annotations

from pathlib import Path

import bcrypt
import requests

from exporter.engines.config import EngineConfig
from exporter.profile.api import build_router
from exporter.profile.config import ProfileConfig
from exporter.profile.run import Profiler
from exporter.profile.state import ProfileState
from exporter.server import create_app
from exporter.store import SnapshotStore
from exporter.webconfig import WebConfig
from tests.profile.profiling_engine import ProfilingEngine
from tests.support.asgi import UvicornThread


def test_profile_needs_the_exporters_credentials(tmp_path: Path) -> None:
    with ProfilingEngine(tmp_path) as engine:
        profiler = Profiler(
            ProfileConfig(True, str(tmp_path)),
            [EngineConfig(url=engine.url, name="A", type="vllm")],
            SnapshotStore(),
            ProfileState(),
        )
        users = {"ops": bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4))}
        app = create_app(SnapshotStore(), [build_router(profiler)], WebConfig(basic_auth_users=users))
        with UvicornThread(app) as server:
            url = f"http://127.0.0.1:{server.port}/profile"
            for auth in (None, ("ops", "wrong")):
                r = requests.post(url, params={"engine": "A", "seconds": "0.5"}, auth=auth, timeout=10)
                assert r.status_code == 401
            assert engine.calls == []
            r = requests.post(url, params={"engine": "A", "seconds": "0.5"}, auth=("ops", "s3cret"), timeout=30)
            assert r.status_code == 200, r.text
            assert engine.calls == ["/start_profile", "/stop_profile"]
            assert requests.get(url, params={"engine": "A"}, timeout=10).status_code == 401
