"""A 100-client wrong-password spray cannot lock out a user whose password is not yet cached.

Once, during such a spray, a legitimate user that the exporter had not verified yet (after
a restart, a new Prometheus replica) got 503 on 28 of 28 tries in 30 s: the one bounded
queue of password checks was the spray's. On the real `serve` (bcrypt cost 10): 100
clients on 127.0.0.1 spray wrong passwords for a bounded time from a separate process,
and during it users that were never verified, connecting from 127.0.0.2 (another address
of the loopback network, as another host would), each get 200 on their first request.
The spray lasts until the last fresh user has been checked (``SPRAY_MAX_S`` at most), so a
host too busy to run the checks on time lengthens the test instead of ending the spray first.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
from collections.abc import Iterator

import bcrypt
import pytest

from tests.core.test_security_spray import SPRAYER, _auth, _cli, _get
from tests.support.ports import free_port
from tests.support.processes import Child

SPRAY_CLIENTS = 100
#: the spray's bound: it is stopped once the fresh users are checked (about 20 s on a quiet host)
SPRAY_MAX_S = 180.0
FRESH_USERS = 6
#: seconds between two fresh users' first requests
FRESH_GAP_S = 2.3
PASSWORD = "the replica's own password"


@pytest.fixture(scope="module")
def exporter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    tmp = tmp_path_factory.mktemp("spray-fresh")
    lines = ["basic_auth_users:"]
    for i in range(FRESH_USERS):
        hashed = bcrypt.hashpw(f"{PASSWORD} {i}".encode(), bcrypt.gensalt(rounds=10)).decode()
        lines.append(f"  replica{i}: '{hashed}'")
    web = tmp / "web.yml"
    web.write_text("\n".join(lines) + "\n")
    port = free_port()
    argv = [*_cli(), "serve", "--gpu-source", "none", "--listen-address", f"127.0.0.1:{port}"]
    argv += ["--web-config-file", str(web), "--log-level", "warning"]
    with Child(argv, "serve", log_dir=tmp).start() as proc:
        proc.wait_ready(
            lambda: _get(http.client.HTTPConnection("127.0.0.1", port, timeout=2), "/healthz")[0] == 200, 60, "/healthz to answer"
        )
        yield port


def test_a_fresh_user_from_another_address_gets_200_during_a_100_client_spray(exporter: int) -> None:
    port = exporter
    sprayer = subprocess.Popen(
        [sys.executable, "-c", SPRAYER, str(port), str(SPRAY_MAX_S), str(SPRAY_CLIENTS), "replica0", "until-stdin"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    answers: list[tuple[str, int, float]] = []
    try:
        assert sprayer.stdout is not None and sprayer.stdout.readline().strip() == "spraying"
        time.sleep(3.0)  # the spray has filled the shared queue and its address has failed
        for i in range(FRESH_USERS):  # each user once: its password is not cached before this request
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15, source_address=("127.0.0.2", 0))
            status, elapsed = _get(conn, "/metrics", _auth(f"replica{i}", f"{PASSWORD} {i}"))
            conn.close()
            answers.append((f"replica{i}", status, elapsed))
            time.sleep(FRESH_GAP_S)
        spraying_at_the_end = sprayer.poll() is None
        out, _ = sprayer.communicate("stop\n", timeout=60)
    finally:
        if sprayer.poll() is None:
            sprayer.kill()
            sprayer.wait(5)
    counts = json.loads(out.strip().splitlines()[-1])
    print(
        f"\nspray: {SPRAY_CLIENTS} clients from 127.0.0.1, answers {counts}; fresh users from 127.0.0.2: "
        + ", ".join(f"{u} {s} in {t * 1000:.0f} ms" for u, s, t in answers)
    )
    assert spraying_at_the_end, f"the spray ended (its {SPRAY_MAX_S:.0f} s bound) before the last fresh user was checked"
    assert counts.get("503", 0) >= 50, f"the spray did not saturate the shared lane: {counts}"
    assert counts.get("401", 0) >= 5, f"the spray did not exercise bcrypt: {counts}"
    assert [s for _, s, _ in answers] == [200] * FRESH_USERS, answers
