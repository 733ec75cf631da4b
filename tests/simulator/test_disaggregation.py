"""Prefill/decode disaggregation: KV reads timed by hand, send-back pins, TTL, the threshold
rule, pinned memory against decode capacity, and engine invariants (hypothesis)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import catalog
from simulator.cache import CacheConfig, KVCacheManager, Nics, TransferSizer, reserve
from simulator.cache.transfer import send_back_tokens
from simulator.cost.latency import LatencyModels
from simulator.cost.step import StepCostModel
from simulator.disaggregation import DisaggSpec
from simulator.engine import Engine
from simulator.metrics import summarize
from simulator.records import Pools, Recorder
from simulator.replica import ReplicaParts
from simulator.scheduler import Scheduler
from simulator.specs import ServingConfig
from simulator.states import ReqState, Status
from simulator.workload.replay import Replay, closed_loop, open_loop
from simulator.workload.request import Session, Turn, chain, content_keys

BLOCK = 16
# no API-server prompt work: these tests time the P->D path alone (test_frontend.py: that)
_H100 = catalog.hardware_profile("h100")
H100 = _H100.model_copy(
    update={"roofline": _H100.roofline.model_copy(update={"frontend_s_per_prompt_token": 0.0})}
)
LLAMA = catalog.model_card("llama-3.3-70b")
COST = StepCostModel(LLAMA, H100, ServingConfig(tp=8), LatencyModels(H100))
# one block of one layer = 1 MB per GPU, 2 full-attention layers: 2 MB per block
SIZER = TransferSizer(
    attention_block_tokens=BLOCK, swa_block_tokens=BLOCK, window_blocks=0, page_bytes=1e6,
    full_layers=2, swa_layers=0, state_layers=0,
)  # fmt: skip
BW, LATENCY = 1e9, 1e-3


def parts(
    num_blocks: int = 200, caching: bool = True, budget: int = 512, hybrid: bool = False
) -> ReplicaParts:
    cache = KVCacheManager(
        CacheConfig(
            block_tokens=BLOCK, num_blocks=num_blocks, prefix_caching=caching,
            state_groups=1 if hybrid else 0,
        )
    )  # fmt: skip
    sched = Scheduler(
        cache, max_num_batched_tokens=budget, max_num_seqs=8, block_tokens=BLOCK, hybrid=hybrid,
        max_request_tokens=(num_blocks - 2) * BLOCK,
    )  # fmt: skip
    return ReplicaParts(
        scheduler=sched, cost=COST, block_tokens=BLOCK, load_bytes=lambda hit: 0.0,
        host_bw_bytes_per_s=64e9, host_latency_s=1e-5,
        blocks_used=lambda: cache.usage.used_blocks,
    )  # fmt: skip


def spec(**knobs: object) -> DisaggSpec:
    base: dict[str, object] = {
        "prefill_replicas": 1, "sizer": SIZER, "link_bw_bytes_per_s": BW,
        "link_latency_s": LATENCY,
    }  # fmt: skip
    return DisaggSpec(**{**base, **knobs})  # type: ignore[arg-type]


def sessions(spec_: list[list[tuple[int, int, float]]]) -> Iterator[Session]:
    """Sessions of (new prompt tokens, output, think) turns; each turn's prompt is the previous
    prompt + its output + the new tokens (block-aligned new parts keep the ids simple)."""
    for s, turns in enumerate(spec_):
        items, total, keys = [], 0, np.zeros(0, dtype=np.uint64)
        for new, output, think in turns:
            total += new
            blocks = total // BLOCK
            extra = np.arange(len(keys), blocks, dtype=np.uint64) + np.uint64(1000 * (s + 1))
            keys = np.concatenate([keys, extra])[:blocks]
            items.append(Turn(total, output, chain(content_keys(9, keys)), BLOCK, think, 0.0))
            total += output
        yield Session(key=f"s{s}", start_s=0.0, items=iter(items))


def engine(
    turns: list[list[tuple[int, int, float]]],
    users: int = 1,
    p_blocks: int = 200,
    d_blocks: int = 200,
    p_caching: bool = False,
    open_at: list[float] | None = None,
    budget: int = 512,
    hybrid: bool = False,
    **knobs: object,
) -> Engine:
    if open_at is None:
        replay = Replay(sessions(turns), closed_loop(users))
    else:
        items = [next(iter(sessions([t]))) for t in turns]
        for sess, at in zip(items, open_at, strict=True):
            sess.start_s = at
        replay = Replay(iter(items), open_loop(1.0))
    p = [
        parts(p_blocks, caching=p_caching, budget=budget, hybrid=hybrid),
        parts(d_blocks, budget=budget, hybrid=hybrid),
    ]
    if hybrid:  # one recurrent layer; the prefill side stops one token short
        knobs = {"sizer": TransferSizer(BLOCK, BLOCK, 0, 1e6, 2, 0, 1), "backoff_tokens": 1,
                 **knobs}  # fmt: skip
    return Engine(replay, p, disaggregation=spec(**knobs))


def only(rec: Recorder, kind: str = "kv") -> list:  # type: ignore[type-arg]
    return [t for t in rec.transfers if t.kind == kind]


# ----------------------------------------------------------------------------- transfer timing


def test_read_time_is_bytes_over_bandwidth_plus_latency() -> None:
    eng = engine([[(160, 4, 0.0)]])
    rec = eng.run()
    (r,) = rec.requests
    (t,) = only(rec)
    # P computed all 160 tokens (no backoff: not a hybrid); D has nothing: 10 blocks x 2 MB
    assert (t.src, t.dst, t.tokens) == (0, 1, 160)
    assert t.bytes_per_gpu == 10 * 2e6
    assert t.asked_s == r.prefill_done_s  # D idle: admitted when P's result arrives
    assert t.start_s == t.asked_s  # both NICs idle
    assert t.landed_s == pytest.approx(t.start_s + 20e6 / BW + LATENCY, rel=1e-12)
    assert r.kv_ready_s == t.landed_s
    # D computes the last prompt token in one step; its token reaches the client
    # output_delay_s after that step ends
    delay = H100.roofline.output_delay_s
    d_steps = [s for s in rec.steps if s.replica == 1]
    first = d_steps[0]
    assert first.start_s == t.landed_s
    assert first.prefill_tokens == 1
    assert r.first_token_s == pytest.approx(t.landed_s + first.step_s + delay, rel=1e-12)
    # TTFT = P queue (0) + P prefill step + its output delay + read + one D step + its delay
    p_step = next(s for s in rec.steps if s.replica == 0)
    assert r.prefill_done_s == pytest.approx(r.arrival_s + p_step.step_s + delay, rel=1e-12)
    # P kept its 10 blocks until the read landed, then freed them
    p_sched = eng.replicas[0].sched
    assert not p_sched.held
    assert p_sched.held_blocks == 0
    assert r.status is Status.FINISHED
    assert r.generated == 4


def test_reads_on_one_link_run_one_at_a_time() -> None:
    eng = engine([[(160, 4, 0.0)], [(320, 4, 0.0)]], open_at=[0.0, 0.0])
    rec = eng.run()
    a, b = sorted(only(rec), key=lambda t: t.start_s)
    assert a.asked_s == b.asked_s  # handed off together, admitted in the same D step
    assert b.start_s == pytest.approx(a.landed_s - LATENCY, rel=1e-12)  # waits for the link
    assert b.landed_s == pytest.approx(b.start_s + b.bytes_per_gpu / BW + LATENCY, rel=1e-12)


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.floats(0, 10),
                          st.floats(0, 1e9)), min_size=1, max_size=30))  # fmt: skip
def test_reserve_never_overlaps_a_nic_direction(jobs: list[tuple[int, int, float, float]]) -> None:
    nics = [Nics(BW, LATENCY) for _ in range(4)]
    busy: dict[tuple[int, str], list[tuple[float, float]]] = {}
    now = 0.0
    for src, dst, dt, nbytes in jobs:
        now += dt
        start, landed = reserve(nics[src], nics[dst], now, nbytes)
        assert start >= now
        assert landed == pytest.approx(start + nbytes / BW + LATENCY)
        for key in ((src, "send"), (dst, "recv")):
            for s, e in busy.get(key, []):
                assert start >= e - 1e-9 or start + nbytes / BW <= s + 1e-9
            busy.setdefault(key, []).append((start, start + nbytes / BW))


def test_sizer_counts_pages_of_real_layers_past_the_local_hit() -> None:
    card = catalog.model_card("kimi-k3")
    from simulator.kv_layout import kv_layout

    serving = ServingConfig(tp=8)
    layout = kv_layout(card, serving)
    sizer = TransferSizer.from_layout(layout, dcp=1)
    assert (sizer.full_layers, sizer.state_layers) == (24, 69)  # MLA + KDA layers of K3
    blk = layout.block_size_tokens
    # 100k tokens, nothing local: every MLA block + one state page per KDA layer
    want = (24 * -(-100_000 // blk) + 69) * layout.page_bytes
    assert sizer.bytes_per_gpu(0, 100_000) == want
    # a local hit of 10 blocks leaves the rest (and still the state)
    assert sizer.bytes_per_gpu(10 * blk, 100_000) == want - 24 * 10 * layout.page_bytes
    assert sizer.bytes_per_gpu(blk, blk) == 0.0
    # with DCP 8 each rank moves its eighth of the latents
    dcp = TransferSizer.from_layout(kv_layout(card, ServingConfig(tp=8, dcp=8)), dcp=8)
    assert dcp.attention_block_tokens == 8 * blk


# ----------------------------------------------------------------------------- send-back


@given(st.integers(0, 10_000), st.integers(1, 10_000), st.integers(0, 10_000),
       st.integers(0, 200))  # fmt: skip
def test_send_back_rule(remote: int, prompt: int, local: int, threshold: int) -> None:
    got = send_back_tokens(remote, prompt, local, threshold)
    count = min(remote, prompt - 1) - local  # vLLM's count (the last token is computed)
    if count > 0 and count >= threshold:
        assert got == min(remote, prompt - 1)
    else:
        assert got == 0


def test_send_back_rule_at_the_threshold() -> None:
    assert send_back_tokens(1063, 5000, 1000, 64) == 0  # count 63: recompute
    assert send_back_tokens(1064, 5000, 1000, 64) == 1064  # count 64: pull
    assert send_back_tokens(9000, 5000, 0, 64) == 4999  # min(remote, prompt), less the last
    assert send_back_tokens(1000, 5000, 1000, 0) == 0  # nothing past the local hit


@pytest.mark.parametrize(("output", "outcome"), [(64, "recompute"), (65, "pull")])
def test_threshold_64_both_sides(output: int, outcome: str) -> None:
    # P caches its own 160-token prompt; D pins 160 + output - 1 computed tokens. Next turn:
    # count = (160 + output - 1) - 160 = output - 1: 63 recomputes, 64 pulls.
    eng = engine([[(160, output, 0.0), (16, 4, 1.0)]], p_caching=True, send_back=True)
    rec = eng.run()
    second = next(r for r in rec.requests if r.request.turn == 1)
    assert second.send_back == outcome
    assert second.gpu_hit_tokens == 160
    pins = {p.req_id: p for p in rec.pins}
    first_pin = pins[next(r.req_id for r in rec.requests if r.request.turn == 0)]
    if outcome == "pull":
        assert second.remote_hit_tokens == output - 1
        (t,) = only(rec, "send_back")
        assert (t.src, t.dst, t.tokens) == (1, 0, output - 1)
        assert first_pin.outcome == "pulled"
        assert first_pin.end_s == t.landed_s
    else:
        assert second.remote_hit_tokens == 0
        assert not only(rec, "send_back")
        assert first_pin.outcome == "declined"  # P's notification frees D's blocks at once


def test_ttl_expiry_frees_pinned_blocks_at_exactly_the_ttl() -> None:
    eng = engine([[(160, 20, 0.0), (16, 4, 100.0)]], send_back=True, ttl_s=30.0)
    rec = eng.run()
    first, second = sorted(rec.requests, key=lambda r: r.request.turn)
    pin = next(p for p in rec.pins if p.req_id == first.req_id)
    assert pin.outcome == "expired"
    assert pin.end_s - pin.start_s == 30.0
    assert pin.blocks == -(-(160 + 20) // BLOCK)  # its blocks (the last token's slot too)
    assert pin.tokens == 160 + 20 - 1
    # the first turn's blocks were held from its last step until the TTL; the second turn's
    # steps (after the TTL) see none held, until its own last step pins its own
    d = [s for s in rec.steps if s.replica == 1]
    assert d[len(d) // 2 - 1].kv_blocks_held == pin.blocks  # the first turn's last step
    later = [s for s in d if s.start_s > pin.end_s]
    assert later
    assert all(s.kv_blocks_held == 0 for s in later[:-1])
    assert later[-1].kv_blocks_held > 0
    assert second.send_back == "expired"
    assert second.remote_hit_tokens == 0


def test_pinned_sequence_is_pulled_within_the_ttl() -> None:
    eng = engine([[(160, 20, 0.0), (32, 4, 5.0)]], send_back=True, ttl_s=30.0)
    rec = eng.run()
    first, second = sorted(rec.requests, key=lambda r: r.request.turn)
    assert second.send_back == "pull"
    assert second.remote_hit_tokens == 179  # 160 + 20 - 1: P computes only the rest
    pin = next(p for p in rec.pins if p.req_id == first.req_id)
    assert pin.outcome == "pulled"
    (pull,) = only(rec, "send_back")
    assert pull.bytes_per_gpu == -(-179 // BLOCK) * 2e6
    assert pull.landed_s == pytest.approx(pull.start_s + pull.bytes_per_gpu / BW + LATENCY)
    assert pull.asked_s == pin.end_s - (pull.landed_s - pull.asked_s)  # freed when it landed
    last_pin = next(p for p in rec.pins if p.req_id == second.req_id)
    assert last_pin.outcome == "expired"


def test_pinned_memory_can_force_a_preemption() -> None:
    # D holds 24 blocks. A finishes with 12 blocks pinned for 1000 s; B then needs 7 blocks
    # for its prompt and grows to 19 over 200 output tokens: it cannot, and is preempted
    # until A's pin runs out. Without send-back nothing is pinned and B runs through.
    turns = [[(160, 32, 0.0)], [(112, 200, 0.0)]]
    on = engine(turns, open_at=[0.0, 10.0], d_blocks=24, send_back=True, ttl_s=1000.0).run()
    off = engine(turns, open_at=[0.0, 10.0], d_blocks=24).run()
    b_on = next(r for r in on.requests if r.request.session_id == 1)
    b_off = next(r for r in off.requests if r.request.session_id == 1)
    assert b_off.preemptions == 0
    assert b_on.preemptions >= 1
    assert b_on.status is Status.FINISHED
    assert b_on.finish_s is not None
    assert b_on.finish_s > 1000.0  # it could finish only once the pin expired
    (pin,) = [p for p in on.pins if p.req_id != b_on.req_id]
    assert pin.outcome == "expired"
    held = {s.kv_blocks_held for s in on.steps if s.replica == 1 and s.start_s < pin.end_s}
    assert held == {0, 12}  # A's 12 blocks, from its last step to the TTL
    s = summarize(on, 16, pools=Pools(1, 1, 8, 24))
    assert s.decode_kv_pinned_share_peak == 20 / 24  # B's own pin after its last step
    assert s.decode_preemptions == b_on.preemptions


def test_send_back_cuts_ttft_of_later_turns() -> None:
    turns = [[(2048, 32, 1.0), (256, 32, 1.0), (256, 32, 1.0), (256, 32, 1.0)]] * 3
    # Llama-3.3-70B at TP8: 80 layers x 16 tokens x 512 B per GPU per block, a 50 GB/s NIC
    llama = TransferSizer(BLOCK, BLOCK, 0, 16 * 512.0, 80, 0, 0)
    sized = {"users": 3, "budget": 256, "p_blocks": 400, "d_blocks": 1000, "sizer": llama,
             "link_bw_bytes_per_s": 50e9}  # fmt: skip
    off = engine(turns, **sized).run()  # type: ignore[arg-type]
    on = engine(turns, send_back=True, **sized).run()  # type: ignore[arg-type]

    def ttft(rec: Recorder, later: bool) -> float:
        return float(
            np.mean(
                [
                    r.first_token_s - r.arrival_s
                    for r in rec.requests
                    if r.first_token_s is not None and (r.request.turn > 0) == later
                ]
            )
        )

    assert ttft(on, later=True) < 0.5 * ttft(off, later=True)
    assert ttft(on, later=False) == pytest.approx(ttft(off, later=False))
    pools = Pools(1, 1, 8, 1000)
    s_on, s_off = summarize(on, 16, pools=pools), summarize(off, 16, pools=pools)
    assert s_on.send_back_pulls == 9  # every later turn
    assert s_on.remote_hit_rate > 0.5
    assert s_off.remote_hit_rate == 0.0
    assert s_off.prefix_hit_rate == 0.0  # P has no prefix cache: it recomputes every prompt
    assert s_on.prefix_hit_rate == s_on.remote_hit_rate


# ----------------------------------------------------------------------------- invariants


turn = st.tuples(st.integers(1, 300), st.integers(1, 60), st.floats(0, 50))
workloads = st.lists(st.lists(turn, min_size=1, max_size=4), min_size=1, max_size=5)


@settings(max_examples=60)
@given(workloads, st.integers(40, 120), st.integers(40, 120), st.booleans(), st.booleans(),
       st.sampled_from([0, 64]), st.floats(1.0, 100.0), st.booleans())  # fmt: skip
def test_every_request_finishes_and_every_block_comes_back(  # type: ignore[no-untyped-def]
    spec_, p_blocks, d_blocks, send_back, p_caching, threshold, ttl, hybrid
) -> None:
    eng = engine(
        spec_, users=2, p_blocks=p_blocks, d_blocks=d_blocks, p_caching=p_caching,
        send_back=send_back, recompute_threshold_tokens=threshold, ttl_s=ttl, hybrid=hybrid,
    )  # fmt: skip
    rec = eng.run()
    assert len(rec.requests) == sum(len(t) for t in spec_)
    for r in rec.requests:
        if r.status is Status.REJECTED:
            assert r.reject_reason
            continue
        assert r.status is Status.FINISHED
        assert r.generated == r.request.output_tokens
        assert r.first_token_s is not None
        assert r.prefill_done_s is not None
        assert r.arrival_s <= r.prefill_done_s < r.first_token_s
        if r.kv_ready_s is not None:
            assert r.prefill_done_s <= r.kv_ready_s < r.first_token_s
        assert r.gpu_hit_tokens + r.cpu_hit_tokens + r.remote_hit_tokens <= r.prompt_tokens - 1
    for step in rec.steps:
        assert step.kv_blocks_held <= step.kv_blocks_used
    # the run drains: every read landed, every pin ended, every block is free again
    for replica in eng.replicas:
        sched = replica.sched
        assert not sched.held
        assert sched.held_blocks == 0
        cache = sched.cache
        assert isinstance(cache, KVCacheManager)
        cache.check()
        assert cache.usage.used_blocks == 0
    pinned = {p.req_id for p in rec.pins}
    finished = {r.req_id for r in rec.requests if r.status is Status.FINISHED}
    assert pinned == (finished if send_back else set())


def test_a_prefill_rejection_is_the_clients() -> None:
    rec = engine([[(400, 4, 0.0)]], p_blocks=10).run()  # 25 blocks of prompt, P holds 10
    (r,) = rec.requests
    assert r.status is Status.REJECTED
    assert "prefill replica 0" in r.reject_reason


def test_reqstate_defaults_leave_aggregated_requests_alone() -> None:
    s = ReqState.__new__(ReqState)
    assert ReqState.__dataclass_fields__["remote_tokens"].default == 0
    assert ReqState.__dataclass_fields__["keep_blocks"].default is False
    del s


def test_simulate_a_hybrid_split_moves_state_and_backs_off_one_token() -> None:
    from simulator.kv_layout import kv_layout
    from simulator.simulation import simulate
    from simulator.specs import Scenario

    scenario = Scenario.model_validate(
        {
            "name": "klin-1p1d", "model": "kimi-linear-48b-a3b", "device": "h200",
            "serving": {"tp": 2},
            "workload": {"kind": "chat", "sessions": 6, "concurrency": 3},
            "duration_s": 600.0,
            "disaggregation": {"prefill_replicas": 1, "decode_replicas": 1, "send_back": True},
        }
    )  # fmt: skip
    result = simulate(scenario)
    rec = result.recorder
    assert result.prefill_memory is not None
    # no prefix caching on P: one state page per recurrent group, not two
    assert result.prefill_memory.state_pages_per_seq < result.memory.state_pages_per_seq
    layout = kv_layout(catalog.model_card("kimi-linear-48b-a3b"), scenario.serving)
    sizer = TransferSizer.from_layout(layout, dcp=1)
    assert sizer.state_layers == 20  # the 20 KDA layers move their state pages
    first = {r.req_id: r for r in rec.requests if r.request.turn == 0}
    reads = [t for t in rec.transfers if t.kind == "kv" and t.req_id in first]
    assert reads
    for t in reads:
        # P computed all but the last prompt token; D had nothing of a first turn
        assert t.tokens == first[t.req_id].prompt_tokens - 1
        assert t.bytes_per_gpu == sizer.bytes_per_gpu(0, t.tokens)
    s = result.summary
    assert s.num_gpus == 4
    assert (s.prefill_gpus, s.decode_gpus) == (2, 2)
    assert s.send_back_pulls > 0
    assert s.kv_transfer_s_p50 is not None
