"""The scenarios and search spaces the ``benchmarks/`` scripts build are valid specs today.

The scripts are not run by ``make test`` (speed is measured there, never in unit tests), so
a spec check added later could refuse a benchmark unnoticed: ``search_200.py`` had 64
requests a run under a 96-user load until the space check refused it, and its figure was of
fewer users than it said.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from simulator.planner.expand import expand
from simulator.planner.space import SearchSpace
from simulator.specs import Scenario
from simulator.specs.loading import load

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("space", ["SPACE", "WIDE"])
def test_the_search_benchmark_spaces_are_valid_and_run_something(space: str) -> None:
    data = getattr(script("search_200"), space)
    parsed = SearchSpace.model_validate(data)
    candidates, _ = expand(parsed)
    assert candidates
    assert parsed.workload.num_requests >= max(parsed.concurrency)  # type: ignore[union-attr]


def test_the_agentic_benchmark_scenarios_are_valid(tmp_path: Path) -> None:
    bench = script("engine_agentic")
    trace = tmp_path / "trace.jsonl"  # not read: the scenario is only validated
    for split in (None, {"prefill_replicas": 1, "decode_replicas": 1, "send_back": True}):
        scenario = bench.agentic_scenario(trace, disaggregation=split)
        assert isinstance(scenario, Scenario)


@pytest.mark.parametrize("path", sorted((BENCHMARKS / "golden").glob("*.yaml")), ids=str)
def test_every_golden_scenario_loads(path: Path) -> None:
    assert isinstance(load(Scenario, path), Scenario)
