"""Lockstep decode accounting (``simulator.lockstep``) changes no answer.

Each case is simulated with the cohort and with the per-request path (``lockstep.ENABLED``
off) and must give the same summary and, request by request, the same token times:
preemptions of cohort members, prefix caching on and off, multi-turn sessions (renamed
output blocks), open-loop arrivals that cut fast-forwarded runs, a run that ends mid-step, DP
replicas, MLA, a small ``max_num_seqs``, decodes whose context reaches a sliding window or a
sparse span, and runs without lazy output ids (recurrent state, a CPU tier), whose members
commit where their tokens fill a block."""

from __future__ import annotations

import json
from array import array
from typing import Any

import pytest

from simulator import lockstep
from simulator.lockstep import NO_STEP_S, Lockstep
from simulator.scheduler import Scheduler
from simulator.simulation import SimResult, simulate
from simulator.specs import Scenario
from simulator.states import ReqState
from simulator.workload.request import EMPTY_IDS, Request

RANDOM = {"kind": "random", "input_tokens": 3000, "output_tokens": 400, "num_requests": 120,
          "concurrency": 48}  # fmt: skip
POISSON = {"kind": "random", "input_tokens": 2500, "output_tokens": 300, "num_requests": 400,
           "request_rate_per_s": 2.0}  # fmt: skip
CHAT = {"kind": "chat", "sessions": 50, "concurrency": 20}
LONG_OUT = {"kind": "random", "input_tokens": 2000, "output_tokens": 1500, "num_requests": 100,
            "concurrency": 64}  # fmt: skip
SHORT = {
    "kind": "random",
    "input_tokens": 110,
    "output_tokens": 300,
    "num_requests": 120,
    "concurrency": 40,
}  # fmt: skip  (prompts inside gpt-oss's 128-token window)
NEAR_SPAN = {
    "kind": "random",
    "input_tokens": 1950,
    "output_tokens": 300,
    "num_requests": 60,
    "concurrency": 24,
}  # fmt: skip  (prompts just inside GLM-5's 2,048-token span)
CASES: dict[str, tuple[str, str, dict[str, Any], dict[str, Any], float]] = {
    # name: model, device, workload, serving, duration_s
    "preemptions": ("llama-3.1-8b", "h100", RANDOM, {"kv_cache_memory_bytes": 3.0e9}, 300.0),
    "no-prefix-caching": ("llama-3.1-8b", "h100", RANDOM,
                          {"kv_cache_memory_bytes": 3.0e9, "enable_prefix_caching": False}, 300.0),
    "multi-turn": ("llama-3.1-8b", "h100", CHAT, {"kv_cache_memory_bytes": 4.0e9}, 300.0),
    "poisson-cut-mid-run": ("llama-3.3-70b", "h200", POISSON, {"tp": 4}, 40.0),
    "dp2": ("qwen3-32b", "h100", RANDOM, {"tp": 2, "dp": 2}, 300.0),
    "mla": ("kimi-k2.5", "h200", RANDOM, {"tp": 8}, 300.0),
    "few-seqs": ("llama-3.1-8b", "h100", RANDOM, {"max_num_seqs": 12}, 300.0),
    "sliding-window": ("gpt-oss-120b", "b200", SHORT, {"tp": 1}, 300.0),
    "sparse-span": ("glm-5-fp8", "h200", NEAR_SPAN, {"tp": 8}, 300.0),
    # no lazy ids: commits at block edges (recurrent state; a CPU tier)
    "recurrent-state": ("nemotron-h-56b", "h100", CHAT, {"tp": 2}, 300.0),
    "recurrent-preemptions": ("nemotron-3-nano-30b-a3b", "h100", LONG_OUT,
                              {"kv_cache_memory_bytes": 6.0e8}, 300.0),
    "cpu-tier": ("llama-3.1-8b", "h100", CHAT,
                 {"kv_cache_memory_bytes": 2.0e9, "cpu_offload_bytes": 2.0e10}, 300.0),
    "kimi-k3-dcp": ("kimi-k3", "b300", CHAT, {"tp": 8, "dcp": 8}, 300.0),
    "1p1d-send-back": ("llama-3.1-8b", "h100", CHAT, {}, 300.0),
    "1p2d-preemptions": ("llama-3.1-8b", "h100", RANDOM, {"kv_cache_memory_bytes": 3.0e9}, 300.0),
}  # fmt: skip
# disaggregated cases: the decode pool's requests run in lockstep; the proxy reads their state
# only when they finish (the pin's tokens, the send-back)
DISAGG = {
    "1p1d-send-back": {"prefill_replicas": 1, "decode_replicas": 1, "send_back": True},
    "1p2d-preemptions": {"prefill_replicas": 1, "decode_replicas": 2},
}
CROSSES = {"sliding-window": 0, "sparse-span": 1}  # cases whose decodes reach a cap


def _scenario(case: str) -> Scenario:
    model, device, workload, serving, duration_s = CASES[case]
    return Scenario.model_validate(
        {
            "name": f"lockstep-{case}",
            "model": model,
            "device": device,
            "serving": serving,
            "workload": workload,
            "router": "least_loaded",
            "duration_s": duration_s,
            "warmup_s": 0.0,
            "seed": 5,
        }
        | ({"disaggregation": DISAGG[case]} if case in DISAGG else {})
    )


def _tokens(result: SimResult) -> list[tuple[Any, ...]]:
    rec = result.recorder
    return [
        (r.req_id, r.computed, r.generated, r.first_token_s, r.last_token_s, r.finish_s,
         r.preemptions, r.itl_runs.tobytes(), r.itl_end_s.tobytes())
        for r in sorted(rec.requests + rec.unfinished, key=lambda r: r.req_id)
    ]  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_lockstep_gives_the_per_request_paths_answers(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    joined: list[int] = []
    join = Lockstep.join

    def spy(self: Lockstep, req: ReqState) -> None:
        joined.append(req.req_id)
        join(self, req)

    below: list[int] = []
    capped = Lockstep.capped_context

    def count(self: Lockstep, j: int) -> float:
        if j == CROSSES.get(case):
            below.append(self.below[j])
        return capped(self, j)

    monkeypatch.setattr(Lockstep, "join", spy)
    monkeypatch.setattr(Lockstep, "capped_context", count)
    fast = simulate(_scenario(case))
    if case in CROSSES:  # members joined below the cap and reached it while decoding
        assert max(below) > 0
        assert below[-1] < max(below)
    assert joined, "the case runs decodes in lockstep"
    monkeypatch.setattr(lockstep, "ENABLED", False)
    joined.clear()
    slow = simulate(_scenario(case))
    assert not joined
    a = json.loads(fast.summary.model_dump_json(exclude={"wall_s"}))
    assert a == json.loads(slow.summary.model_dump_json(exclude={"wall_s"}))
    assert _tokens(fast) == _tokens(slow)
    assert a["requests_finished"] > 0
    if case in ("preemptions", "recurrent-preemptions", "1p2d-preemptions"):
        assert a["preemptions"] > 0, "the cache must be small enough to preempt"
    if case == "1p1d-send-back":
        pins = fast.recorder.pins
        assert pins, "the case pins finished turns for send-back"
        assert pins == slow.recorder.pins
        assert fast.recorder.transfers == slow.recorder.transfers
    if case == "poisson-cut-mid-run":
        assert fast.recorder.unfinished, "the run ends with requests in flight"
        assert any(o.steps > 1 for o in fast.recorder.open_steps), "inside a fast-forward"


def _member(req_id: int, output_tokens: int, last_token_s: float) -> ReqState:
    request = Request(req_id, req_id, 0, 100, output_tokens, EMPTY_IDS, 16, arrival_s=0.0)
    req = ReqState(request, (), arrival_s=0.0)
    req.computed, req.generated, req.kv_cap = 100, 1, 112
    req.first_token_s = req.last_token_s = last_token_s
    req.run_seq = req_id
    return req


def test_a_members_runs_are_the_per_step_appends() -> None:
    ls = Lockstep()
    a = _member(1, 10, 0.5)
    ls.join(a)
    ls.record(0.75, NO_STEP_S, 1)
    b = _member(2, 10, 0.7)
    ls.join(b)
    ls.record(1.0, NO_STEP_S, 1)
    ls.record(1.6, 0.2, 3)  # a fast-forwarded run of three steps
    assert ls.context_tokens() == (100 + 5) + (100 + 4)
    assert ls.min_remaining() == 10 - 1 - 5  # a: 5 of its 9 more tokens made
    ls.sync(a)
    ls.sync(b)
    assert (a.computed, a.generated, a.last_token_s) == (105, 6, 1.6)
    assert a.itl_runs == array("d", [0.75 - 0.5, 1, 1.0 - 0.75, 1, 0.2, 3])
    assert a.itl_end_s == array("d", [0.75, 1.0, 1.6])
    assert b.itl_runs == array("d", [1.0 - 0.7, 1, 0.2, 3])
    ls.record(1.8, NO_STEP_S, 1)
    ls.leave(a)  # a sync after a sync adds only what came since
    assert a.itl_runs[-2:] == array("d", [1.8 - 1.6, 1])
    assert (ls.size, ls.context_tokens()) == (1, 100 + 5)
    assert a.ls_fin == a.ls_grow == -1


def test_members_take_blocks_and_finish_when_due_in_running_order() -> None:
    ls = Lockstep()
    members = [_member(i, 3 + i, 0.0) for i in range(3)]
    for m in members:
        m.kv_cap = 103 - m.req_id  # blocks full after 3, 2, 1 more tokens
        ls.join(m)
    due: list[list[ReqState]] = []
    for t in (1.0, 2.0):
        ls.record(t, NO_STEP_S, 1)
        due.append([])
        while (g := ls.next_grow()) is not None:
            due[-1].append(g)
            g.kv_cap += 16  # the scheduler's grow took a block
            ls.regrown(g)
    assert due == [[members[2]], [members[1]]]
    assert ls.due() == [members[0]]  # 1 output token at join + 2 = its 3
    assert ls.ended(members[0])
    assert ls.due() == []
    ls.leave(members[0])
    taken: list[tuple[int, int]] = []

    def grow(req_id: int, tokens: int) -> int:
        taken.append((req_id, tokens))
        return tokens + 16 if len(taken) > 1 else 0  # the first call does not fit

    members[1].kv_cap = 103  # full after one more token
    ls.regrown(members[1])
    assert ls.reserve(4, grow) == 2  # halved once, as Replica._fast_forward_steps does
    assert taken == [(1, 106), (1, 104)]
    assert ls.min_remaining() == 4 - 1 - 2


def test_without_lazy_ids_members_are_due_where_their_tokens_fill_a_block() -> None:
    ls = Lockstep(edge_tokens=16)
    a, b = _member(1, 100, 0.0), _member(2, 100, 0.0)
    b.computed = 110  # edges at 112 (a), 112 (b): after 12 and 2 more tokens
    ls.join(a)
    ls.join(b)
    due: dict[int, list[int]] = {}
    for t in range(1, 31):
        ls.record(float(t), NO_STEP_S, 1)
        if members := ls.due():
            due[t] = [m.req_id for m in members]
            for m in members:
                ls.next_edge(m)  # as Scheduler.commit_cohort files it again
    assert due == {2: [2], 12: [1], 18: [2], 28: [1]}
    ls.record(40.0, 0.5, 6)  # a fast-forwarded run crossing b's edge at 144 (tick 34)
    assert [m.req_id for m in ls.due()] == [2]


@pytest.mark.parametrize(
    ("change", "applies"),
    [({}, True), ({"k": 2}, False), ({"lazy_ids": False}, True),
     ({"token_budget": 64}, False), ({"window": 4096.0}, True), ({"span": 2048.0}, True),
     ({"window": 100.5}, False)],
)  # fmt: skip
def test_lockstep_applies_only_where_nothing_reads_a_decode_while_it_runs(
    change: dict[str, Any], applies: bool
) -> None:
    sched = Scheduler(None, 8192, 128, 16, False, 1 << 20)  # type: ignore[arg-type]
    sched.lazy_ids = change.get("lazy_ids", True)
    sched.k = change.get("k", 0)
    sched.token_budget = change.get("token_budget", 8192)
    window, span = change.get("window", float("inf")), change.get("span", float("inf"))
    assert lockstep.applies(sched, window, span) is applies
