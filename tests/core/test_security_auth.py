"""Basic auth that cannot be turned against the exporter: off-loop, bounded, cached, constant work.

Unit tests of exporter.basicauth with a counting or blocking bcrypt, and the HTTP
contract (401 / 503 / open probes) on a real uvicorn server on 127.0.0.1. The timing
contract under a password spray is in test_security_spray.py.
"""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import bcrypt
import pytest
import requests

import exporter.basicauth as basicauth
import exporter.server as server
from exporter.basicauth import BasicAuthVerifier, CpuBudget, Verdict, bcrypt_cost, parse_basic
from exporter.server import OPEN_PATHS, create_app
from exporter.store import SnapshotStore
from exporter.webconfig import load_web_config
from tests.support.asgi import UvicornThread

T = TypeVar("T")


def _hash(password: bytes, cost: int = 4) -> bytes:
    return bcrypt.hashpw(password, bcrypt.gensalt(rounds=cost))


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class _CountingCheck:
    """Stands in for exporter.basicauth._checkpw: counts calls, remembers hashes, can block."""

    def __init__(self) -> None:
        self.calls: list[bytes] = []
        self.release = threading.Event()
        self.release.set()
        self._real = basicauth._checkpw

    def __call__(self, password: bytes, hashed: bytes) -> bool:
        self.calls.append(hashed)
        assert self.release.wait(10), "test never released the blocked check"
        return self._real(password, hashed)


@pytest.fixture
def check(monkeypatch: pytest.MonkeyPatch) -> Iterator[_CountingCheck]:
    counting = _CountingCheck()
    monkeypatch.setattr(basicauth, "_checkpw", counting)
    yield counting
    counting.release.set()


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@pytest.mark.parametrize(
    "header, expected",
    [
        (None, None),
        ("", None),
        ("Bearer abc", None),
        ("Basic !!!notbase64", None),
        ("Basic " + base64.b64encode(b"no-colon").decode(), None),
        ("Basic " + base64.b64encode(b"\xff\xfe:pw").decode(), None),
        ("basic " + base64.b64encode(b"u:p:q").decode(), ("u", b"p:q")),
        ("Basic " + base64.b64encode(b"u:").decode(), ("u", b"")),
    ],
)
def test_parse_basic(header: str | None, expected: tuple[str, bytes] | None) -> None:
    assert parse_basic(header) == expected


def test_bcrypt_cost_rejects_what_is_not_a_hash() -> None:
    assert bcrypt_cost(_hash(b"x", 5)) == 5
    for bad in (b"plaintext", b"$2y$03$" + b"a" * 53, b"$1$abc", _hash(b"x")[:-1]):
        with pytest.raises(ValueError):
            bcrypt_cost(bad)


def test_success_is_cached_and_failure_is_not(check: _CountingCheck) -> None:
    v = BasicAuthVerifier({"prom": _hash(b"right")})

    async def scenario() -> list[Verdict]:
        return [
            await v.verify(_basic("prom", "right")),
            await v.verify(_basic("prom", "right")),
            await v.verify(_basic("prom", "wrong")),
            await v.verify(_basic("prom", "wrong")),
        ]

    assert _run(scenario()) == [Verdict.OK, Verdict.OK, Verdict.DENIED, Verdict.DENIED]
    assert len(check.calls) == 3  # the second right password came from the cache; no wrong one did
    v.close()


def test_unknown_user_costs_a_bcrypt_of_the_same_cost(check: _CountingCheck) -> None:
    real = _hash(b"right", cost=6)
    v = BasicAuthVerifier({"prom": real, "other": _hash(b"x", cost=6), "odd": _hash(b"x", cost=4)})
    assert _run(v.verify(_basic("nobody", "right"))) is Verdict.DENIED
    assert _run(v.verify(_basic("prom", "wrong"))) is Verdict.DENIED
    dummy, checked_real = check.calls
    assert checked_real == real
    assert dummy not in (real,) and bcrypt_cost(dummy) == 6  # the cost most users have
    v.close()


def test_cache_is_bounded_and_forgets_after_idle_ttl(check: _CountingCheck) -> None:
    now = [0.0]
    users = {u: _hash(b"pw") for u in ("a", "b", "c")}
    v = BasicAuthVerifier(users, cache_size=2, cache_ttl=10.0, clock=lambda: now[0])

    async def verify(user: str) -> Verdict:
        return await v.verify(_basic(user, "pw"))

    async def scenario() -> None:
        for user in ("a", "b", "c"):  # c evicts a, the least recently used
            assert await verify(user) is Verdict.OK
        assert len(check.calls) == 3
        assert await verify("c") is Verdict.OK and len(check.calls) == 3
        assert await verify("a") is Verdict.OK and len(check.calls) == 4
        now[0] = 9.0
        assert await verify("a") is Verdict.OK and len(check.calls) == 4  # used at 9: kept until 19
        now[0] = 18.0
        assert await verify("a") is Verdict.OK and len(check.calls) == 4
        now[0] = 40.0
        assert await verify("a") is Verdict.OK and len(check.calls) == 5  # idle 22 s > ttl: checked again

    _run(scenario())
    v.close()


def test_saturated_pool_refuses_at_once_and_cached_users_still_pass(check: _CountingCheck) -> None:
    v = BasicAuthVerifier({"prom": _hash(b"right")}, workers=1, max_pending=2, max_wait=5.0)

    async def scenario() -> None:
        assert await v.verify(_basic("prom", "right")) is Verdict.OK  # cached before the spray
        check.release.clear()  # every check from now on blocks in the worker
        waiting = [asyncio.create_task(v.verify(_basic("prom", f"wrong{i}"))) for i in range(2)]
        await asyncio.sleep(0.05)
        assert v.pending == 2
        calls = len(check.calls)
        # the worker stays blocked until release.set() below: an answer now cannot have waited for the pool
        refused = [await v.verify(_basic("prom", f"more{i}")) for i in range(5)]
        refused.append(await v.verify(_basic("nobody", "x")))
        cached = await v.verify(_basic("prom", "right"))
        assert refused == [Verdict.BUSY] * 6 and cached is Verdict.OK
        assert not check.release.is_set() and len(check.calls) == calls, "a refusal reached the blocked pool"
        check.release.set()
        assert await asyncio.gather(*waiting) == [Verdict.DENIED, Verdict.DENIED]
        assert v.pending == 0

    _run(scenario())
    v.close()


def test_wait_for_a_worker_is_bounded_and_queued_checks_are_dropped(check: _CountingCheck) -> None:
    v = BasicAuthVerifier({"prom": _hash(b"right")}, workers=1, max_pending=8, max_wait=0.2)

    async def scenario() -> None:
        check.release.clear()
        t0 = time.perf_counter()
        verdicts = await asyncio.gather(*(v.verify(_basic("prom", f"w{i}")) for i in range(4)))
        elapsed = time.perf_counter() - t0
        assert verdicts == [Verdict.BUSY] * 4 and 0.15 < elapsed < 2.0
        assert v.pending == 1  # the one check already running; the three queued ones were cancelled
        check.release.set()
        for _ in range(100):
            if v.pending == 0:
                break
            await asyncio.sleep(0.01)
        assert v.pending == 0 and len(check.calls) == 1

    _run(scenario())
    v.close()


def test_a_check_that_ends_after_its_request_gave_up_is_still_cached(check: _CountingCheck) -> None:
    """On a CPU-starved node the first scrape may get 503, but its check is not wasted."""
    v = BasicAuthVerifier({"prom": _hash(b"right")}, workers=1, max_wait=0.1)

    async def scenario() -> None:
        check.release.clear()
        task = asyncio.create_task(v.verify(_basic("prom", "right")))
        await asyncio.sleep(0.05)  # the check is running now, not merely queued
        assert await task is Verdict.BUSY
        check.release.set()
        for _ in range(100):
            if v.pending == 0:
                break
            await asyncio.sleep(0.01)
        assert await v.verify(_basic("prom", "right")) is Verdict.OK
        assert len(check.calls) == 1

    _run(scenario())
    v.close()


def test_cpu_budget_refills_at_its_share_up_to_the_burst() -> None:
    now = [0.0]
    budget = CpuBudget(share=0.25, burst=0.5, clock=lambda: now[0])
    assert budget.debt() == 0.0
    budget.spend(0.7)  # 0.2 CPU-second in debt: 0.8 s of wall time at a quarter core
    assert budget.debt() == pytest.approx(0.8)
    now[0] = 0.8
    assert budget.debt() == pytest.approx(0.0)
    now[0] = 100.0  # refill stops at the burst
    budget.spend(0.5)
    assert budget.debt() == 0.0
    budget.spend(0.25)
    assert budget.debt() == pytest.approx(1.0)


def test_a_spray_gets_at_most_its_share_of_a_core() -> None:
    """Real bcrypt (cost 8), no burst: the exporter's CPU over the spray stays near cpu_share."""
    v = BasicAuthVerifier({"prom": _hash(b"right", cost=8)}, cpu_share=0.25, cpu_burst=0.0, max_wait=60.0)

    async def scenario() -> list[Verdict]:
        return list(await asyncio.gather(*(v.verify(_basic("prom", f"w{i}")) for i in range(12))))

    wall0, cpu0 = time.perf_counter(), time.process_time()
    verdicts = _run(scenario())
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    v.close()
    assert verdicts == [Verdict.DENIED] * 12
    assert cpu / wall <= 0.35, f"{cpu:.2f} CPU-s in {wall:.2f} s"
    assert wall >= 0.8 * cpu / 0.25


def test_checks_run_off_the_event_loop(check: _CountingCheck) -> None:
    """While a check blocks in the worker, the loop keeps running other work."""
    v = BasicAuthVerifier({"prom": _hash(b"right")})

    async def scenario() -> None:
        check.release.clear()
        task = asyncio.create_task(v.verify(_basic("prom", "wrong")))
        ticks = 0
        for _ in range(10):
            await asyncio.sleep(0.01)
            ticks += 1
        assert ticks == 10 and not task.done()
        check.release.set()
        assert await task is Verdict.DENIED

    _run(scenario())
    v.close()


def test_password_longer_than_bcrypt_limit_is_denied_for_any_user() -> None:
    v = BasicAuthVerifier({"prom": _hash(b"right")})
    long = "x" * 100
    assert _run(v.verify(_basic("prom", long))) is Verdict.DENIED
    assert _run(v.verify(_basic("nobody", long))) is Verdict.DENIED
    v.close()


def _web(tmp_path: Path, hashed: bytes) -> Path:
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  prom: '{hashed.decode()}'\n")
    return web


def test_http_contract_open_probes_and_everything_else_guarded(tmp_path: Path) -> None:
    store = SnapshotStore()
    store.register("gpu", 1.0)
    cfg = load_web_config(str(_web(tmp_path, _hash(b"right"))))
    with UvicornThread(create_app(store, web_config=cfg)) as srv:
        base = f"http://127.0.0.1:{srv.port}"
        assert OPEN_PATHS == {"/healthz", "/readyz"}
        assert requests.get(base + "/healthz", timeout=5).status_code == 200
        assert requests.get(base + "/readyz", timeout=5).status_code == 503  # open, and honest: not ready
        for path in ("/metrics", "/", "/diagnosis", "/healthz/", "/nope", "//healthz"):
            r = requests.get(base + path, timeout=5)
            assert r.status_code == 401, path
            assert r.headers["www-authenticate"] == 'Basic realm="llm-layer-exporter"'
        assert requests.get(base + "/metrics", auth=("prom", "wrong"), timeout=5).status_code == 401
        assert requests.get(base + "/metrics", auth=("nobody", "right"), timeout=5).status_code == 401
        assert requests.get(base + "/metrics", auth=("prom", "right"), timeout=5).status_code == 200


def test_http_503_with_retry_after_when_the_pool_is_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, check: _CountingCheck
) -> None:
    class Small(BasicAuthVerifier):
        def __init__(self, users: Mapping[str, bytes]) -> None:
            super().__init__(users, workers=1, max_pending=1, max_wait=5.0, clean_pending=0)  # the shared lane only

    monkeypatch.setattr(server, "BasicAuthVerifier", Small)
    cfg = load_web_config(str(_web(tmp_path, _hash(b"right"))))
    app = create_app(SnapshotStore(), web_config=cfg)
    with UvicornThread(app) as srv:
        url = f"http://127.0.0.1:{srv.port}/metrics"
        check.release.clear()
        blocked = threading.Thread(target=lambda: requests.get(url, auth=("prom", "wrong"), timeout=10), daemon=True)
        blocked.start()
        assert _wait(lambda: app.state.auth.pending == 1)
        t0 = time.perf_counter()
        r = requests.get(url, auth=("prom", "other"), timeout=5)
        elapsed = time.perf_counter() - t0
        check.release.set()
        blocked.join(10)
    assert r.status_code == 503 and r.headers["retry-after"] == "1" and elapsed < 1.0


def _wait(predicate: Callable[[], object], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


class _SprayBlocks:
    """Stands in for exporter.basicauth._checkpw: passwords starting with b"spray" block until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self._real = basicauth._checkpw

    def __call__(self, password: bytes, hashed: bytes) -> bool:
        if password.startswith(b"spray"):
            assert self.release.wait(10), "test never released the spray"
        return self._real(password, hashed)


def test_a_spraying_address_cannot_starve_a_user_from_another_address(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shared lane full of one address's wrong passwords; a never-failed address still passes, at once."""
    blocks = _SprayBlocks()
    monkeypatch.setattr(basicauth, "_checkpw", blocks)
    users = {"prom": _hash(b"right"), "replica": _hash(b"also-right")}
    v = BasicAuthVerifier(users, max_pending=8, per_source_pending=4, clean_pending=2, clean_per_source=1, refusal_delay=0.2)

    async def scenario() -> None:
        blocks.release.set()
        assert await v.verify(_basic("prom", "wrong"), "10.0.0.9") is Verdict.DENIED  # the sprayer has failed once
        blocks.release.clear()
        spray = [asyncio.create_task(v.verify(_basic("prom", f"spray{i}"), "10.0.0.9")) for i in range(4)]
        await asyncio.sleep(0.05)
        assert v.pending == 4  # all in the shared lane: a failed address may not use the clean one
        t0 = time.perf_counter()
        assert await v.verify(_basic("prom", "spray-more"), "10.0.0.9") is Verdict.BUSY  # over its share
        assert time.perf_counter() - t0 >= 0.2  # tarpitted, not refused at once (no spinning)
        # a fresh user from an address that never failed: the clean lane, while the spray still blocks
        assert await v.verify(_basic("replica", "also-right"), "10.0.0.7") is Verdict.OK
        assert await v.verify(_basic("prom", "right"), "2001:db8::1") is Verdict.OK
        assert all(not t.done() for t in spray)
        blocks.release.set()
        assert await asyncio.gather(*spray) == [Verdict.DENIED] * 4

    _run(scenario())
    v.close()


def test_the_clean_lane_is_bounded_per_address_and_overflows_to_the_shared_lane(monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = _SprayBlocks()
    monkeypatch.setattr(basicauth, "_checkpw", blocks)
    v = BasicAuthVerifier({"prom": _hash(b"right")}, max_pending=4, per_source_pending=4, clean_pending=2, clean_per_source=1)

    async def scenario() -> None:
        first = [asyncio.create_task(v.verify(_basic("prom", f"spray{i}"), "10.0.0.9")) for i in range(3)]
        await asyncio.sleep(0.05)
        # one place in the clean lane for 10.0.0.9 (its first, not yet failed, checks), the rest shared
        assert v._clean.pending == 1 and v._shared.pending == 2
        blocks.release.set()
        assert await asyncio.gather(*first) == [Verdict.DENIED] * 3
        assert v._suspect("10.0.0.9")  # from now on it stays in the shared lane
        assert await v.verify(_basic("prom", "right"), "10.0.0.8") is Verdict.OK
        assert not v._suspect("10.0.0.8") and v.pending == 0

    _run(scenario())
    v.close()


def test_an_address_is_suspect_for_a_while_and_the_table_is_bounded() -> None:
    now = [0.0]
    v = BasicAuthVerifier({"prom": _hash(b"right")}, suspect_ttl=60.0, max_sources=3, clock=lambda: now[0])
    for i in range(5):
        v._mark_failed(f"10.0.0.{i}")
    assert len(v._failed) == 3 and not v._suspect("10.0.0.0") and v._suspect("10.0.0.4")
    now[0] = 61.0
    assert not v._suspect("10.0.0.4") and len(v._failed) == 2
    assert basicauth._source_key("2001:db8::1") == basicauth._source_key("2001:db8::ffff") == "2001:db8::/64"
    assert basicauth._source_key("::ffff:10.0.0.1") == "10.0.0.1" and basicauth._source_key(None) is None
    v.close()


def test_a_bcrypt_cost_above_the_maximum_is_refused_before_any_hashing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_hashing(*args: object) -> bytes:
        raise AssertionError("bcrypt ran while the web config was read")

    monkeypatch.setattr(bcrypt, "hashpw", no_hashing)
    monkeypatch.setattr(bcrypt, "checkpw", no_hashing)
    ok = tmp_path / "ok.yml"
    ok.write_text("basic_auth_users:\n  prom: '$2b$14$" + "a" * 53 + "'\n")
    assert load_web_config(str(ok)).basic_auth_users["prom"].startswith(b"$2b$14$")
    for cost in (15, 31):
        web = tmp_path / f"c{cost}.yml"
        web.write_text(f"basic_auth_users:\n  prom: '$2y${cost}$" + "a" * 53 + "'\n")
        with pytest.raises(ValueError, match=f"prom: bcrypt cost {cost} is above the maximum {basicauth.MAX_BCRYPT_COST}"):
            load_web_config(str(web))
