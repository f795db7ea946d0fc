"""The engine's profiler routes as the driver calls them (a real HTTP engine on 127.0.0.1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.engines.config import EngineConfig
from exporter.profile.driver import EngineProfiler, ProfilerError
from tests.profile.profiling_engine import ProfilingEngine


def test_sglang_is_told_where_to_write_and_the_scrape_token_is_sent(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("tok-123\n")
    with ProfilingEngine(tmp_path) as engine:
        cfg = EngineConfig(url=engine.url, name="s", type="sglang", bearer_token_file=str(token))
        driver = EngineProfiler(cfg, "sglang")
        driver.start("/profiles")
        driver.stop(10)
    assert engine.calls == ["/start_profile", "/stop_profile"]
    assert json.loads(engine.bodies[0]) == {"output_dir": "/profiles", "activities": ["CPU", "GPU"]}
    assert engine.bodies[1] == b""
    assert all(h["Authorization"] == "Bearer tok-123" for h in engine.headers)


def test_vllm_start_has_no_body_and_a_missing_route_says_how_to_start_vllm(tmp_path: Path) -> None:
    with ProfilingEngine(tmp_path) as engine:
        driver = EngineProfiler(EngineConfig(url=engine.url, name="v", type="vllm"), "vllm")
        driver.start("/ignored")
        assert engine.bodies == [b""]
        engine.routes = False
        with pytest.raises(ProfilerError) as err:
            driver.start("/ignored")
    assert err.value.status == 422
    assert "serves no profiler route" in err.value.message and "--profiler-config" in err.value.message


def test_an_engine_that_does_not_answer_is_a_502_naming_it() -> None:
    driver = EngineProfiler(EngineConfig(url="http://user:pw@127.0.0.1:9/metrics", name="v", type="vllm"), "vllm")
    with pytest.raises(ProfilerError) as err:
        driver.stop(2)
    assert err.value.status == 502
    assert err.value.message.startswith("http://127.0.0.1:9/stop_profile: the engine did not answer")
    assert "pw" not in err.value.message


@pytest.mark.parametrize("family", ["tgi", "llamacpp", "trtllm"])
def test_engines_without_profiler_routes_are_refused_before_any_call(family: str) -> None:
    with pytest.raises(ProfilerError, match="has no profiler route") as err:
        EngineProfiler(EngineConfig(url="http://127.0.0.1:9/metrics", name="x", type=family), family)
    assert err.value.status == 422
