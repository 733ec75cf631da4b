"""A search end to end, minus the printing: grid or max-load, every point under every seed.

``run_search`` is what ``plan search`` (and the dashboard) call: it runs the space's points
through ``run_batch`` (the cached worker pool) and returns the runs table, one row per point
with the replicate means and intervals, and, for the max-load search, each configuration's
search (its probes, its answer and how many simulations it took).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simulator.planner.analysis import replicate_scenarios, runs_table
from simulator.planner.expand import Candidate, Pruned
from simulator.planner.maxload import LoadSearch, max_load
from simulator.planner.replicates import Chain, variant
from simulator.planner.space import SearchSpace
from simulator.specs.scenario import Scenario

if TYPE_CHECKING:
    import pandas as pd

    from simulator.planner.executor import Executor

# a batch of runs (a chain: in turn in one worker, up to the first that misses), by name
Batch = Callable[[list[Scenario | Chain]], dict[str, dict[str, Any]]]


@dataclass
class SearchResult:
    runs: pd.DataFrame
    results: dict[str, dict[str, Any]]
    searches: list[LoadSearch]  # empty for a grid search
    space: SearchSpace | None = None  # the space as run (workload paths resolved), when known

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
        grid = run_batch(list(scenarios))
        return SearchResult(runs_table(space, candidates, grid), grid, [])
    results: dict[str, dict[str, Any]] = {}

    def run(batch: list[Scenario | Chain]) -> dict[str, dict[str, Any]]:
        got = run_batch(batch)
        results.update(got)
        return got

    lo, hi = min(space.concurrency), max(space.concurrency)
    searches = max_load(
        candidates, space.slo, run, lo, hi, space.seeds, space.seed, space.load_tolerance,
        progress, every_seed=space.every_seed,
    )  # fmt: skip
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


def prepare(
    space: SearchSpace, source: str = "(search)", base: Path = Path()
) -> tuple[SearchSpace, list[Candidate], list[Pruned]]:
    """The space ready to run: a relative trace path made relative to the space file's folder
    ``base`` (as a scenario's is to its file), the traces checked whole (gzip, UTF-8) before
    the first simulation, and every configuration expanded (all of them pruned is an error
    naming the reasons)."""
    from simulator.planner.expand import all_pruned_reason, expand
    from simulator.simulation import check_workload_files, resolve_workload
    from simulator.specs.loading import SpecError

    space = space.model_copy(update={"workload": resolve_workload(space.workload, base)})
    check_workload_files(space.workload)
    candidates, pruned = expand(space, source)
    if not candidates:
        raise SpecError(source, "(configurations)", all_pruned_reason(pruned))
    return space, candidates, pruned


def write_search_report(
    stage: Path, space: SearchSpace, runs: pd.DataFrame, pruned: list[Pruned]
) -> tuple[list[Path], pd.DataFrame, pd.DataFrame]:
    """The report, the CSVs and the space (so that a reader, the dashboard, needs only the
    folder) written into ``stage``; returns the paths, the best per device and the pruned
    table."""
    import yaml

    from simulator.planner.analysis import best_per_device, pruned_table
    from simulator.planner.compare import sensitivity
    from simulator.planner.report import write_report

    best = best_per_device(space, runs)
    pruned_df = pruned_table(pruned)
    paths = write_report(
        stage, space, runs, best, sensitivity(space, runs, best, pruned_df), pruned_df
    )
    (stage / "space.yaml").write_text(
        yaml.safe_dump(space.model_dump(mode="json"), sort_keys=False)
    )
    return [*paths, stage / "space.yaml"], best, pruned_df


@contextlib.contextmanager
def cached_batches(
    cache: Path,
    workers: int = 2,
    progress: Callable[[int, int], None] | None = None,
    executor: Executor = "local",
    address: str | None = None,
    source: str = "(search)",
) -> Iterator[Batch]:
    """The ``run_batch`` of :func:`run_search`, for the ``with`` block: each batch through
    ``run_all`` (its runs cached in ``cache``), every local batch on one worker pool that
    lives as long as the block (a max-load search's rounds reuse its warm workers);
    ``progress(done, submitted)`` counts the simulations of every batch so far (``submitted``
    drops as chains stop early). An input error met inside a run names ``source`` (the
    space file) and the run, not the run alone."""
    from simulator.planner.executor import KeptPool, run_all
    from simulator.specs.loading import SpecError

    done = 0

    def batch(scenarios: list[Scenario | Chain]) -> dict[str, dict[str, Any]]:
        nonlocal done
        start = done
        step = None
        if progress is not None:

            def step(finished: int, total: int) -> None:
                progress(start + finished, start + total)

        try:
            got = run_all(scenarios, cache, workers, step, executor, address, kept)
        except SpecError as exc:
            names = {s.name for item in scenarios for s in Chain.of(item).scenarios}

            def named(e: SpecError) -> SpecError:
                if e.file not in names:
                    return e  # a trace's own line, say
                # a space's loads are its concurrency list, not its workload template's
                field = "concurrency" if e.field == "workload.concurrency" else e.field
                return SpecError(source, field, f"{e.reason} (in run {e.file})")

            raise exc.remapped(named) from None
        done = start + len(got)
        return got

    with KeptPool(workers) as kept:
        yield batch


def search_space(
    space: SearchSpace,
    source: str = "(search)",
    base: Path = Path(),
    out: Path | None = None,
    workers: int = 2,
    progress: Callable[[int, int], None] | None = None,
) -> SearchResult:
    """A search from its space to its answer, as ``simulator.search`` runs it: prepared
    (:func:`prepare`), its runs cached under ``out/cache`` (else the user data folder's
    ``cache``), and with ``out`` the report written there (swapped in whole; a failure
    leaves the old folder as it was). ``progress(done, submitted)`` counts simulations."""
    from simulator.outputs import OutputFolder
    from simulator.userdata import plan_home

    folder = OutputFolder(out, "simulator.search", SEARCH_FILES) if out is not None else None
    with folder if folder is not None else contextlib.nullcontext() as stage:
        space, candidates, pruned = prepare(space, source, base)
        cache = folder.target / "cache" if folder is not None else plan_home() / "cache"
        with cached_batches(cache, workers, progress, source=source) as batch:
            found = run_search(space, candidates, batch)
        found.space = space
        if stage is not None:
            write_search_report(stage, space, found.runs, pruned)
    return found


# what a search writes beside its cache/ (which is kept across runs)
SEARCH_FILES = ("report.html", "report.md", "runs.csv", "best.csv", "sensitivity.csv",
                "pruned.csv", "modes.csv", "space.yaml", "figure_*.png")  # fmt: skip
