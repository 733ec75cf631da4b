"""Cached, stoppable calls into the core: one scenario (What-if), a small sweep (Compare), a
sizing (Sizing), a ``plan search`` output folder (Search results).

Caching: ``st.cache_data`` keyed on the scenario's (or search space's) JSON, so a scenario
seen before, by anyone on this server, is answered at once; the Compare page's runs also go
through ``run_all``'s per-run JSON cache, in a folder shared with the CLI (``plan search
--out OUT`` keeps the same files in ``OUT/cache``).

Stopping: the core has no cancel hook. A run reports progress through its callback, and every
progress update is a Streamlit call, which is where Streamlit interrupts a script whose user
pressed Stop or changed a control. So a run stops at its next progress report; nothing half
done is cached. The progress bar is created inside the cached function (Streamlit replays it,
already removed, on a cache hit).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import streamlit as st

from dashboard.checks import BEST_COLUMNS, RUNS_COLUMNS, folder_name, read_table
from simulator.cost.shapes import CATEGORIES
from simulator.memory import MemoryReport
from simulator.metrics import Summary
from simulator.planner.analysis import replicate_scenarios
from simulator.planner.executor import KeptPool, run_all
from simulator.planner.expand import Candidate, Pruned, expand
from simulator.planner.fingerprint import scenario_hash
from simulator.planner.space import SearchSpace
from simulator.simulation import simulate, slo_met, tokens_per_dollar
from simulator.specs.loading import SpecError, load
from simulator.specs.scenario import SLO, Scenario
from simulator.userdata import plan_home

if TYPE_CHECKING:
    from simulator.planner.sizing import SizeResult

PROGRESS_INTERVAL_S = 0.25  # wall time between progress updates (and stop checks)
KV_USAGE_POINTS = 2000  # points per replica in the KV usage chart
DEFAULT_COST_MODEL = Scenario.model_fields["cost_model"].default
SEARCH_FILES = ("runs.csv", "best.csv", "sensitivity.csv", "pruned.csv")


class Progress:
    """A progress bar that a long core call updates through its callback, at most every
    ``PROGRESS_INTERVAL_S`` of wall time."""

    def __init__(self, text: str) -> None:
        self._bar = st.progress(0.0, text=text)
        self._last_s = time.monotonic()

    def update(self, fraction: float, text: str) -> None:
        now = time.monotonic()
        if now - self._last_s < PROGRESS_INTERVAL_S:
            return
        self._last_s = now
        self._bar.progress(min(max(fraction, 0.0), 1.0), text=text)

    def close(self) -> None:
        self._bar.empty()


class StopButton:
    """A Stop button shown while a run this session has not finished yet is computed (use it
    as a context manager around the run: it goes away when the run ends).

    ``stopped`` is True when the user stopped the run of ``key``: the page then shows a Run
    button instead and runs nothing until it is pressed or the inputs change."""

    def __init__(self, page: str, key: str) -> None:
        self._done: set[str] = st.session_state.setdefault(f"{page}_done", set())
        self._state = f"{page}_stopped"
        self._key = key
        self._slot = st.empty()
        self.stopped = False
        if key in self._done:
            return
        if st.session_state.get(self._state) == key:
            self.stopped = True
            with self._slot.container():
                st.info("Stopped. Press Run to simulate these inputs, or change one.")
                st.button("Run", key=f"{page}_run", on_click=self._set, args=(None,),
                          type="primary")  # fmt: skip
            return
        self._slot.button(
            "Stop", key=f"{page}_stop", on_click=self._set, args=(key,),
            icon=":material/stop_circle:", help="Stop this run (nothing of it is kept)",
        )  # fmt: skip

    def _set(self, value: str | None) -> None:
        st.session_state[self._state] = value

    def __enter__(self) -> StopButton:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if self.stopped:
            return
        if exc_type is None:
            self._done.add(self._key)
        if exc_type is None or issubclass(exc_type, Exception):  # not Streamlit's stop/rerun
            self._slot.empty()


# ------------------------------------------------------------------------------- what-if


@dataclass(frozen=True)
class WhatIfResult:
    summary: Summary
    memory: MemoryReport
    kv_usage: pd.DataFrame  # minute, replica, kv_used (share of the block pool)
    step_ms: pd.DataFrame  # component, ms (mean per engine step in the measured window)
    wall_s: float


def judged(scenario: Scenario, result: WhatIfResult) -> tuple[float | None, bool | None]:
    """(tokens per USD under the scenario's cost model, SLO met or None without an SLO)."""
    tput = result.summary.throughput_tok_per_s_per_gpu
    return tokens_per_dollar(scenario, tput), slo_met(scenario, result.summary)


def simulated_part(scenario: Scenario) -> str:
    """The cache key of a scenario: its JSON without the SLO and the cost model, which judge
    a run but do not change it (so moving them answers at once)."""
    return scenario.model_copy(
        update={"slo": SLO(), "cost_model": DEFAULT_COST_MODEL}
    ).model_dump_json()


@st.cache_data(show_spinner=False, max_entries=64)
def what_if(scenario_json: str) -> WhatIfResult:
    """Simulate one scenario (``Scenario`` JSON, see ``simulated_part``) with a progress bar."""
    scenario = Scenario.model_validate_json(scenario_json)
    total_s = scenario.duration_s or math.inf
    bar = Progress("simulating")

    def progress(now_s: float, done: int) -> None:
        bar.update(
            now_s / total_s,
            f"simulated {now_s / 60:,.1f} of {total_s / 60:,.0f} min, {done:,} requests done",
        )

    try:
        result = simulate(scenario, "what-if", ".", progress)
    finally:
        bar.close()
    steps = result.step_table()
    return WhatIfResult(
        summary=result.summary,
        memory=result.memory,
        kv_usage=_kv_usage(steps, result.memory.num_blocks),
        step_ms=_step_ms(steps, scenario.warmup_s),
        wall_s=result.wall_s,
    )


def _kv_usage(steps: pd.DataFrame, num_blocks: int) -> pd.DataFrame:
    if steps.empty:
        return pd.DataFrame({"minute": [], "replica": [], "kv_used": []})
    parts = []
    for _, g in steps.groupby("replica"):
        every = max(1, len(g) // KV_USAGE_POINTS)
        parts.append(g.iloc[::every])
    thin = pd.concat(parts)
    return pd.DataFrame(
        {
            "minute": thin.start_s / 60,
            "replica": thin.replica,
            "kv_used": thin.kv_blocks_used / max(num_blocks, 1),
        }
    )


def _step_ms(steps: pd.DataFrame, warmup_s: float) -> pd.DataFrame:
    """Mean milliseconds per engine step by component, over the measured window."""
    window = steps[steps.start_s >= warmup_s] if not steps.empty else steps
    components = [f"{c}_s" for c in CATEGORIES if f"{c}_s" in steps.columns]
    count = float(window.steps.sum()) if not window.empty else 0.0
    return pd.DataFrame(
        {
            "component": [c.removesuffix("_s") for c in components],
            "ms": [float(window[c].sum()) / count * 1e3 if count else 0.0 for c in components],
        }
    )


# ------------------------------------------------------------------------------- compare


@dataclass(frozen=True)
class SweepResult:
    candidates: list[Candidate]
    pruned: list[Pruned]
    results: dict[str, dict[str, Any]]


def default_run_cache() -> str:
    """The run cache the Compare page starts with: ``$PLAN_DASHBOARD_CACHE``, else
    ``<plan_home>/cache`` (the user data folder's, where the core's own searches keep their
    runs without an output folder)."""
    return os.environ.get("PLAN_DASHBOARD_CACHE") or str(plan_home() / "cache")


def sweep_scenarios(space: SearchSpace) -> tuple[list[Candidate], list[Pruned], list[Scenario]]:
    """The configurations of a search space, the pruned ones, and every run of its grid as
    ``plan search`` names and builds them (``<config>-c<users>-s<seed>``): the same runs have
    the same ``run_all`` cache key (``scenario_hash``: the scenario, the code, the input
    files), so a run cache is shared with the CLI's ``OUT/cache``."""
    candidates, pruned = expand(space, "compare")
    return candidates, pruned, replicate_scenarios(space, candidates)


def cached_runs(scenarios: list[Scenario], cache_dir: Path) -> int:
    """How many of the runs ``run_all`` would read from ``cache_dir`` instead of running."""
    return sum((cache_dir / f"{scenario_hash(sc)}.json").is_file() for sc in scenarios)


@st.cache_data(show_spinner=False, max_entries=16)
def sweep(simulated_json: str, workers: int, cache_dir: str, _space: SearchSpace) -> SweepResult:
    """Every configuration x concurrency of ``_space``, ``workers`` processes at a time, through
    ``run_all``'s per-run cache in ``cache_dir``.

    The key is ``simulated_json``, the space without its SLO, prices and demand: they judge
    the runs without changing them, so another SLO is answered from here at once. The runs
    themselves carry the space's SLO and cost model, as ``plan search`` builds them (their
    cache keys are the CLI's).

    Runs go to ``run_all`` in batches of ``workers``: a stopped sweep waits for at most one
    batch (``run_all`` itself finishes every submitted run before it returns or raises)."""
    del simulated_json  # the cache key only
    candidates, pruned, scenarios = sweep_scenarios(_space)
    bar = Progress(f"{len(scenarios)} runs")

    def progress(offset: int, done: int, total: int) -> None:
        del total
        n = offset + done
        bar.update(n / max(len(scenarios), 1), f"{n} of {len(scenarios)} runs done")

    results: dict[str, dict[str, Any]] = {}
    try:
        with KeptPool(workers) as kept:  # one set of warm workers for every batch
            for start in range(0, len(scenarios), workers):
                batch = scenarios[start : start + workers]
                results |= run_all(
                    batch, Path(cache_dir), workers, partial(progress, start), kept=kept
                )
    finally:
        bar.close()
    return SweepResult(candidates, pruned, results)


# -------------------------------------------------------------------------------- sizing


def size_planned(request_json: str) -> int:
    """At most this many simulations for a sizing request (nothing run)."""
    from simulator.planner.sizing import SizeRequest, base_space, plan_candidates, planned_runs

    request = SizeRequest.model_validate_json(request_json)
    space, candidates, _ = plan_candidates(base_space(request))
    return planned_runs(space, candidates)


@st.cache_data(show_spinner=False, max_entries=8)
def size(request_json: str, workers: int, cache_dir: str) -> SizeResult:
    """``run_size`` of a ``SizeRequest`` (JSON), its simulations through ``run_all``'s cache in
    ``cache_dir`` (``plan size`` without ``--out`` uses ``<plan_home>/cache``, this page's
    default), with a progress bar its progress callback drives."""
    from simulator.planner.sizing import SizeRequest, run_size

    request = SizeRequest.model_validate_json(request_json)
    bar = Progress("sizing: planning the searches")

    def progress(done: int, at_most: int) -> None:
        bar.update(done / max(at_most, 1), f"{done:,} simulations done (at most {at_most:,})")

    try:
        return run_size(request, None, workers, progress, Path(cache_dir))
    finally:
        bar.close()


# ------------------------------------------------------------------------ search results


@dataclass(frozen=True)
class SearchOutput:
    folder: str
    runs: pd.DataFrame
    best: pd.DataFrame
    sensitivity: pd.DataFrame
    pruned: pd.DataFrame


def search_output(folder: str) -> SearchOutput:
    """The CSVs ``plan search --out FOLDER`` wrote (re-read when a file changes), each with
    the columns the page reads (``checks.read_table``)."""
    path = folder_name("search results", "folder", folder)
    if not (path / "runs.csv").is_file():
        raise SpecError(
            path,
            "(folder)",
            "no runs.csv: not a plan search output folder"
            " (plan search SPACE.yaml --out FOLDER writes one)",
        )
    stamp = tuple((path / f).stat().st_mtime if (path / f).is_file() else 0.0 for f in SEARCH_FILES)
    return _read_search_output(str(path.resolve()), stamp)


@st.cache_data(show_spinner=False, max_entries=8)
def _read_search_output(folder: str, stamp: tuple[float, ...]) -> SearchOutput:
    del stamp  # part of the cache key only
    checked = {"runs.csv": RUNS_COLUMNS, "best.csv": BEST_COLUMNS}
    return SearchOutput(
        folder, *(read_table(Path(folder) / f, checked.get(f, {})) for f in SEARCH_FILES)
    )


def search_space(path: str) -> SearchSpace:
    return load(SearchSpace, Path(path).expanduser())
