"""The API server's prompt work (``roofline.frontend_s_per_prompt_token``): a request reaches
the engine ``prompt tokens x that`` after it is sent, after the work its API server already
has queued; one API server per engine replica; a server busy through the window is reported
as saturation, not hidden.
"""

from __future__ import annotations

import pytest

from simulator.cost.latency import LatencyModels
from simulator.cost.step import StepCostModel
from simulator.engine import Engine
from simulator.metrics import summarize
from simulator.planner.deploy import serve_flags
from simulator.records import Recorder
from simulator.specs import ServingConfig
from simulator.workload.replay import Replay, closed_loop, open_loop
from tests.simulator.test_token_timing import H100, LLAMA, parts, sessions

PER_TOKEN_S = 4e-6


def cost_model(per_token_s: float, serving: ServingConfig) -> StepCostModel:
    roofline = H100.roofline.model_copy(update={"frontend_s_per_prompt_token": per_token_s})
    device = H100.model_copy(update={"roofline": roofline})
    return StepCostModel(LLAMA, device, serving, LatencyModels(device))


def run(
    spec: list[list[tuple[int, int, float]]],
    per_token_s: float,
    users: int = 1,
    replicas: int = 1,
    open_arrivals: bool = False,
    api_servers: int | None = None,
) -> Recorder:
    serving = ServingConfig(tp=8, dp=replicas, api_server_count=api_servers)
    cost = cost_model(per_token_s, serving)
    p = [parts(cost, num_blocks=4000, budget=8192, max_seqs=64) for _ in range(replicas)]
    loop = open_loop() if open_arrivals else closed_loop(users)
    engine = Engine(Replay(sessions(spec), loop), p, router="round_robin", seed=0)
    return engine.run()


def ttft(rec: Recorder) -> list[float]:
    return [
        r.first_token_s - r.arrival_s
        for r in sorted(rec.requests, key=lambda r: r.req_id)
        if r.first_token_s is not None
    ]


@pytest.mark.parametrize("prompt", [1024, 8192, 30_000])
def test_a_lone_request_waits_its_prompts_work_before_the_engine(prompt: int) -> None:
    base = run([[(prompt, 4, 0.0)]], 0.0)
    slow = run([[(prompt, 4, 0.0)]], PER_TOKEN_S)
    (b,), (s,) = ttft(base), ttft(slow)
    assert s - b == pytest.approx(prompt * PER_TOKEN_S, rel=1e-9, abs=1e-12)
    # the step the engine ran is the same step, only later
    assert slow.steps[0].start_s == pytest.approx(prompt * PER_TOKEN_S, rel=1e-12)
    assert slow.steps[0].step_s == base.steps[0].step_s


def test_one_api_server_serves_simultaneous_prompts_in_arrival_order() -> None:
    # three sessions sent at once: the second waits for the first's work, the third for both
    prompts = [4000, 2000, 6000]
    rec = run([[(p, 2, 0.0)] for p in prompts], PER_TOKEN_S, users=3)
    ends = [0.0, 4000 * PER_TOKEN_S, 6000 * PER_TOKEN_S, 12000 * PER_TOKEN_S]
    spans = sorted(rec.frontend_spans())
    assert [a for a, _ in spans] == pytest.approx(ends[:-1], rel=1e-12)
    assert [b for _, b in spans] == pytest.approx(ends[1:], rel=1e-12)
    # and each request reached the engine when its work was done
    enqueued = sorted(r.enqueued_s for r in rec.requests)
    assert enqueued == pytest.approx(ends[1:], rel=1e-12)
    assert rec.frontends == 1


def test_each_replica_brings_its_own_api_server() -> None:
    # two replicas, two API servers: two simultaneous prompts are tokenized side by side
    rec = run([[(4000, 2, 0.0)], [(4000, 2, 0.0)]], PER_TOKEN_S, users=2, replicas=2)
    assert rec.frontends == 2
    assert [start for start, _ in rec.frontend_spans()] == [0.0, 0.0]
    one = run([[(4000, 2, 0.0)], [(4000, 2, 0.0)]], PER_TOKEN_S, users=2, replicas=1)
    assert max(end for _, end in one.frontend_spans()) == pytest.approx(8000 * PER_TOKEN_S)


@pytest.mark.parametrize(("replicas", "api_servers", "expected"), [(1, 3, 3), (2, 1, 1), (2, 4, 4)])
def test_api_server_count_sets_how_many_tokenize_side_by_side(
    replicas: int, api_servers: int, expected: int
) -> None:
    spec = [[(4000, 2, 0.0)] for _ in range(4)]
    rec = run(spec, PER_TOKEN_S, users=4, replicas=replicas, api_servers=api_servers)
    assert rec.frontends == expected
    starts = sorted(start for start, _ in rec.frontend_spans())
    # four prompts at once: `expected` of them start at 0, the rest wait for a free server
    assert starts.count(0.0) == min(expected, 4)


def test_the_deploy_line_carries_the_api_server_count() -> None:
    flags = serve_flags("x/y", ServingConfig(tp=8, api_server_count=4), "h100")
    assert flags[flags.index("--api-server-count") + 1] == "4"
    assert "--api-server-count" not in serve_flags("x/y", ServingConfig(tp=8), "h100")


def test_no_prompt_work_leaves_the_run_as_it_was() -> None:
    spec = [[(3000, 16, 0.5), (500, 16, 0.0)], [(7000, 8, 0.0)]]
    rec = run(spec, 0.0, users=2)
    assert rec.frontend_spans() == []
    again = run(spec, 0.0, users=2)
    assert ttft(rec) == ttft(again)


def test_an_api_server_busy_through_the_window_is_saturation() -> None:
    # 40 prompts of 20k tokens sent at once, at 0.1 ms a token: 2 s of prompt work each,
    # longer than its prefill; the engine's queue stays short, the API server is the bottleneck
    slow_s = 1e-4
    spec = [[(20_000, 2, 0.0)] for _ in range(40)]
    s = summarize(run(spec, slow_s, open_arrivals=True), num_gpus=8)
    assert s.saturated
    assert s.saturation_reason is not None
    assert "API server busy" in s.saturation_reason
    # at the default-sized cost the same burst is the engine's queue, as before
    fast = summarize(run(spec, PER_TOKEN_S, open_arrivals=True), num_gpus=8)
    assert fast.saturation_reason is not None
    assert "API server" not in fast.saturation_reason
    light = summarize(run(spec[:1], slow_s, open_arrivals=True), num_gpus=8)
    assert not light.saturated
