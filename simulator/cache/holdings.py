"""What one admitted request holds in a replica's KV cache (``KVCacheManager``'s records).

A :class:`Holding` is the request's blocks per layer group (full attention, sliding window,
recurrent-state pages) and how far it has got: tokens computed, blocks offered to the prefix
cache and the CPU tier, its chain hashes. ``with_real_ids`` gives every holding real block
ids when a counting pool hands over to the full one (``KVCacheManager.defer_identities``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Protocol

from simulator.cache.block_pool import BlockPool
from simulator.cache.config import CacheConfig
from simulator.cache.counting_pool import CountingPool

ATTN_KIND, SWA_KIND, STATE_KIND = 0, 1, 2  # the pool's block kinds


class Holding:
    __slots__ = (
        "attn",
        "cap_tokens",
        "computed",
        "drafts",
        "hashes",
        "mandatory",
        "num_cached",
        "num_offered",
        "prev",
        "prompt_tokens",
        "running",
        "short",
        "swa",
    )

    def __init__(self, prompt_tokens: int, hashes: list[int], computed: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.hashes = hashes  # chain hashes of its full blocks (prompt, then output)
        self.computed = computed  # tokens whose KV (and state) is computed
        self.attn: list[list[int]] = []  # per full-attention group
        self.swa: list[list[int]] = []  # per sliding-window group
        self.prev: list[int] = []  # previous boundary state, one block per recurrent group
        self.running: list[int] = []  # running state, one block per recurrent group
        self.drafts: list[int] = []  # one page per draft token per recurrent group
        self.short = 0  # state blocks it could not re-take at a crossing (grow re-takes them)
        self.num_cached = 0  # leading attention blocks already offered to the prefix cache
        self.num_offered = 0  # leading attention blocks already offered to the CPU tier
        self.mandatory: tuple[int, ...] = ()  # checkpoint positions always retained
        self.cap_tokens = 0  # tokens its blocks hold without growing (grow's fast path)

    def num_blocks(self) -> int:
        """Pool blocks held in all groups (a block shared with another request counts too)."""
        return (
            sum(len(b) for b in self.attn)
            + sum(len(b) for b in self.swa)
            + len(self.prev)
            + len(self.running)
            + len(self.drafts)
        )

    def check(self, req_id: Hashable, c: CacheConfig) -> None:
        """Assert the holding's own invariants (``KVCacheManager.check``)."""
        s = c.state_groups
        lengths = {len(b) for b in self.attn}
        assert len(lengths) <= 1, f"{req_id}: attention groups out of step"
        assert all(len(b) <= c.window_blocks for b in self.swa), f"{req_id}: window overrun"
        assert len(self.running) == s
        assert len(self.drafts) == s * c.num_speculative_tokens
        if s and c.prefix_caching:
            assert len(self.prev) + self.short == s, f"{req_id}: state pages lost"
        else:
            assert not self.prev
            assert not self.short
        assert self.num_cached <= max(lengths, default=0) or not c.full_groups


def with_real_ids(
    holdings: Iterable[Holding], counted: BlockPool | CountingPool, pool: BlockPool
) -> BlockPool:
    """``pool`` (empty) in ``counted``'s place: every holding's blocks get real ids, one ref
    each (nothing is shared while a pool counts), the rest stay free and unhashed."""
    for h in holdings:
        for groups, kind in (
            (h.attn, ATTN_KIND),
            (h.swa, SWA_KIND),
            ((h.prev, h.running, h.drafts), STATE_KIND),
        ):
            for blocks in groups:
                new = pool.allocate(len(blocks), kind)
                assert new is not None
                blocks[:] = new
    assert all(pool.num_used_kind(k) == counted.num_used_kind(k) for k in range(3)), (
        "a request's blocks went missing while counting"
    )
    return pool


def hit_blocks(
    pool: BlockPool | CountingPool,
    req_id: Hashable,
    hashes: Sequence[int],
    blocks: range,
    spaces: Iterable[int],
) -> list[int]:
    """The cached blocks of ``hashes[i]`` for ``i`` in ``blocks``, in each of ``spaces``
    (space by space): what a prefix hit holds; one not cached means the hit is stale."""
    held: list[int] = []
    for space in spaces:
        for i in blocks:
            b = pool.lookup(hashes[i], space)
            if b is None:
                raise ValueError(
                    f"stale PrefixHit for {req_id!r}: block {i} (space {space}) not cached"
                )
            held.append(b)
    return held


class _Checked(Protocol):
    def check(self) -> None: ...


def check_holdings(
    reqs: Mapping[Hashable, Holding],
    pool: BlockPool | CountingPool,
    tiers: Iterable[_Checked],
    c: CacheConfig,
    set_capacity: Callable[[Holding], None],
) -> None:
    """``KVCacheManager.check``: the pool's and tiers' invariants, each holding's, a fresh
    capacity equal to the kept one, and ref counts exactly the holdings' holds."""
    pool.check()
    for tier in tiers:
        tier.check()
    holds: Counter[int] = Counter()
    for req_id, r in reqs.items():
        r.check(req_id, c)
        cap = r.cap_tokens
        set_capacity(r)
        assert cap == r.cap_tokens, f"{req_id}: stale capacity"
        for blocks in (*r.attn, *r.swa, r.prev, r.running, r.drafts):
            holds.update(blocks)
    if isinstance(pool, CountingPool):  # block "ids" are kind tags: count them
        assert sum(holds.values()) == pool.num_used, "blocks held != blocks used"
        return
    for b in range(1, c.num_blocks + 1):
        assert pool.ref(b) == holds[b], f"block {b}: ref {pool.ref(b)} != holds"
