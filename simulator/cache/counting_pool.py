"""A block pool that only counts: for runs without prefix caching.

:class:`~simulator.cache.block_pool.BlockPool` keeps every block's identity, ref count, hash
and place in vLLM's LRU free queue, because a later request may hit a cached block and which
blocks were evicted first decides whether it does. Without prefix caching no block is ever
cached (``KVCacheManager.commit`` caches nothing, lookups find nothing), so which block is
which never matters, only how many are free: this pool is exact for everything a run
observes (``num_free``, ``num_used``, ``num_used_kind``; ``allocate`` fails exactly when the
full pool would), at O(1) a call instead of O(blocks). ``simulation._replica_parts`` swaps it
in for such runs (the InferenceMAX-style benchmark runs among them);
``tests/simulator/cache/test_counting_pool.py`` runs them both ways. With prefix caching it
serves only until a block is first cached under an id a lookup could find
(``KVCacheManager.defer_identities``), even for prompts that share nothing: a preempted request
finds its own blocks again if they were not evicted meanwhile, so the full pool takes over
there.

A "block id" it hands out is the allocation's kind tag, so ``free`` can give each kind back.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


class CountingPool:
    """``BlockPool``'s interface, counting blocks per kind without their identities."""

    __slots__ = ("_num_free", "_used_kind", "num_blocks")

    def __init__(self, num_blocks: int, num_kinds: int = 1) -> None:
        if num_blocks < 0 or num_kinds < 1:
            raise ValueError("num_blocks >= 0 and num_kinds >= 1 required")
        self.num_blocks = num_blocks
        self._num_free = num_blocks
        self._used_kind = [0] * num_kinds

    @property
    def num_free(self) -> int:
        return self._num_free

    @property
    def num_used(self) -> int:
        return self.num_blocks - self._num_free

    @property
    def num_cached(self) -> int:
        return 0  # nothing is cached without prefix caching

    def num_used_kind(self, kind: int) -> int:
        return self._used_kind[kind]

    def allocate(self, n: int, kind: int = 0) -> list[int] | None:
        if n > self._num_free:
            return None
        self._num_free -= n
        self._used_kind[kind] += n
        return [kind] * n

    def free(self, blocks: Iterable[int]) -> None:
        tags = blocks if isinstance(blocks, list) else list(blocks)
        if not tags:
            return
        self._num_free += len(tags)
        used = self._used_kind
        for kind in set(tags):  # one kind in every caller's list
            used[kind] -= tags.count(kind)
        if self._num_free > self.num_blocks or min(used) < 0:
            raise ValueError("blocks freed more often than they were taken")

    def ref(self, block: int) -> int:
        raise NotImplementedError("a counting pool does not track blocks one by one")

    def touch(self, blocks: Iterable[int]) -> None:
        if any(True for _ in blocks):
            raise ValueError("a counting pool has no cached block to hit")

    def cache(self, block: int, h: int, space: int = 0) -> bool:
        raise ValueError("a counting pool caches nothing (prefix caching is off)")

    def cache_many(self, blocks: Sequence[int], hashes: Sequence[int], space: int = 0) -> None:
        if len(blocks):
            raise ValueError("a counting pool caches nothing (prefix caching is off)")

    def lookup(self, h: int, space: int = 0) -> int | None:
        return None

    def count_prefix(self, hashes: Sequence[int], limit: int, spaces: Sequence[int]) -> int:
        return 0

    def rename(self, old: int, new: int, space: int = 0) -> bool:
        return False

    def check(self) -> None:
        assert 0 <= self._num_free <= self.num_blocks, "free count out of range"
        assert sum(self._used_kind) == self.num_used, "per-kind use counters drifted"
