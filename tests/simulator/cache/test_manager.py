"""KVCacheManager: each vLLM rule on a tiny hand-checked case."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from simulator import catalog
from simulator.cache.config import CacheConfig
from simulator.cache.manager import KVCacheManager
from simulator.cache.prefix import PrefixHit
from simulator.kv_layout import blocks_per_seq, kv_layout
from simulator.specs.serving import ServingConfig, SpeculativeConfig


def chain(blocks: Sequence[int], parent: int = 0) -> list[int]:
    """Chained block hashes of a prompt whose full blocks have the given contents."""
    out = []
    for x in blocks:
        parent = hash((parent, x))
        out.append(parent)
    return out


def manager(**knobs: object) -> KVCacheManager:
    fields: dict[str, object] = {"block_tokens": 4, "num_blocks": 64}
    fields.update(knobs)
    return KVCacheManager(CacheConfig(**fields))  # type: ignore[arg-type]


def run_prefill(
    m: KVCacheManager, rid: str, prompt: int, hashes: Sequence[int], stops: Sequence[int] = ()
) -> PrefixHit:
    """Look up, admit and compute a whole prompt, ending chunks at ``stops`` and at the
    mandatory checkpoints (as the scheduler does). Returns the hit."""
    hit = m.lookup(rid, prompt, hashes)
    assert m.admit(rid, prompt, hashes, hit)
    while m.computed_tokens(rid) < prompt:
        nxt = m.next_checkpoint(rid)
        ends = [p for p in (*stops, nxt or prompt, prompt) if p > m.computed_tokens(rid)]
        m.commit(rid, min(ends))
    m.check()
    return hit


# --------------------------------------------------------------------------- full attention


def test_hit_is_capped_at_prompt_minus_one_and_block_aligned() -> None:
    m = manager()
    h = chain([1, 2, 3])
    run_prefill(m, "a", 12, h)  # 3 full blocks of 4 tokens
    m.free("a")
    assert m.lookup("q", 12, h) == PrefixHit(gpu_tokens=8)  # 11 tokens at most -> 2 blocks
    assert m.lookup("q", 13, h) == PrefixHit(gpu_tokens=12)
    assert m.lookup("q", 14, [*h, 99]) == PrefixHit(gpu_tokens=12)  # stops at the first miss
    assert m.lookup("q", 1, h) == PrefixHit()
    assert m.lookup("q", 9, chain([1, 5])) == PrefixHit(gpu_tokens=4)


def test_eagle_drops_the_last_matched_block() -> None:
    m = manager(eagle=True)
    h = chain([1, 2, 3])
    run_prefill(m, "a", 13, h)
    m.free("a")
    assert m.lookup("q", 13, h).gpu_tokens == 8


def test_dcp_block_covers_block_tokens_times_dcp() -> None:
    m = manager(block_tokens=4, dcp=2)  # an attention block covers 8 tokens
    assert m.admit("a", 17, chain([1, 2]), PrefixHit())
    assert m.usage.used_blocks == 3  # ceil(17 / 8)
    m.commit("a", 17)
    m.free("a")
    assert m.lookup("q", 17, chain([1, 2])).gpu_tokens == 16


def test_groups_each_take_a_block_per_attention_block() -> None:
    m = manager(full_groups=2)
    assert m.admit("a", 9, chain([1, 2]), PrefixHit())
    assert m.usage.used_blocks == 6  # 2 groups x ceil(9/4)
    m.commit("a", 9)
    m.free("a")
    assert m.lookup("q", 9, chain([1, 2])).gpu_tokens == 8


def test_free_releases_tail_first_so_the_tail_is_evicted_first() -> None:
    m = manager(num_blocks=4)
    h = chain([1, 2, 3])
    run_prefill(m, "a", 13, h)  # blocks 1..4; 1..3 hashed, 4 partial
    m.free("a")
    assert m.pool.free_queue() == [4, 3, 2, 1]
    assert m.admit("b", 5, chain([7]), PrefixHit())  # needs 2: block 4 then block 3 (evicted)
    assert m.lookup("q", 13, h).gpu_tokens == 8
    m.check()


def test_hit_blocks_are_shared_and_free_ones_count_against_admission() -> None:
    m = manager(num_blocks=4)
    h = chain([1, 2])
    run_prefill(m, "a", 9, h)  # 3 blocks
    m.free("a")
    hit = m.lookup("q", 9, h)
    assert hit.gpu_tokens == 8
    # 2 hit blocks leave the free queue + 1 new block = 3 of the 4 free blocks
    assert m.admit("b", 9, h, hit)
    assert m.usage.used_blocks == 3
    assert m.lookup("q", 9, h).gpu_tokens == 8
    hit = m.lookup("q", 9, h)
    assert m.admit("c", 9, h, hit)  # shares the 2 hit blocks, 1 new
    assert m.usage.used_blocks == 4
    assert m.pool.ref(m.pool.lookup(h[0]) or 0) == 2
    m.check()


def test_admission_is_all_or_nothing() -> None:
    m = manager(num_blocks=5)
    assert m.admit("a", 12, chain([1, 2, 3]), PrefixHit())
    before = (m.usage, m.pool.free_queue())
    assert not m.admit("b", 9, chain([4, 5]), PrefixHit())  # needs 3, 2 free
    assert (m.usage, m.pool.free_queue()) == before
    assert "b" not in m
    assert not m.grow("a", 21)  # needs 3 more
    assert (m.usage, m.pool.free_queue()) == before
    assert m.grow("a", 20)
    assert m.num_free_blocks == 0
    m.check()


def test_lookahead_slots_are_allocated_but_never_cached() -> None:
    m = manager()
    h = chain([1, 2])
    assert m.admit("a", 8, h, PrefixHit(), lookahead_tokens=3)
    assert m.usage.used_blocks == 3
    m.commit("a", 8)
    assert m.grow("a", 8 + 1 + 3)
    m.commit("a", 10)  # 2 of 4 tokens accepted; block 2 not full, no hash
    assert m.usage.cached_blocks == 2
    m.check()


def test_sliding_window_groups_hold_at_most_the_window() -> None:
    # window 9 tokens at B=4: ceil(8/4) + 1 = 3 blocks per sliding group
    m = manager(swa_groups=2, window_tokens=9)
    assert m.admit("a", 6, chain([1]), PrefixHit())
    assert m.usage.used_blocks == 2 + 2 * 2
    assert m.grow("a", 40)
    assert m.usage.used_blocks == 10 + 2 * 3
    m.check()
    m.free("a")
    assert m.usage.cached_blocks == 0  # nothing committed; sliding blocks are never cached


def test_rename_gives_output_blocks_the_next_turns_hashes() -> None:
    m = manager()
    h = chain([1, 2])
    run_prefill(m, "t1", 9, h)
    assert m.grow("t1", 16)
    m.commit("t1", 16, new_block_hashes=[555, 556])  # provisional output hashes
    m.free("t1")
    turn2 = chain([1, 2, 3, 4, 5])  # the output's real chain ids
    assert m.lookup("q", 21, turn2).gpu_tokens == 8
    m.rename(555, turn2[2])
    m.rename(556, turn2[3])
    assert m.lookup("q", 21, turn2).gpu_tokens == 16


def test_prefix_caching_off() -> None:
    m = manager(prefix_caching=False, state_groups=1)
    h = chain([1, 2])
    assert m.admit("a", 9, h, m.lookup("q", 9, h))
    assert m.usage.state_blocks == 1
    m.commit("a", 9)
    m.free("a")
    assert m.lookup("q", 9, h) == PrefixHit()
    assert m.usage.cached_blocks == 0


# --------------------------------------------------------------------------- hybrids


def test_state_pages_per_request_with_drafts() -> None:
    m = manager(state_groups=3, num_speculative_tokens=2)
    assert m.config.state_pages_per_request == 4  # 2 + K in align mode
    assert m.admit("a", 4, [], PrefixHit(), lookahead_tokens=2)
    assert m.usage.state_blocks == 12
    assert m.usage.used_blocks == 2 + 12
    off = manager(state_groups=3, num_speculative_tokens=2, prefix_caching=False)
    assert off.config.state_pages_per_request == 3  # 1 + K
    m.check()


@pytest.mark.parametrize(
    ("model", "tp", "dcp", "spec"),
    [
        ("kimi-linear-48b-a3b", 4, 1, None),
        ("kimi-k3", 8, 1, 3),
        ("kimi-k3", 8, 4, None),
        ("gpt-oss-120b", 1, 1, None),
    ],
)
def test_from_layout_agrees_with_memory_blocks_per_seq(
    model: str, tp: int, dcp: int, spec: int | None
) -> None:
    speculative = (
        None
        if spec is None
        else SpeculativeConfig(method="mtp", num_speculative_tokens=spec, acceptance_rate=0.7)
    )
    serving = ServingConfig(tp=tp, dcp=dcp, speculative=speculative)
    layout = kv_layout(catalog.model_card(model), serving)
    config = CacheConfig.from_layout(layout, serving, num_blocks=20_000)
    assert config.eagle == (spec is not None)
    for context in (1, 700, 20_000, 100_000):
        m = KVCacheManager(config)
        assert m.admit("a", context, [], PrefixHit())
        assert m.usage.used_blocks == blocks_per_seq(layout, serving, context)


def test_hybrid_hit_is_the_largest_checkpoint_within_the_attention_hit() -> None:
    m = manager(state_groups=2, retention="every_block")
    h = chain([1, 2, 3, 4])
    run_prefill(m, "a", 17, h, stops=[4, 8, 12])  # chunks end at every boundary
    m.free("a")
    assert m.lookup("q", 17, h) == PrefixHit(gpu_tokens=16)
    # a prompt sharing 3 blocks: checkpoint at 12
    assert m.lookup("q", 17, [*h[:3], 77]).gpu_tokens == 12
    # take the checkpoint at 12 away (re-key it in the state group's space only)
    assert m.pool.rename(h[2], 999, space=1)
    assert m.lookup("q", 17, h) == PrefixHit(gpu_tokens=16)
    assert m.lookup("q", 13, h) == PrefixHit(gpu_tokens=8, recompute_tokens=4)


def test_chunk_ends_decide_which_extra_checkpoints_exist() -> None:
    m = manager(state_groups=1, retention="every_block")
    h = chain([1, 2, 3, 4])
    run_prefill(m, "a", 17, h)  # one chunk up to the replay boundary 16, then 17
    m.free("a")
    assert m.lookup("q", 17, h).gpu_tokens == 16
    assert m.lookup("q", 13, h) == PrefixHit(recompute_tokens=12)  # no state at 4, 8, 12


def _resume_case(store_attention_remainder: bool) -> PrefixHit:
    """Turn 1: a 2,100-token prompt (blk 1,024) and a decode past 3,072; turn 2 resends it
    with 400 more tokens. The attention history is cached up to 3,072."""
    m = manager(
        block_tokens=1024, state_groups=3, store_attention_remainder=store_attention_remainder
    )
    h = chain([1, 2, 3])
    run_prefill(m, "t1", 2100, h[:2])
    for t in range(2101, 3100):
        assert m.grow("t1", t)
        m.commit("t1", t, new_block_hashes=[h[2]] if t == 3072 else ())
    m.free("t1")
    m.check()
    return m.lookup("q", 3500, h)


def test_hybrid_resume_recomputes_past_the_last_checkpoint() -> None:
    assert _resume_case(False) == PrefixHit(gpu_tokens=2048, recompute_tokens=1024)


def test_storing_the_attention_remainder_makes_resume_points_coincide() -> None:
    assert _resume_case(True) == PrefixHit(gpu_tokens=3072)


def test_default_retention_gives_zero_reuse_until_a_junction_is_stored() -> None:
    """vllm#45238: shared system prompt (3 blocks) + unique suffix (2 blocks)."""
    m = manager(state_groups=2)
    system = [1, 2, 3]
    a = chain([*system, 10, 11])
    run_prefill(m, "a", 21, a)  # replay boundary 20, inside the unique suffix
    m.free("a")
    b = chain([*system, 20, 21])
    hit_b = run_prefill(m, "b", 21, b)
    assert hit_b == PrefixHit(recompute_tokens=12)  # attention matched 12, no checkpoint
    m.free("b")
    c = chain([*system, 30, 31])
    assert m.lookup("q", 21, c) == PrefixHit(gpu_tokens=12)  # b stored the junction at 12


def test_next_checkpoint_names_the_mandatory_chunk_ends() -> None:
    m = manager(state_groups=1, eagle=True)
    h = chain([1, 2, 3, 4])
    assert m.admit("a", 18, h, PrefixHit())
    assert m.next_checkpoint("a") == 12  # replay boundary 16, one block lower with EAGLE
    m.commit("a", 12)
    assert m.next_checkpoint("a") == 16
    m.commit("a", 18)
    assert m.next_checkpoint("a") is None
    m.free("a")
    plain = manager()
    assert plain.admit("a", 18, h, PrefixHit())
    assert plain.next_checkpoint("a") is None


def test_a_shared_checkpoint_hit_is_held_then_released() -> None:
    m = manager(state_groups=1)
    h = chain([1, 2])
    run_prefill(m, "a", 9, h)  # checkpoint at 8
    m.free("a")
    hit = m.lookup("q", 9, h)
    assert hit.gpu_tokens == 8
    assert m.admit("b", 9, h, hit)
    ckpt = m.pool.lookup(h[1], 1)
    assert ckpt is not None
    assert m.pool.ref(ckpt) == 1
    assert m.usage.state_blocks == 2
    m.commit("b", 9)
    assert m.grow("b", 12)
    m.commit("b", 12)  # decode crosses 12: the checkpoint page is released, still cached
    assert m.pool.ref(ckpt) == 0
    assert m.pool.lookup(h[1], 1) == ckpt
    m.check()


def test_a_crossing_without_a_free_block_leaves_the_request_short_until_grow() -> None:
    m = manager(num_blocks=7, state_groups=1)
    h = chain([1, 2])
    run_prefill(m, "a", 9, h)  # checkpoint at 8
    m.free("a")
    for rid in ("b", "c"):  # both resume from the shared checkpoint
        hit = m.lookup("q", 9, h)
        assert hit.gpu_tokens == 8
        assert m.admit(rid, 9, h, hit)
    assert m.num_free_blocks == 0
    assert not m.commit("b", 9)
    assert m.commit("b", 12)  # crossing 12: the shared page is released but frees nothing
    m.check()
    assert m.usage.state_blocks == 3  # checkpoint (held by c) + two running pages
    assert not m.grow("b", 12)  # the missing state page (the blocks would hold 12 tokens)
    assert not m.grow("b", 13)  # one attention block + the missing state page
    m.free("c")
    assert m.grow("b", 13) == 16  # its blocks' capacity, recurrent groups or not
    assert m.usage.state_blocks == 2
    assert not m.commit("b", 13)
    m.check()


def test_version_changes_whenever_a_lookup_could() -> None:
    m = manager()
    h = chain([1, 2])
    v = m.version
    assert m.admit("a", 9, h, m.lookup("q", 9, h))
    assert m.version > v
    v = m.version
    assert m.grow("a", 9)  # nothing to add
    m.commit("a", 3)  # no block filled
    assert m.version == v
    m.commit("a", 9)
    assert m.version > v
    v = m.version
    m.free("a")
    assert m.version > v


def test_every_n_keeps_multiples_of_n_where_chunks_end() -> None:
    m = manager(state_groups=1, retention="every_n", retention_interval_tokens=8)
    h = chain([1, 2, 3, 4, 5, 6])
    run_prefill(m, "a", 25, h, stops=[4, 8, 12, 16, 20])  # replay boundary 24
    m.free("a")
    assert m.lookup("q", 25, h).gpu_tokens == 24
    assert m.lookup("q", 25, [*h[:3], 0, 0, 0]) == PrefixHit(gpu_tokens=8, recompute_tokens=4)
    assert m.lookup("q", 25, [*h[:4], 0, 0]).gpu_tokens == 16


def test_config_rejects_inconsistent_knobs() -> None:
    with pytest.raises(ValueError, match="window_tokens"):
        CacheConfig(block_tokens=16, num_blocks=10, swa_groups=1)
    with pytest.raises(ValueError, match="every_n"):
        CacheConfig(block_tokens=16, num_blocks=10, retention="every_n")
    with pytest.raises(ValueError, match="at least one group"):
        CacheConfig(block_tokens=16, num_blocks=10, full_groups=0)


def test_hit_only_admission_checks_the_whole_prompt_but_holds_only_the_hit() -> None:
    """vLLM's allocate_slots(full_sequence_must_fit=True): the whole prompt must fit in the free
    blocks, but only the computed tokens get blocks; each chunk's come from grow."""
    m = manager(num_blocks=10)
    h = chain([1, 2])
    run_prefill(m, "a", 8, h)  # 2 full blocks of 4 tokens, cached
    m.free("a")
    prompt = 36  # 9 blocks; the hit holds 2
    hashes = [*h, *chain(range(3, 10), h[-1])]
    hit = m.lookup("b", prompt, hashes)
    assert hit == PrefixHit(gpu_tokens=8)
    assert m.admit("b", prompt, hashes, hit, hit_only=True)
    assert m.num_blocks_of("b") == 2  # the hit only
    assert m.num_free_blocks == 8
    assert m.grow("b", 8 + 12)  # a first chunk of 12 tokens: 3 more blocks
    assert m.num_blocks_of("b") == 5
    m.commit("b", 20)
    # a second request whose whole prompt does not fit in what is free is refused, although its
    # first chunk would fit: the gate is the full sequence
    assert m.num_free_blocks == 5
    assert not m.admit("c", 24, chain([50, 51, 52, 53, 54, 55]), PrefixHit(), hit_only=True)
    assert m.admit("c", 20, chain([50, 51, 52, 53, 54]), PrefixHit(), hit_only=True)
    assert m.num_blocks_of("c") == 0
    m.check()
