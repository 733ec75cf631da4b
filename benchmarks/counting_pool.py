"""Runs without prefix caching, with the counting block pool and with the full one.

Without prefix caching ``simulation`` counts KV blocks instead of tracking each one
(``simulator/cache/counting_pool.py``). This times the same silicon-validation points (the
InferenceX-style benchmark runs: closed loop, random prompts, prefix caching off) both ways,
alternating, in one process after a warm-up, and checks that every summary is the same.

Run:  .venv/bin/python benchmarks/counting_pool.py [--points 30] [--repeats 3]
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

from simulator.cache import KVCacheManager
from simulator.simulation import simulate
from simulator.specs import Scenario
from simulator.validation.silicon import default_data, load_silicon, scenario_of


def run(scenarios: list[Scenario], counting: bool) -> tuple[float, list[dict[str, Any]]]:
    KVCacheManager.count_only = COUNT_ONLY if counting else (lambda self: None)  # type: ignore[method-assign]
    t0 = time.perf_counter()
    out = [simulate(s).summary.model_dump(exclude={"wall_s"}) for s in scenarios]
    return time.perf_counter() - t0, out


COUNT_ONLY = KVCacheManager.count_only


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=30, help="silicon points, drawn seeded")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    points = load_silicon(default_data()).points
    pick = np.random.default_rng(1).choice(len(points), size=args.points, replace=False)
    scenarios = [scenario_of(points[i]) for i in pick]
    run(scenarios, True)  # warm: tables read, templates made
    walls: dict[bool, list[float]] = {True: [], False: []}
    answers: dict[bool, list[dict[str, Any]]] = {}
    for _ in range(args.repeats):
        for counting in (False, True):
            wall, answers[counting] = run(scenarios, counting)
            walls[counting].append(wall)
    KVCacheManager.count_only = COUNT_ONLY  # type: ignore[method-assign]
    full, counted = statistics.median(walls[False]), statistics.median(walls[True])
    print(f"full pool  {' '.join(f'{w:.2f}' for w in walls[False])} s  (median {full:.2f})")
    print(f"counting   {' '.join(f'{w:.2f}' for w in walls[True])} s  (median {counted:.2f})")
    print(f"ratio {full / counted:.2f}x; the same summaries: {answers[True] == answers[False]}")


if __name__ == "__main__":
    main()
