"""Prefix sharing broken mid-run (issue 36): a salted request finds no other request's cached blocks,
while its prompt is still looked up; ``POST /sim/prefix_cache`` switches it live and back."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from exporter.simulator.requests import SimRequest
from exporter.simulator.scenarios import SCENARIOS
from exporter.simulator.scheduler import Scheduler
from exporter.simulator.settings import SimConfig
from exporter.simulator.stats import EngineStats
from tests.simulator.sim_helpers import sim_server

MODEL = SimConfig().model
SHARED = [(i * 2654435761) & 0xFFFFFFFF for i in range(64)]  # four 16-token blocks


def request(tag: str, salt: bytes = b"") -> SimRequest:
    ids = SHARED + [hash((tag, i)) & 0xFFFFFFFF for i in range(36)]
    return SimRequest(id=tag, prompt_ids=ids, max_tokens=2, streaming=True, sink=lambda e: None, arrival=0.0, cache_salt=salt)


def drain(s: Scheduler, t: float) -> float:
    while not (plan := s.schedule(t)).empty:
        s.apply(plan, t + 0.01)
        t += 0.01
    return t


def test_a_salted_request_is_looked_up_and_finds_nothing_an_unsalted_one_finds_the_prefix() -> None:
    s = Scheduler(SimConfig(block_size=16), EngineStats())
    s.submit(request("first"))
    t = drain(s, 0.0)
    s.submit(request("salted", salt=b"salt-2"))
    t = drain(s, t)
    st = s.stats.freeze()
    assert st.counter("prefix_queries") == 200 and st.counter("prefix_hits") == 0  # looked up, nothing shared
    s.submit(request("plain"))
    drain(s, t)
    assert s.stats.freeze().counter("prefix_hits") == 64  # the unsalted prefix is still cached


@pytest.fixture
def url() -> Iterator[str]:
    with sim_server("shared_prefix", "vllm", time_scale=20.0) as srv:
        yield srv.base_url


def _prefix(client: httpx.Client) -> tuple[float, float]:
    pc = client.get("/sim/state").json()["prefix_cache"]
    return pc["queried_tokens"], pc["hit_tokens"]


def test_post_prefix_cache_breaks_sharing_live_and_restores_it(url: str) -> None:
    prompt = " ".join(f"shared{i}" for i in range(96))
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 2}
    with httpx.Client(base_url=url, timeout=60) as client:
        assert client.post("/v1/completions", json=body).status_code == 200  # caches the prefix
        off = client.post("/sim/prefix_cache", json={"shared": False})
        assert off.status_code == 200 and off.json()["config"]["cache_salt_per_request"] is True
        assert client.get("/sim/state").json()["scenario"] == "shared_prefix"  # the scenario and its load stay
        queried, hits = _prefix(client)
        assert client.post("/v1/completions", json=body).status_code == 200
        now_queried, now_hits = _prefix(client)
        assert now_queried > queried and now_hits == hits
        bad = client.post("/sim/prefix_cache", json={"shared": "no"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "shared"
        assert client.post("/sim/prefix_cache", json={"shared": True}).json()["config"]["cache_salt_per_request"] is False
        assert client.post("/v1/completions", json=body).status_code == 200
        assert _prefix(client)[1] > now_hits


def test_the_shared_prefix_scenario_is_a_shared_system_prompt() -> None:
    load = SCENARIOS["shared_prefix"].load
    assert load.shared_prefix_ratio == 1.0 and load.prefix_groups == 1
    assert load.shared_prefix_tokens / load.prompt_tokens[0][0] > 0.8


def test_post_prefix_cache_switches_caching_off_live_nothing_is_looked_up_and_back(url: str) -> None:
    """``{"enabled": false}``: as a restart with --no-enable-prefix-caching, no prompt is looked up (vLLM's
    prefix-cache counters stand still) and the engine's cache config says so; true restores lookups."""
    prompt = " ".join(f"shared{i}" for i in range(96))
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 2}
    with httpx.Client(base_url=url, timeout=60) as client:
        assert client.post("/v1/completions", json=body).status_code == 200
        off = client.post("/sim/prefix_cache", json={"enabled": False})
        assert off.status_code == 200 and off.json()["config"]["enable_prefix_caching"] is False
        assert 'enable_prefix_caching="False"' in client.get("/metrics").text
        before = _prefix(client)
        assert client.post("/v1/completions", json=body).status_code == 200
        assert _prefix(client) == before  # served, and nothing looked up
        assert client.post("/sim/prefix_cache", json={}).status_code == 400
        bad = client.post("/sim/prefix_cache", json={"enabled": 0})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "enabled"
        assert client.post("/sim/prefix_cache", json={"enabled": True}).json()["config"]["enable_prefix_caching"] is True
        assert client.post("/v1/completions", json=body).status_code == 200
        assert _prefix(client)[0] > before[0]
