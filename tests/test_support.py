"""The kit's own contracts (tests/support): the ones every other test leans on without checking."""

from __future__ import annotations

import http.client
import socket
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.simulator.dialects import vllm as vllm_dialect
from tests.support import exposition
from tests.support.fake_engine import FakeEngine
from tests.support.processes import Child
from tests.support.waiting import WaitTimeout, wait_until


def test_wait_until_returns_the_value_and_fails_naming_what_and_the_last_error() -> None:
    calls = iter([0, None, "ready"])
    assert wait_until(lambda: next(calls), 5, "the third call", interval=0.01) == "ready"

    def refused() -> bool:
        raise ConnectionRefusedError("nobody home")

    t0 = time.monotonic()
    with pytest.raises(WaitTimeout) as err:
        wait_until(refused, 0.3, "the engine to answer", interval=0.05)
    assert 0.3 <= time.monotonic() - t0 < 1.0  # bounded: the deadline, one interval late at most
    assert "the engine to answer" in str(err.value) and "nobody home" in str(err.value)
    assert isinstance(err.value, AssertionError) and isinstance(err.value, TimeoutError)
    with pytest.raises(WaitTimeout, match="last value 0"):
        wait_until(lambda: 0, 0.1, "a count above zero")


def test_wait_until_asks_for_its_detail_only_once_the_wait_failed() -> None:
    asked: list[int] = []

    def detail() -> str:
        asked.append(1)
        return "the log's tail"

    assert wait_until(lambda: "up", 1, "a server", detail=detail) == "up"
    assert asked == []
    with pytest.raises(WaitTimeout, match="waiting for a server .*:\nthe log's tail"):
        wait_until(lambda: None, 0.1, "a server", interval=0.02, detail=detail)
    assert asked == [1]


def test_child_output_goes_to_a_file_so_a_chatty_child_never_blocks(tmp_path: Path) -> None:
    # 1 MiB on stdout and stderr with nobody reading: a pipe (64 KiB) would block it forever
    code = "import sys\nfor _ in range(1024):\n    sys.stdout.write('o' * 1023 + '\\n'); sys.stderr.write('e' * 1023 + '\\n')\nprint('done')"
    child = Child([sys.executable, "-c", code], "chatty", log_dir=tmp_path).start()
    wait_until(lambda: not child.alive(), 30, "the chatty child to finish")
    assert child.returncode == 0
    assert child.log == tmp_path / "chatty.log" and child.log.stat().st_size > 2 * 1024 * 1024
    assert child.output(20).endswith("done\n")


def test_child_stop_kills_what_ignores_term_and_wait_ready_fails_at_once_on_exit() -> None:
    stubborn = Child(
        [
            sys.executable,
            "-c",
            "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\ntime.sleep(60)",
        ],
        "stubborn",
        grace_s=0.5,
    ).start()
    stubborn.wait_ready(lambda: "up" in stubborn.output(), 20, "the child to start")
    t0 = time.monotonic()
    assert stubborn.stop() == -9 and time.monotonic() - t0 < 10
    quitter = Child([sys.executable, "-c", "print('bad config'); raise SystemExit(2)"], "quitter").start()
    t0 = time.monotonic()
    with pytest.raises(AssertionError) as err:
        quitter.wait_ready(lambda: False, 30, "a port that never opens")
    assert time.monotonic() - t0 < 10, "it waited out the deadline instead of failing when the child exited"
    assert "exited with 2" in str(err.value) and "bad config" in str(err.value)


def test_fake_engine_switches_answers_and_wakes_a_waiting_handler() -> None:
    with FakeEngine("a 1\n") as engine, httpx.Client(timeout=10) as client:
        assert client.get(engine.url).text == "a 1\n"
        engine.set(delay=20.0)  # a hang, until the next set()
        answers: list[httpx.Response] = []
        thread = threading.Thread(target=lambda: answers.append(client.get(engine.url)))
        t0 = time.monotonic()
        thread.start()
        wait_until(lambda: len(engine.seen_headers) == 2, 5, "the second request to arrive")
        engine.set(delay=0.0, body="b 2\n", status=503)  # wakes the handler: it answers the new behaviour
        thread.join(10)
        assert time.monotonic() - t0 < 10 and (answers[0].status_code, answers[0].text) == (503, "b 2\n")
        port = engine.port
        engine.set(down=True)
        with pytest.raises(httpx.ConnectError):
            httpx.get(engine.url, timeout=2)
        engine.reset()  # up again, on the same port, as built
        assert engine.port == port and httpx.get(engine.url, timeout=5).text == "a 1\n"
        engine.set(framing="short")  # declares the whole length, sends half
        conn = http.client.HTTPConnection("127.0.0.1", engine.port, timeout=5)
        conn.request("GET", "/metrics")
        with pytest.raises(http.client.IncompleteRead):
            conn.getresponse().read()
        conn.close()


def test_the_exposition_uses_the_simulators_bucket_lists_and_parses() -> None:
    names = {name: bounds for name, _, bounds in exposition.HISTOGRAMS}
    assert names["vllm:time_to_first_token_seconds"] is vllm_dialect.TTFT_BUCKETS
    assert names["vllm:e2e_request_latency_seconds"] is vllm_dialect.REQUEST_LATENCY_BUCKETS
    assert exposition.TOKEN_BUCKETS[-1] == 100000 and exposition.build_1_2_5_buckets(8192) == vllm_dialect.TOKEN_BUCKETS
    text = exposition.vllm_exposition(2)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["vllm:time_to_first_token_seconds"].type == "histogram"
    assert "vllm:prompt_tokens_created" in families and "vllm:prompt_tokens_created" not in {
        f.name for f in text_string_to_metric_families(exposition.vllm_exposition(2, created=False))
    }
    running = [s for s in families["vllm:num_requests_running"].samples]
    assert [(s.labels["engine"], s.value) for s in running] == [
        ("0", exposition.engine_values(0)["vllm:num_requests_running"]),
        ("1", exposition.engine_values(1)["vllm:num_requests_running"]),
    ]
    assert 50 * 1024 <= len(exposition.vllm_exposition(1)) <= 64 * 1024  # the benchmarks' "55 KB engine"


def test_closed_port_url_refuses() -> None:
    from tests.support.ports import closed_port_url, free_port

    with pytest.raises(httpx.ConnectError):
        httpx.get(closed_port_url(), timeout=2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port()))  # free: it binds


def test_free_ports_are_this_workers_share_below_the_ephemeral_range(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two xdist workers never hand out the same port, and none collides with a kernel-chosen one."""
    from tests.support import ports

    assert ports.worker_slot({}) == (0, 1)
    assert ports.worker_slot({"PYTEST_XDIST_WORKER": "gw3", "PYTEST_XDIST_WORKER_COUNT": "4"}) == (3, 4)
    assert ports.worker_slot({"PYTEST_XDIST_WORKER": "master", "PYTEST_XDIST_WORKER_COUNT": "2"}) == (0, 1)
    low = ports._ephemeral_low()
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
        handed = [ports.free_port() for _ in range(50)]
        assert len(set(handed)) == 50, "one process never hands out a port twice in a row"
        assert all(ports.LOWEST_PORT <= p < low and (p - ports.LOWEST_PORT) % 2 == int(worker[2:]) for p in handed)


def test_start_answering_waits_for_the_url_and_stops_what_never_answers(tmp_path: Path) -> None:
    from tests.support.ports import free_port

    port = free_port()
    server = Child(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)], "http-server"
    )
    try:
        assert server.start_answering(f"http://127.0.0.1:{port}/", 30) < 30 and server.alive()
    finally:
        server.stop()
    silent = Child([sys.executable, "-c", "import time; time.sleep(60)"], "silent")
    with pytest.raises(WaitTimeout):
        silent.start_answering(f"http://127.0.0.1:{free_port()}/", 1.0)
    assert not silent.alive(), "a child that never answered was left running"
