"""A paged KV cache with a prefix cache, the way vLLM's block pool works.

Why model it block by block: preemption storms, "waiting while the cache is
half empty" and prefix-cache hit ratios are consequences of block
accounting, not of a formula. Blocks are reference counted; a block whose
last user finishes goes to the free list but keeps its content hash, so a
later request with the same prefix can take it back (a hit) until allocation
pressure evicts it (least recently freed first).

Usage (``used / total``) counts referenced blocks only, as vLLM's
``block_pool.get_usage()`` does: cached-but-free blocks are free.
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence


def block_hashes(token_ids: Sequence[int], block_size: int, prev: bytes | None = None) -> list[bytes]:
    """Chained hashes of every *full* block of ``token_ids``; each covers the whole prefix.

    ``prev`` is the hash of the block before ``token_ids[0]`` when extending a chain.
    """
    out: list[bytes] = []
    chain = prev or b""
    for i in range(len(token_ids) // block_size):
        chunk = token_ids[i * block_size : (i + 1) * block_size]
        chain = hashlib.blake2b(chain + struct.pack(f"<{block_size}I", *chunk), digest_size=12).digest()
        out.append(chain)
    return out


class BlockPool:
    """GPU KV blocks: allocation, reference counts, prefix-cache lookup and eviction."""

    def __init__(self, num_blocks: int, enable_prefix_caching: bool = True) -> None:
        self.total = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self._next_id = num_blocks
        self._ref: dict[int, int] = {}
        #: free blocks in eviction order (oldest first); value unused
        self._free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))
        self._hash_of: dict[int, bytes] = {}
        self._block_of: dict[bytes, int] = {}
        #: blocks to drop as soon as they are freed (after a shrink below the used count)
        self._retire = 0
        #: called with the hash of every cached block that allocation evicts (a host KV tier
        #: keeps it instead of losing it: Scheduler with ``kv_offload_blocks``); None: dropped
        self.on_evict: Callable[[bytes], None] | None = None

    # ------------------------------------------------------------------ queries
    @property
    def free(self) -> int:
        return len(self._free)

    @property
    def used(self) -> int:
        return len(self._ref)

    @property
    def cached(self) -> int:
        return len(self._block_of)

    @property
    def pending_retire(self) -> int:
        """Used blocks still to be dropped after a shrink (they vanish when freed)."""
        return self._retire

    def usage(self) -> float:
        return min(1.0, self.used / self.total) if self.total else 0.0

    def cached_prefix(self, hashes: Sequence[bytes]) -> int:
        """How many leading blocks of ``hashes`` are in the prefix cache (no side effects)."""
        if not self.enable_prefix_caching:
            return 0
        n = 0
        for h in hashes:
            if h not in self._block_of:
                break
            n += 1
        return n

    def idle_cached(self, hashes: Sequence[bytes]) -> int:
        """How many of the cached blocks for ``hashes`` sit on the free list (taking them uses free blocks)."""
        return sum(1 for h in hashes if self._ref.get(self._block_of[h], 0) == 0)

    # ------------------------------------------------------------------ changes
    def take_cached(self, hashes: Sequence[bytes]) -> list[int]:
        """Reference the cached blocks of the leading ``hashes`` (call after cached_prefix)."""
        blocks = []
        for h in hashes:
            b = self._block_of[h]
            if self._ref.get(b, 0) == 0:
                self._free.pop(b, None)
            self._ref[b] = self._ref.get(b, 0) + 1
            blocks.append(b)
        return blocks

    def allocate(self, n: int) -> list[int]:
        """``n`` fresh blocks (evicting cached free blocks, oldest first); ValueError if short."""
        if n > len(self._free):
            raise ValueError(f"need {n} blocks, {len(self._free)} free")
        out = []
        for _ in range(n):
            b, _ = self._free.popitem(last=False)
            old = self._hash_of.pop(b, None)
            if old is not None and self._block_of.get(old) == b:
                del self._block_of[old]
                if self.on_evict is not None:
                    self.on_evict(old)
            self._ref[b] = 1
            out.append(b)
        return out

    def register(self, block: int, h: bytes) -> None:
        """Record that ``block`` now holds the full block whose chained hash is ``h``."""
        if not self.enable_prefix_caching or h in self._block_of:
            return
        self._hash_of[block] = h
        self._block_of[h] = block

    def release(self, blocks: Iterable[int]) -> None:
        """Drop one reference to each block; unreferenced blocks become free (tail = newest)."""
        for b in blocks:
            ref = self._ref.get(b, 0) - 1
            if ref > 0:
                self._ref[b] = ref
                continue
            self._ref.pop(b, None)
            if self._retire > 0:
                self._retire -= 1
                self._forget(b)
                continue
            self._free[b] = None

    def resize(self, num_blocks: int) -> int:
        """Grow or shrink the pool; returns how many used blocks must still be freed to fit."""
        if num_blocks >= self.total:
            for _ in range(num_blocks - self.total):
                self._free[self._next_id] = None
                self._next_id += 1
            self.total = num_blocks
            self._retire = 0
            return 0
        drop = self.total - num_blocks
        self.total = num_blocks
        while drop and self._free:
            b, _ = self._free.popitem(last=False)
            self._forget(b)
            drop -= 1
        self._retire = drop
        return drop

    def _forget(self, b: int) -> None:
        old = self._hash_of.pop(b, None)
        if old is not None and self._block_of.get(old) == b:
            del self._block_of[old]


class HostTier:
    """Host-memory KV blocks: swap space for preempted requests and the offload tier's cache.

    As the offload tier of ``kv_offload_blocks`` the GPU pool's evictions are ``store``d here
    (least recently used dropped past its size) and a prefix lookup past the GPU's own hits
    reads ``cached_prefix``: each block found is a host-tier hit, copied back to the GPU.
    """

    def __init__(self, num_blocks: int) -> None:
        self.total = num_blocks
        self.swapped = 0
        self._cache: OrderedDict[bytes, None] = OrderedDict()

    @property
    def used(self) -> int:
        return self.swapped + len(self._cache)

    def usage(self) -> float:
        return self.used / self.total if self.total else 0.0

    def can_swap(self, n: int) -> bool:
        return self.swapped + n <= self.total

    def swap_out(self, n: int) -> None:
        self.swapped += n
        self._evict()

    def swap_in(self, n: int) -> None:
        self.swapped = max(0, self.swapped - n)

    def cached_prefix(self, hashes: Sequence[bytes]) -> int:
        n = 0
        for h in hashes:
            if h not in self._cache:
                break
            self._cache.move_to_end(h)
            n += 1
        return n

    def store(self, hashes: Iterable[bytes]) -> int:
        """Offload these blocks (already-present ones are refreshed); returns how many were new."""
        new = 0
        for h in hashes:
            if h in self._cache:
                self._cache.move_to_end(h)
                continue
            self._cache[h] = None
            new += 1
        self._evict()
        return new

    def _evict(self) -> None:
        while self._cache and self.used > self.total:
            self._cache.popitem(last=False)
