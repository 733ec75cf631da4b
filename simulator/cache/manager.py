"""One replica's KV cache manager: vLLM v1 ``KVCacheManager`` + ``HybridKVCacheCoordinator``.

Mirrors ``vllm/v1/core/kv_cache_manager.py`` (``get_computed_blocks``, ``allocate_slots``,
``free``), ``kv_cache_coordinator.py:HybridKVCacheCoordinator.find_longest_cache_hit`` and
``single_type_kv_cache_manager.py`` (``FullAttentionManager``, ``SlidingWindowManager``,
``MambaManager`` in align mode); see ``vllm_mechanics.md`` 2.1-2.5, 4, 5.1, 8.

Accounting (all groups draw on one ``BlockPool``; every block has the same bytes):

- full attention: ``full_groups`` pool blocks per attention block of ``B*dcp`` tokens; a
  request holds ``ceil(tokens / (B*dcp))`` of them per group;
- sliding window: at most ``ceil((window-1)/B) + 1`` blocks per group (older blocks are
  recycled without being cached, as ``simulator.kv_layout.blocks_per_seq`` assumes; vLLM's
  transient overshoot during a long prefill chunk is not modelled);
- recurrent groups: ``state_pages_per_request`` pages per group while running: the previous
  boundary state (``prev``, possibly a shared checkpoint hit), the running state and one per
  draft token. When the running state crosses a block boundary the previous page is released,
  the running page becomes the previous one (cached as a checkpoint if retained) and a fresh
  running page is allocated (``preprocess_mamba`` copies the state into it). A retained
  checkpoint (``simulator.cache.retention``) is a cached entry keyed by the hash of the block
  it ends and costs ``state_groups`` pool blocks while cached (LRU-evictable like any block).

Prefix hits (``lookup``): full-attention hit = longest run of leading blocks cached in every
full-attention group, at most ``prompt-1`` tokens, block-aligned; hybrids take the largest
cached checkpoint not beyond it and truncate the attention blocks there; the CPU tier then
extends the hit from that point.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

from simulator.cache.block_pool import SINK, BlockPool
from simulator.cache.config import CacheConfig, CacheUsage
from simulator.cache.counting_pool import CountingPool
from simulator.cache.holdings import (
    ATTN_KIND,
    STATE_KIND,
    SWA_KIND,
    Holding,
    check_holdings,
    hit_blocks,
    with_real_ids,
)
from simulator.cache.offload import ATTENTION, STATE, CpuTier
from simulator.cache.prefix import HitLike, PrefixHit, find_prefix_hit
from simulator.cache.remote_tier import RemoteTier
from simulator.cache.retention import mandatory_checkpoints, retains


class KVCacheManager:
    """Block accounting and prefix caching for the requests of one replica."""

    def __init__(self, config: CacheConfig) -> None:
        c = config
        self.config = c
        self._blk = c.attention_block_tokens
        self._f = c.full_groups
        self._s = c.state_groups
        self._state_spaces = tuple(range(c.full_groups, c.full_groups + c.state_groups))
        self.pool: BlockPool | CountingPool = self._full_pool()
        self.deferred = False  # counting until the first block is cached under a real id
        self.cpu = (
            CpuTier(c.cpu_blocks, c.bytes_per_block) if c.cpu_blocks and c.prefix_caching else None
        )
        self.store: RemoteTier | None = None  # remote KV store (``attach_store``)
        self._tiers: tuple[CpuTier, ...] = (self.cpu,) if self.cpu is not None else ()
        self._reqs: dict[Hashable, Holding] = {}
        # bumped by every call that may change a lookup's answer or the free count: a
        # scheduler can keep a blocked request's PrefixHit while the version is unchanged
        self.version = 0

    def count_only(self) -> None:
        """Swap the empty pool for a :class:`CountingPool`: without prefix caching no block
        is ever cached, so none is ever found and only how many are free matters. Refused with
        prefix caching (a preempted request finds its own blocks again: ``defer_identities``
        counts only until then) or blocks in use."""
        if self.config.prefix_caching:
            raise ValueError("only an empty pool without prefix caching can count")
        self._count()

    def _count(self) -> None:
        if self.pool.num_used:
            raise ValueError("only an empty pool without prefix caching can count")
        self.pool = CountingPool(self.pool.num_blocks, num_kinds=3)

    def defer_identities(self) -> None:
        """With prefix caching: count (a :class:`CountingPool`) until a block is first cached
        under an id that can be looked up, then carry on with the full pool (``_materialise``).

        Exact: until then every hash in the pool is SINK (a finished request's private
        blocks, kept only for their place in the free queue), so no lookup can find a block,
        every free block is one nobody can hit and every used block is one request's own.
        Which free block is which, and in what order they queue, then decides nothing: a block
        cached later is appended behind every block free at that moment in the full pool as
        in a fresh one. Random prompts and other one-request sessions cache real ids only when
        a preempted request names its blocks, so a run without preemption counts throughout
        (``tests/simulator/cache/test_counting_pool.py`` runs both ways)."""
        self._count()
        self.deferred = True

    def _full_pool(self) -> BlockPool:
        return BlockPool(self.config.num_blocks, num_spaces=max(1, self._f + self._s), num_kinds=3)

    def _materialise(self) -> None:
        """The full pool in the counting pool's place (``holdings.with_real_ids``)."""
        self.pool = with_real_ids(self._reqs.values(), self.pool, self._full_pool())
        self.deferred = False

    def attach_store(self, store: RemoteTier) -> None:
        """Put a (shared) remote KV store below the CPU tier (``simulator.cache.remote_tier``):
        it is offered every block the CPU tier is, and looked up when the CPU tier misses."""
        if self.config.prefix_caching:
            self.store = store
            self._tiers = (*self._tiers, store)

    # ------------------------------------------------------------------ queries

    def __contains__(self, req_id: Hashable) -> bool:
        return req_id in self._reqs

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free

    @property
    def usage(self) -> CacheUsage:
        return CacheUsage(
            used_blocks=self.pool.num_used,
            free_blocks=self.pool.num_free,
            cached_blocks=self.pool.num_cached,
            state_blocks=self.pool.num_used_kind(STATE_KIND),
            num_requests=len(self._reqs),
            cpu_used_blocks=self.cpu.used_blocks if self.cpu is not None else 0,
        )

    def computed_tokens(self, req_id: Hashable) -> int:
        return self._reqs[req_id].computed

    def num_blocks_of(self, req_id: Hashable) -> int:
        """Pool blocks the request holds in all groups (a block shared with another request
        counts here too)."""
        return self._reqs[req_id].num_blocks()

    def load_bytes(self, hit: PrefixHit) -> float:
        """Bytes the CPU part of ``hit`` moves over the host link (0 without a CPU tier)."""
        return self.cpu.load_bytes(hit.cpu_load_blocks) if self.cpu is not None else 0.0

    def lookup(
        self, req_id: Hashable, prompt_tokens: int, block_hashes: Sequence[int]
    ) -> PrefixHit:
        """The prefix hit of a waiting request (pure; see ``simulator.cache.prefix``).

        ``block_hashes``: chained hashes of the prompt's full attention blocks, in order.
        ``req_id`` does not change the answer (as ``get_computed_blocks(request)`` reads only
        the request's hashes); it names the request in the call like the other methods.
        """
        del req_id
        return find_prefix_hit(
            self.config, self.pool, self.cpu, prompt_tokens, block_hashes, self.store
        )

    def next_checkpoint(self, req_id: Hashable) -> int | None:
        """The next position where the scheduler must end a prefill chunk so that a mandatory
        checkpoint (replay boundary, junction) is written (``_mamba_block_aligned_split``)."""
        r = self._reqs[req_id]
        return min((p for p in r.mandatory if p > r.computed), default=None)

    # ------------------------------------------------------------------ admission / growth

    def _attn_blocks(self, tokens: int) -> int:
        return math.ceil(tokens / self._blk) if self._f else 0

    def _swa_blocks(self, tokens: int) -> int:
        if not self.config.swa_groups:
            return 0
        return min(math.ceil(tokens / self.config.block_tokens), self.config.window_blocks)

    def admit(
        self,
        req_id: Hashable,
        prompt_tokens: int,
        block_hashes: Sequence[int],
        hit: HitLike,
        lookahead_tokens: int = 0,
        remote_tokens: int = 0,
        hit_only: bool = False,
    ) -> bool:
        """Admit a waiting request (``allocate_slots(..., full_sequence_must_fit=True)``).

        The whole prompt plus ``lookahead_tokens`` (draft slots) must fit in the free blocks
        (``scheduler_reserve_full_isl``). With ``hit_only`` (what the scheduler asks, as vLLM
        does) only what the request holds now is allocated: the hit (GPU, CPU tier or remote),
        the draft slots and the recurrent state pages; the first chunk's blocks come from
        ``grow``, as every later chunk's do, so a long prompt takes blocks chunk by chunk and
        cached blocks are evicted as its prefill advances, not all at admission. Without it the
        whole prompt is allocated at once. Takes refs on the GPU hit blocks (``touch``).
        CPU-hit blocks are allocated and cached at once (the engine delays the request by the
        load time). ``remote_tokens`` > the hit: the tokens up to there are read from another
        replica (disaggregation: WAITING_FOR_REMOTE_KVS); the request counts them computed, and
        their full blocks are cached at once, as vLLM caches them when the read lands
        (``_update_waiting_for_remote_kv``). ``hit`` must come from ``lookup`` on the current
        state. Returns False and changes nothing if the blocks do not fit.
        """
        if req_id in self._reqs:
            raise ValueError(f"request {req_id!r} is already admitted")
        c, pool, blk, f, s = self.config, self.pool, self._blk, self._f, self._s
        total = prompt_tokens + lookahead_tokens
        n_attn = self._attn_blocks(total)
        g_hit, c_hit = hit.gpu_tokens // blk, hit.cpu_tokens // blk
        hashes = list(block_hashes)
        held = hit_blocks(pool, req_id, hashes, range(g_hit), range(f))
        ckpt: list[int] = []
        if s and c.prefix_caching and g_hit and not c_hit:
            ckpt = hit_blocks(pool, req_id, hashes, range(g_hit - 1, g_hit), self._state_spaces)
        evictable = sum(1 for b in held if pool.ref(b) == 0) + sum(
            1 for b in ckpt if pool.ref(b) == 0
        )
        swa = self._swa_blocks(total)
        need = (
            f * (n_attn - g_hit)
            + c.swa_groups * swa
            + s * c.state_pages_per_request
            - len(ckpt)
            + evictable
        )
        if need > pool.num_free:
            return False
        # blocks loaded from the CPU tier or read from a remote replica are cached at once
        loaded = g_hit + c_hit
        if remote_tokens and c.prefix_caching:
            loaded = max(loaded, min(remote_tokens // blk, len(hashes), n_attn))
        if self.deferred and loaded > g_hit:
            self._materialise()
            pool = self.pool
        pool.touch(held)
        pool.touch(ckpt)
        r = Holding(prompt_tokens, hashes, max(hit.gpu_tokens + hit.cpu_tokens, remote_tokens))
        now = min(total, r.computed + lookahead_tokens) if hit_only else total
        n_now = max(self._attn_blocks(now), loaded, g_hit)
        for g in range(f):
            new = pool.allocate(n_now - g_hit, ATTN_KIND)
            assert new is not None
            r.attn.append(held[g * g_hit : (g + 1) * g_hit] + new)
            for i in range(g_hit, loaded):
                pool.cache(r.attn[g][i], hashes[i], g)
        r.num_cached = loaded
        for _ in range(c.swa_groups):
            new = pool.allocate(self._swa_blocks(now), SWA_KIND)
            assert new is not None
            r.swa.append(new)
        if s:
            self._take_state_pages(r, ckpt, hashes, g_hit + c_hit if c_hit else 0)
        source = self.store if getattr(hit, "store_tokens", 0) else self.cpu
        if source is not None and c_hit:
            for i in range(g_hit, g_hit + c_hit):
                source.touch(ATTENTION, hashes[i])
            if s:
                source.touch(STATE, hashes[g_hit + c_hit - 1])
            source.record_load(c_hit * f + s)
        r.mandatory = mandatory_checkpoints(c, prompt_tokens, r.computed, hit.recompute_tokens)
        self._set_capacity(r)
        self._reqs[req_id] = r
        self.version += 1
        return True

    def _set_capacity(self, r: Holding) -> None:
        c = self.config
        cap = len(r.attn[0]) * self._blk if r.attn else 1 << 62
        if r.swa and len(r.swa[0]) < c.window_blocks:
            cap = min(cap, len(r.swa[0]) * c.block_tokens)
        r.cap_tokens = cap

    def _take_state_pages(
        self, r: Holding, ckpt: list[int], hashes: list[int], cpu_ckpt_blocks: int
    ) -> None:
        c, pool, s = self.config, self.pool, self._s
        if c.prefix_caching:
            if ckpt:
                r.prev = ckpt  # the GPU checkpoint hit is the previous boundary state
            else:
                prev = pool.allocate(s, STATE_KIND)
                assert prev is not None
                if cpu_ckpt_blocks:  # the checkpoint loaded from the CPU tier
                    for sp, b in zip(self._state_spaces, prev, strict=True):
                        pool.cache(b, hashes[cpu_ckpt_blocks - 1], sp)
                r.prev = prev
        running = pool.allocate(s, STATE_KIND)
        drafts = pool.allocate(s * c.num_speculative_tokens, STATE_KIND)
        assert running is not None
        assert drafts is not None
        r.running, r.drafts = running, drafts

    def grow(self, req_id: Hashable, total_tokens: int) -> int:
        """Make a running request hold blocks for ``total_tokens`` (computed + scheduled +
        lookahead; ``allocate_slots`` for a running request). 0, changing nothing, if the
        free blocks do not suffice: the scheduler preempts.

        Else the tokens the request can reach without another call: its blocks' capacity,
        which only a later ``grow`` or ``free`` changes, or (recurrent groups) a state page it
        could not re-take at a crossing: ``commit`` says so, and the caller must grow again
        before the request's next step."""
        r = self._reqs[req_id]
        if total_tokens <= r.cap_tokens and not r.short:
            return r.cap_tokens
        c, pool = self.config, self.pool
        add = max(self._attn_blocks(total_tokens) - (len(r.attn[0]) if r.attn else 0), 0)
        swa_add = max(self._swa_blocks(total_tokens) - (len(r.swa[0]) if r.swa else 0), 0)
        if self._f * add + c.swa_groups * swa_add + r.short > pool.num_free:
            return 0
        for blocks in r.attn:
            new = pool.allocate(add, ATTN_KIND)
            assert new is not None
            blocks.extend(new)
        for blocks in r.swa:
            new = pool.allocate(swa_add, SWA_KIND)
            assert new is not None
            blocks.extend(new)
        if r.short:
            prev = pool.allocate(r.short, STATE_KIND)
            assert prev is not None
            r.prev, r.short = prev, 0
        self._set_capacity(r)
        self.version += 1
        return r.cap_tokens

    # ------------------------------------------------------------------ progress / release

    def commit(
        self, req_id: Hashable, computed_tokens: int, new_block_hashes: Sequence[int] = ()
    ) -> bool:
        """Record that ``computed_tokens`` of the request are computed after a step.

        ``new_block_hashes`` appends chain hashes of output blocks (the prompt's came with
        ``admit``); pass a block's hash no later than the commit that fills it. Blocks that are
        full, computed and hashed are cached (``cache_full_blocks``; drafts never are, having no
        hash) and offered to the CPU tier; recurrent states crossing block boundaries move to a
        new page, and retained boundaries are cached as checkpoints.

        True when a crossing could not re-take a state page (the released one was shared):
        ``grow`` must run before the request's next step.
        """
        r = self._reqs[req_id]
        if computed_tokens < r.computed:
            raise ValueError(
                f"{req_id!r}: computed tokens went back {r.computed} -> {computed_tokens}"
            )
        blk = self._blk
        if not new_block_hashes and computed_tokens // blk == r.computed // blk:
            r.computed = computed_tokens  # no block filled, no boundary crossed
            return bool(r.short)
        r.hashes.extend(new_block_hashes)
        self.version += 1
        c, hashes = self.config, r.hashes
        if not c.prefix_caching:
            r.computed = computed_tokens
            return False
        full = min(computed_tokens // blk, len(hashes))
        if self._f:
            full = min(full, len(r.attn[0]))
            if full > r.num_cached:
                lo = r.num_cached
                if self.deferred and hashes[lo:full].count(SINK) < full - lo:
                    self._materialise()  # the first id someone could look up
                if not self.deferred:  # (while counting, SINK blocks need no caching)
                    cache_many = self.pool.cache_many
                    for g, blocks in enumerate(r.attn):
                        cache_many(blocks[lo:full], hashes[lo:full], g)
                r.num_cached = full
            if self._tiers:
                limit = min(full, r.prompt_tokens // blk) if c.offload_prompt_only else full
                for i in range(r.num_offered, limit):
                    for tier in self._tiers:  # the CPU tier, then the remote store
                        tier.store(ATTENTION, hashes[i], self._f)
                r.num_offered = max(r.num_offered, limit)
        if self._s:
            first, last = r.computed // blk + 1, computed_tokens // blk
            if last >= first:
                stored = False
                for k in range(first, min(last, len(hashes)) + 1):
                    p = k * blk
                    if retains(c, r.prompt_tokens, r.mandatory, p, computed_tokens):
                        self._cross(r, hashes[k - 1], p)
                        stored = True
                if not stored:
                    self._cross(r, None, 0)
        r.computed = computed_tokens
        return bool(r.short)

    def _cross(self, r: Holding, key: int | None, p: int) -> None:
        """The running state moves to a new page; the old one is cached under ``key``."""
        if self.deferred and key is not None:
            self._materialise()
        pool = self.pool
        pool.free(r.prev)  # the previous boundary page is released (remove_skipped_blocks)
        r.prev = []
        new = pool.allocate(self._s, STATE_KIND)
        if new is None:  # only if the released page was shared: grow() must re-take it
            r.short = self._s
            return
        if key is not None:
            for sp, b in zip(self._state_spaces, r.running, strict=True):
                pool.cache(b, key, sp)
            if self._tiers and (not self.config.offload_prompt_only or p <= r.prompt_tokens):
                for tier in self._tiers:
                    tier.store(STATE, key, self._s)
        r.prev, r.running, r.short = r.running, new, 0

    def free(self, req_id: Hashable) -> None:
        """Release every block of a finished or preempted request (``KVCacheManager.free``),
        group by group, each tail first; hashed blocks stay cached and evictable."""
        r = self._reqs.pop(req_id)
        self.version += 1
        pool = self.pool
        for blocks in r.attn:
            pool.free(reversed(blocks))
        for blocks in r.swa:
            pool.free(reversed(blocks))
        pool.free(reversed(r.drafts))
        pool.free(r.running)
        pool.free(r.prev)

    def rename(self, old_hash: int, new_hash: int) -> None:
        """Re-key every cached entry of ``old_hash`` (attention blocks, checkpoint, CPU tier)
        to ``new_hash``: how the engine gives output blocks the chain ids the next turn has."""
        self.version += 1
        for space in range(self._f + self._s):
            self.pool.rename(old_hash, new_hash, space)
        for tier in self._tiers:
            tier.rename(old_hash, new_hash)

    def check(self) -> None:
        """Assert the pool's invariants and that its ref counts are exactly the requests' holds."""
        check_holdings(self._reqs, self.pool, self._tiers, self.config, self._set_capacity)
