"""The counting pool: exact for runs without prefix caching, where no block is ever found.

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
    swapped: list[bool] = []
    count_only = KVCacheManager.count_only

    def spy(self: KVCacheManager) -> None:
        swapped.append(True)
        count_only(self)

    monkeypatch.setattr(KVCacheManager, "count_only", spy)
    counted = simulate(_scenario(model, device, workload, **serving)).summary
    assert swapped, "a run without prefix caching counts"
    monkeypatch.setattr(KVCacheManager, "count_only", lambda self: None)
    full = simulate(_scenario(model, device, workload, **serving)).summary
    assert full.requests_finished > 0
    assert counted.model_dump(exclude={"wall_s"}) == full.model_dump(exclude={"wall_s"})
    if case == "kv-pressure":
        assert full.preemptions > 0  # the case is one with preemptions


def test_runs_with_prefix_caching_keep_the_full_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    swapped: list[bool] = []
    monkeypatch.setattr(KVCacheManager, "count_only", lambda self: swapped.append(True))
    scenario = _scenario("llama-3.3-70b", "h100", RANDOM, tp=2, enable_prefix_caching=True)
    assert simulate(scenario).summary.requests_finished > 0
    assert not swapped  # a preempted request may find its own blocks again


def test_only_an_empty_pool_without_prefix_caching_is_swapped() -> None:
    from simulator.cache import CacheConfig

    with pytest.raises(ValueError, match="without prefix caching"):
        KVCacheManager(CacheConfig(block_tokens=16, num_blocks=8)).count_only()
    m = KVCacheManager(CacheConfig(block_tokens=16, num_blocks=8, prefix_caching=False))
    m.pool.allocate(1)
    with pytest.raises(ValueError, match="without prefix caching"):
        m.count_only()
