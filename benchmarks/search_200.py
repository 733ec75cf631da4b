"""Search throughput: a 200-run search with the local process pool and with a local Ray.

Llama-3.3-70B, random 1k/128 prompts (InferenceX style, 96 requests per run: as many as the
largest load's users, which a space now needs; it was 64 until 2026-12-07), 5 devices x
TP {4, 8} x DCP {1, 2} x 10 concurrency levels (2-96) = 200 runs. Fresh caches each time.
(Llama's 8 KV heads leave no room for DCP 2 at TP <= 8: those 10 are pruned, 100 runs remain.)
``--wide``: 216 configurations instead, none pruned (9 devices x TP {2, 4, 8} x
max_num_seqs {default, 32, 64, 128} x max_num_batched_tokens {default, 2048}), at the same
10 concurrency levels: 2,160 runs.
``--plan-search``: the wide space through the whole ``plan search`` command as a user runs it
(its max-load search over the concurrency levels, 3 seeds a point, the reports), a fresh
output folder each time, ``--repeats`` times; prints each wall time and the median.

Run:  .venv/bin/python benchmarks/search_200.py [--workers 2] [--skip-ray] [--wide]
      .venv/bin/python benchmarks/search_200.py --plan-search [--repeats 3]
It times the tree it is in: for a base revision, run that worktree's copy (the script as of
this commit) with this .venv's python.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

# the tree this script is in is the one timed, whatever PYTHONPATH and the installed package
# say: run a worktree's copy of the script to time that revision
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.planner.executor import run_all  # noqa: E402
from simulator.planner.expand import expand  # noqa: E402
from simulator.planner.space import SearchSpace  # noqa: E402

SPACE = {
    "name": "bench-200",
    "model": "llama-3.3-70b",
    "devices": ["h100", "h200", "b200", "mi300x", "mi355x"],
    "sweep": {"tp": [4, 8], "dcp": [1, 2]},
    "concurrency": [2, 4, 8, 12, 16, 24, 32, 48, 64, 96],
    "workload": {
        "kind": "random",
        "input_tokens": 1024,
        "output_tokens": 128,
        "num_requests": 96,  # >= the largest concurrency: every level holds its users
        "concurrency": 1,
    },
    "slo": {"interactivity_tok_per_s_p90": 30.0},
    "duration_s": 3600.0,
    "warmup_s": 0.0,
}
WIDE = {
    **SPACE,
    "name": "bench-200-configurations",
    "devices": ["h100", "h200", "b200", "b300", "gb200", "gb300", "mi300x", "mi325x", "mi355x"],
    "sweep": {"tp": [2, 4, 8], "max_num_seqs": [None, 32, 64, 128],
              "max_num_batched_tokens": [None, 2048]},
}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--wide", action="store_true", help="216 configurations, not 200 runs")
    parser.add_argument("--plan-search", action="store_true", help="the wide space via plan search")
    parser.add_argument("--repeats", type=int, default=3, help="with --plan-search")
    args = parser.parse_args()
    if args.plan_search:
        plan_search(args.workers, args.repeats)
        return
    candidates, pruned = expand(SearchSpace.model_validate(WIDE if args.wide else SPACE))
    scenarios = [sc for c in candidates for sc in c.scenarios]
    print(
        f"{len(candidates) + len(pruned)} configurations, {len(pruned)} pruned;"
        f" {len(scenarios)} runs, {args.workers} workers"
    )
    executors = ["local"] if args.skip_ray else ["local", "ray"]
    for executor in executors:
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            run_all(scenarios, Path(tmp), args.workers, executor=executor)  # type: ignore[arg-type]
            wall = time.perf_counter() - start
        print(f"{executor:6} {wall:7.1f} s   {len(scenarios) / wall * 60:7.1f} runs/min")


def plan_search(workers: int, repeats: int) -> None:
    walls = []
    with tempfile.TemporaryDirectory() as tmp:
        space = Path(tmp) / "wide.yaml"
        space.write_text(yaml.safe_dump(WIDE, sort_keys=False))
        for i in range(repeats):
            out = Path(tmp) / f"out{i}"
            cmd = [sys.executable, "-c", "from simulator.cli import main; main()", "search",
                   str(space), "--out", str(out), "--workers", str(workers)]  # fmt: skip
            start = time.perf_counter()
            # ROOT's code, not the working folder's (`-c` puts that first on the path)
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT, env=env)
            walls.append(time.perf_counter() - start)
            print(f"plan search, 216 configurations: {walls[-1]:6.1f} s", flush=True)
    print(f"median of {repeats}: {statistics.median(walls):.1f} s")


if __name__ == "__main__":
    main()
