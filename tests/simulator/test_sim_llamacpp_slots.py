"""The simulator served as llama.cpp: /props and /slots in the real llama-server shape, and its slots
cut out of the KV cache as llama.cpp cuts them (-c split over -np, each slot reserved in full).

Real parts: the simulator on 127.0.0.1 (uvicorn on a thread), the exporter's own llama.cpp readers
(exporter/engines/llamacpp_slots.py, exporter/engines/settings.py) and its EngineSource scraping it.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from exporter.engines import llamacpp_slots, settings
from exporter.engines.config import EngineConfig
from exporter.engines.source import EngineSource
from exporter.loadgen import LoadSpec
from exporter.samples import Sample
from exporter.simulator.instance import Simulator
from exporter.simulator.scenarios import SCENARIOS
from tests.simulator.sim_helpers import BackgroundLoad, sim_server
from tests.support.waiting import wait_until

FIXTURE = Path(__file__).resolve().parents[1] / "engines" / "fixtures" / "llamacpp-b11434-props.json"
LABELS = {"server": "s", "engine": "llamacpp", "model": "", "rank": ""}


def test_slots_are_the_contexts_that_fit_in_the_kv_cache() -> None:
    """32768 KV tokens: 4 slots of 8192, 8 of 4096 (a shorter context per slot is more slots in the same
    memory, as llama.cpp's -np up with -c kept), never more than --max-num-seqs."""
    over = SCENARIOS["over_reserved_context"]
    assert over.dialect == "llamacpp" and over.launch_settings() == {"max_model_len": "8192"}
    assert Simulator("over_reserved_context", "llamacpp", {"max_model_len": 8192}).engine.config.max_num_seqs == 4
    assert Simulator("over_reserved_context", "llamacpp", {"max_model_len": 4096}).engine.config.max_num_seqs == 8
    capped = Simulator("over_reserved_context", "llamacpp", {"max_model_len": 256, "max_num_seqs": 16})
    assert capped.engine.config.max_num_seqs == 16
    # other dialects keep their own admission: max_num_seqs as given
    assert Simulator("over_reserved_context", "vllm", {"max_model_len": 8192}).engine.config.max_num_seqs == 64


def test_a_context_larger_than_the_cache_is_a_clear_error() -> None:
    with pytest.raises(ValueError) as err:
        Simulator("over_reserved_context", "llamacpp", {"max_model_len": 65536})
    message = str(err.value)
    assert "\n" not in message and "65536" in message and "32768" in message and "one slot" in message


def test_props_has_the_real_shape_and_the_exporter_reads_it() -> None:
    real = json.loads(FIXTURE.read_text())
    with sim_server("over_reserved_context", "llamacpp", max_model_len=8192) as srv:
        resp = httpx.get(srv.base_url + "/props", timeout=10)
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("application/json")
        props = resp.json()
        slots = httpx.get(srv.base_url + "/slots", timeout=10).json()
    # the keys the real server answers, at the same places, with the same types
    assert set(props) <= set(real)
    assert type(props["total_slots"]) is type(real["total_slots"]) is int
    assert type(props["default_generation_settings"]["n_ctx"]) is int
    read = settings.from_llamacpp_props(props)
    assert read.numbers == {"slots": 4.0, "context_per_slot": 8192.0}
    # idle: every slot listed, none processing, in the shape the real /slots has
    assert [s["id"] for s in slots] == [0, 1, 2, 3] and not any(s["is_processing"] for s in slots)
    assert all(s["n_ctx"] == 8192 for s in slots)
    busy = {p.name: p.value for p in llamacpp_slots.slots_points(json.dumps(slots), LABELS)}
    assert busy == {"llm_scheduler_slots_busy": 0.0, "llm_kv_cache_used_tokens": 0.0}


def test_other_dialects_do_not_serve_props() -> None:
    with sim_server("healthy", "vllm", time_scale=20.0) as srv:
        for route in ("/props", "/slots"):
            resp = httpx.get(srv.base_url + route, timeout=10)
            assert resp.status_code == 404 and "vllm" in resp.json()["error"]["message"], route


def test_busy_slots_under_load_reach_the_exporter_as_slot_evidence() -> None:
    """16 clients on 4 slots: /slots lists 4 busy slots each holding its request's prompt and decoded
    tokens, and the exporter's EngineSource scraping the simulator publishes the slots, the busy slots
    and the context per slot as a launch setting."""
    with sim_server("over_reserved_context", "llamacpp", max_model_len=8192, time_scale=4.0) as srv:
        spec = LoadSpec(
            srv.base_url,
            concurrency=16,
            duration_s=120,
            prompt_tokens=((256, 1.0),),
            max_tokens=((128, 1.0),),
            shared_prefix_ratio=0.0,
            seed=1,
        )
        with BackgroundLoad(spec) as load:

            def all_busy() -> list[dict[str, object]] | None:
                body: list[dict[str, object]] = httpx.get(srv.base_url + "/slots", timeout=10).json()
                return body if all(s["is_processing"] for s in body) else None

            slots = wait_until(all_busy, timeout=60, what="all 4 slots busy")
            assert len(slots) == 4
            for slot in slots:
                assert 0 < int(str(slot["n_prompt_tokens"])) <= 256
            source = EngineSource(EngineConfig(name="sim", url=srv.base_url + "/metrics", type="llamacpp", timeout=5.0))
            try:
                result = source.sample()
            finally:
                source.close()
            load.stop()
        values = {(p.name, p.labels.get("setting", "")): p.value for p in result.points if isinstance(p, Sample)}
        assert values[("llm_scheduler_slots", "")] == 4.0
        assert values[("llm_engine_setting", "context_per_slot")] == 8192.0
        assert values[("llm_engine_setting", "slots")] == 4.0
        assert 0 <= values[("llm_scheduler_slots_busy", "")] <= 4.0
