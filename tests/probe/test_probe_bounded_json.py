"""The probe decodes the JSON an engine streams under a depth and a size bound.

A real local streaming server (tests/probe/probe_http.py) sends an SSE event
nested 30 000 levels deep (before the bound: ``RecursionError`` and an
``internal`` traceback), an event of 300 KB (five data lines joined) and a
``/v1/models`` answer nested as deep: each is ``result="bad_stream"`` in
``llm_probe_requests_total`` with a message naming the bound, and nothing with
a traceback reaches the log.
"""

from __future__ import annotations

import logging

import pytest

from exporter.engines.config import EngineConfig
from exporter.probe.config import ProbeConfig
from exporter.probe.source import ProbeSource
from exporter.probe.stream import MAX_EVENT_BYTES, MAX_EVENT_DEPTH
from exporter.runner import SourceRunner
from exporter.samples import Sample
from exporter.store import SnapshotStore
from tests.probe.probe_http import Behaviour, ProbeHTTPServer


def probe_once(behaviour: Behaviour, caplog: pytest.LogCaptureFixture) -> tuple[dict[str, float], str]:
    """One probe by the real runner into a store: its result counts and what it logged."""
    caplog.set_level(logging.DEBUG)
    with ProbeHTTPServer(behaviour) as server:
        cfg = EngineConfig(
            url=server.url + "/metrics", name="fake", interval=0.1, timeout=0.09, probe=ProbeConfig(interval=1.0, timeout=2.0)
        )
        store = SnapshotStore()
        source = ProbeSource(cfg, store)
        assert SourceRunner(source, store).sample_once(), store.states()[source.name].last_error
    counts = {
        p.labels["result"]: p.value
        for p in store.snapshot().samples("llm_probe_requests_total")
        if isinstance(p, Sample) and p.value
    }
    assert not [r for r in caplog.records if r.exc_info], "a traceback reached the log"
    assert "Traceback" not in caplog.text and "RecursionError" not in caplog.text
    return counts, caplog.text


def test_a_deeply_nested_event_is_a_bad_stream(caplog: pytest.LogCaptureFixture) -> None:
    counts, logged = probe_once(Behaviour(mode="deep_json"), caplog)
    assert counts == {"bad_stream": 1.0}
    assert f"nested deeper than {MAX_EVENT_DEPTH} levels" in logged


def test_an_event_over_the_size_bound_is_a_bad_stream(caplog: pytest.LogCaptureFixture) -> None:
    counts, logged = probe_once(Behaviour(mode="huge_event"), caplog)
    assert counts == {"bad_stream": 1.0}
    assert f"over {MAX_EVENT_BYTES} bytes" in logged


def test_a_deeply_nested_models_answer_is_a_bad_stream(caplog: pytest.LogCaptureFixture) -> None:
    counts, logged = probe_once(Behaviour(models_body=b"[" * 30_000 + b"]" * 30_000), caplog)
    assert counts == {"bad_stream": 1.0}
    assert "no model id" in logged


def test_a_normal_stream_is_still_ok(caplog: pytest.LogCaptureFixture) -> None:
    counts, _ = probe_once(Behaviour(tokens=3, gap=0.001), caplog)
    assert counts == {"ok": 1.0}
