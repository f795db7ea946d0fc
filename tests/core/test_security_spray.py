"""A password spray cannot slow the exporter, and timing does not tell users apart.

On the real CLI (`llm-layer-exporter serve`, a real uvicorn on 127.0.0.1) with a
bcrypt cost-10 user, as an operator would configure it:

- 16 clients spray wrong passwords (random, half for the real user, half for unknown
  users) for 30 s from a separate process, while a third process measures authorised
  /metrics (p99 <= 50 ms) and the open /healthz (p99 <= 20 ms);
- without the spray, the median answer to a wrong user is within 20 % of the median
  answer to a wrong password.

Latency is measured by the client (so it includes the client's own overhead), after a
warm-up, on persistent connections, over hundreds of samples. The figures are printed
(`pytest -s`) for the docs.
"""

from __future__ import annotations

import base64
import http.client
import json
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

from tests.support.ports import free_port
from tests.support.processes import Child
from tests.support.waiting import wait_until

USER, PASSWORD = "prometheus", "correct horse battery staple"
SPRAY_CLIENTS, SPRAY_SECONDS = 16, 30.0
METRICS_P99_S, HEALTHZ_P99_S = 0.050, 0.020

SPRAYER = r"""
import base64, http.client, json, os, sys, threading, time
port, seconds, clients, user = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
counts, lock = {}, threading.Lock()
deadline = time.monotonic() + seconds

def spray(i):
    conn = None
    while time.monotonic() < deadline:
        name = user if i % 2 else "user%d" % i
        token = base64.b64encode(("%s:%s" % (name, os.urandom(9).hex())).encode()).decode()
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/metrics", headers={"Authorization": "Basic " + token})
            response = conn.getresponse()
            response.read()
            status = str(response.status)
        except Exception as err:
            status, conn = type(err).__name__, None
        with lock:
            counts[status] = counts.get(status, 0) + 1

threads = [threading.Thread(target=spray, args=(i,)) for i in range(clients)]
for t in threads:
    t.start()
print("spraying", flush=True)
for t in threads:
    t.join()
print(json.dumps(counts), flush=True)
"""


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("llm-layer-exporter")
    return [str(script)] if script.exists() else [sys.executable, "-m", "exporter"]


@pytest.fixture(scope="module")
def exporter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """`serve` with basic auth (bcrypt cost 10) and no GPU or engine: the HTTP face under test."""
    tmp = tmp_path_factory.mktemp("spray")
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=10)).decode()
    web = tmp / "web.yml"
    web.write_text(f"basic_auth_users:\n  {USER}: '{hashed}'\n")
    port = free_port()
    argv = [
        *_cli(),
        "serve",
        "--gpu-source",
        "none",
        "--listen-address",
        f"127.0.0.1:{port}",
        "--web-config-file",
        str(web),
        "--log-level",
        "warning",
    ]
    with Child(argv, "serve", log_dir=tmp).start() as proc:
        proc.wait_ready(
            lambda: _get(http.client.HTTPConnection("127.0.0.1", port, timeout=2), "/healthz")[0] == 200, 60, "/healthz to answer"
        )
        yield port


def _auth(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _get(conn: http.client.HTTPConnection, path: str, headers: dict[str, str] | None = None) -> tuple[int, float]:
    """(status, seconds), reconnecting once if uvicorn closed the idle keep-alive (after 5 s)."""
    t0 = time.perf_counter()
    try:
        status = _request(conn, path, headers or {})
    except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
        conn.close()
        status = _request(conn, path, headers or {})
    return status, time.perf_counter() - t0


def _request(conn: http.client.HTTPConnection, path: str, headers: dict[str, str]) -> int:
    conn.request("GET", path, headers=headers)
    response = conn.getresponse()
    response.read()
    return response.status


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def test_spray_of_wrong_passwords_keeps_metrics_and_healthz_fast(exporter: int) -> None:
    port = exporter
    metrics, health = (http.client.HTTPConnection("127.0.0.1", port, timeout=10) for _ in range(2))
    good = _auth(USER, PASSWORD)
    # the first check may miss its 3 s wait on a starved machine (503); it still ends up cached
    wait_until(
        lambda: _get(http.client.HTTPConnection("127.0.0.1", port, timeout=10), "/metrics", good)[0] == 200,
        30,
        "the first authorised /metrics",
    )
    for _ in range(30):  # warm-up, on the connections that measure
        assert _get(metrics, "/metrics", good)[0] == 200
        assert _get(health, "/healthz")[0] == 200
    sprayer = subprocess.Popen(
        [sys.executable, "-c", SPRAYER, str(port), str(SPRAY_SECONDS), str(SPRAY_CLIENTS), USER],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    m_times: list[float] = []
    h_times: list[float] = []
    statuses: set[int] = set()
    try:
        assert sprayer.stdout is not None and sprayer.stdout.readline().strip() == "spraying"
        time.sleep(2.0)  # let the spray fill the verification pool before measuring
        end = time.monotonic() + SPRAY_SECONDS - 4.0
        while time.monotonic() < end:
            status, elapsed = _get(metrics, "/metrics", good)
            statuses.add(status)
            m_times.append(elapsed)
            status, elapsed = _get(health, "/healthz")
            statuses.add(status)
            h_times.append(elapsed)
            time.sleep(0.01)
        out, _ = sprayer.communicate(timeout=SPRAY_SECONDS + 30)
    finally:
        if sprayer.poll() is None:
            sprayer.kill()
            sprayer.wait(5)
    counts = json.loads(out.strip().splitlines()[-1])
    m_p99, h_p99 = _p99(m_times), _p99(h_times)
    print(
        f"\nspray: {SPRAY_CLIENTS} clients, answers {counts}; authorised /metrics n={len(m_times)} "
        f"p50={statistics.median(m_times) * 1000:.1f} ms p99={m_p99 * 1000:.1f} ms; "
        f"/healthz n={len(h_times)} p50={statistics.median(h_times) * 1000:.1f} ms p99={h_p99 * 1000:.1f} ms"
    )
    assert statuses == {200}
    assert counts.get("401", 0) >= 5, f"the spray did not exercise bcrypt: {counts}"
    assert set(counts) <= {"401", "503"}, f"the spray saw other answers than 401/503: {counts}"
    assert len(m_times) >= 300 and len(h_times) >= 300
    assert m_p99 <= METRICS_P99_S, f"authorised /metrics p99 {m_p99 * 1000:.1f} ms under the spray"
    assert h_p99 <= HEALTHZ_P99_S, f"/healthz p99 {h_p99 * 1000:.1f} ms under the spray"


def test_wrong_user_and_wrong_password_take_the_same_time(exporter: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", exporter, timeout=10)
    # checks a spray left queued are dropped within max_wait (3 s); until then a guess may get 503
    wait_until(lambda: _get(conn, "/metrics", _auth(USER, "warm-up"))[0] == 401, 15, "a wrong password answered 401")
    times: dict[str, list[float]] = {"user": [], "password": []}
    busy = 0
    rng = random.Random(13)
    for i in range(45):
        order = ["user", "password"]
        rng.shuffle(order)
        for kind in order:
            user = f"nobody{i}" if kind == "user" else USER
            status, elapsed = _get(conn, "/metrics", _auth(user, f"guess-{i}-{kind}"))
            while status == 503 and busy < 13:  # a starved worker: BUSY, the same for any user; ask again
                busy += 1
                status, elapsed = _get(conn, "/metrics", _auth(user, f"guess-{i}-{kind}"))
            assert status == 401
            if i >= 5:  # warm-up
                times[kind].append(elapsed)
    wrong_user, wrong_password = statistics.median(times["user"]), statistics.median(times["password"])
    ratio = max(wrong_user, wrong_password) / min(wrong_user, wrong_password)
    print(
        f"\nmedian wrong user {wrong_user * 1000:.1f} ms, wrong password {wrong_password * 1000:.1f} ms, ratio {ratio:.3f}, 503s {busy}"
    )
    assert wrong_user > 0.010, "a wrong user must cost a bcrypt check, as a wrong password does"
    assert ratio <= 1.20, f"wrong user {wrong_user * 1000:.1f} ms vs wrong password {wrong_password * 1000:.1f} ms"
