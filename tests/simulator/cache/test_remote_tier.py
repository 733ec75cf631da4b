"""The remote KV store (Mooncake-style) below the host tier: shared by replicas, saved to with
the host tier, looked up only when the host tier misses (vLLM MultiConnector), LRU, and loaded
asynchronously with the store's link: hand answers on crafted prompts and sessions."""

from __future__ import annotations

import pytest

from simulator.cache import CacheConfig, KVCacheManager
from simulator.cache.remote_tier import RemoteTier
from simulator.engine import Engine
from simulator.metrics import summarize
from simulator.pd_pools import load_bytes_with_store
from simulator.replica import ReplicaParts
from simulator.scheduler import Scheduler
from simulator.specs.hardware import Link
from simulator.workload.replay import Replay, closed_loop
from tests.simulator.test_disaggregation import BLOCK, COST, sessions

HASHES = [101, 102, 103, 104, 105]
PER_BLOCK = 2e6  # bytes per pool block per GPU
STORE_BW, STORE_LATENCY = 1e9, 5e-4


def manager(store: RemoteTier | None, cpu_blocks: int = 0) -> KVCacheManager:
    cache = KVCacheManager(
        CacheConfig(block_tokens=BLOCK, num_blocks=64, cpu_blocks=cpu_blocks,
                    bytes_per_block=PER_BLOCK)
    )  # fmt: skip
    if store is not None:
        cache.attach_store(store)
    return cache


def run_prompt(cache: KVCacheManager, req: int, tokens: int, hashes: list[int]) -> None:
    hit = cache.lookup(req, tokens, hashes)
    assert cache.admit(req, tokens, hashes, hit)
    cache.commit(req, tokens)
    cache.free(req)


def test_a_block_saved_by_one_replica_hits_on_another() -> None:
    store = RemoteTier(100, PER_BLOCK, STORE_BW, STORE_LATENCY)
    a, b = manager(store), manager(store)
    run_prompt(a, 1, 5 * BLOCK, HASHES)  # 5 full prompt blocks saved
    hit = b.lookup(2, 5 * BLOCK + 3, HASHES)
    # B's GPU and host tier have nothing: the store serves 5 blocks (cap prompt - 1 = 83)
    assert (hit.gpu_tokens, hit.cpu_tokens, hit.store_tokens) == (0, 5 * BLOCK, 5 * BLOCK)
    assert hit.cpu_load_blocks == 5
    assert store.load_seconds(5) == pytest.approx(5 * PER_BLOCK / STORE_BW + STORE_LATENCY)
    assert b.admit(2, 5 * BLOCK + 3, HASHES, hit)
    assert store.loaded_bytes == 5 * PER_BLOCK
    b.check()


def test_host_tier_first_store_only_when_it_misses() -> None:
    store = RemoteTier(100, PER_BLOCK, STORE_BW, STORE_LATENCY)
    a = manager(store, cpu_blocks=2)  # the host tier keeps the last 2 blocks only
    run_prompt(a, 1, 5 * BLOCK, HASHES)
    assert len(store) == 5
    assert len(a.cpu or []) == 2
    c = manager(store, cpu_blocks=4)
    run_prompt(c, 3, 1 * BLOCK, HASHES[:1])  # c's GPU and host tier: block 0 only
    hit = c.lookup(4, 5 * BLOCK + 1, HASHES)
    # GPU hit 1 block; past it the host tier has nothing -> the store serves blocks 1..4
    assert (hit.gpu_tokens, hit.store_tokens, hit.cpu_tokens) == (BLOCK, 4 * BLOCK, 4 * BLOCK)
    d = manager(store, cpu_blocks=4)
    assert d.cpu is not None
    for h in HASHES[:2]:
        d.cpu.store(0, h, 1)
    hit = d.lookup(5, 5 * BLOCK + 1, HASHES)
    # the host tier reports 2 blocks: MultiConnector loads from it alone, not the store's 5
    assert (hit.cpu_tokens, hit.store_tokens) == (2 * BLOCK, 0)


def test_store_is_lru_over_its_capacity() -> None:
    store = RemoteTier(3, PER_BLOCK, STORE_BW, STORE_LATENCY)
    a = manager(store)
    run_prompt(a, 1, 5 * BLOCK, HASHES)
    assert [store.contains(0, h) for h in HASHES] == [False, False, True, True, True]
    assert store.evicted_blocks == 2
    assert manager(store).lookup(2, 5 * BLOCK + 1, HASHES).cpu_tokens == 0  # block 0 gone
    assert RemoteTier.sized(10 * PER_BLOCK * 2, PER_BLOCK, 2, 1.0, 0.0).capacity_blocks == 10


def replica(store: RemoteTier) -> ReplicaParts:
    cache = manager(store)
    sched = Scheduler(cache, max_num_batched_tokens=512, max_num_seqs=8, block_tokens=BLOCK,
                      hybrid=False, max_request_tokens=62 * BLOCK)  # fmt: skip
    host = Link(kind="pcie", bw_bytes_per_s=64e9, latency_s=1e-5)
    return ReplicaParts(
        scheduler=sched, cost=COST, block_tokens=BLOCK,
        load_bytes=load_bytes_with_store(cache.load_bytes, store, host),  # type: ignore[arg-type]
        host_bw_bytes_per_s=host.bw_bytes_per_s, host_latency_s=host.latency_s,
        blocks_used=lambda: cache.usage.used_blocks,
    )  # fmt: skip


def test_next_turn_on_another_replica_loads_from_the_store() -> None:
    store = RemoteTier(1000, PER_BLOCK, STORE_BW, STORE_LATENCY)
    # one session, two turns: 160 prompt tokens, 4 out; then 160 + 4 + 28 = 192 tokens.
    # Round robin puts turn 2 on replica 1, whose GPU has nothing: the store holds turn 1's
    # 10 prompt blocks (prompt blocks only: offload_prompt_only)
    replay = Replay(sessions([[(160, 4, 0.0), (28, 4, 0.0)]]), closed_loop(1))
    eng = Engine(replay, [replica(store), replica(store)], router="round_robin")
    rec = eng.run()
    first, second = sorted(rec.requests, key=lambda r: r.arrival_s)
    assert (first.replica, second.replica) == (0, 1)
    assert first.store_hit_tokens == 0
    assert second.store_hit_tokens == second.cpu_hit_tokens == 10 * BLOCK
    assert second.gpu_hit_tokens == 0
    # replica 1 never ran a step before: the load lands bytes / store bw + latency later
    assert second.store_hit_s is not None
    want = 10 * PER_BLOCK / STORE_BW + STORE_LATENCY
    assert second.ready_s - second.store_hit_s == pytest.approx(want, rel=1e-9)
    summary = summarize(rec, num_gpus=2)
    prompt = first.prompt_tokens + second.prompt_tokens
    assert summary.store_hit_rate == pytest.approx(10 * BLOCK / prompt)
    assert summary.cpu_hit_rate == 0.0
    assert summary.prefix_hit_rate == pytest.approx(summary.gpu_hit_rate + 10 * BLOCK / prompt)


def test_scenario_store_serves_sessions_that_change_replica() -> None:
    from simulator.simulation import simulate
    from simulator.specs import Scenario

    def run(store: bool, disagg: bool = False) -> object:
        fields = {
            "name": "store", "model": "llama-3.1-8b", "device": "h100", "router": "round_robin",
            "serving": {"tp": 1, "dp": 1 if disagg else 2},
            "workload": {"kind": "chat", "sessions": 20, "concurrency": 8},
            **({"kv_store": {"capacity_bytes": 1e13}} if store else {}),
            **({"disaggregation": {"prefill_replicas": 2, "prefill_prefix_caching": True}}
               if disagg else {}),
        }  # fmt: skip
        return simulate(Scenario.model_validate(fields)).summary

    without, with_store = run(False), run(True)
    assert without.store_hit_rate == 0.0  # type: ignore[attr-defined]
    assert with_store.store_hit_rate > 0.0  # type: ignore[attr-defined]
    for s in (with_store, run(True, disagg=True)):
        parts = s.gpu_hit_rate + s.cpu_hit_rate + s.store_hit_rate + s.remote_hit_rate  # type: ignore[attr-defined]
        assert s.prefix_hit_rate == pytest.approx(parts)  # type: ignore[attr-defined]
        assert s.store_hit_rate > 0.0  # type: ignore[attr-defined]


def test_a_store_load_still_in_flight_at_the_end_is_not_a_negative_cpu_share() -> None:
    """The store's tokens were counted at admission, the CPU tier's when the load landed: a
    load still in flight at the window's end read "57.4% (57.4% + -12.3% + 12.3%)"."""
    from simulator.simulation import simulate
    from simulator.specs import Scenario

    fields = {
        "name": "slow-store", "model": "llama-3.1-8b", "device": "h100",
        "serving": {"tp": 1, "kv_cache_memory_bytes": 4e9},
        "workload": {"kind": "agentic", "sessions": 12, "concurrency": 6},
        "duration_s": 900.0,
        "kv_store": {"capacity_bytes": 1e12, "latency_s": 1.0, "bw_bytes_per_s": 1e6},
    }  # fmt: skip
    s = simulate(Scenario.model_validate(fields)).summary
    assert s.requests_in_flight_at_end + s.requests_waiting_at_end > 0  # a load never landed
    assert s.cpu_hit_rate >= 0.0
    assert s.store_hit_rate >= 0.0
    parts = s.gpu_hit_rate + s.cpu_hit_rate + s.store_hit_rate + s.remote_hit_rate
    assert s.prefix_hit_rate == pytest.approx(parts)
