"""A known-good credential never waits behind failing ones (issue 37, item 6).

Once, a legitimate user behind the same address as a password spray waited 10.9 s for
its first success (4 of 20 refused): its address had failed, so its check was confined
to the shared lane with the sprayers'. Unit tests of exporter.basicauth's answer: a
credential verified before comes from the cache before any lane, and a configured
user's first check, from an address over its share, runs in that user's reservation,
while the shared lane is still blocked by the spray. A failure in a reservation is
answered as the tarpitted refusal an unknown name gets, so the reservation tells nothing
about which names exist.

Mechanism only: bcrypt is replaced by a check that blocks the spray's passwords until the
test releases them and records the worker thread of every check, and basicauth's
``asyncio.sleep`` (the tarpit) is recorded instead of waited. No assertion on how long
anything took on this host.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import exporter.basicauth as basicauth
from exporter.basicauth import BasicAuthVerifier, Verdict
from tests.core.test_security_auth import _basic, _hash

A, B = "10.0.0.9", "10.0.0.10"
#: long enough that no reservation's wait runs out while a test runs; the tarpit itself is recorded, not waited
REFUSAL_DELAY = 30.0


class _Checks:
    """Stands in for exporter.basicauth._checkpw: passwords starting with b"spray" block until
    released; every check is recorded with the worker thread that ran it."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.ran: list[tuple[str, bytes]] = []
        self._lock = threading.Lock()
        self._real = basicauth._checkpw

    def __call__(self, password: bytes, hashed: bytes) -> bool:
        with self._lock:
            self.ran.append((threading.current_thread().name, password))
        if password.startswith(b"spray"):
            assert self.release.wait(10), "test never released the spray"
        return self._real(password, hashed)

    def in_lane(self, prefix: str) -> list[bytes]:
        """The passwords checked by workers of one lane (basic-auth, basic-auth-clean, basic-auth-named)."""
        with self._lock:
            return [pw for thread, pw in self.ran if thread.rsplit("_", 1)[0] == prefix]

    def count(self) -> int:
        with self._lock:
            return len(self.ran)


class _RecordedSleeps:
    """basicauth's view of asyncio, with ``sleep`` (the tarpit) recorded and not waited."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    async def sleep(self, delay: float) -> None:
        self.delays.append(delay)
        await asyncio.sleep(0)


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Checks]:
    fake = _Checks()
    monkeypatch.setattr(basicauth, "_checkpw", fake)
    yield fake
    fake.release.set()


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> _RecordedSleeps:
    recorded = _RecordedSleeps()
    monkeypatch.setattr(basicauth, "asyncio", recorded)
    return recorded


async def _until(predicate: Callable[[], bool], what: str) -> None:
    """Yield to the loop (and the workers) until ``predicate`` holds; a bounded number of turns."""
    for _ in range(2000):
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never happened: {what}")


def _verifier(**kw: Any) -> BasicAuthVerifier:
    users = {"prom": _hash(b"right"), "other": _hash(b"other-right")}
    settings: dict[str, Any] = {"max_pending": 8, "per_source_pending": 4, "clean_pending": 2, "clean_per_source": 1}
    return BasicAuthVerifier(users, refusal_delay=REFUSAL_DELAY, **{**settings, **kw})


def test_a_right_password_from_a_spraying_address_passes_while_the_spray_still_blocks(
    checks: _Checks, sleeps: _RecordedSleeps
) -> None:
    v = _verifier()

    async def scenario() -> None:
        checks.release.set()
        assert await v.verify(_basic("prom", "wrong"), A) is Verdict.DENIED
        assert v._suspect(A), "the address has failed: from now on it is confined to the shared lane"
        checks.release.clear()
        # the spray fills the address's share of the shared lane: random names, another user, this user
        names = ["nobody0", "nobody1", "other", "prom"]
        spray = [asyncio.create_task(v.verify(_basic(n, f"spray{i}"), A)) for i, n in enumerate(names)]
        await _until(lambda: v._shared.pending == 4 and len(checks.in_lane("basic-auth")) == 1, "the spray blocking the lane")

        # over its share: a random name is tarpitted and checks nothing; wrong passwords for another
        # configured name take that name's reservation (and block there), not prom's
        before = checks.count()
        assert await v.verify(_basic("intruder", "spray-x"), A) is Verdict.BUSY
        assert sleeps.delays == [REFUSAL_DELAY] and checks.count() == before and v._named.pending == 0
        other = asyncio.create_task(v.verify(_basic("other", "spray-o"), A))
        await _until(lambda: checks.in_lane("basic-auth-named") == [b"spray-o"], "other's reservation checking")

        # prom's first check after a restart: its own reservation, while every blocked check still blocks
        assert await v.verify(_basic("prom", "right"), A) is Verdict.OK
        assert checks.in_lane("basic-auth-named") == [b"spray-o", b"right"]
        assert not checks.release.is_set() and not any(t.done() for t in spray) and not other.done()
        assert v._shared.pending == 4 and len(checks.in_lane("basic-auth")) == 1, "the shared lane never moved"

        # verified once: from the cache, before any lane (no check at all), the spray still blocking
        before = checks.count()
        assert await v.verify(_basic("prom", "right"), A) is Verdict.OK
        assert checks.count() == before and not any(t.done() for t in spray)

        checks.release.set()
        assert await asyncio.gather(*spray) == [Verdict.DENIED] * 4
        # a failure in a reservation is answered as the tarpit answers an unknown name: 503, once the delay is out
        assert await other is Verdict.BUSY
        assert len(sleeps.delays) == 2 and 0 < sleeps.delays[1] <= REFUSAL_DELAY
        await _until(lambda: v.pending == 0, "every place released")

    asyncio.run(scenario())
    v.close()


def test_over_its_share_a_wrong_password_for_a_configured_name_looks_like_an_unknown_name(
    checks: _Checks, sleeps: _RecordedSleeps
) -> None:
    """The reservation can only turn into OK: a configured name's wrong password and an unknown
    name get the same verdict after the same tarpit, though only the first was checked."""
    v = _verifier(per_source_pending=1)

    async def scenario() -> None:
        v._mark_failed(A)
        spray = asyncio.create_task(v.verify(_basic("nobody", "spray0"), A))
        await _until(lambda: len(checks.in_lane("basic-auth")) == 1, "the spray blocking the shared lane")
        unknown = await v.verify(_basic("nobody", "guess"), A)
        configured = await v.verify(_basic("prom", "guess"), A)
        assert unknown is configured is Verdict.BUSY
        assert checks.in_lane("basic-auth-named") == [b"guess"], "only the configured name was checked"
        tarpit, reserved = sleeps.delays
        assert tarpit == REFUSAL_DELAY and 0 < reserved <= REFUSAL_DELAY, "both answered once the same delay was out"
        # the same name twice at once: the second finds the place taken and is tarpitted, as any name would be
        checks.release.clear()
        held = asyncio.create_task(v.verify(_basic("prom", "spray1"), A))
        await _until(lambda: b"spray1" in checks.in_lane("basic-auth-named"), "prom's reservation held")
        before = checks.count()
        assert await v.verify(_basic("prom", "right"), A) is Verdict.BUSY
        assert checks.count() == before and sleeps.delays[-1] == REFUSAL_DELAY
        checks.release.set()
        assert await held is Verdict.BUSY and await spray is Verdict.DENIED

    asyncio.run(scenario())
    v.close()


def test_a_failed_address_is_tarpitted_and_reserved_even_when_the_shared_lane_is_full(
    checks: _Checks, sleeps: _RecordedSleeps
) -> None:
    """Two spraying addresses fill the whole shared lane: a failed address's refusal still waits
    (it used to be instant there), so its configured users still reach their reservation; an
    unknown address is refused at once, as before."""
    v = _verifier(max_pending=2, per_source_pending=1)

    async def scenario() -> None:
        for address in (A, B):
            v._mark_failed(address)
        spray = [asyncio.create_task(v.verify(_basic("nobody", f"spray{i}"), a)) for i, a in enumerate((A, B))]
        await _until(lambda: v._shared.pending == 2, "the shared lane full")
        assert await v.verify(_basic("nobody", "x"), None) is Verdict.BUSY and sleeps.delays == []
        assert await v.verify(_basic("nobody", "x"), A) is Verdict.BUSY and sleeps.delays == [REFUSAL_DELAY]
        assert await v.verify(_basic("prom", "right"), B) is Verdict.OK
        assert checks.in_lane("basic-auth-named") == [b"right"] and not any(t.done() for t in spray)
        checks.release.set()
        assert await asyncio.gather(*spray) == [Verdict.DENIED] * 2

    asyncio.run(scenario())
    v.close()


def test_a_reservations_cpu_is_charged_to_the_shared_lanes_budget(
    checks: _Checks, sleeps: _RecordedSleeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Naming a configured user gains a spray no CPU: what a reservation's check spends is owed by
    the shared lane too (and by the reservations' own budget, which alone it waits for)."""
    cpu = [0.0]

    def thread_time() -> float:  # a check reads it twice: 50 CPU-seconds apart
        cpu[0] += 50.0
        return cpu[0]

    monkeypatch.setattr(time, "thread_time", thread_time)
    v = _verifier(per_source_pending=1, cpu_share=0.25, cpu_burst=0.0)

    async def scenario() -> None:
        v._mark_failed(A)
        spray = asyncio.create_task(v.verify(_basic("nobody", "spray0"), A))
        await _until(lambda: len(checks.in_lane("basic-auth")) == 1, "the spray blocking the shared lane")
        assert v._shared.budget.debt() == 0.0 and v._named.budget.debt() == 0.0
        assert await v.verify(_basic("prom", "right"), A) is Verdict.OK
        # 50 CPU-s owed by the reservations' budget and the shared lane's (200 s at a quarter core); not the clean lane's
        assert v._named.budget.debt() > 100 and v._shared.budget.debt() > 100 and v._clean.budget.debt() == 0.0
        checks.release.set()
        assert await spray is Verdict.DENIED

    asyncio.run(scenario())
    v.close()
