"""The prefix-hit rate as the KV pool shrinks under a steady agentic load (issue 19, item 5).

Kimi K3 on 8x MI355X TP8 (the example scenario) at 16 closed-loop users, one hour, seed 0,
with the GPU pool cut from 60 to 22 GiB/GPU. Under vLLM's rules (LRU free queue, tail-first
free, a hybrid hit needs a retained KDA checkpoint) the hit rate must fall as the pool shrinks,
and it must fall over the sweep, not in one step: a cliff like the user-count sweep's
(84 % -> 15 % between 32 and 40 users, docs/kv-pressure.md) would fail it. What the window
average hides near the edge (quarters that switch between states) is documented there.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import yaml

from simulator import simulation
from simulator.specs import Scenario
from simulator.specs.overrides import apply_overrides

EXAMPLE = Path(__file__).resolve().parents[2] / "simulator/examples/kimi-k3-mi355x-agentic.yaml"
POOLS_GIB = (60.0, 45.0, 35.0, 28.0, 22.0)  # largest first


def hit_rates() -> list[float]:
    raw = yaml.safe_load(EXAMPLE.read_text())
    common = ["workload.concurrency=16", "duration_s=3600", "warmup_s=600", "seed=0"]
    out = []
    for gib in POOLS_GIB:
        sets = [*common, f"serving.kv_cache_memory_bytes={gib * 2**30}"]
        scenario = Scenario.model_validate(apply_overrides(raw, sets, "test"))
        out.append(simulation.simulate(scenario, "kv-sweep").summary.prefix_hit_rate)
    return out


def test_hit_rate_falls_monotonically_and_gradually_as_the_pool_shrinks() -> None:
    hits = hit_rates()
    # the sweep spans the regime: no pressure at its top, heavy pressure at its bottom
    assert hits[0] > 0.9, hits
    assert hits[-1] < 0.5, hits
    # monotone: a smaller pool never hits more (one point of slack: the runs share the seed,
    # but a smaller pool changes every later step's timing)
    for bigger, smaller in itertools.pairwise(hits):
        assert smaller <= bigger + 0.01, hits
    # gradual: no neighbouring pair of pool sizes carries more than half of the decline
    drops = [bigger - smaller for bigger, smaller in itertools.pairwise(hits)]
    assert max(drops) <= 0.5 * (hits[0] - hits[-1]), hits
