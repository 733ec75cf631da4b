"""Run a search's scenarios on a local process pool or a Ray cluster, cached by scenario hash.

Each finished run is written to ``<cache_dir>/<hash>.json`` at once, so an interrupted search
resumes where it stopped and a repeated search costs nothing. Ray (``executor="ray"``) runs
the same function as remote tasks: on the cluster at ``address``, or on a local instance that
is started for the search and stopped after it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Literal

from simulator.planner.space import scenario_hash
from simulator.specs.loading import SpecError
from simulator.specs.scenario import Scenario


def run_scenario(payload: str) -> dict[str, Any]:
    """One run, in a worker process: the summary plus what the analysis needs."""
    from simulator.simulation import simulate

    scenario = Scenario.model_validate_json(payload)
    result = simulate(scenario, scenario.name)
    steps = result.recorder.steps
    peak_blocks = max((s.kv_blocks_used for s in steps), default=0)
    return {
        **result.summary.model_dump(mode="json"),
        "num_blocks": result.memory.num_blocks,
        "peak_blocks_used": peak_blocks,
        "kv_cache_gib_per_gpu": result.memory.kv_cache_bytes_per_gpu / 2**30,
        "wall_s": result.wall_s,
    }


Executor = Literal["local", "ray"]


def run_all(
    scenarios: list[Scenario],
    cache_dir: Path,
    workers: int = 2,
    progress: Callable[[int, int], None] | None = None,
    executor: Executor = "local",
    address: str | None = None,
) -> dict[str, dict[str, Any]]:
    """Results by scenario name; cached runs are read, the rest run ``workers`` at a time
    (local) or as Ray tasks."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    todo: list[tuple[Scenario, Path]] = []
    for sc in scenarios:
        path = cache_dir / f"{scenario_hash(sc)}.json"
        if path.exists():
            results[sc.name] = json.loads(path.read_text())
        else:
            todo.append((sc, path))
    done = len(results)
    if progress is not None:
        progress(done, len(scenarios))
    if not todo:
        return results

    def store(sc: Scenario, path: Path, out: dict[str, Any]) -> None:
        nonlocal done
        path.write_text(json.dumps(out) + "\n")
        results[sc.name] = out
        done += 1
        if progress is not None:
            progress(done, len(scenarios))

    if executor == "ray":
        _run_ray(todo, store, workers, address)
        return results
    with ProcessPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = {pool.submit(run_scenario, sc.model_dump_json()): (sc, path) for sc, path in todo}
        for future in as_completed(futures):
            sc, path = futures[future]
            store(sc, path, future.result())
    return results


def _run_ray(
    todo: list[tuple[Scenario, Path]],
    store: Callable[[Scenario, Path, dict[str, Any]], None],
    workers: int,
    address: str | None,
) -> None:
    try:
        import ray
    except ImportError:
        raise SpecError(
            "(arguments)", "executor", "ray is not installed (pip install ray, or the [ray] extra)"
        ) from None
    started = not ray.is_initialized()
    if started:
        if address is None:  # a local instance for this search
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    try:
        remote = ray.remote(run_scenario)
        pending = {remote.remote(sc.model_dump_json()): (sc, path) for sc, path in todo}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                sc, path = pending.pop(ref)
                store(sc, path, ray.get(ref))
    finally:
        if started:
            ray.shutdown()
