"""BlockPool: vLLM's LRU free queue, ref counts and lazy eviction, case by case."""

from __future__ import annotations

import pytest

from simulator.cache.block_pool import SINK, BlockPool


def test_allocation_pops_from_the_front_and_never_hands_out_the_null_block() -> None:
    pool = BlockPool(4)
    assert pool.allocate(3) == [1, 2, 3]
    assert pool.num_free == 1
    assert pool.num_used == 3
    assert pool.allocate(2) is None  # not enough: nothing changes
    assert pool.num_free == 1
    assert pool.free_queue() == [4]
    pool.check()


def test_free_appends_hashed_blocks_in_the_given_order_and_prepends_unhashed() -> None:
    pool = BlockPool(6)
    blocks = pool.allocate(6)
    assert blocks == [1, 2, 3, 4, 5, 6]
    for b, h in ((1, 101), (2, 102), (3, 103)):
        pool.cache(b, h)
    # a request's blocks are freed tail first (vLLM frees reversed(req_blocks))
    pool.free(reversed([1, 2, 3, 4]))  # 4 unhashed, then 3, 2, 1 hashed
    assert pool.free_queue() == [4, 3, 2, 1]
    pool.free([5, 6])  # unhashed: each prepended, so the last freed is reused first
    assert pool.free_queue() == [6, 5, 4, 3, 2, 1]
    # unhashed blocks are reused first; then the request's tail block is evicted first
    assert pool.allocate(3) == [6, 5, 4]
    assert pool.lookup(103) == 3
    assert pool.allocate(1) == [3]
    assert pool.lookup(103) is None  # evicted when popped
    assert pool.lookup(101) == 1
    pool.check()


def test_eviction_is_lazy_and_a_hit_takes_a_free_block_out_of_the_queue() -> None:
    pool = BlockPool(3)
    a, b, c = pool.allocate(3) or []
    pool.cache(a, 7)
    pool.free([a, b, c])
    assert pool.num_free == 3
    assert pool.lookup(7) == a  # freed but still cached
    assert pool.num_cached == 1
    pool.touch([a])  # a hit on a free cached block
    assert pool.ref(a) == 1
    assert pool.num_free == 2
    assert a not in pool.free_queue()
    pool.touch([a])  # a second holder only adds a ref
    assert pool.ref(a) == 2
    assert pool.num_free == 2
    pool.free([a])
    assert pool.ref(a) == 1
    pool.free([a])
    assert pool.free_queue()[-1] == a  # hashed: back at the tail
    pool.check()


def test_freeing_more_often_than_taken_is_an_error() -> None:
    pool = BlockPool(2)
    (a,) = pool.allocate(1) or []
    pool.free([a])
    with pytest.raises(ValueError, match="freed more often"):
        pool.free([a])


def test_a_block_keeps_its_first_hash_and_duplicates_are_kept_in_order() -> None:
    pool = BlockPool(4)
    a, b, c, d = pool.allocate(4) or []
    assert pool.cache(a, 5)
    assert not pool.cache(a, 6)  # already hashed
    assert pool.cache(b, 5)  # same content computed twice: both cached
    assert pool.lookup(5) == a
    assert pool.num_cached == 2
    pool.free([a, c, d])  # a hashed -> tail; c, d unhashed -> front
    assert pool.allocate(3) == [d, c, a]  # a is evicted: its duplicate b takes over
    assert pool.lookup(5) == b
    pool.check()


def test_spaces_keep_groups_apart() -> None:
    pool = BlockPool(2, num_spaces=2)
    a, b = pool.allocate(2) or []
    pool.cache(a, 9, space=0)
    pool.cache(b, 9, space=1)
    assert pool.lookup(9, 0) == a
    assert pool.lookup(9, 1) == b
    assert pool.count_prefix([9, 10], 2, (0, 1)) == 1
    assert pool.count_prefix([9, 10], 0, (0, 1)) == 0
    pool.check()


def test_rename_rekeys_and_merges_into_an_existing_hash() -> None:
    pool = BlockPool(3)
    a, b, c = pool.allocate(3) or []
    pool.cache(a, 1)
    pool.cache(b, 2)
    assert pool.rename(1, 11)
    assert pool.lookup(1) is None
    assert pool.lookup(11) == a
    assert pool.block_hash(a) == 11
    assert not pool.rename(1, 12)  # nothing cached as 1 any more
    assert pool.rename(2, 11)  # clash: b becomes a duplicate of 11
    assert pool.lookup(11) == a
    pool.free([a, b, c])
    assert pool.allocate(2) == [c, a]
    assert pool.lookup(11) == b
    pool.check()


def test_used_blocks_are_counted_per_kind() -> None:
    pool = BlockPool(5, num_kinds=2)
    x = pool.allocate(2, kind=0) or []
    y = pool.allocate(3, kind=1) or []
    assert (pool.num_used_kind(0), pool.num_used_kind(1)) == (2, 3)
    pool.cache(y[0], 4)
    pool.free(y)
    assert pool.num_used_kind(1) == 0
    pool.touch([y[0]])
    assert pool.num_used_kind(1) == 1
    pool.free(x)
    pool.check()


def test_empty_pool() -> None:
    pool = BlockPool(0)
    assert pool.allocate(0) == []
    assert pool.allocate(1) is None
    pool.check()


def test_a_sink_block_keeps_a_hashed_blocks_place_but_no_lookup_finds_it() -> None:
    pool = BlockPool(4)
    a, b, c, d = pool.allocate(4)
    pool.cache(a, 101)
    pool.cache(b, SINK)
    assert pool.num_cached == 2
    assert pool.lookup(SINK) is None
    pool.free(reversed([a, b, c, d]))  # d, c unhashed: prepended; b (sink), a hashed: appended
    assert pool.free_queue() == [c, d, b, a]
    pool.check()
    assert pool.allocate(3) == [c, d, b]  # the sink is evicted in its place, like a hash
    assert pool.num_cached == 1
    assert pool.lookup(101) == a
    pool.check()


def test_pools_of_one_size_start_fresh_whatever_an_earlier_one_did() -> None:
    # pools of a size share their initial links: a used pool must not leak into the next
    first = BlockPool(6)
    got = first.allocate(4)
    assert got is not None
    first.free(got)  # unhashed blocks go to the front: 4, 3, 2, 1, 5, 6
    assert first.free_queue() != [1, 2, 3, 4, 5, 6]
    second = BlockPool(6)
    assert second.free_queue() == [1, 2, 3, 4, 5, 6]
    assert second.allocate(2) == [1, 2]
