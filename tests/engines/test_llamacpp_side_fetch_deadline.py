"""llama.cpp's /props and /slots share the scrape's one deadline; a slow one costs only the slot metrics.

Before: each side fetch had its own timeout (up to 1 s each) after /metrics, so
a server whose /props and /slots answered slowly pushed ``sample()`` past the
source's timeout and the runner marked the engine down although /metrics had
answered at once. Here a real HTTP server on 127.0.0.1 answers /metrics at once
and holds /props or /slots (or both, or closes them): the real runner records
the source up, the /metrics series publish, the slot metrics are absent, and
the side fetch's failure is counted as a partial error with its reason in
``llm_exporter_source_errors_total``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

import pytest

from exporter.collector import meta_points
from exporter.engines.config import EngineConfig
from exporter.engines.source import SIDE_FETCH_SHARE, EngineSource
from exporter.runner import SourceRunner
from exporter.samples import Sample
from exporter.store import SnapshotStore, SourceState
from tests.engines.test_llamacpp_slots import METRICS, PROPS, SLOTS

TIMEOUT = 2.0
SLOT_NAMES = {"llm_scheduler_slots", "llm_scheduler_slots_busy", "llm_kv_cache_used_tokens", "llm_kv_cache_slot_context_tokens"}
#: how long a slow route holds its answer: past the whole scrape's timeout
HOLD_S = 5.0


class _Slow(BaseHTTPRequestHandler):
    """/metrics at once; the routes in ``slow`` wait (until the server stops), those in ``broken`` close."""

    slow: frozenset[str] = frozenset()
    broken: frozenset[str] = frozenset()
    stopping: threading.Event
    bodies = {"/metrics": METRICS.encode(), "/props": json.dumps(PROPS).encode(), "/slots": json.dumps(SLOTS).encode()}

    def do_GET(self) -> None:
        if self.path in self.broken:
            self.close_connection = True
            return
        if self.path in self.slow and self.stopping.wait(HOLD_S):
            return
        body = self.bodies.get(self.path, b"not found")
        self.send_response(200 if self.path in self.bodies else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class Server:
    def __init__(self, slow: set[str], broken: AbstractSet[str] = frozenset()) -> None:
        self.stopping = threading.Event()
        handler = type("Handler", (_Slow,), {"slow": frozenset(slow), "broken": frozenset(broken), "stopping": self.stopping})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"

    def __enter__(self) -> Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


class Scrape(Protocol):
    """The ``scrape`` fixture: one sample through the real runner, against a server with these routes slow/broken."""

    def __call__(
        self, slow: set[str], broken: set[str] = ..., /
    ) -> tuple[bool, SnapshotStore, SourceState, dict[str, float]]: ...


@pytest.fixture()
def scrape() -> Iterator[Scrape]:
    servers: list[Server] = []

    def run(slow: set[str], broken: set[str] = set()) -> tuple[bool, SnapshotStore, SourceState, dict[str, float]]:  # noqa: B006
        server = Server(slow, broken).__enter__()
        servers.append(server)
        store = SnapshotStore()
        source = EngineSource(EngineConfig(url=server.url, name="llama", timeout=TIMEOUT, interval=5.0))
        ok = SourceRunner(source, store).sample_once()
        state = store.states()[source.name]
        errors = {
            p.labels["reason"]: p.value
            for p in meta_points(store.states().values())
            if p.name == "llm_exporter_source_errors_total" and p.labels["source"] == source.name and isinstance(p, Sample)
        }
        return ok, store, state, errors

    yield run
    for server in servers:
        server.__exit__()


@pytest.mark.parametrize("slow", [{"/props"}, {"/slots"}, {"/props", "/slots"}])
def test_a_slow_side_fetch_degrades_only_the_slot_metrics(scrape: Scrape, slow: set[str]) -> None:
    ok, store, state, errors = scrape(slow)
    assert ok and state.up, state.last_error  # the runner's timeout was kept: the source is up
    assert state.last_duration <= TIMEOUT
    snap = store.snapshot()
    assert snap.values("llm_scheduler_requests_waiting") == [5.0]  # the /metrics series publish
    published = {name for name in SLOT_NAMES if snap.find(name)}
    if slow == {"/props"}:
        assert published == {"llm_scheduler_slots_busy", "llm_kv_cache_used_tokens"}  # /slots had its share
    else:
        assert published <= {"llm_scheduler_slots", "llm_kv_cache_slot_context_tokens"}
        assert not published & {"llm_scheduler_slots_busy", "llm_kv_cache_used_tokens"}
    assert errors == {"timeout": float(len(slow))}  # one counted reason per side fetch that did not fit


def test_both_side_fetches_end_within_the_one_deadline(scrape: Scrape) -> None:
    ok, _, state, errors = scrape({"/props", "/slots"})
    assert ok
    # each side fetch waits its share of what is left, and the two together end by the deadline
    assert SIDE_FETCH_SHARE * TIMEOUT * 0.9 <= state.last_duration <= TIMEOUT
    assert errors == {"timeout": 2.0}


def test_a_side_fetch_that_closes_is_counted_and_the_rest_publishes(scrape: Scrape) -> None:
    ok, store, state, errors = scrape(set(), {"/slots"})
    assert ok and state.up
    snap = store.snapshot()
    assert snap.values("llm_scheduler_slots") == [2.0] and not snap.find("llm_scheduler_slots_busy")
    assert errors == {"connection": 1.0}


def test_fast_side_fetches_count_nothing(scrape: Scrape) -> None:
    ok, store, state, errors = scrape(set())
    assert ok and state.up and errors == {}
    assert {name for name in SLOT_NAMES if store.snapshot().find(name)} == SLOT_NAMES
