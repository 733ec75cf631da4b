"""Engine invariants (hypothesis, 200 examples each) and end-to-end behaviour on small cases."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import catalog
from simulator.cache import CacheConfig, KVCacheManager
from simulator.cost.latency import LatencyModels
from simulator.cost.step import StepCostModel
from simulator.engine import Engine
from simulator.metrics import summarize
from simulator.records import Recorder
from simulator.replica import ReplicaParts
from simulator.scheduler import Scheduler
from simulator.specs import ServingConfig
from simulator.states import Status
from simulator.workload.replay import Replay, closed_loop, open_loop
from simulator.workload.request import Session, Turn, chain, content_keys

BLOCK = 16
H100 = catalog.hardware_profile("h100")
LLAMA = catalog.model_card("llama-3.3-70b")
COST = StepCostModel(LLAMA, H100, ServingConfig(tp=8), LatencyModels(H100))


def parts(num_blocks: int, budget: int, max_seqs: int, k: int = 0) -> ReplicaParts:
    cache = KVCacheManager(
        CacheConfig(block_tokens=BLOCK, num_blocks=num_blocks, num_speculative_tokens=k)
    )
    sched = Scheduler(
        cache, max_num_batched_tokens=budget, max_num_seqs=max_seqs, block_tokens=BLOCK,
        hybrid=False, max_request_tokens=num_blocks * BLOCK, num_speculative_tokens=k,
    )  # fmt: skip
    return ReplicaParts(
        scheduler=sched, cost=COST, block_tokens=BLOCK, load_bytes=lambda hit: 0.0,
        host_bw_bytes_per_s=64e9, host_latency_s=1e-5,
        blocks_used=lambda: cache.usage.used_blocks,
    )  # fmt: skip


def sessions(spec: list[list[tuple[int, int, float]]], shared_prefix: int) -> Iterator[Session]:
    """Sessions of (prompt, output, think) turns; each turn's prompt extends the previous one,
    and every session starts with the same ``shared_prefix`` tokens."""
    for s, turns in enumerate(spec):
        items = []
        for prompt, output, think in turns:
            blocks = prompt // BLOCK
            shared = min(shared_prefix // BLOCK, blocks)
            keys = np.concatenate(
                [np.arange(shared), 10_000 * (s + 1) + np.arange(blocks - shared)]
            )
            ids = chain(content_keys(7, keys.astype(np.uint64)))
            items.append(Turn(prompt, output, ids, BLOCK, think, 0.0))
        yield Session(key=f"s{s}", start_s=0.0, items=iter(items))


def grow(turns: list[tuple[int, int, float]]) -> list[tuple[int, int, float]]:
    """Make prompts grow turn by turn (prompt_i = prompt_{i-1} + output_{i-1} + new)."""
    out, total = [], 0
    for new, output, think in turns:
        total += new
        out.append((total, output, think))
        total += output
    return out


turn = st.tuples(st.integers(1, 300), st.integers(1, 40), st.floats(0, 5))
workloads = st.lists(st.lists(turn, min_size=1, max_size=4), min_size=1, max_size=6)


def run(spec, num_blocks=64, budget=96, max_seqs=4, users=3, shared=32, seed=0, k=0):  # type: ignore[no-untyped-def]
    replay = Replay(sessions([grow(t) for t in spec], shared), closed_loop(users))
    engine = Engine(
        replay, [parts(num_blocks, budget, max_seqs, k)], seed=seed,
        acceptance_rate=0.6 if k else None,
    )  # fmt: skip
    return engine.run(), engine


@settings(max_examples=200)
@given(workloads, st.integers(24, 80), st.integers(16, 200), st.integers(1, 5))
def test_every_request_finishes_or_is_rejected_with_a_reason(spec, blocks, budget, seqs) -> None:  # type: ignore[no-untyped-def]
    rec, engine = run(spec, num_blocks=blocks, budget=budget, max_seqs=seqs)
    assert len(rec.requests) == sum(len(t) for t in spec)
    for r in rec.requests:
        if r.status is Status.REJECTED:
            assert r.reject_reason
        else:
            assert r.status is Status.FINISHED
            assert r.generated == r.request.output_tokens
            assert r.first_token_s is not None
            assert r.finish_s is not None
            assert r.arrival_s <= r.first_token_s <= r.finish_s
    assert engine.replay.done


@settings(max_examples=200)
@given(workloads, st.integers(24, 80), st.integers(16, 200))
def test_budget_and_capacity_are_never_exceeded(spec, blocks, budget) -> None:  # type: ignore[no-untyped-def]
    rec, _ = run(spec, num_blocks=blocks, budget=budget)
    for step in rec.steps:
        assert step.prefill_tokens + step.decodes <= budget
        assert step.kv_blocks_used <= blocks


@settings(max_examples=200)
@given(workloads)
def test_prompt_tokens_are_cached_plus_computed(spec) -> None:  # type: ignore[no-untyped-def]
    rec, _ = run(spec, num_blocks=400, budget=128)
    for r in rec.requests:
        cached = r.gpu_hit_tokens + r.cpu_hit_tokens
        assert cached % BLOCK == 0
        assert 0 <= cached <= r.prompt_tokens - 1
    # with room for everything, the second turn of a session hits the first turn's prompt
    by_session: dict[int, list] = {}  # type: ignore[type-arg]
    for r in rec.requests:
        by_session.setdefault(r.request.session_id, []).append(r)
    for turns in by_session.values():
        turns.sort(key=lambda r: r.request.turn)
        for prev, nxt in itertools.pairwise(turns):
            assert nxt.gpu_hit_tokens >= (prev.prompt_tokens - 1) // BLOCK * BLOCK


@settings(max_examples=200)
@given(workloads, st.integers(0, 3))
def test_same_seed_gives_identical_results(spec, k) -> None:  # type: ignore[no-untyped-def]
    a, _ = run(spec, seed=5, k=k)
    b, _ = run(spec, seed=5, k=k)
    key = [(r.req_id, r.first_token_s, r.finish_s, r.gpu_hit_tokens) for r in a.requests]
    assert key == [(r.req_id, r.first_token_s, r.finish_s, r.gpu_hit_tokens) for r in b.requests]
    assert [s.step_s for s in a.steps] == [s.step_s for s in b.steps]


def test_fast_forward_matches_step_by_step_timing() -> None:
    # one long decode alone: fast-forwarded in runs, token times as if step by step
    rec, _ = run([[(64, 600, 0.0)]], num_blocks=200, budget=512, users=1)
    (r,) = rec.requests
    assert sum(s.steps for s in rec.steps) == 1 + 599  # prefill step + 599 decode steps
    assert len(rec.steps) < 20
    decode_s = [s.step_s / s.steps for s in rec.steps[1:]]
    assert max(decode_s) / min(decode_s) < 1.05  # context growth barely changes a decode step
    # runs are contiguous and the last token reaches the client output_delay_s after its step
    for before, after in zip(rec.steps, rec.steps[1:], strict=False):
        assert after.start_s == before.start_s + before.step_s
    last = rec.steps[-1]
    assert r.finish_s == last.start_s + last.step_s + H100.roofline.output_delay_s


def test_open_loop_arrivals_and_summary() -> None:
    turns = [Turn(160, 20, chain(content_keys(3, np.arange(10, dtype=np.uint64))), BLOCK, 0.0, t)
             for t in (0.0, 0.5, 1.0)]  # fmt: skip
    sess = iter([Session("s", 0.0, iter([tt])) for tt in turns])
    engine = Engine(Replay(sess, open_loop(1.0)), [parts(200, 512, 8)])
    rec: Recorder = engine.run()
    assert sorted(r.arrival_s for r in rec.requests) == [0.0, 0.5, 1.0]
    s = summarize(rec, num_gpus=8)
    assert s.requests_finished == 3
    # identical prompts: the 2nd and 3rd hit 9 of 10 blocks (the last token is recomputed)
    assert s.prefix_hit_rate == (2 * 144) / (3 * 160)
    assert s.interactivity_tok_per_s_p90 is not None
    assert s.ttft_s_p50 is not None


def test_cpu_tier_serves_evicted_prefixes_after_an_async_load() -> None:
    """Pinned regression: a replica whose only work is a landed CPU load must schedule it
    (it used to idle at zero time forever)."""
    cache = KVCacheManager(
        CacheConfig(block_tokens=BLOCK, num_blocks=24, cpu_blocks=200, bytes_per_block=1e6)
    )
    sched = Scheduler(
        cache, max_num_batched_tokens=512, max_num_seqs=4, block_tokens=BLOCK, hybrid=False,
        max_request_tokens=24 * BLOCK,
    )  # fmt: skip
    p = ReplicaParts(
        scheduler=sched, cost=COST, block_tokens=BLOCK, load_bytes=cache.load_bytes,  # type: ignore[arg-type]
        host_bw_bytes_per_s=64e9, host_latency_s=1e-5,
        blocks_used=lambda: cache.usage.used_blocks,
    )  # fmt: skip
    # A's second turn comes back after 100 s, alone; meanwhile B's 19-block prompts evicted
    # A's 10 blocks from the 24-block GPU pool (they live on in the CPU tier)
    spec = [[(160, 8, 0.0), (8, 8, 100.0)], [(300, 8, 0.0), (0, 8, 1.0)]]
    engine = Engine(Replay(sessions([grow(t) for t in spec], 0), closed_loop(2)), [p])
    rec = engine.run()
    assert len(rec.requests) == 4
    assert all(r.status is Status.FINISHED for r in rec.requests)
    second = [r for r in rec.requests if r.request.turn == 1]
    assert sum(r.cpu_hit_tokens for r in second) > 0
    s = summarize(rec, num_gpus=8)
    assert s.cpu_hit_rate > 0
    assert s.prefix_hit_rate == s.gpu_hit_rate + s.cpu_hit_rate


def test_engine_step_sums_equal_the_cost_models() -> None:
    from simulator.cost.step import shape_of
    from simulator.replica import Replica
    from simulator.states import StepPlan

    gpt = catalog.model_card("gpt-oss-120b")  # sliding-window layers: the windowed sums matter
    cost = StepCostModel(gpt, H100, ServingConfig(tp=8), LatencyModels(H100))
    p = parts(64, 512, 8)
    p.cost = cost
    replica = Replica.__new__(Replica)
    replica.parts = p
    new = [1, 1, 300, 40]
    ctx = [50, 5000, 0, 900]
    entries = [(None, n, c, n == 1) for n, c in zip(new, ctx, strict=True)]
    plan = StepPlan(entries, [], [])  # type: ignore[arg-type]
    assert replica._shape(plan) == shape_of(np.array(new), np.array(ctx), 1, cost.window)


def test_progress_reports_while_nothing_finishes_and_a_raise_stops_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A long prompt keeps the engine stepping without finishes: progress still comes (every
    step here, with the interval at 0), and the exception it raises ends the run."""
    import simulator.engine as engine_mod

    monkeypatch.setattr(engine_mod, "PROGRESS_EVERY_S", 0.0)

    class StopError(Exception):
        pass

    calls: list[tuple[float, int]] = []

    def progress(now_s: float, done: int) -> None:
        calls.append((now_s, done))
        if len(calls) == 5:
            raise StopError

    replay = Replay(sessions([grow([(900, 40, 0.0)])], 0), closed_loop(1))  # ~10 prefill steps
    engine = Engine(replay, [parts(64, 96, 4)], progress=progress)
    with pytest.raises(StopError):
        engine.run()
    assert len(calls) == 5
    assert all(done == 0 for _, done in calls)  # reported before any request finished
    assert [t for t, _ in calls] == sorted(t for t, _ in calls)


def test_replicas_of_one_serving_config_share_their_step_cost_model(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """DP replicas price through one model (its templates serve them all), and the answer is
    the one separate models give."""
    from simulator import simulation
    from simulator.specs import Scenario

    scenario = Scenario.model_validate({
        "name": "dp4", "model": "llama-3.1-8b", "device": "h100", "serving": {"tp": 1, "dp": 4},
        "workload": {"kind": "random", "input_tokens": 300, "output_tokens": 40,
                     "num_requests": 40, "concurrency": 8},
    })  # fmt: skip
    built: list[StepCostModel] = []

    class Counting(StepCostModel):
        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*args, **kwargs)
            built.append(self)

    monkeypatch.setattr(simulation, "StepCostModel", Counting)
    shared = simulation.simulate(scenario).summary
    assert len(built) == 1
    # the same run with a model per replica
    real_parts = simulation._replica_parts

    def own_model(card, serving, memory, cost, *rest):  # type: ignore[no-untyped-def]
        seqs = simulation.batch_limits(cost.device, serving)[1]
        own = StepCostModel(card, cost.device, serving, cost.latency, seqs)
        return real_parts(card, serving, memory, own, *rest)

    monkeypatch.setattr(simulation, "_replica_parts", own_model)
    assert simulation.simulate(scenario).summary == shared
