"""The Ray executor runs the same search as the local pool, on a local Ray instance that
the executor starts and stops itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.planner.executor import run_all
from simulator.planner.expand import expand
from simulator.planner.space import SearchSpace

ray = pytest.importorskip("ray", reason="ray is a dev dependency; install the [dev] extra")

SPACE = {
    "name": "ray",
    "model": "llama-3.3-70b",
    "devices": ["h100"],
    "sweep": {"tp": [4, 8]},
    "concurrency": [4],
    "workload": {"kind": "random", "input_tokens": 256, "output_tokens": 16,
                 "num_requests": 8, "concurrency": 1},
    "slo": {"interactivity_tok_per_s_p90": 10.0},
    "duration_s": 300.0,
    "warmup_s": 0.0,
}  # fmt: skip


def test_ray_executor_matches_the_local_pool(tmp_path: Path) -> None:
    candidates, _ = expand(SearchSpace.model_validate(SPACE))
    scenarios = [sc for c in candidates for sc in c.scenarios]
    local = run_all(scenarios, tmp_path / "local", workers=2)
    seen: list[int] = []
    remote = run_all(
        scenarios, tmp_path / "ray", workers=2, executor="ray",
        progress=lambda done, total: seen.append(done),
    )  # fmt: skip
    assert not ray.is_initialized()  # the executor stopped the instance it started
    assert seen[-1] == len(scenarios)
    for name, out in local.items():
        expected = {k: v for k, v in out.items() if k != "wall_s"}
        assert {k: v for k, v in remote[name].items() if k != "wall_s"} == expected
    assert len(list((tmp_path / "ray").glob("*.json"))) == len(scenarios)
