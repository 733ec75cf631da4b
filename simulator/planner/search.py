"""A search end to end, minus the printing: grid or max-load, every point under every seed.

``run_search`` is what ``plan search`` (and the dashboard) call: it runs the space's points
through ``run_batch`` (the cached worker pool) and returns the runs table, one row per point
with the replicate means and intervals, and, for the max-load search, each configuration's
search (its probes, its answer and how many simulations it took).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simulator.planner.analysis import replicate_scenarios, runs_table
from simulator.planner.maxload import LoadSearch, max_load
from simulator.planner.replicates import variant
from simulator.planner.space import Candidate, SearchSpace
from simulator.specs.scenario import Scenario

if TYPE_CHECKING:
    import pandas as pd

Batch = Callable[[list[Scenario]], dict[str, dict[str, Any]]]


@dataclass
class SearchResult:
    runs: pd.DataFrame
    results: dict[str, dict[str, Any]]
    searches: list[LoadSearch]  # empty for a grid search

    @property
    def simulations(self) -> int:
        return len(self.results)


def run_search(
    space: SearchSpace,
    candidates: list[Candidate],
    run_batch: Batch,
    progress: Callable[[int, int], None] | None = None,
) -> SearchResult:
    if space.search == "grid":
        scenarios = replicate_scenarios(space, candidates)
        grid = run_batch(scenarios)
        return SearchResult(runs_table(space, candidates, grid), grid, [])
    results: dict[str, dict[str, Any]] = {}

    def run(batch: list[Scenario]) -> dict[str, dict[str, Any]]:
        got = run_batch(batch)
        results.update(got)
        return got

    lo, hi = min(space.concurrency), max(space.concurrency)
    searches = max_load(
        candidates, space.slo, run, lo, hi, space.seeds, space.seed, space.load_tolerance, progress
    )
    probed = [
        Candidate(
            s.candidate.config_id,
            s.candidate.device,
            s.candidate.knobs,
            tuple(
                variant(s.candidate.scenarios[0], f"{s.candidate.config_id}-c{u}", space.seed, u)
                for u in sorted({p.users for p in s.probes})
            ),
        )
        for s in searches
    ]
    runs = runs_table(space, probed, results)
    if not runs.empty:
        by_id = {s.candidate.config_id: s for s in searches}
        runs["operating_point"] = [
            by_id[c].best == u for c, u in zip(runs.config_id, runs.concurrency, strict=True)
        ]
        runs["max_load_users"] = [by_id[c].best for c in runs.config_id]
        runs["max_load_note"] = [by_id[c].note for c in runs.config_id]
        runs["simulations"] = [by_id[c].simulations for c in runs.config_id]
    return SearchResult(runs, results, searches)
