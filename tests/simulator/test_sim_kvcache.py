"""The paged KV cache: reference counts, prefix-cache hits, eviction order, resizing, host tier."""

from __future__ import annotations

import pytest

from exporter.simulator.kvcache import BlockPool, HostTier, block_hashes


def test_block_hashes_chain_and_cover_only_full_blocks() -> None:
    a = block_hashes(list(range(40)), 16)
    b = block_hashes(list(range(32)) + [999] * 8, 16)
    assert len(a) == 2 and a == b  # the partial third block is not hashed
    c = block_hashes([7] + list(range(1, 40)), 16)
    assert c[0] != a[0] and c[1] != a[1]  # a change in block 0 changes every later hash
    assert block_hashes(list(range(16, 32)), 16, prev=a[0]) == a[1:2]


def test_allocate_release_and_usage() -> None:
    pool = BlockPool(8)
    got = pool.allocate(5)
    assert pool.used == 5 and pool.free == 3 and pool.usage() == pytest.approx(5 / 8)
    with pytest.raises(ValueError):
        pool.allocate(4)
    pool.release(got)
    assert pool.used == 0 and pool.free == 8


def test_prefix_hit_takes_back_a_freed_block_until_evicted() -> None:
    pool = BlockPool(4)
    hashes = block_hashes(list(range(32)), 16)
    blocks = pool.allocate(2)
    for b, h in zip(blocks, hashes):
        pool.register(b, h)
    assert pool.cached_prefix(hashes) == 2
    pool.release(blocks)
    # freed but still cached: a hit that uses no fresh block, yet takes the blocks off the free list
    assert pool.cached_prefix(hashes) == 2 and pool.idle_cached(hashes) == 2
    again = pool.take_cached(hashes)
    assert again == blocks and pool.used == 2
    pool.release(again)
    pool.allocate(3)  # evicts the oldest free blocks first: the 2 never-used ones, then the first cached
    assert pool.cached_prefix(hashes) == 0 and pool.cached == 1
    pool.allocate(1)
    assert pool.cached == 0


def test_shared_block_needs_every_reference_released() -> None:
    pool = BlockPool(4)
    h = block_hashes(list(range(16)), 16)
    b = pool.allocate(1)
    pool.register(b[0], h[0])
    pool.take_cached(h)
    pool.release(b)
    assert pool.used == 1
    pool.release(b)
    assert pool.used == 0


def test_prefix_caching_off_never_hits() -> None:
    pool = BlockPool(4, enable_prefix_caching=False)
    h = block_hashes(list(range(16)), 16)
    b = pool.allocate(1)
    pool.register(b[0], h[0])
    assert pool.cached_prefix(h) == 0


def test_resize_grow_and_shrink_below_used() -> None:
    pool = BlockPool(4)
    held = pool.allocate(3)
    assert pool.resize(8) == 0 and pool.free == 5
    assert pool.resize(2) == 1  # 3 used, room for 2: one used block must go when freed
    assert pool.total == 2 and pool.free == 0 and pool.pending_retire == 1
    pool.release(held[:1])
    assert pool.pending_retire == 0 and pool.free == 0 and pool.used == 2


def test_host_tier_swap_and_offload_cache_are_bounded() -> None:
    host = HostTier(4)
    assert host.can_swap(3) and not host.can_swap(5)
    host.swap_out(3)
    hashes = block_hashes(list(range(48)), 16)
    assert host.store(hashes) == 3
    assert host.used <= host.total  # the offload cache yields to swapped blocks
    host.swap_in(3)
    assert host.store(hashes) >= 0 and host.used <= host.total
    assert host.cached_prefix(hashes[:1]) in (0, 1)
