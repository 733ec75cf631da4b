"""What one admitted request holds in a replica's KV cache (``KVCacheManager``'s records).

A :class:`Holding` is the request's blocks per layer group (full attention, sliding window,
recurrent-state pages) and how far it has got: tokens computed, blocks offered to the prefix
cache and the CPU tier, its chain hashes. ``with_real_ids`` gives every holding real block
ids when a counting pool hands over to the full one (``KVCacheManager.defer_identities``).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

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
