"""llama.cpp's /props and /slots become slot and context evidence, on a real local HTTP server.

The bodies below have the shape a real llama-server b11434 returned here (two slots,
n_ctx 512, one processing a 415-token prompt), trimmed to the fields we read.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from exporter.engines import llamacpp_slots
from exporter.engines.config import EngineConfig
from exporter.engines.source import EngineSource
from exporter.samples import Sample

METRICS = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 16
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 0
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 400
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 5
"""
PROPS = {"default_generation_settings": {"params": {"n_predict": -1}, "n_ctx": 512}, "total_slots": 2, "model_alias": "tiny"}
SLOTS = [
    {
        "id": 0,
        "n_ctx": 512,
        "speculative": False,
        "is_processing": True,
        "id_task": 3,
        "n_prompt_tokens": 40,
        "next_token": [{"has_next_token": True, "n_remain": 300, "n_decoded": 60}],
    },
    {
        "id": 1,
        "n_ctx": 512,
        "speculative": False,
        "is_processing": True,
        "id_task": 1,
        "n_prompt_tokens": 415,
        "next_token": [{"has_next_token": True, "n_remain": -1, "n_decoded": 0}],
    },
]
LABELS = {"server": "s", "engine": "llamacpp", "model": "", "rank": ""}


def test_props_and_slots_bodies_become_points() -> None:
    props = {p.name: p.value for p in llamacpp_slots.props_points(json.dumps(PROPS), LABELS)}
    assert props == {"llm_scheduler_slots": 2.0, "llm_kv_cache_slot_context_tokens": 512.0}
    slots = {p.name: p.value for p in llamacpp_slots.slots_points(json.dumps(SLOTS), LABELS)}
    assert slots == {"llm_scheduler_slots_busy": 2.0, "llm_kv_cache_used_tokens": 40 + 60 + 415 + 0}
    idle = [{**SLOTS[0], "is_processing": False}]
    assert {p.name: p.value for p in llamacpp_slots.slots_points(json.dumps(idle), LABELS)}["llm_scheduler_slots_busy"] == 0.0


def test_garbled_bodies_publish_nothing_rather_than_zeros() -> None:
    for body in (None, b"", b"<html>", b"[1, 2]", json.dumps({"total_slots": "two", "default_generation_settings": 5})):
        assert llamacpp_slots.props_points(body, LABELS) == [], body
    for body in (None, b"", b"<html>", json.dumps({"slots": []}), json.dumps([{"id": 0}, 3])):
        assert llamacpp_slots.slots_points(body, LABELS) == [], body
    assert llamacpp_slots.base_of("http://h:8080/metrics") == "http://h:8080"
    assert llamacpp_slots.base_of("http://h:8080/") == "http://h:8080"


class _Llama(BaseHTTPRequestHandler):
    routes: dict[str, tuple[int, bytes]] = {}

    def do_GET(self) -> None:
        status, body = self.routes.get(self.path, (404, b"not found"))
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def _serve(routes: dict[str, tuple[int, bytes]]) -> tuple[ThreadingHTTPServer, str]:
    handler = type("Handler", (_Llama,), {"routes": routes})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_engine_source_adds_slot_evidence_for_llamacpp() -> None:
    server, base = _serve(
        {
            "/metrics": (200, METRICS.encode()),
            "/props": (200, json.dumps(PROPS).encode()),
            "/slots": (200, json.dumps(SLOTS).encode()),
        }
    )
    try:
        result = EngineSource(EngineConfig(url=base + "/metrics", name="llama", timeout=2.0)).sample()
    finally:
        server.shutdown()
        server.server_close()
    values = {p.name: p.value for p in result.points if isinstance(p, Sample)}
    assert values["llm_scheduler_requests_waiting"] == 5.0
    assert values["llm_scheduler_slots"] == 2.0 and values["llm_scheduler_slots_busy"] == 2.0
    assert values["llm_kv_cache_slot_context_tokens"] == 512.0 and values["llm_kv_cache_used_tokens"] == 515.0
    slot = next(p for p in result.points if p.name == "llm_scheduler_slots")
    assert slot.labels["server"] == "llama" and slot.labels["engine"] == "llamacpp"


def test_a_server_without_slots_endpoints_still_scrapes() -> None:
    """--no-slots answers 501; /props missing: the scrape succeeds with the /metrics values only."""
    server, base = _serve({"/metrics": (200, METRICS.encode()), "/slots": (501, b"slots disabled")})
    try:
        result = EngineSource(EngineConfig(url=base + "/metrics", name="llama", timeout=2.0)).sample()
    finally:
        server.shutdown()
        server.server_close()
    names = {p.name for p in result.points}
    assert "llm_scheduler_requests_running" in names
    assert not names & {"llm_scheduler_slots", "llm_scheduler_slots_busy", "llm_kv_cache_used_tokens"}
    assert result.partial_errors == []
