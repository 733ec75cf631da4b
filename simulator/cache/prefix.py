"""Prefix-hit computation: how much of a new prompt the GPU cache and the CPU tier hold.

Mirrors ``v1/core/kv_cache_manager.py:get_computed_blocks``,
``kv_cache_coordinator.py:HybridKVCacheCoordinator.find_longest_cache_hit``,
``single_type_kv_cache_manager.py`` (``FullAttentionManager`` / ``MambaManager``
``.find_longest_cache_hit``) and the offloading connector's ``get_num_new_matched_tokens``
(``vllm_mechanics.md`` 2.1, 2.5, 5.1):

1. full attention: the longest run of leading blocks cached in every full-attention group,
   capped at ``prompt - 1`` tokens (``max_cache_hit_length``), block-aligned; with EAGLE/MTP
   the last matched block is dropped (``drop_eagle_block``);
2. hybrids: the largest position ``j * blk`` not beyond that whose recurrent checkpoint (keyed
   by the hash of block ``j - 1``) is cached in every recurrent group, scanning right to left;
   the attention blocks past it are not used (0 if no checkpoint qualifies: vllm#45238);
3. CPU tier: from that GPU hit on, consecutive attention blocks present on the CPU extend the
   hit; hybrids then need the state at the new boundary on the CPU (one state entry), else the
   hit stays at the GPU hit. As in vLLM, the CPU part starts at the (truncated) GPU hit, so
   blocks the GPU holds past a missing checkpoint are loaded again from the CPU.
4. remote KV store (``simulator.cache.remote_tier``): asked only when the CPU tier has
   nothing past the GPU hit (vLLM ``MultiConnector``: the first connector with a match
   loads); the same rule as the CPU tier from the GPU hit on. Its tokens are counted in
   ``cpu_tokens`` (loaded through a connector) and named in ``store_tokens``.

Sliding-window groups do not bound the hit: their blocks are not cached here. Assumption:
the window before the hit is cached whenever the full-attention blocks are. That holds for
resends and next turns (the hit ends where the earlier request ended, and its last window
was freed with its attention blocks); for a hit in the middle of an earlier prompt vLLM's
``SlidingWindowManager`` may find those window blocks evicted, so this is optimistic there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from simulator.cache.block_pool import BlockPool
from simulator.cache.config import CacheConfig
from simulator.cache.counting_pool import CountingPool
from simulator.cache.offload import STATE, CpuTier


class HitLike(Protocol):
    """What ``KVCacheManager.admit`` reads from a hit (a ``PrefixHit`` or a caller's copy)."""

    @property
    def gpu_tokens(self) -> int: ...
    @property
    def cpu_tokens(self) -> int: ...
    @property
    def recompute_tokens(self) -> int: ...


@dataclass(frozen=True, slots=True)
class PrefixHit:
    """Where a new request's prompt prefix comes from (all token counts block-aligned).

    ``gpu_tokens`` are reused from GPU blocks, ``cpu_tokens`` (after them) are loaded from the
    CPU tier; the request computes from ``total_tokens`` on. ``recompute_tokens`` are cached
    attention tokens past the hit that are recomputed because no recurrent checkpoint lies
    there (hybrids; vllm#45238). ``cpu_load_blocks`` pool blocks move host -> device (or
    store -> device). ``store_tokens``: the CPU tokens that come from the remote KV store
    (all of them or none: one connector serves a request).
    """

    gpu_tokens: int = 0
    cpu_tokens: int = 0
    recompute_tokens: int = 0
    cpu_load_blocks: int = 0
    store_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.gpu_tokens + self.cpu_tokens


NO_HIT = PrefixHit()


def _gpu_checkpoint(
    pool: BlockPool | CountingPool, spaces: Sequence[int], hashes: Sequence[int], hi: int
) -> int:
    """Largest ``j <= hi`` whose checkpoint (keyed by block ``j-1``) is cached on the GPU in
    every recurrent group (``MambaManager.find_longest_cache_hit``: right to left)."""
    lookup = pool.lookup
    for j in range(hi, 0, -1):
        h = hashes[j - 1]
        if all(lookup(h, s) is not None for s in spaces):
            return j
    return 0


def find_prefix_hit(
    c: CacheConfig,
    pool: BlockPool | CountingPool,
    cpu: CpuTier | None,
    prompt_tokens: int,
    block_hashes: Sequence[int],
    store: CpuTier | None = None,
) -> PrefixHit:
    """The hit of a prompt of ``prompt_tokens`` whose full blocks hash to ``block_hashes``.

    Pure. Attention groups use pool spaces ``0..full_groups-1``, recurrent groups the next
    ``state_groups`` spaces (as ``KVCacheManager`` caches them).
    """
    if not c.prefix_caching or prompt_tokens <= 1:
        return NO_HIT
    blk, f, s = c.attention_block_tokens, c.full_groups, c.state_groups
    cap = min((prompt_tokens - 1) // blk, len(block_hashes))  # max_cache_hit_length
    if f:
        attn = pool.count_prefix(block_hashes, cap, range(f))
        if c.eagle and attn:
            attn -= 1  # drop_eagle_block
    else:
        attn = cap  # no attention group bounds a pure recurrent model
    gpu = _gpu_checkpoint(pool, range(f, f + s), block_hashes, attn) if s else attn
    hit, extent, load = gpu, attn, 0
    if cpu is not None and f:
        hit, end, load = _tier_hit(c, cpu, block_hashes, gpu, cap)
        extent = max(extent, end)
    from_store = False
    if store is not None and f and hit == gpu:  # MultiConnector: the next connector
        hit, end, load = _tier_hit(c, store, block_hashes, gpu, cap)
        extent = max(extent, end)
        from_store = hit > gpu
    if not f:
        extent = hit
    return PrefixHit(
        gpu_tokens=gpu * blk,
        cpu_tokens=(hit - gpu) * blk,
        recompute_tokens=(extent - hit) * blk,
        cpu_load_blocks=load,
        store_tokens=(hit - gpu) * blk if from_store else 0,
    )


def _tier_hit(
    c: CacheConfig, tier: CpuTier, block_hashes: Sequence[int], gpu: int, cap: int
) -> tuple[int, int, int]:
    """(hit, extent, pool blocks loaded) in attention blocks: the run of attention blocks
    ``tier`` holds from the GPU hit on; hybrids need the state at the new boundary there."""
    f, s = c.full_groups, c.state_groups
    end = tier.count_prefix(block_hashes, gpu, cap)
    if c.eagle and end > gpu:
        end -= 1
    if s:
        for j in range(end, gpu, -1):  # the state at the new boundary only
            if tier.contains(STATE, block_hashes[j - 1]):
                return j, end, (j - gpu) * f + s
        return gpu, end, 0
    return end, end, (end - gpu) * f
