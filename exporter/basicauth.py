"""Basic-auth verification that an attacker cannot turn against the exporter.

Why this shape: bcrypt is slow on purpose (~70 ms at cost 10). Checked on the event
loop, 16 clients with wrong passwords once stalled the open /healthz for 2.5 s and
authorised /metrics for 1.7 s, and an unknown user answered 20x faster than a wrong
password, so user names could be enumerated. Here, as in the Prometheus
exporter-toolkit:

- checks run on a small worker pool (one thread by default, at a lower CPU priority
  than the serving loop), never on the event loop, and the pool spends at most
  `cpu_share` of one core on them once a burst is used up: a spray cannot eat the
  exporter's CPU quota (a cgroup limit would throttle /healthz with it);
- admission is bounded: at most `max_pending` checks queued or running, each waits at
  most `max_wait` seconds; past either bound the request is refused (BUSY, HTTP 503),
  never queued without limit. A full queue refuses at once. The queue is deeper than
  a spray's usual concurrency so that sprayers wait (costing nothing) instead of
  spinning on instant refusals, which would keep the event loop busy;
- successful verifications are cached under the user and a keyed hash of the password
  (per-process random key), bounded in size and forgotten after `cache_ttl` seconds
  unused, so an authorised scraper never waits behind the pool. A check that ends
  after its request gave up is still cached, so on a CPU-starved node the next scrape
  passes. Failures are not cached: a spray of random passwords cannot evict the
  scraper's entry;
- an unknown user is checked against a dummy hash of the configured cost, so a wrong
  user costs what a wrong password costs.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import enum
import hashlib
import hmac
import os
import re
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor

import bcrypt

BCRYPT_HASH = re.compile(rb"^\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}$")
#: how much nicer than the serving loop the bcrypt workers run (Linux: nice is per thread)
WORKER_NICENESS = 10


class Verdict(enum.Enum):
    OK = "ok"
    DENIED = "denied"
    BUSY = "busy"


def bcrypt_cost(hashed: bytes) -> int:
    """The cost factor of a bcrypt hash; ValueError if it is not one."""
    match = BCRYPT_HASH.match(hashed)
    if not match or not 4 <= int(match.group(1)) <= 31:
        raise ValueError("expected a bcrypt hash ($2a$/$2b$/$2y$, cost 04-31)")
    return int(match.group(1))


def parse_basic(header: str | None) -> tuple[str, bytes] | None:
    """(user, password) from an `Authorization: Basic` header, or None if it is not one."""
    if not header or not header[:6].lower() == "basic ":
        return None
    try:
        decoded = base64.b64decode(header[6:].strip(), validate=True)
        user, sep, password = decoded.partition(b":")
        return (user.decode("utf-8"), password) if sep else None
    except (binascii.Error, UnicodeDecodeError):
        return None


class BasicAuthVerifier:
    """Checks Basic credentials against bcrypt hashes without letting checks pile up."""

    def __init__(
        self,
        users: Mapping[str, bytes],
        *,
        workers: int = 1,
        max_pending: int = 64,
        max_wait: float = 3.0,
        cache_size: int = 256,
        cache_ttl: float = 600.0,
        cpu_share: float = 0.25,
        cpu_burst: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._users = dict(users)
        self._max_pending = max_pending
        self._max_wait = max_wait
        self._cache_size = cache_size
        self._cache_ttl = cache_ttl
        self._clock = clock
        self._key = os.urandom(32)
        self._cache: OrderedDict[tuple[str, bytes], float] = OrderedDict()
        self._pending = 0
        self._lock = threading.Lock()
        self._dummy = _dummy_hash(self._users.values())
        self._budget = CpuBudget(cpu_share, cpu_burst)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="basic-auth", initializer=_lower_priority)

    @property
    def pending(self) -> int:
        return self._pending

    async def verify(self, header: str | None) -> Verdict:
        if not self._users:
            return Verdict.OK
        creds = parse_basic(header)
        if creds is None:
            return Verdict.DENIED
        user, password = creds
        key = (user, hmac.new(self._key, password, hashlib.sha256).digest())
        if self._cached(key):
            return Verdict.OK
        hashed = self._users.get(user)
        if hashed is None:  # same work as a wrong password, and nothing to remember
            future = self._submit(password, self._dummy, None)
        else:
            future = self._submit(password, hashed, key)
        if future is None:
            return Verdict.BUSY
        try:
            ok = await asyncio.wait_for(asyncio.wrap_future(future), self._max_wait)
        except asyncio.TimeoutError:
            return Verdict.BUSY
        return Verdict.OK if ok and hashed is not None else Verdict.DENIED

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _submit(self, password: bytes, hashed: bytes, key: tuple[str, bytes] | None) -> Future[bool] | None:
        """Queue one check, or None when `max_pending` are already queued or running."""
        with self._lock:
            if self._pending >= self._max_pending:
                return None
            self._pending += 1
        try:
            future = self._pool.submit(self._check, password, hashed)
        except RuntimeError:  # the pool is shut down: the server is stopping
            self._release()
            return None

        def done(f: Future[bool]) -> None:  # also runs when a queued check is cancelled
            self._release()
            if key is not None and not f.cancelled() and f.exception() is None and f.result():
                self._remember(key)

        future.add_done_callback(done)
        return future

    def _release(self) -> None:
        with self._lock:
            self._pending -= 1

    def _cached(self, key: tuple[str, bytes]) -> bool:
        now = self._clock()
        with self._lock:
            seen = self._cache.get(key)
            if seen is None:
                return False
            if now - seen > self._cache_ttl:
                del self._cache[key]
                return False
            self._cache[key] = now
            self._cache.move_to_end(key)
            return True

    def _remember(self, key: tuple[str, bytes]) -> None:
        with self._lock:
            self._cache[key] = self._clock()
            self._cache.move_to_end(key)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    def _check(self, password: bytes, hashed: bytes) -> bool:
        """On a worker: wait for CPU budget, check, pay for the CPU the check used."""
        self._budget.wait()
        started = time.thread_time()
        try:
            return _checkpw(password, hashed)
        finally:
            self._budget.spend(time.thread_time() - started)


class CpuBudget:
    """A token bucket of CPU seconds: refills at `share` per second of wall time, holds at most `burst`."""

    def __init__(self, share: float, burst: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._share = share
        self._burst = burst
        self._clock = clock
        self._tokens = burst
        self._last = clock()
        self._lock = threading.Lock()

    def debt(self) -> float:
        """Seconds to wait before the budget is back to zero (0 when there is budget left)."""
        with self._lock:
            self._refill()
            return max(0.0, -self._tokens) / self._share

    def wait(self) -> None:
        delay = self.debt()
        if delay > 0:
            time.sleep(delay)

    def spend(self, cpu_seconds: float) -> None:
        with self._lock:
            self._refill()
            self._tokens -= cpu_seconds

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._share)
        self._last = now


def _checkpw(password: bytes, hashed: bytes) -> bool:
    try:
        return bcrypt.checkpw(password, hashed)
    except ValueError:  # longer than bcrypt's 72 bytes: raised before any work, for every user alike
        return False


def _dummy_hash(hashes: Iterable[bytes]) -> bytes:
    """A hash nobody's password matches, at the cost most users have (the highest on a tie)."""
    costs = Counter(bcrypt_cost(h) for h in hashes)
    cost = max(costs, key=lambda c: (costs[c], c)) if costs else 10
    return bcrypt.hashpw(base64.b64encode(os.urandom(24)), bcrypt.gensalt(rounds=cost))


def _lower_priority() -> None:
    """Run bcrypt below the serving loop so a spray cannot starve /healthz (no-op where unsupported)."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + WORKER_NICENESS)
    except (AttributeError, OSError):
        pass
