"""The CPU tier: stores full computed blocks, extends GPU hits, LRU eviction, load bytes."""

from __future__ import annotations

from collections.abc import Sequence

from simulator.cache.config import CacheConfig
from simulator.cache.manager import KVCacheManager
from simulator.cache.offload import ATTENTION, STATE, CpuTier
from simulator.cache.prefix import PrefixHit


def chain(blocks: Sequence[int], parent: int = 0) -> list[int]:
    out = []
    for x in blocks:
        parent = hash((parent, x))
        out.append(parent)
    return out


def manager(**knobs: object) -> KVCacheManager:
    fields: dict[str, object] = {"block_tokens": 4, "num_blocks": 5, "bytes_per_block": 100.0}
    fields.update(knobs)
    return KVCacheManager(CacheConfig(**fields))  # type: ignore[arg-type]


def prefill(m: KVCacheManager, rid: str, prompt: int, hashes: Sequence[int]) -> PrefixHit:
    hit = m.lookup(rid, prompt, hashes)
    assert m.admit(rid, prompt, hashes, hit)
    for stop in (*(p for p in (m.next_checkpoint(rid),) if p), prompt):
        if stop > m.computed_tokens(rid):
            m.commit(rid, stop)
    m.check()
    return hit


def test_cpu_tier_lru_evicts_the_oldest_entries() -> None:
    tier = CpuTier(capacity_blocks=3, bytes_per_block=10.0)
    for h in (1, 2, 3):
        assert tier.store(ATTENTION, h, 1)
    assert not tier.store(ATTENTION, 2, 1)  # present: not stored again
    tier.touch(ATTENTION, 1)
    assert tier.store(STATE, 4, 2)  # evicts 2 and 3 (oldest), keeps the touched 1
    assert tier.contains(ATTENTION, 1)
    assert not tier.contains(ATTENTION, 2)
    assert not tier.contains(ATTENTION, 3)
    assert tier.used_blocks == 3
    assert tier.evicted_blocks == 2
    assert tier.stored_bytes == 50.0
    assert not tier.store(STATE, 5, 4)  # larger than the tier
    tier.check()


def test_cpu_tier_extends_a_gpu_miss_and_counts_load_bytes() -> None:
    m = manager(cpu_blocks=10)
    a = chain([1, 2, 3, 4])
    prefill(m, "a", 17, a)
    m.free("a")
    prefill(m, "b", 17, chain([5, 6, 7, 8]))  # evicts all of a's GPU blocks
    m.free("b")
    hit = m.lookup("q", 17, a)
    assert hit == PrefixHit(cpu_tokens=16, cpu_load_blocks=4)
    assert m.load_bytes(hit) == 400.0
    assert m.admit("a2", 17, a, hit)
    assert m.cpu is not None
    assert m.cpu.loaded_bytes == 400.0
    m.commit("a2", 17)
    m.free("a2")
    assert m.lookup("q", 17, a) == PrefixHit(gpu_tokens=16)  # loaded blocks are cached on the GPU
    m.check()


def test_cpu_tier_continues_past_the_gpu_hit() -> None:
    m = manager(num_blocks=6, cpu_blocks=10)
    a = chain([1, 2, 3, 4])
    prefill(m, "a", 17, a)
    m.free("a")
    # queue (front..tail): 5 (partial, unhashed), 6, then a's blocks tail first 4, 3, 2, 1
    assert m.admit("x", 12, chain([9, 9, 9]), PrefixHit())  # takes 5, 6 and evicts 4
    m.free("x")
    assert m.lookup("q", 17, a) == PrefixHit(gpu_tokens=12, cpu_tokens=4, cpu_load_blocks=1)
    m.check()


def test_only_prompt_blocks_are_offloaded_by_default() -> None:
    m = manager(num_blocks=8, cpu_blocks=10)
    prefill(m, "a", 9, chain([1, 2]))
    assert m.grow("a", 16)
    m.commit("a", 16, new_block_hashes=chain([3, 4], parent=chain([1, 2])[-1]))
    assert m.cpu is not None
    assert len(m.cpu) == 2
    m.free("a")
    both = manager(num_blocks=8, cpu_blocks=10, offload_prompt_only=False)
    prefill(both, "a", 9, chain([1, 2]))
    assert both.grow("a", 16)
    both.commit("a", 16, new_block_hashes=chain([3, 4], parent=chain([1, 2])[-1]))
    assert both.cpu is not None
    assert len(both.cpu) == 4


def test_hybrid_cpu_hit_needs_the_state_at_the_new_boundary() -> None:
    m = manager(num_blocks=9, state_groups=2, cpu_blocks=20)
    a = chain([1, 2, 3, 4])
    prefill(m, "a", 17, a)  # checkpoint at 16 stored on GPU and CPU
    m.free("a")
    prefill(m, "b", 17, chain([5, 6, 7, 8]))  # 5 attention + 4 state blocks: evicts all of a
    m.free("b")
    hit = m.lookup("q", 17, a)
    assert hit == PrefixHit(cpu_tokens=16, cpu_load_blocks=4 + 2)
    assert m.admit("a2", 17, a, hit)
    m.commit("a2", 17)
    m.free("a2")
    assert m.lookup("q", 17, a) == PrefixHit(gpu_tokens=16)  # the loaded checkpoint is cached
    # a prompt sharing 3 blocks: attention on CPU, but no state at 12 anywhere
    assert m.lookup("q", 17, [*a[:3], 42]).total_tokens == 0
    m.check()
