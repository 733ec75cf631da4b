"""The engine's exact fast paths, on and off, on silicon-validation points.

Two paths give the per-request path's answers faster where they apply:

- ``counting``: without prefix caching ``simulation`` counts KV blocks instead of tracking
  each one (``simulator/cache/counting_pool.py``);
- ``lockstep``: steady decodes advance by one clock (``simulator/lockstep.py``);
- ``deferred``: with prefix caching (turned on for these points), the pool counts until a
  block is first cached under an id a lookup could find (``KVCacheManager.defer_identities``):
  random prompts until a preemption names a request's blocks.

This times the same silicon-validation points (the InferenceX-style benchmark runs: closed
loop, random prompts, prefix caching off; on for ``deferred``) with the path on and off,
alternating, in one process after a warm-up, and checks that every summary is the same.

Run:  .venv/bin/python benchmarks/exact_paths.py [--path counting|lockstep|deferred] [--points 30]
      [--repeats 3]
Prints each pass's wall time, the medians and their ratio (this machine is noisy: ratios
within one run are the figure to trust). Needs the measured extra (aiconfigurator-core).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

from simulator import lockstep
from simulator.cache import KVCacheManager
from simulator.simulation import simulate
from simulator.specs import Scenario
from simulator.validation.silicon import default_data, load_silicon
from simulator.validation.silicon_sim import scenario_of


def switch(path: str, on: bool) -> None:
    if path == "counting":
        KVCacheManager.count_only = COUNT_ONLY if on else (lambda self: None)  # type: ignore[method-assign]
    elif path == "deferred":
        KVCacheManager.defer_identities = DEFER if on else (lambda self: None)  # type: ignore[method-assign]
    else:
        lockstep.ENABLED = on


def run(scenarios: list[Scenario], path: str, on: bool) -> tuple[float, list[dict[str, Any]]]:
    switch(path, on)
    t0 = time.perf_counter()
    out = [simulate(s).summary.model_dump(exclude={"wall_s"}) for s in scenarios]
    return time.perf_counter() - t0, out


COUNT_ONLY = KVCacheManager.count_only
DEFER = KVCacheManager.defer_identities


def with_prefix_caching(scenario: Scenario) -> Scenario:
    serving = scenario.serving.model_copy(update={"enable_prefix_caching": True})
    return scenario.model_copy(update={"serving": serving})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", choices=("counting", "lockstep", "deferred"), default="counting")
    parser.add_argument("--points", type=int, default=30, help="silicon points, drawn seeded")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    points = load_silicon(default_data()).points
    pick = np.random.default_rng(1).choice(len(points), size=args.points, replace=False)
    scenarios = [scenario_of(points[i]) for i in pick]
    if args.path == "deferred":
        scenarios = [with_prefix_caching(s) for s in scenarios]
    run(scenarios, args.path, True)  # warm: tables read, templates made
    walls: dict[bool, list[float]] = {True: [], False: []}
    answers: dict[bool, list[dict[str, Any]]] = {}
    for _ in range(args.repeats):
        for on in (False, True):
            wall, answers[on] = run(scenarios, args.path, on)
            walls[on].append(wall)
    switch(args.path, True)
    off, on = statistics.median(walls[False]), statistics.median(walls[True])
    print(f"{args.path} off  {' '.join(f'{w:.2f}' for w in walls[False])} s  (median {off:.2f})")
    print(f"{args.path} on   {' '.join(f'{w:.2f}' for w in walls[True])} s  (median {on:.2f})")
    print(f"ratio {off / on:.2f}x; the same summaries: {answers[True] == answers[False]}")


if __name__ == "__main__":
    main()
