"""Random admit/grow/commit/free/lookup/rename sequences: the accounting never drifts.

After every operation: the pool's invariants hold (``KVCacheManager.check``: free queue ==
ref-0 blocks, used + free == num_blocks, every cached hash maps to its blocks, ref counts ==
the requests' holds, CPU tier within capacity); lookups are pure, block-aligned and below the
prompt; a request freed after computing its prompt is hit again at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import event, given, settings
from hypothesis import strategies as st

from simulator.cache.config import CacheConfig
from simulator.cache.manager import KVCacheManager


@st.composite
def configs(draw: st.DrawFn) -> CacheConfig:
    full = draw(st.integers(0, 2))
    swa = draw(st.integers(0, 1))
    state = draw(st.integers(0 if full + swa else 1, 2))
    block = draw(st.integers(1, 4))
    dcp = draw(st.integers(1, 2))
    retention = draw(st.sampled_from(["default", "every_n", "every_block"]))
    return CacheConfig(
        block_tokens=block,
        num_blocks=draw(st.integers(0, 60)),
        dcp=dcp,
        full_groups=full,
        swa_groups=swa,
        window_tokens=draw(st.integers(1, 12)) if swa else None,
        state_groups=state,
        num_speculative_tokens=draw(st.integers(0, 2)),
        prefix_caching=draw(st.booleans() | st.just(True)),
        retention=retention,
        retention_interval_tokens=draw(st.integers(1, 9)) if retention == "every_n" else None,
        store_attention_remainder=draw(st.booleans()),
        eagle=draw(st.booleans()),
        cpu_blocks=draw(st.sampled_from([0, 0, 3, 12, 40])),
        bytes_per_block=1.0,
        offload_prompt_only=draw(st.booleans()),
    )


# an operation: (kind, request id, a number its parameters are cut from); the list of kinds
# repeats the frequent ones (hypothesis draws each element of sampled_from alike)
KINDS = ["admit"] * 3 + ["step"] * 8 + ["free", "refree", "rename"]
ops = st.tuples(st.sampled_from(KINDS), st.integers(0, 4), st.integers(0, 1 << 20))


@dataclass
class Running:
    prompt: int
    prompt_hashes: list[int]
    hashes: list[int] = field(default_factory=list)


def chain(contents: list[tuple[int, ...]]) -> list[int]:
    out, parent = [], 0
    for x in contents:
        parent = hash((parent, x))
        out.append(parent)
    return out


def _consistent(m: KVCacheManager) -> None:
    m.check()
    u = m.usage
    assert u.used_blocks + u.free_blocks == m.config.num_blocks
    assert 0 <= u.used_blocks <= m.config.num_blocks


def _admit(m: KVCacheManager, run: dict[str, Running], rid: str, x: int) -> None:
    # prompt family (shared prefix), full blocks, where the family prefix ends, suffix variant
    family, nblocks, split, variant, tail = x % 3, x // 3 % 8, x // 24 % 8, x // 192 % 4, x // 768
    if rid in run:
        return
    blk = m.config.attention_block_tokens
    contents = [(family, i) if i < split else (family, variant, i) for i in range(nblocks)]
    prompt = max(nblocks * blk + tail % blk, 1)
    hashes = chain(contents)[: prompt // blk]
    before = (m.usage, m.pool.free_queue())
    hit = m.lookup(rid, prompt, hashes)
    assert m.lookup(rid, prompt, hashes) == hit  # pure
    assert (m.usage, m.pool.free_queue()) == before
    assert hit.total_tokens % blk == 0
    assert hit.recompute_tokens % blk == 0
    assert 0 <= hit.total_tokens <= prompt - 1 or hit.total_tokens == 0
    assert hit.recompute_tokens >= 0
    if m.cpu is None:
        assert hit.cpu_tokens == 0
    lookahead = m.config.num_speculative_tokens
    if m.admit(rid, prompt, hashes, hit, lookahead_tokens=lookahead):
        run[rid] = Running(prompt, hashes, list(hashes))
        event("admitted with a GPU hit" if hit.gpu_tokens else "admitted")
        if hit.cpu_tokens:
            event("admitted with a CPU hit")
        if hit.recompute_tokens:
            event("admitted recomputing cached attention")
    else:
        event("admission refused")
        assert (m.usage, m.pool.free_queue()) == before  # all or nothing


def _step(m: KVCacheManager, run: dict[str, Running], rid: str, n: int, stop: bool) -> None:
    r = run.get(rid)
    if r is None:
        return
    blk, k = m.config.attention_block_tokens, m.config.num_speculative_tokens
    done = m.computed_tokens(rid)
    if done < r.prompt:  # a prefill chunk, maybe ended at the next mandatory checkpoint
        end = min(done + n, r.prompt)
        nxt = m.next_checkpoint(rid)
        if stop and nxt is not None:
            end = min(end, nxt)
    else:  # a decode step: 1 + accepted drafts
        end = done + 1 + min(n - 1, k)
    if not m.grow(rid, end + k):
        event("preempted")
        m.free(rid)  # preempted
        del run[rid]
        return
    new = [hash((rid, "out", i)) for i in range(len(r.hashes), end // blk)]
    r.hashes.extend(new)
    m.commit(rid, end, new_block_hashes=new)


def _refree(m: KVCacheManager, run: dict[str, Running], rid: str) -> None:
    """Free a request that computed its prompt; the same prompt is then hit at once."""
    r = run.get(rid)
    if r is None or m.computed_tokens(rid) < r.prompt:
        return
    m.free(rid)
    del run[rid]
    c = m.config
    if not c.prefix_caching or not c.full_groups:
        return
    blk = c.attention_block_tokens
    cap = min((r.prompt - 1) // blk, len(r.prompt_hashes))
    expect = max(cap - 1, 0) if c.eagle else cap
    hit = m.lookup("q", r.prompt, r.prompt_hashes)
    if not c.state_groups:
        assert hit.gpu_tokens == expect * blk
    else:
        assert hit.total_tokens + hit.recompute_tokens >= expect * blk
        ckpt = r.prompt_hashes[expect - 1] if expect else None
        spaces = range(c.full_groups, c.full_groups + c.state_groups)
        if ckpt is not None and all(m.pool.lookup(ckpt, s) is not None for s in spaces):
            assert hit.gpu_tokens == expect * blk


def run_script(config: CacheConfig, script: list[tuple[str, int, int]]) -> None:
    m = KVCacheManager(config)
    run: dict[str, Running] = {}
    issued: list[int] = []
    for kind, rid_n, x in script:
        rid = f"r{rid_n}"
        if kind == "admit":
            _admit(m, run, rid, x)
        elif kind == "step":
            _step(m, run, rid, 1 + x % 40, x & 64 == 0)
            issued.extend(h for r in run.values() for h in r.hashes[len(r.prompt_hashes) :])
        elif kind == "free" and rid in run:
            m.free(rid)
            del run[rid]
        elif kind == "refree":
            _refree(m, run, rid)
        elif kind == "rename" and issued:
            old = issued[x % len(issued)]
            m.rename(old, hash(("renamed", old)))
        _consistent(m)
    for rid in list(run):
        m.free(rid)
    _consistent(m)
    assert m.usage.used_blocks == 0


@settings(max_examples=200)
@given(config=configs(), script=st.lists(ops, min_size=20, max_size=120))
def test_random_operations_never_leak_or_double_free(
    config: CacheConfig, script: list[tuple[str, int, int]]
) -> None:
    run_script(config, script)


@st.composite
def hybrid_offload_configs(draw: st.DrawFn) -> CacheConfig:
    """Hybrids with a CPU tier and room for a few requests: the paths the first test rarely
    reaches (checkpoint hits, junctions, CPU loads, state swaps under pressure)."""
    base = draw(configs())
    return CacheConfig(
        block_tokens=base.block_tokens,
        num_blocks=draw(st.integers(15, 60)),
        dcp=base.dcp,
        full_groups=draw(st.integers(1, 2)),
        state_groups=draw(st.integers(1, 3)),
        num_speculative_tokens=base.num_speculative_tokens,
        retention=base.retention,
        retention_interval_tokens=base.retention_interval_tokens,
        store_attention_remainder=base.store_attention_remainder,
        eagle=base.eagle,
        cpu_blocks=draw(st.integers(5, 60)),
        bytes_per_block=1.0,
        offload_prompt_only=base.offload_prompt_only,
    )


@settings(max_examples=200)
@given(config=hybrid_offload_configs(), script=st.lists(ops, min_size=20, max_size=120))
def test_hybrids_with_a_cpu_tier_never_leak_or_double_free(
    config: CacheConfig, script: list[tuple[str, int, int]]
) -> None:
    run_script(config, script)
