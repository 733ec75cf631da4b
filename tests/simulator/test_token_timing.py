"""When tokens reach the client: ``output_delay_s`` after the end of their step (async
scheduling), not a second copy of the step.

TTFT of a lone long prompt = the API server's prompt work + its prefill steps (priced by
hand with the engine's own StepCostModel) + the delay; steady decode gaps = step times;
and over random workloads (aggregated or disaggregated, fast-forward on or off,
speculative decoding on or off) no request's tokens go backwards: arrival <= first token
<= last token = finish.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simulator.replica as replica_mod
from simulator import catalog
from simulator.cache import CacheConfig, KVCacheManager, TransferSizer
from simulator.cost.latency import LatencyModels
from simulator.cost.step import StepCostModel, shape_of
from simulator.disaggregation import DisaggSpec
from simulator.engine import Engine
from simulator.metrics import summarize
from simulator.records import Recorder
from simulator.replica import ReplicaParts
from simulator.scheduler import Scheduler
from simulator.specs import HardwareProfile, ServingConfig
from simulator.states import ReqState, Status
from simulator.workload.replay import Replay, closed_loop
from simulator.workload.request import Session, Turn, chain, content_keys

BLOCK = 16
H100 = catalog.hardware_profile("h100")
LLAMA = catalog.model_card("llama-3.3-70b")
SIZER = TransferSizer(BLOCK, BLOCK, 0, 1e6, 2, 0, 0)  # 2 MB per block per GPU


def with_delay(delay_s: float) -> HardwareProfile:
    roofline = H100.roofline.model_copy(update={"output_delay_s": delay_s})
    return H100.model_copy(update={"roofline": roofline})


def cost_model(delay_s: float) -> StepCostModel:
    device = with_delay(delay_s)
    return StepCostModel(LLAMA, device, ServingConfig(tp=8), LatencyModels(device))


def parts(
    cost: StepCostModel, num_blocks: int = 400, budget: int = 512, max_seqs: int = 8, k: int = 0
) -> ReplicaParts:
    cache = KVCacheManager(
        CacheConfig(block_tokens=BLOCK, num_blocks=num_blocks, num_speculative_tokens=k)
    )
    sched = Scheduler(
        cache, max_num_batched_tokens=budget, max_num_seqs=max_seqs, block_tokens=BLOCK,
        hybrid=False, max_request_tokens=(num_blocks - 2) * BLOCK, num_speculative_tokens=k,
    )  # fmt: skip
    return ReplicaParts(
        scheduler=sched, cost=cost, block_tokens=BLOCK, load_bytes=lambda hit: 0.0,
        host_bw_bytes_per_s=64e9, host_latency_s=1e-5,
        blocks_used=lambda: cache.usage.used_blocks,
    )  # fmt: skip


def sessions(spec: list[list[tuple[int, int, float]]]) -> Iterator[Session]:
    """Sessions of (new prompt tokens, output, think) turns; each prompt extends the last."""
    for s, turns in enumerate(spec):
        items, total = [], 0
        for new, output, think in turns:
            total += new
            keys = np.arange(total // BLOCK, dtype=np.uint64) + np.uint64(10_000 * (s + 1))
            items.append(Turn(total, output, chain(content_keys(7, keys)), BLOCK, think, 0.0))
            total += output
        yield Session(key=f"s{s}", start_s=0.0, items=iter(items))


def run(  # type: ignore[no-untyped-def]
    spec: list[list[tuple[int, int, float]]],
    delay_s: float = 0.0,
    users: int = 1,
    budget: int = 512,
    k: int = 0,
    disaggregated: bool = False,
    num_blocks: int = 1200,
    max_seqs: int = 8,
):
    cost = cost_model(delay_s)
    replicas = 2 if disaggregated else 1
    p = [parts(cost, num_blocks, budget, max_seqs, k) for _ in range(replicas)]
    disagg = DisaggSpec(1, SIZER, 1e9, 1e-3) if disaggregated else None
    engine = Engine(
        Replay(sessions(spec), closed_loop(users)), p, seed=3,
        acceptance_rate=0.6 if k else None, disaggregation=disagg,
    )  # fmt: skip
    return engine.run(), cost


def prefill_chunks(prompt: int, budget: int) -> list[tuple[int, int]]:
    """(new tokens, context) of each chunk of a lone prompt under the token budget."""
    chunks, done = [], 0
    while done < prompt:
        n = min(budget, prompt - done)
        chunks.append((n, done))
        done += n
    return chunks


def step_s(cost: StepCostModel, new: list[int], ctx: list[int]) -> float:
    shape = shape_of(np.array(new), np.array(ctx), 1, cost.window, cost.sparse_span)
    return cost.price(shape).seconds


# ----------------------------------------------------------------------------- TTFT by hand


@pytest.mark.parametrize(
    ("prompt", "budget", "delay_s"),
    [
        (2000, 512, 0.0),  # four chunks: 512, 512, 512, 464
        (2000, 512, 0.004),
        (8192, 8192, 0.0),  # one 8k-token step
        (8192, 8192, 0.02),
        (5000, 2048, 0.001),
    ],
)
def test_ttft_of_a_lone_long_prompt_is_its_prefill_steps_plus_the_output_delay(
    prompt: int, budget: int, delay_s: float
) -> None:
    rec, cost = run([[(prompt, 8, 0.0)]], delay_s=delay_s, budget=budget)
    (r,) = rec.requests
    assert r.first_token_s is not None
    chunks = prefill_chunks(prompt, budget)
    prefill = [step_s(cost, [n], [c]) for n, c in chunks]
    # the API server's prompt work first (test_frontend.py), then the prefill steps
    frontend_s = prompt * H100.roofline.frontend_s_per_prompt_token
    assert frontend_s > 0.0
    expected = frontend_s + sum(prefill) + delay_s
    assert r.first_token_s - r.arrival_s == pytest.approx(expected, rel=1e-9)
    # the engine ran exactly those steps, back to back from the request reaching it
    steps = rec.steps[: len(chunks)]
    assert [s.prefill_tokens for s in steps] == [n for n, _ in chunks]
    assert [s.step_s for s in steps] == pytest.approx(prefill, rel=1e-12)
    # the last prefill step is no longer paid twice: TTFT < prefill + that step again
    assert r.first_token_s - r.arrival_s < frontend_s + sum(prefill) + prefill[-1]


# ----------------------------------------------------------------------------- steady decode


@pytest.mark.parametrize("fast_forward", [True, False])
@pytest.mark.parametrize("delay_s", [0.0, 0.003])
def test_steady_decode_gaps_equal_the_step_times(
    fast_forward: bool, delay_s: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not fast_forward:
        monkeypatch.setattr(replica_mod, "MAX_FAST_FORWARD", 1)
    out = 300
    rec, cost = run([[(64, out, 0.0)]], delay_s=delay_s)
    (r,) = rec.requests
    prefill, *decodes = rec.steps
    assert prefill.prefill_tokens == 64
    assert (len(decodes) < out - 1) == fast_forward
    assert sum(s.steps for s in decodes) == out - 1
    # each decode step's token comes one step time after the previous one
    want = [(s.step_s / s.steps, s.steps) for s in decodes]
    got = r.itl_pairs()
    assert [n for _, n in got] == [n for _, n in want]
    assert [g for g, _ in got] == pytest.approx([g for g, _ in want], rel=1e-9)
    # and that time is what the cost model charges for a lone decode at that context
    assert decodes[0].step_s / decodes[0].steps == pytest.approx(step_s(cost, [1], [64]), rel=1e-12)
    # first token: the prefill step + the delay; last: the end of the last step + the delay
    assert r.first_token_s == pytest.approx(prefill.start_s + prefill.step_s + delay_s)
    last = rec.steps[-1]
    assert r.finish_s == pytest.approx(last.start_s + last.step_s + delay_s, rel=1e-12)
    assert r.last_token_s == r.finish_s


def test_delay_shifts_every_token_and_leaves_the_gaps() -> None:
    spec = [[(700, 50, 0.0)], [(300, 80, 0.0)]]
    base, _ = run(spec, users=2, budget=256)
    late, _ = run(spec, delay_s=0.01, users=2, budget=256)
    assert [s.step_s for s in base.steps] == [s.step_s for s in late.steps]  # same schedule
    for a, b in zip(
        sorted(base.requests, key=lambda r: r.req_id),
        sorted(late.requests, key=lambda r: r.req_id),
        strict=True,
    ):
        assert a.first_token_s is not None
        assert b.first_token_s == pytest.approx(a.first_token_s + 0.01, rel=1e-12)
        assert a.finish_s is not None
        assert b.finish_s == pytest.approx(a.finish_s + 0.01, rel=1e-12)
        assert [n for _, n in a.itl_pairs()] == [n for _, n in b.itl_pairs()]
        gaps_a = [g for g, _ in a.itl_pairs()]
        assert [g for g, _ in b.itl_pairs()] == pytest.approx(gaps_a, abs=1e-9)


# ----------------------------------------------------------------------------- never backwards


@pytest.mark.parametrize("output", [1, 2, 3, 20])
@pytest.mark.parametrize("prompt", [2048, 8000])
def test_a_long_prefill_step_then_short_decodes_finish_after_the_first_token(
    prompt: int, output: int
) -> None:
    """Pinned regression: with tokens at "end of step + that step's duration", a long prefill
    step's first token landed after the next (short) decode steps' tokens, so a request with a
    couple of output tokens finished before its first token (negative ITL, e2e < TTFT)."""
    rec, _ = run([[(prompt, output, 0.0)]], budget=8192)
    (r,) = rec.requests
    check_times(r)
    assert rec.steps[0].prefill_tokens == prompt  # one long step, then ~10 ms decodes


@pytest.mark.parametrize("disaggregated", [False, True])
def test_a_request_for_no_output_tokens_runs_its_whole_prompt(disaggregated: bool) -> None:
    """Pinned regression: a prompt longer than the token budget asking for 0 output tokens (a
    few trace records) used to finish after its first chunk, with no first token."""
    delay = 0.002
    rec, _ = run([[(2000, 0, 0.0)]], delay_s=delay, budget=512, disaggregated=disaggregated)
    (r,) = rec.requests
    check_times(r)
    assert r.generated == 0
    last = rec.steps[-1]  # the last prompt chunk (disaggregated: the decode side's 1 token)
    assert r.finish_s == r.first_token_s == pytest.approx(last.start_s + last.step_s + delay)
    assert sum(s.prefill_tokens for s in rec.steps if s.replica == 0) == 2000
    if disaggregated:
        assert [s.prefill_tokens for s in rec.steps if s.replica == 1] == [1]


def check_times(r: ReqState) -> None:
    assert r.status is Status.FINISHED
    assert r.generated == r.request.output_tokens
    assert r.first_token_s is not None
    assert r.finish_s is not None
    assert r.arrival_s <= r.first_token_s <= r.finish_s
    if r.request.output_tokens:
        assert r.last_token_s == r.finish_s
    assert all(gap >= 0 for gap, _ in r.itl_pairs())
    assert sum(n for _, n in r.itl_pairs()) == max(r.generated - 1, 0)


turn = st.tuples(st.integers(1, 1500), st.integers(0, 40), st.floats(0, 5))
workloads = st.lists(st.lists(turn, min_size=1, max_size=3), min_size=1, max_size=5)


@settings(max_examples=80, deadline=None)
@given(
    workloads,
    st.sampled_from([0.0, 0.002, 0.05]),
    st.booleans(),  # fast-forward
    st.sampled_from([0, 2]),  # speculative tokens
    st.booleans(),  # disaggregated
    st.sampled_from([64, 256, 2048]),  # token budget
    st.integers(1, 3),  # users
)
def test_tokens_never_go_backwards(  # type: ignore[no-untyped-def]
    spec, delay_s, fast_forward, k, disaggregated, budget, users
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        if not fast_forward:
            mp.setattr(replica_mod, "MAX_FAST_FORWARD", 1)
        rec: Recorder
        rec, _ = run(
            spec, delay_s=delay_s, users=users, budget=budget, k=k,
            disaggregated=disaggregated, num_blocks=300, max_seqs=4,
        )  # fmt: skip
    assert len(rec.requests) == sum(len(t) for t in spec)
    for r in rec.requests:
        if r.status is Status.REJECTED:
            assert r.reject_reason
            continue
        check_times(r)
        if disaggregated:
            assert r.prefill_done_s is not None
            assert r.first_token_s is not None
            assert r.arrival_s <= r.prefill_done_s <= r.first_token_s
    s = summarize(rec, num_gpus=8)
    if s.requests_finished:
        assert s.ttft_s_p50 is not None
        assert s.e2e_s_p50 is not None
        assert s.ttft_s_p50 <= s.e2e_s_p50
