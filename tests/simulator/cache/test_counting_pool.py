"""The counting pool: exact for runs without prefix caching, where no block is ever found,
and with it until a block is first cached under an id a lookup could find.

``simulate`` swaps it in for those; these runs are simulated both ways (the full
``BlockPool`` forced by switching the swap off) and must give the same summary, preemptions,
sliding-window and recurrent-state groups and multi-turn sessions included."""

from __future__ import annotations

import pytest

from simulator.cache import KVCacheManager
from simulator.cache.block_pool import BlockPool
from simulator.cache.counting_pool import CountingPool
from simulator.simulation import simulate
from simulator.specs import Scenario


def test_it_counts_per_kind_and_refuses_what_the_full_pool_refuses() -> None:
    full, counting = BlockPool(10, num_kinds=3), CountingPool(10, num_kinds=3)
    for pool in (full, counting):
        a = pool.allocate(6, 0)
        b = pool.allocate(3, 2)
        assert a is not None
        assert b is not None
        assert pool.allocate(2, 0) is None  # 1 free
        assert (pool.num_free, pool.num_used, pool.num_used_kind(0), pool.num_used_kind(2)) == (
            1, 9, 6, 3,
        )  # fmt: skip
        pool.free(reversed(a))
        pool.free(b)
        assert (pool.num_free, pool.num_used_kind(0), pool.num_used_kind(2)) == (10, 0, 0)
        pool.check()
    with pytest.raises(ValueError, match="more often"):
        counting.free([0])
    with pytest.raises(ValueError, match="no cached block"):
        counting.touch([1])
    with pytest.raises(ValueError, match="caches nothing"):
        counting.cache_many([1], [7])


def _calls(monkeypatch: pytest.MonkeyPatch, method: str) -> list[bool]:
    """One entry per call of ``KVCacheManager.method``, which still does its work."""
    calls: list[bool] = []
    real = getattr(KVCacheManager, method)

    def spy(self: KVCacheManager) -> None:
        calls.append(True)
        real(self)

    monkeypatch.setattr(KVCacheManager, method, spy)
    return calls


def _scenario(model: str, device: str, workload: dict[str, object], **serving: object) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "counting",
            "model": model,
            "device": device,
            "serving": {"enable_prefix_caching": False, **serving},
            "workload": workload,
            "duration_s": 120.0,
            "warmup_s": 0.0,
            "seed": 3,
        }
    )


RANDOM = {"kind": "random", "input_tokens": 6000, "output_tokens": 800, "num_requests": 120,
          "concurrency": 96}  # fmt: skip
CASES = {  # name: (model, device, workload, serving)
    "kv-pressure": ("llama-3.3-70b", "h100", RANDOM, {"tp": 2}),
    "plain": ("llama-3.3-70b", "h100", RANDOM, {"tp": 4}),
    "sliding-window": ("gpt-oss-120b", "b200", RANDOM, {"tp": 1}),
    "recurrent-state": ("nemotron-h-56b", "h100", RANDOM, {"tp": 2}),
    "multi-turn": ("llama-3.3-70b", "h100", {"kind": "chat", "sessions": 40, "concurrency": 16},
                   {"tp": 4}),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_a_counting_run_gives_the_full_pools_summary(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, device, workload, serving = CASES[case]
    swapped = _calls(monkeypatch, "count_only")
    counted = simulate(_scenario(model, device, workload, **serving)).summary
    assert swapped, "a run without prefix caching counts"
    monkeypatch.setattr(KVCacheManager, "count_only", lambda self: None)
    full = simulate(_scenario(model, device, workload, **serving)).summary
    assert full.requests_finished > 0
    assert counted.model_dump(exclude={"wall_s"}) == full.model_dump(exclude={"wall_s"})
    if case == "kv-pressure":
        assert full.preemptions > 0  # the case is one with preemptions


CACHED = {  # prefix caching on: counted until a block is cached under a real id
    **CASES,
    "light": ("llama-3.3-70b", "h100", {**RANDOM, "concurrency": 8}, {"tp": 8}),
    "offload": ("llama-3.3-70b", "h100", RANDOM, {"tp": 2, "cpu_offload_bytes": 2**36}),
    "spec-decode": ("llama-3.3-70b", "h200", RANDOM, {"tp": 4, "speculative": {
        "method": "eagle", "num_speculative_tokens": 2, "acceptance_rate": 0.7}}),
    "agentic-hybrid": ("kimi-k3", "mi355x", {"kind": "agentic", "sessions": 24,
                       "concurrency": 16}, {"tp": 8}),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CACHED))
def test_with_prefix_caching_counting_until_the_first_real_id_gives_the_full_pools_summary(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deferred pool (``KVCacheManager.defer_identities``) against the full pool from the
    start: the same summary; random prompts count until a preemption names its blocks (they
    materialise exactly when a preemption occurs, the light case never), sessions with shared
    prefixes materialise at their first commit."""
    model, device, workload, serving = CACHED[case]
    made = _calls(monkeypatch, "_materialise")
    scenario = _scenario(model, device, workload, **{**serving, "enable_prefix_caching": True})
    deferred = simulate(scenario).summary
    monkeypatch.setattr(KVCacheManager, "defer_identities", lambda self: None)
    full = simulate(scenario).summary
    assert full.requests_finished > 0
    assert deferred.model_dump(exclude={"wall_s"}) == full.model_dump(exclude={"wall_s"})
    if case in ("kv-pressure", "light", "plain", "sliding-window", "spec-decode"):
        # random prompts: live ids only where a preempted request names its blocks
        assert bool(made) == (full.preemptions > 0)
        if case == "kv-pressure":
            assert full.preemptions > 0
        if case == "light":
            assert full.preemptions == 0  # counted throughout
    if case in ("multi-turn", "agentic-hybrid"):
        assert made
        assert full.prefix_hit_rate > 0


def test_materialising_gives_every_held_block_a_real_id() -> None:
    from simulator.cache import CacheConfig
    from simulator.cache.block_pool import SINK
    from simulator.cache.prefix import PrefixHit

    m = KVCacheManager(CacheConfig(block_tokens=16, num_blocks=12))
    m.defer_identities()
    miss = PrefixHit(0, 0)
    assert m.admit("a", 40, [], miss)
    assert m.admit("b", 20, [], miss)
    assert m.grow("a", 40)
    assert m.grow("b", 20)
    m.commit("a", 40, [SINK, SINK])  # a finished request's private blocks: still counting
    assert isinstance(m.pool, CountingPool)
    m.check()
    m.commit("b", 20, [7])  # an id a lookup can find: the full pool from here on
    assert isinstance(m.pool, BlockPool)
    m.check()  # ref 1 on each of the 5 held blocks, 7 free
    assert m.pool.num_used == 5
    assert m.pool.lookup(7) is not None
    m.free("b")
    assert m.lookup("c", 40, [7, 8]).gpu_tokens == 16  # b's block is found again


def test_only_an_empty_pool_without_prefix_caching_is_swapped() -> None:
    from simulator.cache import CacheConfig

    with pytest.raises(ValueError, match="without prefix caching"):
        KVCacheManager(CacheConfig(block_tokens=16, num_blocks=8)).count_only()
    used = KVCacheManager(CacheConfig(block_tokens=16, num_blocks=8))
    used.pool.allocate(1)
    with pytest.raises(ValueError, match="can count"):
        used.defer_identities()
    m = KVCacheManager(CacheConfig(block_tokens=16, num_blocks=8, prefix_caching=False))
    m.pool.allocate(1)
    with pytest.raises(ValueError, match="without prefix caching"):
        m.count_only()
