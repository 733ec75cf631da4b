"""vLLM v1 scheduling rules, one tiny hand-checked case each, on the real KV cache manager."""

from __future__ import annotations

import numpy as np

from simulator.cache import CacheConfig, KVCacheManager
from simulator.scheduler import Scheduler
from simulator.states import ReqState, Status
from simulator.workload.request import Request

BLOCK = 16


def request(
    rid: int, prompt: int, output: int = 4, hashes: tuple[int, ...] | None = None
) -> ReqState:
    ids = hashes if hashes is not None else tuple(1000 * rid + i for i in range(prompt // BLOCK))
    req = Request(
        request_id=rid, session_id=rid, turn=0, prompt_tokens=prompt, output_tokens=output,
        block_hashes=np.array(ids, dtype=np.uint64), block_tokens=BLOCK, arrival_s=0.0,
    )  # fmt: skip
    return ReqState(req, ids, arrival_s=0.0)


def scheduler(
    num_blocks: int = 64, budget: int = 64, max_seqs: int = 8, state_groups: int = 0, k: int = 0
) -> Scheduler:
    cache = KVCacheManager(
        CacheConfig(
            block_tokens=BLOCK,
            num_blocks=num_blocks,
            state_groups=state_groups,
            num_speculative_tokens=k,
        )
    )
    return Scheduler(
        cache, max_num_batched_tokens=budget, max_num_seqs=max_seqs, block_tokens=BLOCK,
        hybrid=state_groups > 0, max_request_tokens=num_blocks * BLOCK, num_speculative_tokens=k,
    )  # fmt: skip


def planned(plan) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    return [(r.req_id, n) for r, n, _, _ in plan.entries]


def test_chunked_prefill_fills_the_budget_in_fcfs_order() -> None:
    s = scheduler(budget=64)
    for rid, prompt in ((1, 40), (2, 50)):
        s.add(request(rid, prompt))
    plan = s.schedule(0.0)
    assert planned(plan) == [(1, 40), (2, 24)]  # 2 gets the rest of the budget: a chunk
    s.commit(plan, 1.0)
    plan = s.schedule(1.0)
    # running first: 1 decodes (its first token came with its last prefill chunk), 2 continues
    assert planned(plan) == [(1, 1), (2, 26)]


def test_running_requests_go_before_waiting_ones() -> None:
    s = scheduler(budget=32)
    s.add(request(1, 31))
    s.commit(s.schedule(0.0), 1.0)
    s.add(request(2, 100))
    plan = s.schedule(1.0)
    assert planned(plan) == [(1, 1), (2, 31)]


def test_max_num_seqs_caps_admission() -> None:
    s = scheduler(budget=1000, max_seqs=2)
    for rid in (1, 2, 3):
        s.add(request(rid, 16))
    assert [rid for rid, _ in planned(s.schedule(0.0))] == [1, 2]
    assert [r.req_id for r in s.waiting] == [3]


def test_admission_needs_the_whole_prompt_and_blocks_the_queue() -> None:
    s = scheduler(num_blocks=10, budget=1000)
    s.add(request(1, 100))  # 7 blocks
    s.add(request(2, 64))  # 4 more blocks: does not fit
    s.add(request(3, 16))  # would fit, but FCFS: head-of-line blocking
    assert planned(s.schedule(0.0)) == [(1, 100)]
    assert [r.req_id for r in s.waiting] == [2, 3]


def test_preemption_evicts_the_newest_and_blocks_admission_that_step() -> None:
    s = scheduler(num_blocks=6, budget=1000)
    a, b = request(1, 48, output=40), request(2, 48, output=40)
    s.add(a)
    s.add(b)
    s.commit(s.schedule(0.0), 1.0)  # 3 blocks each, pool full; each has its first token
    s.add(request(3, 16))
    plan = s.schedule(1.0)  # a's token 49 needs a 4th block: b (newest) is preempted
    assert [r.req_id for r in plan.preempted] == [2]
    assert planned(plan) == [(1, 1)]
    assert b.status is Status.WAITING
    assert b.computed == 0
    assert b.preemptions == 1
    assert [r.req_id for r in s.waiting] == [2, 3]  # back at the head; no admission this step


def test_hit_is_capped_below_the_prompt_and_block_aligned() -> None:
    s = scheduler(budget=1000)
    first = request(1, 64, output=1)
    s.add(first)
    s.commit(s.schedule(0.0), 1.0)  # finishes; its 4 hashed blocks stay cached
    again = request(2, 64, hashes=first.block_hashes)
    s.add(again)
    plan = s.schedule(1.0)
    # prompt_len - 1 = 63 tokens at most -> 3 full blocks = 48 tokens hit, 16 computed
    assert again.gpu_hit_tokens == 48
    assert planned(plan) == [(2, 16)]


def test_prompt_larger_than_the_cache_is_rejected_with_a_reason() -> None:
    s = scheduler(num_blocks=4)
    big = request(1, 100)
    assert not s.add(big)
    assert big.status is Status.REJECTED
    assert "whole cache holds 64" in big.reject_reason


def test_hybrid_chunks_end_on_block_boundaries() -> None:
    s = scheduler(budget=40, state_groups=1)
    s.add(request(1, 100))
    assert planned(s.schedule(0.0)) == [(1, 32)]  # 40 rounded down to 2 blocks of 16


def test_speculative_decoding_schedules_drafts_and_rolls_back_rejections() -> None:
    s = scheduler(budget=100, k=2)
    r = request(1, 32, output=10)
    s.add(r)
    s.commit(s.schedule(0.0), 1.0)
    assert (r.generated, r.computed) == (1, 32)
    plan = s.schedule(1.0)
    assert planned(plan) == [(1, 3)]  # 1 + K
    s.commit(plan, 2.0, accepted=lambda drafts: 1)  # one of two drafts accepted
    assert (r.generated, r.computed) == (3, 34)  # 2 tokens emitted, 1 rejected draft rolled back


def test_finished_request_frees_its_blocks_and_records_latencies() -> None:
    s = scheduler(budget=100)
    r = request(1, 32, output=3)
    s.add(r)
    t = 0.0
    while r.status is not Status.FINISHED:
        t += 1.0
        s.commit(s.schedule(t), t + 0.5)
    assert r.first_token_s == 1.5
    assert r.finish_s == 3.5
    assert r.itl_pairs() == [(1.0, 1), (1.0, 1)]
    assert s.cache.usage.used_blocks == 0  # type: ignore[attr-defined]


def test_landed_loads_that_block_each_other_give_the_newest_back() -> None:
    """Three landed CPU loads hold every block, none can take its next chunk, nothing runs:
    the newest is given back (blocks freed, to the front of the queue) and the oldest starts.
    Before, the engine stopped with SchedulerStallError (seen on Kimi K3 with a host tier)."""
    s = scheduler(num_blocks=12, budget=64)
    loads = [request(rid, 96) for rid in (1, 2, 3)]
    for r in loads:  # admitted while the whole prompt fitted (admission reserves no more)
        hit = s.cache.lookup(r.req_id, 96, r.block_hashes)
        assert s.cache.admit(r.req_id, 96, r.block_hashes, hit, hit_only=True)
    for r in loads:  # then each load landed 64 tokens into 4 blocks: all 12 held
        assert s.cache.grow(r.req_id, 64)
        r.computed, r.status, r.accounted = 64, Status.LOADING, True
        s.holding.append(r)
    assert s.cache.num_free_blocks == 0
    plan = s.schedule(0.0)
    assert plan.entries == []
    assert plan.preempted == [loads[2]]
    assert list(s.waiting) == [loads[2]]
    assert (loads[2].computed, loads[2].preemptions, loads[2].status) == (0, 1, Status.WAITING)
    assert s.cache.num_free_blocks == 4
    plan = s.schedule(0.0)  # the two older ones take their last chunks in the freed blocks
    assert planned(plan) == [(1, 32), (2, 32)]
    assert not s.holding
    assert list(s.waiting) == [loads[2]]  # its whole prompt no longer fits: it waits
