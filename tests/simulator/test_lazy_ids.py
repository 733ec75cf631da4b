"""Lazy output ids (``simulator.output_ids.lazy_output_ids``) change no answer: the same
scenario with ids made eagerly as blocks fill and lazily at the free gives the same summary,
on a cache small enough that requests are preempted and hit their own blocks again."""

from __future__ import annotations

import json

import pytest

from simulator import simulation
from simulator.simulation import simulate
from simulator.specs import Scenario


def _scenario(kind: str, prefix_caching: bool = True) -> Scenario:
    workload = (
        {"kind": "random", "input_tokens": 3000, "output_tokens": 400, "num_requests": 120,
         "concurrency": 48}
        if kind == "random"
        else {"kind": "chat", "sessions": 60, "concurrency": 24}
    )  # fmt: skip
    return Scenario.model_validate(
        {
            "name": f"lazy-{kind}",
            "model": "llama-3.1-8b",
            "device": "h100",
            "serving": {
                "tp": 1,
                "kv_cache_memory_bytes": 4.0e9,
                "enable_prefix_caching": prefix_caching,
            },
            "workload": workload,
            "duration_s": 300.0,
            "warmup_s": 0.0,
            "seed": 7,
        }
    )


@pytest.mark.parametrize(("kind", "prefix_caching"),
                         [("random", True), ("chat", True), ("chat", False)])  # fmt: skip
def test_lazy_and_eager_ids_give_the_same_summary(
    kind: str, prefix_caching: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    sc = _scenario(kind, prefix_caching)
    lazy = simulate(sc)
    monkeypatch.setattr(simulation, "lazy_output_ids", lambda *a: False)
    eager = simulate(sc)
    a = json.loads(lazy.summary.model_dump_json(exclude={"wall_s"}))
    b = json.loads(eager.summary.model_dump_json(exclude={"wall_s"}))
    assert a == b
    if kind == "random":
        assert a["preemptions"] > 0, "the cache must be small enough to preempt"
    elif prefix_caching:
        assert a["prefix_hit_rate"] > 0.3, "later turns hit the renamed output blocks"
    else:
        assert a["prefix_hit_rate"] == 0
