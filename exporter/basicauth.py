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
  never queued without limit. A full queue refuses at once (an address that has failed:
  after the tarpit below). The queue is deeper than a spray's usual concurrency so that
  sprayers wait (costing nothing) instead of spinning on instant refusals, which would
  keep the event loop busy;
- successful verifications are cached under the user and a keyed hash of the password
  (per-process random key), bounded in size and forgotten after `cache_ttl` seconds
  unused, so an authorised scraper never waits behind the pool. A check that ends
  after its request gave up is still cached, so on a CPU-starved node the next scrape
  passes. Failures are not cached: a spray of random passwords cannot evict the
  scraper's entry;
- an unknown user is checked against a dummy hash of the configured cost, so a wrong
  user costs what a wrong password costs;
- failures are limited per source address, and a second, small lane is kept for the
  others: a 100-client spray once filled the one queue, so a legitimate user whose
  password was not yet cached (after a restart, a new Prometheus replica) got 503 for
  as long as the spray lasted. Now a check from an address that has not failed in
  the last `suspect_ttl` seconds runs in the clean lane (its own worker, queue and CPU
  budget; at most `clean_per_source` checks of one address), and an address that has
  failed is confined to the shared lane, where one address holds at most
  `per_source_pending` places and is refused after `refusal_delay` seconds beyond
  that (a tarpit, so refused sprayers cannot spin on the event loop; a failed address
  is tarpitted even when the whole lane is full). The clean or shared lane depends on
  the address only, never on the user name. IPv6 addresses count per /64 (one host
  can hold a whole /64); behind a proxy every client shares the proxy's address;
- a known-good credential never waits behind failing ones. Once verified, a
  credential is answered from the success cache above, before any lane: no queue, no
  worker, whatever its address has done. What is left is its *first* check (after a
  restart, a new replica, a cache entry forgotten) from an address a spray shares (a
  proxy, a NAT, the same host): that address is over its share of the shared lane, so
  the check was tarpitted with the sprayers' (once 4 of 20 tries refused, 10.9 s to
  the first success). So, where a refusal would be tarpitted, a check for a user name
  *in the web config* first tries that user's reservation: a third lane with one place
  per configured name (`named_pending` places in all) and a worker per place, so no
  name's check queues behind another's. Random and unknown names never enter it, and
  wrong passwords for another configured name take that name's place, not this one's.
  Limits: a spray of the same name can hold its place (only the bcrypt check tells
  that user from the sprayer), and past `named_pending` configured names sprayed at
  once the rest find no place. Why the configured names, not the names that succeeded
  before: after a restart none has, and that is the case to cover.
  Why it does not tell which users exist: a check in a reservation can only turn into
  OK. Any other outcome (a wrong password, a check not done within `refusal_delay`)
  is answered exactly as the tarpitted refusal an unknown name gets: 503 once
  `refusal_delay` has passed since the request came. The check goes on, and a late
  success is still cached. Its CPU: it waits only for its own budget (the same burst,
  refilled at a quarter of `cpu_share`), so nothing the shared lane's spray spent
  delays it, and what it spends is charged to the shared lane's budget as well, so the
  shared lane and the reservations together stay within one `cpu_share` in the long
  run (plus a burst): naming a configured user gains a spray no CPU, and a spray that
  keeps reservations busy takes at most a quarter of the shared lane's CPU from it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import enum
import hashlib
import hmac
import ipaddress
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
#: the highest bcrypt cost a web config may use (docs/security.md). At 14 one check is about
#: 1.1 s of CPU (16x cost 10); at 15 it is over the 1 s CPU burst and, at the quarter of a core
#: the checks may use, longer than a request waits (3 s): no uncached scrape would pass on a
#: busy node. Cost 31 would hash for about 36 h at start-up before anything is logged.
MAX_BCRYPT_COST = 14
#: the users' reservations refill their CPU budget at this fraction of `cpu_share` (the same burst): a
#: first check after a restart runs on the burst at once, and a spray of a configured name that keeps
#: its reservation busy takes at most this much of the shared lane's budget (it is charged there too)
RESERVATION_SHARE = 0.25


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


class _Lane:
    """A worker pool with its own bounded queue and CPU budget; at most `per_source` places per address
    (per user name in the reservations' lane). A check waits for `budget` and is charged to it and to
    `also_charged` (the reservations' CPU counts against the shared lane's budget too)."""

    def __init__(
        self,
        name: str,
        workers: int,
        max_pending: int,
        per_source: int,
        budget: CpuBudget,
        also_charged: tuple[CpuBudget, ...] = (),
    ) -> None:
        self.max_pending = max_pending
        self.per_source = per_source
        self.budget = budget
        self.charged = (budget, *also_charged)
        self.pending = 0
        self.by_source: Counter[str] = Counter()
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name, initializer=_lower_priority)


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
        per_source_pending: int | None = None,
        clean_pending: int = 8,
        clean_per_source: int = 2,
        named_pending: int = 8,
        suspect_ttl: float = 600.0,
        max_sources: int = 4096,
        refusal_delay: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._users = dict(users)
        self._max_wait = max_wait
        self._cache_size = cache_size
        self._cache_ttl = cache_ttl
        self._suspect_ttl = suspect_ttl
        self._max_sources = max_sources
        self._refusal_delay = refusal_delay
        self._clock = clock
        self._key = os.urandom(32)
        self._cache: OrderedDict[tuple[str, bytes], float] = OrderedDict()
        #: address -> when a check from it last failed (bounded; the oldest forgotten first)
        self._failed: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()
        self._dummy = _dummy_hash(self._users.values())
        per_source = per_source_pending if per_source_pending is not None else max(1, max_pending // 4)
        self._shared = _Lane("basic-auth", workers, max_pending, per_source, CpuBudget(cpu_share, cpu_burst))
        #: its own CPU budget: a spray that spent the shared one cannot delay a clean address
        self._clean = _Lane("basic-auth-clean", 1, clean_pending, clean_per_source, CpuBudget(cpu_share, cpu_burst))
        #: the configured users' reservations: one place per user name and a worker per place (no name's
        #: check queues behind another's); waits for its own budget only, charged to the shared lane's as
        #: well (a spray gains no CPU by naming a configured user)
        named_budget = CpuBudget(cpu_share * RESERVATION_SHARE, cpu_burst)
        self._named = _Lane(
            "basic-auth-named", max(1, named_pending), named_pending, 1, named_budget, also_charged=(self._shared.budget,)
        )
        self._lanes = (self._shared, self._clean, self._named)

    @property
    def pending(self) -> int:
        return sum(lane.pending for lane in self._lanes)

    async def verify(self, header: str | None, source: str | None = None) -> Verdict:
        """OK, DENIED or BUSY for an Authorization header from `source` (the client's address; None: unknown)."""
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
        # an unknown user: the same work as a wrong password, and nothing to remember
        future, tarpit, reserved = self._submit(
            password, self._dummy if hashed is None else hashed, key if hashed else None, source, user if hashed else None
        )
        if future is None:
            if tarpit:
                await asyncio.sleep(self._refusal_delay)
            return Verdict.BUSY
        if reserved:
            return await self._reserved_verdict(future)
        try:
            ok = await asyncio.wait_for(asyncio.wrap_future(future), self._max_wait)
        except asyncio.TimeoutError:
            return Verdict.BUSY
        return Verdict.OK if ok and hashed is not None else Verdict.DENIED

    async def _reserved_verdict(self, future: Future[bool]) -> Verdict:
        """OK as soon as a reservation's check succeeds; anything else is the tarpitted refusal an
        unknown name gets at the same moment (503 `refusal_delay` after the request came)."""
        loop = asyncio.get_running_loop()
        refuse_at = loop.time() + self._refusal_delay
        try:
            ok = await asyncio.wait_for(asyncio.wrap_future(future), self._refusal_delay)
        except asyncio.TimeoutError:  # not done yet: refused now; the check goes on, a success is cached
            return Verdict.BUSY
        if ok:
            return Verdict.OK
        await asyncio.sleep(max(0.0, refuse_at - loop.time()))
        return Verdict.BUSY

    def close(self) -> None:
        for lane in self._lanes:
            lane.pool.shutdown(wait=False, cancel_futures=True)

    def _submit(
        self, password: bytes, hashed: bytes, key: tuple[str, bytes] | None, source: str | None, user: str | None = None
    ) -> tuple[Future[bool] | None, bool, bool]:
        """Queue one check in the clean lane when the address may use it, else in the shared lane,
        else (where the refusal would be tarpitted) in the reservation of `user` (a configured name).

        (None, tarpit, False) when there is no room: tarpit is True when this address alone
        is over its share or has failed (its refusal waits), False when the lane is full
        for an address that has not failed or is unknown (refused at once). The last item
        is True when the check runs in a reservation.
        """
        who = _source_key(source)
        with self._lock:
            suspect = who is not None and self._suspect(who)
            lanes = [self._shared]
            if who is not None and not suspect:
                lanes.insert(0, self._clean)
            lane = next((ln for ln in lanes if ln.pending < ln.max_pending and self._room(ln, who)), None)
            place = who
            if lane is None:
                full = self._shared.pending >= self._shared.max_pending
                tarpit = who is not None and (suspect or not full)
                named = self._named
                if not (tarpit and user is not None and named.pending < named.max_pending and self._room(named, user)):
                    return None, tarpit, False
                lane, place = named, user
            lane.pending += 1
            if place is not None:
                lane.by_source[place] += 1
        try:
            future = lane.pool.submit(self._check, lane, password, hashed)
        except RuntimeError:  # the pool is shut down: the server is stopping
            self._release(lane, place)
            return None, False, False

        def done(f: Future[bool]) -> None:  # also runs when a queued check is cancelled
            self._release(lane, place)
            if f.cancelled() or f.exception() is not None:
                return
            if f.result() and key is not None:
                self._remember(key)
            elif who is not None:
                self._mark_failed(who)

        future.add_done_callback(done)
        return future, False, lane is self._named

    @staticmethod
    def _room(lane: _Lane, who: str | None) -> bool:
        """Whether `who` (an address; a user name in the reservations' lane) may take another place."""
        return who is None or lane.by_source[who] < lane.per_source

    def _suspect(self, who: str) -> bool:
        """Whether `who` failed within suspect_ttl (call with the lock held)."""
        failed = self._failed.get(who)
        if failed is None:
            return False
        if self._clock() - failed > self._suspect_ttl:
            del self._failed[who]
            return False
        return True

    def _mark_failed(self, who: str) -> None:
        with self._lock:
            self._failed[who] = self._clock()
            self._failed.move_to_end(who)
            while len(self._failed) > self._max_sources:
                self._failed.popitem(last=False)

    def _release(self, lane: _Lane, who: str | None) -> None:
        with self._lock:
            lane.pending -= 1
            if who is not None:
                lane.by_source[who] -= 1
                if lane.by_source[who] <= 0:
                    del lane.by_source[who]

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

    @staticmethod
    def _check(lane: _Lane, password: bytes, hashed: bytes) -> bool:
        """On a worker: wait for the lane's CPU budget, check, pay for the CPU the check used
        (to every budget the lane is charged to)."""
        lane.budget.wait()
        started = time.thread_time()
        try:
            return _checkpw(password, hashed)
        finally:
            used = time.thread_time() - started
            for budget in lane.charged:
                budget.spend(used)


def _source_key(source: str | None) -> str | None:
    """The unit failures are counted in: an IPv4 address, an IPv6 /64, or the text as given."""
    if not source:
        return None
    try:
        ip = ipaddress.ip_address(source)
    except ValueError:
        return source[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


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
