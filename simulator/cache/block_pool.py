"""One replica's pool of KV blocks with vLLM's LRU free queue and lazy prefix-cache eviction.

Mirrors ``vllm/v1/core/block_pool.py:BlockPool`` and
``vllm/v1/core/kv_cache_utils.py:FreeKVCacheBlockQueue`` (``vllm_mechanics.md`` 2.1):

- block ids are ``1..num_blocks``; id 0 is vLLM's ``null_block`` and is never handed out
  (here it doubles as the sentinel of the free queue's circular doubly linked list);
- every block has a ref count; a block is in the free queue exactly when its ref count is 0;
- ``allocate`` (``get_new_blocks``) pops from the front of the free queue;
- ``free`` (``free_blocks``) drops one ref per block, in the order given: a block whose ref
  count reaches 0 is appended to the tail (evicted last) if it carries a hash, or prepended
  (reused first) if it does not. Callers pass a request's blocks tail first, as
  ``SingleTypeKVCacheManager.free`` does with ``reversed(req_blocks)``, so the request's last
  blocks are evicted before its first ones;
- eviction is lazy (``_maybe_evict_cached_block``): a free block keeps its hash, and can still
  be hit, until ``allocate`` pops it for reuse;
- a hit on a cached block with ref 0 takes it out of the free queue (``touch``).

Hashes live in *spaces*: one per KV cache group, as vLLM keys cached blocks by
(block hash, group id) (``BlockHashWithGroupId``). Like ``BlockHashToBlockMap``, a hash
computed twice (two requests missed on the same prefix) keeps both blocks; a lookup returns
the earliest cached one still present (``get_one_block``).

Every operation is O(1) per block touched: the queue is two index arrays (prev/next).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

_SENTINEL = 0  # the null block id doubles as the list head/tail sentinel
# the hash of a block cached only to keep its place in the free queue (evicted last, as a
# hashed block is): its id could never be looked up (a finished request's private output)
SINK = -1


# 0, 1, 2, ...: the int objects every pool's links are sliced from, grown to the largest pool
# seen in this process (~36 bytes a block, kept: a search builds pools of one size many times)
_IDS: list[int] = [0]


def _ids(n: int) -> list[int]:
    if len(_IDS) <= n:
        _IDS.extend(range(len(_IDS), n + 1))
    return _IDS


class BlockPool:
    """``num_blocks`` equal blocks, ref counted, with an LRU free queue and a prefix-hash map.

    ``kinds`` lets callers tag blocks at allocation (e.g. attention / sliding window / state)
    so that ``num_used_kind`` reports distinct blocks in use per kind.
    """

    __slots__ = (
        "_dups",
        "_hash",
        "_kind",
        "_maps",
        "_next",
        "_num_free",
        "_num_hashed",
        "_prev",
        "_ref",
        "_space",
        "_used_kind",
        "num_blocks",
    )

    def __init__(self, num_blocks: int, num_spaces: int = 1, num_kinds: int = 1) -> None:
        if num_blocks < 0 or num_spaces < 1 or num_kinds < 1:
            raise ValueError("num_blocks >= 0, num_spaces >= 1 and num_kinds >= 1 required")
        n = num_blocks
        self.num_blocks = n
        self._ref = [0] * (n + 1)
        # circular list through the sentinel 0: 0 -> 1 -> 2 -> ... -> n -> 0 (sliced from
        # shared ints: making 10^5 int objects anew took ~7 ms a simulation)
        ids = _ids(n)
        self._next = ids[1 : n + 1]
        self._next.append(_SENTINEL)
        self._prev = ids[:n]
        self._prev.insert(0, n)
        self._hash: list[int | None] = [None] * (n + 1)
        self._space = [0] * (n + 1)
        self._kind = [0] * (n + 1)
        self._used_kind = [0] * num_kinds
        # per space: hash -> earliest block caching it; later duplicates in _dups, in order
        self._maps: list[dict[int, int]] = [{} for _ in range(num_spaces)]
        self._dups: list[dict[int, list[int]]] = [{} for _ in range(num_spaces)]
        self._num_free = n
        self._num_hashed = 0

    # ------------------------------------------------------------------ queue primitives

    def _unlink(self, b: int) -> None:
        p, n = self._prev[b], self._next[b]
        self._next[p] = n
        self._prev[n] = p

    def _append(self, b: int) -> None:
        tail = self._prev[_SENTINEL]
        self._next[tail] = b
        self._prev[b] = tail
        self._next[b] = _SENTINEL
        self._prev[_SENTINEL] = b

    def _prepend(self, b: int) -> None:
        head = self._next[_SENTINEL]
        self._prev[head] = b
        self._next[b] = head
        self._prev[b] = _SENTINEL
        self._next[_SENTINEL] = b

    def _drop_hash(self, b: int) -> None:
        """Remove block ``b`` (which carries a hash) from its space's map."""
        h = self._hash[b]
        assert h is not None
        if h == SINK:  # never mapped
            self._hash[b] = None
            self._num_hashed -= 1
            return
        space = self._space[b]
        m, dups = self._maps[space], self._dups[space]
        extra = dups.get(h)
        if m[h] == b:
            if extra:
                m[h] = extra.pop(0)
            else:
                del m[h]
        else:
            assert extra is not None
            extra.remove(b)
        if extra is not None and not extra:
            del dups[h]
        self._hash[b] = None
        self._num_hashed -= 1

    # ------------------------------------------------------------------ public API

    @property
    def num_free(self) -> int:
        """Blocks with ref count 0 (cached or not): what ``allocate`` can hand out."""
        return self._num_free

    @property
    def num_used(self) -> int:
        """Blocks with ref count >= 1."""
        return self.num_blocks - self._num_free

    @property
    def num_cached(self) -> int:
        """Hash-carrying blocks, in use or free (evictable)."""
        return self._num_hashed

    def num_used_kind(self, kind: int) -> int:
        """Distinct blocks in use whose allocation was tagged ``kind``."""
        return self._used_kind[kind]

    def ref(self, block: int) -> int:
        return self._ref[block]

    def block_hash(self, block: int) -> int | None:
        return self._hash[block]

    def allocate(self, n: int, kind: int = 0) -> list[int] | None:
        """Pop ``n`` blocks from the front of the free queue (``BlockPool.get_new_blocks``).

        A popped block that still carries a hash is evicted from the cache now (lazy
        eviction). Returns None, changing nothing, if fewer than ``n`` blocks are free.
        """
        if n > self._num_free:
            return None
        out: list[int] = []
        nxt, ref, hashes, kinds = self._next, self._ref, self._hash, self._kind
        b = _SENTINEL
        for _ in range(n):  # pop n from the front; relink the sentinel once after
            b = nxt[b]
            h = hashes[b]
            if h is not None:  # _maybe_evict_cached_block
                if h == SINK:  # never mapped: _drop_hash's first case, inlined
                    hashes[b] = None
                    self._num_hashed -= 1
                else:
                    self._drop_hash(b)
            ref[b] = 1
            kinds[b] = kind
            out.append(b)
        if n:
            n2 = nxt[b]
            nxt[_SENTINEL] = n2
            self._prev[n2] = _SENTINEL
        self._num_free -= n
        self._used_kind[kind] += n
        return out

    def touch(self, blocks: Iterable[int]) -> None:
        """Take one more ref on each block (a prefix hit); ref-0 blocks leave the free queue."""
        ref = self._ref
        for b in blocks:
            if ref[b] == 0:
                self._unlink(b)
                self._num_free -= 1
                self._used_kind[self._kind[b]] += 1
            ref[b] += 1

    def free(self, blocks: Iterable[int]) -> None:
        """Drop one ref per block, in the order given (``BlockPool.free_blocks``).

        A block reaching ref 0 goes to the tail of the free queue if it carries a hash (evicted
        last) or to the front if it does not (reused first). Pass a request's blocks tail first.
        """
        ref, hashes, nxt, prev = self._ref, self._hash, self._next, self._prev
        kinds, used = self._kind, self._used_kind
        for b in blocks:
            r = ref[b] - 1
            if r < 0:
                raise ValueError(f"block {b} freed more often than it was taken")
            ref[b] = r
            if r == 0:
                self._num_free += 1
                used[kinds[b]] -= 1
                if hashes[b] is not None:  # _append, inlined
                    tail = prev[_SENTINEL]
                    nxt[tail] = b
                    prev[b] = tail
                    nxt[b] = _SENTINEL
                    prev[_SENTINEL] = b
                else:  # _prepend, inlined
                    head = nxt[_SENTINEL]
                    prev[head] = b
                    nxt[b] = head
                    prev[b] = _SENTINEL
                    nxt[_SENTINEL] = b

    def cache(self, block: int, h: int, space: int = 0) -> bool:
        """Give ``block`` the hash ``h`` in ``space`` (``BlockPool.cache_full_blocks``).

        Returns False, changing nothing, if the block already carries a hash. A hash already
        cached by another block is kept twice (a duplicate, looked up after the first).
        """
        if self._hash[block] is not None:
            return False
        m = self._maps[space]
        if h == SINK:
            pass  # cached for the free queue's order only: no lookup can name it
        elif h in m:
            self._dups[space].setdefault(h, []).append(block)
        else:
            m[h] = block
        self._hash[block] = h
        self._space[block] = space
        self._num_hashed += 1
        return True

    def cache_many(self, blocks: Sequence[int], hashes: Sequence[int], space: int = 0) -> None:
        """``cache(blocks[i], hashes[i], space)`` for each i, in order (one call per run of
        blocks: a request's newly full blocks)."""
        own, spaces, m = self._hash, self._space, self._maps[space]
        for block, h in zip(blocks, hashes, strict=True):
            if own[block] is not None:
                continue
            if h == SINK:
                pass
            elif h in m:
                self._dups[space].setdefault(h, []).append(block)
            else:
                m[h] = block
            own[block] = h
            spaces[block] = space
            self._num_hashed += 1

    def lookup(self, h: int, space: int = 0) -> int | None:
        """The block caching ``h`` in ``space`` (in use or free), or None."""
        return self._maps[space].get(h)

    def count_prefix(self, hashes: Sequence[int], limit: int, spaces: Sequence[int]) -> int:
        """Length of the leading run of ``hashes[:limit]`` cached in every one of ``spaces``."""
        maps = [self._maps[s] for s in spaces]
        if len(maps) == 1:
            m = maps[0]
            i = 0
            while i < limit and hashes[i] in m:
                i += 1
            return i
        i = 0
        while i < limit and all(hashes[i] in m for m in maps):
            i += 1
        return i

    def rename(self, old: int, new: int, space: int = 0) -> bool:
        """Re-key the blocks cached as ``old`` (duplicates included) to ``new``; if ``new`` is
        already cached in the space they become its later duplicates. False if ``old`` is absent."""
        m, dups = self._maps[space], self._dups[space]
        first = m.pop(old, None)
        if first is None:
            return False
        moved = [first, *dups.pop(old, [])]
        for b in moved:
            self._hash[b] = new
        if new in m:
            dups.setdefault(new, []).extend(moved)
        else:
            m[new] = moved[0]
            if len(moved) > 1:
                dups[new] = moved[1:]
        return True

    def free_queue(self) -> list[int]:
        """The free queue front (next to be reused) to tail (O(num_free); for tests)."""
        out: list[int] = []
        b = self._next[_SENTINEL]
        while b != _SENTINEL:
            out.append(b)
            b = self._next[b]
        return out

    def check(self) -> None:
        """Assert every invariant (O(num_blocks); property tests call it after each step)."""
        n = self.num_blocks
        queue = self.free_queue()
        back: list[int] = []
        b = self._prev[_SENTINEL]
        while b != _SENTINEL:
            back.append(b)
            b = self._prev[b]
        assert back[::-1] == queue, "free queue links are inconsistent"
        assert len(queue) == self._num_free == len(set(queue)), "free count drifted"
        assert _SENTINEL not in queue, "the null block is never free"
        in_queue = set(queue)
        used_kind = [0] * len(self._used_kind)
        for b in range(1, n + 1):
            assert self._ref[b] >= 0, f"negative ref count on block {b}"
            assert (self._ref[b] == 0) == (b in in_queue), f"block {b}: ref 0 <=> free"
            if self._ref[b] > 0:
                used_kind[self._kind[b]] += 1
            h = self._hash[b]
            if h is not None and h != SINK:
                space = self._space[b]
                mapped = [self._maps[space].get(h), *self._dups[space].get(h, [])]
                assert mapped.count(b) == 1, f"block {b} hash not mapped exactly once"
        assert used_kind == self._used_kind, "per-kind use counters drifted"
        assert self.num_used + self._num_free == n
        hashed = 0
        for space, m in enumerate(self._maps):
            dups = self._dups[space]
            for h, first in m.items():
                for c in (first, *dups.get(h, [])):
                    assert 1 <= c <= n
                    assert self._hash[c] == h
                    assert self._space[c] == space
                    hashed += 1
            assert set(dups) <= set(m), "a duplicate without its first block"
            assert all(dups.values()), "empty duplicate list"
        hashed += sum(h == SINK for h in self._hash)
        assert hashed == self._num_hashed == sum(h is not None for h in self._hash)
        assert self._ref[_SENTINEL] == 0
        assert self._hash[_SENTINEL] is None
