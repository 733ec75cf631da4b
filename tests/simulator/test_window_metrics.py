"""Window metrics that hold under load (``simulator.metrics.summarize``).

Throughput counts the tokens processed inside the measured window whether or not their request
finished; interactivity counts every inter-token gap that ends there (requests still running
included); a workload that runs out early ends the window at its last token; a queue that grows
or never drains flags the run ``saturated``. And where every request finishes (``plan validate
inferencemax``: no warm-up, no duration) the figures equal the old finished-requests formula.
Scenarios are built as in ``test_engine.py``, priced by ``LatencyModels(profile)`` priors.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import simulator.replica as replica_mod
from simulator import catalog
from simulator.cache import CacheConfig, KVCacheManager, TransferSizer
from simulator.cost.latency import LatencyModels
from simulator.cost.step import StepCostModel
from simulator.disaggregation import DisaggSpec
from simulator.engine import Engine
from simulator.metrics import Summary, summarize
from simulator.records import Pools, Recorder
from simulator.replica import ReplicaParts
from simulator.scheduler import Scheduler
from simulator.specs import ServingConfig
from simulator.states import ReqState, Status
from simulator.workload.replay import Replay, closed_loop, open_loop
from simulator.workload.request import Session, Turn, chain, content_keys

BLOCK = 16
H100 = catalog.hardware_profile("h100")
LLAMA = catalog.model_card("llama-3.3-70b")
COST = StepCostModel(LLAMA, H100, ServingConfig(tp=8), LatencyModels(H100))
DELAY = H100.roofline.output_delay_s
SIZER = TransferSizer(BLOCK, BLOCK, 0, 1e6, 2, 0, 0)  # 2 MB per block per GPU


def parts(num_blocks: int = 400, budget: int = 256, max_seqs: int = 4, k: int = 0) -> ReplicaParts:
    cache = KVCacheManager(
        CacheConfig(block_tokens=BLOCK, num_blocks=num_blocks, num_speculative_tokens=k)
    )
    sched = Scheduler(
        cache, max_num_batched_tokens=budget, max_num_seqs=max_seqs, block_tokens=BLOCK,
        hybrid=False, max_request_tokens=(num_blocks - 2) * BLOCK, num_speculative_tokens=k,
    )  # fmt: skip
    return ReplicaParts(
        scheduler=sched, cost=COST, block_tokens=BLOCK, load_bytes=lambda hit: 0.0,
        host_bw_bytes_per_s=64e9, host_latency_s=1e-5,
        blocks_used=lambda: cache.usage.used_blocks,
    )  # fmt: skip


def sessions(spec: list[list[tuple[int, int, float]]], shared: int = 32) -> Iterator[Session]:
    """Sessions of (new prompt tokens, output, think) turns; each prompt extends the previous
    one, and every session starts with the same ``shared`` tokens (prefix-cache hits)."""
    for s, turns in enumerate(spec):
        items, total = [], 0
        for new, output, think in turns:
            total += new
            blocks = total // BLOCK
            common = min(shared // BLOCK, blocks)
            keys = np.concatenate(
                [np.arange(common), 10_000 * (s + 1) + np.arange(blocks - common)]
            ).astype(np.uint64)
            items.append(Turn(total, output, chain(content_keys(7, keys)), BLOCK, think, 0.0))
            total += output
        yield Session(key=f"s{s}", start_s=0.0, items=iter(items))


def many(n: int, prompt: int = 200, output: int = 60, think: float = 0.0) -> Iterator[Session]:
    """``n`` one-turn sessions, lazily (a closed loop of many users)."""
    for s in range(n):
        keys = 10_000 * (s + 1) + np.arange(prompt // BLOCK, dtype=np.uint64)
        turn = Turn(prompt, output, chain(content_keys(7, keys)), BLOCK, think, 0.0)
        yield Session(key=f"u{s}", start_s=0.0, items=iter([turn]))


def engine(  # type: ignore[no-untyped-def]
    source: Iterator[Session],
    users: int = 2,
    duration_s: float | None = None,
    disaggregated: bool = False,
    seed: int = 0,
    k: int = 0,
    **knobs,
) -> Engine:
    replicas = 2 if disaggregated else 1
    p = [parts(k=k, **knobs) for _ in range(replicas)]
    disagg = DisaggSpec(1, SIZER, 1e9, 1e-3) if disaggregated else None
    return Engine(
        Replay(source, closed_loop(users)), p, seed=seed, duration_s=duration_s,
        acceptance_rate=0.6 if k else None, disaggregation=disagg,
    )  # fmt: skip


def old_formula(
    rec: Recorder, num_gpus: int, warmup_s: float = 0.0, end_s: float | None = None
) -> dict[str, Any]:
    """The summary as it was computed before the window metrics: requests that arrived after
    the warm-up and finished inside the window, window end = the last finish if not given."""
    done = [r for r in rec.requests if r.status is Status.FINISHED and r.finish_s is not None]
    finish = {r.req_id: r.finish_s or 0.0 for r in done}
    measured = [
        r for r in done if r.arrival_s >= warmup_s and (end_s is None or finish[r.req_id] <= end_s)
    ]
    end = (
        end_s if end_s is not None else max((finish[r.req_id] for r in measured), default=warmup_s)
    )
    window = max(end - warmup_s, 1e-9)
    prompt = float(sum(r.prompt_tokens for r in measured))
    output = float(sum(r.generated for r in measured))
    hit = float(sum(r.gpu_hit_tokens + r.cpu_hit_tokens + r.remote_hit_tokens for r in measured))
    gaps = np.array([g for r in measured for g, _ in r.itl_pairs()])
    counts = np.array([c for r in measured for _, c in r.itl_pairs()], dtype=np.float64)

    def inter(q: float) -> float | None:
        if gaps.size == 0:
            return None
        order = np.argsort(gaps)
        cum = np.cumsum(counts[order])
        gap = float(gaps[order][np.searchsorted(cum, q / 100.0 * cum[-1])])
        return 1.0 / gap if gap > 0 else None

    ttft = np.array([(r.first_token_s or 0.0) - r.arrival_s for r in measured])
    e2e = np.array([finish[r.req_id] - r.arrival_s for r in measured])
    return {
        "window_s": window,
        "requests_finished": len(measured),
        "throughput_tok_per_s_per_gpu": (prompt + output) / window / num_gpus,
        "output_tok_per_s_per_gpu": output / window / num_gpus,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "interactivity_tok_per_s_p50": inter(50),
        "interactivity_tok_per_s_p90": inter(90),
        "interactivity_tok_per_s_p99": inter(99),
        "ttft_s_p50": float(np.percentile(ttft, 50)) if ttft.size else None,
        "ttft_s_p90": float(np.percentile(ttft, 90)) if ttft.size else None,
        "e2e_s_p50": float(np.percentile(e2e, 50)) if e2e.size else None,
        "prefix_hit_rate": hit / prompt if prompt else 0.0,
    }


def approx(x: float | None) -> Any:
    return None if x is None else pytest.approx(x, rel=1e-9, abs=1e-9)


turn = st.tuples(st.integers(1, 700), st.integers(0, 60), st.floats(0, 3))
workloads = st.lists(st.lists(turn, min_size=1, max_size=3), min_size=1, max_size=6)


# ----------------------------------------------------------------------- validation semantics


@settings(max_examples=60, deadline=None)
@given(
    workloads,
    st.integers(1, 4),  # users
    st.sampled_from([0, 2]),  # speculative tokens
    st.booleans(),  # fast-forward
    st.booleans(),  # disaggregated
    st.sampled_from([40, 400]),  # KV blocks: 40 preempts now and then
)
def test_a_workload_bounded_run_gives_the_old_formulas_figures(  # type: ignore[no-untyped-def]
    spec, users, k, fast_forward, disaggregated, blocks
) -> None:
    """``plan validate inferencemax`` calls summarize with no warm-up and no end: every
    request finishes, and throughput (all tokens / the time to the last finish), interactivity
    and TTFT are what the finished-requests formula gave."""
    with pytest.MonkeyPatch.context() as mp:
        if not fast_forward:
            mp.setattr(replica_mod, "MAX_FAST_FORWARD", 1)
        rec = engine(
            sessions(spec), users=users, k=k, disaggregated=disaggregated, num_blocks=blocks
        ).run()
    # every request finishes (a disaggregated request the decode pool rejects after its
    # prefill is prefill work the window counts and the old formula did not)
    assume(all(r.status is Status.FINISHED for r in rec.requests))
    pools = Pools(1, 1, 8, blocks) if disaggregated else None
    gpus = 16 if disaggregated else 8
    s = summarize(rec, gpus, pools=pools)
    old = old_formula(rec, gpus)
    assert rec.workload_ended
    assert s.window_end_reason == "workload_ended"
    assert s.requests_in_flight_at_end == s.requests_waiting_at_end == 0
    for name in (
        "window_s", "requests_finished", "throughput_tok_per_s_per_gpu",
        "output_tok_per_s_per_gpu", "interactivity_tok_per_s_p50", "interactivity_tok_per_s_p90",
        "interactivity_tok_per_s_p99", "ttft_s_p50", "ttft_s_p90", "e2e_s_p50",
        "prefix_hit_rate",
    ):  # fmt: skip
        assert getattr(s, name) == approx(old[name]), name
    assert s.prompt_tokens_in_window == approx(old["prompt_tokens"])
    assert s.output_tokens_in_window == approx(old["output_tokens"])
    if pools is not None:
        assert s.prefill_input_tok_per_s_per_gpu == approx(old["prompt_tokens"] / s.window_s / 8)
        assert s.decode_output_tok_per_s_per_gpu == approx(old["output_tokens"] / s.window_s / 8)


# ----------------------------------------------------------------------- tokens in the window


def busy_inside(rec: Recorder, w0: float, w1: float) -> bool:
    """A step inside the window decoded (its tokens reached the client in it), or a step
    computed new prompt tokens during part of the window."""
    for s in rec.steps:
        stop = s.start_s + s.step_s
        if s.decodes and s.start_s >= w0 and stop + DELAY <= w1:
            return True
        if s.prompt_computed and min(stop, w1) > max(s.start_s, w0):
            return True
    return False


@settings(max_examples=60, deadline=None)
@given(
    st.integers(20, 400),  # users
    st.floats(0.0, 4.0),  # warm-up
    st.floats(0.2, 6.0),  # window
    st.integers(0, 1000),  # seed of the workload shapes
)
def test_window_throughput_is_positive_whenever_a_gpu_was_busy(users, warmup, span, seed) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    spec = [
        [(int(rng.integers(16, 1500)), int(rng.integers(1, 200)), float(rng.uniform(0, 2)))]
        for _ in range(users)
    ]
    end = warmup + span
    rec = engine(sessions(spec), users=users, duration_s=end, num_blocks=200).run()
    s = summarize(rec, 8, warmup, end)
    if busy_inside(rec, warmup, s.window_end_s):
        assert s.throughput_tok_per_s_per_gpu > 0
    if any(s_.decodes for s_ in rec.steps if warmup <= s_.start_s < s.window_end_s - 1.0):
        assert s.output_tok_per_s_per_gpu > 0


@settings(max_examples=40, deadline=None)
@given(workloads, st.integers(1, 4), st.floats(0.05, 1.0), st.floats(0.0, 1.0), st.booleans())
def test_a_run_cut_short_counts_what_a_longer_run_did_before_the_cut(  # type: ignore[no-untyped-def]
    spec, users, cut_share, warmup_share, disaggregated
) -> None:
    """Runs stopped at T and at a later T2 agree on [w0, T]: tokens of a fast-forwarded run
    cut by the stop, prompt chunks in progress (pro rata) and the gaps of requests still
    running are counted exactly as the longer run's finished steps count them."""
    full = engine(sessions(spec), users=users, disaggregated=disaggregated).run()
    last = max((r.finish_s or 0.0 for r in full.requests), default=0.0)
    cut = max(cut_share * last, 1e-3)
    w0 = warmup_share * cut * 0.9
    short = engine(sessions(spec), users=users, duration_s=cut, disaggregated=disaggregated)
    long_ = engine(
        sessions(spec), users=users, duration_s=cut * 1.5 + 1, disaggregated=disaggregated
    )
    pools = Pools(1, 1, 8, 400) if disaggregated else None
    a = summarize(short.run(), 8, w0, cut, pools)
    b = summarize(long_.run(), 8, w0, cut, pools)
    assert a.window_end_s == b.window_end_s
    for name in (
        "prompt_tokens_in_window", "output_tokens_in_window", "throughput_tok_per_s_per_gpu",
        "interactivity_tok_per_s_p50", "interactivity_tok_per_s_p90", "ttft_s_p50",
        "prefix_hit_rate", "requests_finished",
    ):  # fmt: skip
        assert getattr(a, name) == approx(getattr(b, name)), name


@settings(max_examples=40, deadline=None)
@given(workloads, st.integers(1, 4), st.lists(st.floats(0.01, 0.99), min_size=1, max_size=4))
def test_tokens_of_adjacent_windows_add_up(spec, users, cuts) -> None:  # type: ignore[no-untyped-def]
    rec = engine(sessions(spec), users=users).run()
    end = summarize(rec, 8).window_end_s
    edges = [0.0, *sorted(c * end for c in cuts), end]
    whole = summarize(rec, 8, 0.0, end)
    parts_ = [summarize(rec, 8, lo, hi) for lo, hi in itertools.pairwise(edges)]
    for name in ("prompt_tokens_in_window", "output_tokens_in_window"):
        # a token exactly on a cut counts on both sides: allow one per request and cut
        slack = len(rec.requests) * len(cuts) + 1e-6
        assert sum(getattr(p, name) for p in parts_) == pytest.approx(
            getattr(whole, name), abs=slack
        )


# ----------------------------------------------------------------------- saturation


def test_a_heavily_overloaded_closed_loop_is_saturated_and_still_has_throughput() -> None:
    # 2,000 users on one small replica (4 sequences, a 200-block cache): the queue never drains
    rec = engine(many(2000), users=2000, duration_s=20.0, num_blocks=200).run()
    s = summarize(rec, 8, 5.0, 20.0)
    assert s.saturated
    assert s.saturation_reason is not None
    assert s.saturation_reason.startswith("queue never drains")
    assert s.throughput_tok_per_s_per_gpu > 0
    assert s.output_tok_per_s_per_gpu > 0
    assert s.interactivity_tok_per_s_p90 is not None
    assert s.requests_waiting_at_end > 1000
    assert 0 < s.requests_in_flight_at_end <= 4
    assert s.window_end_reason == "duration"


def test_a_saturated_run_meets_no_slo() -> None:
    # 1,000 users: the queue never drains, and the few served got their first token in a few
    # seconds, so a loose TTFT target read "met" on a run that serves almost nothing
    from simulator.simulation import slo_met
    from simulator.specs import Scenario

    rec = engine(many(1000), users=1000, duration_s=20.0, num_blocks=200).run()
    s = summarize(rec, 8, 0.0, 20.0)  # no warm-up: the first wave's TTFTs are in the window
    assert s.saturated
    assert s.ttft_s_p90 is not None
    scenario = Scenario.model_validate({
        "name": "s", "model": "llama-3.1-8b", "device": "h100",
        "workload": {"kind": "random", "input_tokens": 200, "output_tokens": 80,
                     "num_requests": 1000, "concurrency": 1000},
        "slo": {"ttft_s_p90": 10 * s.ttft_s_p90},
    })  # fmt: skip
    assert scenario.slo.met(s.interactivity_tok_per_s_p90, s.ttft_s_p90)  # the bare rule
    assert slo_met(scenario, s) is False
    steady = s.model_copy(update={"saturated": False, "saturation_reason": None})
    assert slo_met(scenario, steady) is True


def test_an_open_loop_beyond_capacity_has_a_growing_queue() -> None:
    # a request every 50 ms, each needing ~10 decode steps per slot turn: arrivals outrun it
    turns = [
        Session(f"o{i}", 0.05 * i, iter([Turn(200, 80, chain(content_keys(
            7, 10_000 * (i + 1) + np.arange(12, dtype=np.uint64))), BLOCK, 0.0, 0.0)]))
        for i in range(2000)
    ]  # fmt: skip
    replay = Replay(iter(turns), open_loop(1.0))
    rec = Engine(replay, [parts(num_blocks=400, max_seqs=4)], duration_s=40.0).run()
    s = summarize(rec, 8, 5.0, 40.0)
    assert s.saturated
    assert s.saturation_reason is not None
    assert s.saturation_reason.startswith("queue grows")
    assert s.throughput_tok_per_s_per_gpu > 0


@pytest.mark.parametrize("users", [1, 2, 4])
def test_a_lightly_loaded_run_is_not_saturated(users: int) -> None:
    # at most max_num_seqs users, each thinking a second between turns: nobody waits for long
    spec = [[(200, 40, 1.0)] * 20 for _ in range(users)]
    rec = engine(sessions(spec), users=users, duration_s=30.0, num_blocks=4000).run()
    s = summarize(rec, 8, 5.0, 30.0)
    assert not s.saturated
    assert s.saturation_reason is None
    assert s.requests_waiting_at_end == 0


@settings(max_examples=30, deadline=None)
@given(workloads, st.integers(1, 4), st.sampled_from([0, 2]), st.integers(0, 5))
def test_the_same_seed_gives_the_same_summary(spec, users, k, seed) -> None:  # type: ignore[no-untyped-def]
    def once() -> Summary:
        rec = engine(sessions(spec), users=users, duration_s=3.0, k=k, seed=seed).run()
        return summarize(rec, 8, 0.5, 3.0)

    assert once() == once()


# ----------------------------------------------------------------------- window end


def test_a_workload_that_ends_early_is_not_averaged_over_the_idle_rest() -> None:
    spec = [[(300, 50, 0.5), (100, 50, 0.5)], [(500, 30, 0.0)]]
    rec = engine(sessions(spec), users=2, duration_s=600.0).run()
    last = max(r.finish_s or 0.0 for r in rec.requests)
    assert last < 10.0
    s = summarize(rec, 8, 0.0, 600.0)
    assert s.window_end_reason == "workload_ended"
    assert s.window_end_s == last
    assert s.window_s == pytest.approx(last)
    work = sum(r.prompt_tokens + r.generated for r in rec.requests)
    assert s.throughput_tok_per_s_per_gpu == pytest.approx(work / last / 8, rel=1e-9)
    # the same work whatever the duration: no dilution by the idle rest
    rec2 = engine(sessions(spec), users=2, duration_s=60.0).run()
    assert summarize(rec2, 8, 0.0, 60.0).throughput_tok_per_s_per_gpu == pytest.approx(
        s.throughput_tok_per_s_per_gpu, rel=1e-12
    )
    assert old_formula(rec, 8, 0.0, 600.0)["throughput_tok_per_s_per_gpu"] < (
        s.throughput_tok_per_s_per_gpu / 50
    )


def test_a_run_that_is_still_busy_ends_at_its_duration() -> None:
    rec = engine(many(50), users=50, duration_s=5.0).run()
    s = summarize(rec, 8, 1.0, 5.0)
    assert s.window_end_reason == "duration"
    assert s.window_end_s == 5.0
    assert s.window_s == 4.0


# ----------------------------------------------------------------------- interactivity


@pytest.mark.parametrize("fast_forward", [True, False])
def test_interactivity_includes_the_gaps_of_requests_still_running(fast_forward: bool) -> None:
    with pytest.MonkeyPatch.context() as mp:
        if not fast_forward:
            mp.setattr(replica_mod, "MAX_FAST_FORWARD", 1)
        # one request decoding 20,000 tokens (~10 ms a step), cut after 5 s: nothing finishes
        rec = engine(
            sessions([[(64, 20_000, 0.0)]]), users=1, duration_s=5.0, num_blocks=2000
        ).run()
    s = summarize(rec, 8, 1.0, 5.0)
    assert s.requests_finished == 0
    assert s.requests_in_flight_at_end == 1
    assert old_formula(rec, 8, 1.0, 5.0)["interactivity_tok_per_s_p90"] is None
    assert s.interactivity_tok_per_s_p90 is not None
    decode_s = [x.step_s / x.steps for x in rec.steps if x.decodes]
    assert 1.0 / s.interactivity_tok_per_s_p90 == pytest.approx(np.median(decode_s), rel=0.01)
    # every token that reached the client in [1, 5] s: the window over the step time
    assert s.output_tokens_in_window == pytest.approx(4.0 / np.median(decode_s), rel=0.01)
    (r,) = rec.unfinished
    assert r.first_token_s is not None
    assert s.ttft_s_p50 is None  # it arrived before the warm-up ended


def test_ttft_counts_requests_whose_first_token_lands_in_the_window() -> None:
    spec = [[(64, 20_000, 0.0)], [(64, 20_000, 0.0)]]
    rec = engine(sessions(spec), users=2, duration_s=3.0, num_blocks=4000).run()
    s = summarize(rec, 8, 0.0, 3.0)
    assert s.requests_finished == 0
    assert s.ttft_s_p50 is not None
    assert old_formula(rec, 8, 0.0, 3.0)["ttft_s_p50"] is None


# ----------------------------------------------------------------------- regression


def test_many_users_and_a_warm_up_no_longer_report_zero_throughput() -> None:
    """Pinned regression (the issue "Trustworthy answers"): 10,000 users on 8x H200 with a
    20 s warm-up reported 0 tok/s/GPU and 0 tokens/$ while every GPU was busy: no request
    that arrived after the warm-up finished inside the window. Scaled down: 1,000 users on
    one 4-sequence replica, a 2 s warm-up, 8 s."""
    rec = engine(many(1000), users=1000, duration_s=8.0, num_blocks=200).run()
    old = old_formula(rec, 8, 2.0, 8.0)
    assert old["throughput_tok_per_s_per_gpu"] == 0.0  # the bug, reproduced
    s = summarize(rec, 8, 2.0, 8.0)
    assert s.throughput_tok_per_s_per_gpu > 0
    # the replica served the whole window: about what it does in a run that is not saturated
    light = summarize(engine(many(400), users=4, duration_s=8.0).run(), 8, 2.0, 8.0)
    assert s.output_tok_per_s_per_gpu == pytest.approx(light.output_tok_per_s_per_gpu, rel=0.3)
    assert s.saturated
    assert not light.saturated
    assert s.requests_finished == 0


def test_disaggregated_pool_figures_use_the_window() -> None:
    rec = engine(many(200, prompt=400, output=40), users=200, duration_s=6.0,
                 disaggregated=True).run()  # fmt: skip
    s = summarize(rec, 16, 1.0, 6.0, Pools(1, 1, 8, 400))
    assert s.prefill_input_tok_per_s_per_gpu == pytest.approx(
        s.prompt_tokens_in_window / s.window_s / 8
    )
    assert s.decode_output_tok_per_s_per_gpu == pytest.approx(
        s.output_tokens_in_window / s.window_s / 8
    )
    assert (s.prefill_input_tok_per_s_per_gpu or 0.0) > 0
    assert (s.decode_output_tok_per_s_per_gpu or 0.0) > 0
    assert s.throughput_tok_per_s_per_gpu == pytest.approx(
        (s.prompt_tokens_in_window + s.output_tokens_in_window) / s.window_s / 16
    )


def test_waiting_and_in_flight_requests_at_the_end() -> None:
    rec = engine(many(30), users=30, duration_s=2.0).run()
    s = summarize(rec, 8, 0.0, 2.0)
    live = rec.unfinished
    assert s.requests_waiting_at_end == sum(1 for r in live if r.status is Status.WAITING)
    assert s.requests_in_flight_at_end + s.requests_waiting_at_end == len(live)
    assert s.requests_in_flight_at_end <= 4
    assert all(isinstance(r, ReqState) for r in live)


def test_hit_rate_quarters_show_a_cache_that_switches_state_inside_the_window() -> None:
    """Each quarter's hit rate is the window formula on that quarter; quarters of 90 % and
    0 % hits mark the run unsteady, quarters a few points apart do not."""
    from simulator.records import HitRecord, StepRecord
    from simulator.window import hit_rate_quarters, unsteady

    def recorder(hits: list[float]) -> Recorder:
        rec = Recorder()
        for k, share in enumerate(hits):  # one admission and one step per 100 s quarter
            t = 100.0 * k + 10.0
            rec.on_hit(HitRecord(0, t, int(1000 * share), 0, 0))
            rec.on_step(
                StepRecord(0, t, 1.0, 1, 0, 1000, 0, (), prompt_computed=1000 - int(1000 * share))
            )
        return rec

    switching = recorder([0.9, 0.9, 0.0, 0.0])
    quarters = hit_rate_quarters(switching, 0.0, 400.0)
    assert quarters == pytest.approx((0.9, 0.9, 0.0, 0.0))
    assert unsteady(quarters)
    steady = hit_rate_quarters(recorder([0.9, 0.86, 0.93, 0.9]), 0.0, 400.0)
    assert not unsteady(steady)
    # the four quarters' tokens are the window's: the same rate over the whole window
    whole = summarize(switching, 8, 0.0, 400.0).prefix_hit_rate
    assert whole == pytest.approx(0.45)
    assert summarize(switching, 8, 0.0, 400.0).prefix_hit_rate_quarters == quarters
    assert hit_rate_quarters(Recorder(), 0.0, 400.0) == (None, None, None, None)
    assert not unsteady((None, 0.9, None, None))
