"""Async scheduling admits a request one step late: the batch of step n + 1 is formed when
step n starts (vLLM ``AsyncScheduler``), so a request that arrives while step n runs is first
scheduled in step n + 2. An idle replica schedules an arrival at once."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from simulator import catalog
from simulator.cache import CacheConfig, KVCacheManager
from simulator.cost.latency import LatencyModels
from simulator.cost.step import StepCostModel
from simulator.engine import Engine
from simulator.replica import ReplicaParts
from simulator.scheduler import Scheduler
from simulator.specs import ServingConfig
from simulator.workload.replay import Replay, open_loop
from simulator.workload.request import Session, Turn, chain, content_keys

BLOCK = 16
# no API-server prompt work: these tests time admission timing alone (that work: test_frontend.py)
_H100 = catalog.hardware_profile("h100")
H100 = _H100.model_copy(
    update={"roofline": _H100.roofline.model_copy(update={"frontend_s_per_prompt_token": 0.0})}
)
LLAMA = catalog.model_card("llama-3.3-70b")


def parts() -> ReplicaParts:
    cache = KVCacheManager(CacheConfig(block_tokens=BLOCK, num_blocks=2000))
    sched = Scheduler(
        cache, max_num_batched_tokens=512, max_num_seqs=8, block_tokens=BLOCK, hybrid=False,
        max_request_tokens=1998 * BLOCK,
    )  # fmt: skip
    cost = StepCostModel(LLAMA, H100, ServingConfig(tp=8), LatencyModels(H100))
    return ReplicaParts(
        scheduler=sched, cost=cost, block_tokens=BLOCK, load_bytes=lambda hit: 0.0,
        host_bw_bytes_per_s=64e9, host_latency_s=1e-5,
        blocks_used=lambda: cache.usage.used_blocks,
    )  # fmt: skip


def session(key: int, start_s: float, prompt: int, output: int) -> Session:
    keys = np.arange(prompt // BLOCK, dtype=np.uint64) + np.uint64(10_000 * key)
    turn = Turn(prompt, output, chain(content_keys(7, keys)), BLOCK, 0.0, 0.0)
    return Session(key=f"s{key}", start_s=start_s, items=iter([turn]))


def run(starts: list[float]):  # type: ignore[no-untyped-def]
    def gen() -> Iterator[Session]:
        # the first user decodes for a while; the others arrive while it runs
        yield session(1, starts[0], 64, 400)
        for i, t in enumerate(starts[1:], start=2):
            yield session(i, t, 64, 4)

    engine = Engine(Replay(gen(), open_loop()), [parts()], seed=0)
    return engine.run()


def test_an_arrival_during_a_step_waits_for_the_step_after_next() -> None:
    rec = run([0.0, 0.0305])
    steps = sorted(rec.steps, key=lambda s: s.start_s)
    late = next(r for r in rec.requests if r.request.prompt_tokens == 64 and r.arrival_s > 0)
    # the step in flight when it arrived, and the one formed at that step's start
    during = next(s for s in steps if s.start_s <= late.arrival_s < s.start_s + s.step_s)
    after = next(s for s in steps if s.start_s >= during.start_s + during.step_s - 1e-12)
    first_prefill = next(s for s in steps if s.start_s > late.arrival_s and s.prefill_tokens)
    assert first_prefill.start_s >= after.start_s + after.step_s - 1e-9
    assert late.first_token_s is not None
    assert late.first_token_s >= after.start_s + after.step_s


def test_an_idle_replica_schedules_an_arrival_at_once() -> None:
    rec = run([5.0])
    (only,) = rec.requests
    first = min(rec.steps, key=lambda s: s.start_s)
    assert first.start_s == 5.0
    assert only.first_token_s is not None
    assert only.first_token_s <= 5.0 + first.step_s + H100.roofline.output_delay_s + 1e-9
