"""Engine speed on Vidur's reference workload (benchmarks/golden/vidur-reference.yaml).

1,000 requests, prompts uniform in [2048, 8192], outputs in [512, 1024], Poisson 2 req/s,
Llama-3.3-70B TP8 on H100, chunked prefill at 2,048 tokens, 128 sequences. Reports, as
medians of --repeats runs:

- ``whole``: the whole process ``plan run <scenario> --json`` (imports, set-up, the loop,
  the summary), wall seconds, as a user runs it;
- ``loop``: ``Engine.run`` alone (the discrete-event loop), timed in-process;
- simulated requests per wall second of the whole process.

The whole process runs as an installed package does: Python's bytecode of the project is
written once (to ``/tmp/plan-bench-pyc``, a warm-up run per tree, not timed) and read after,
even where the shell sets ``PYTHONDONTWRITEBYTECODE`` (this sandbox does: every run would
compile the project's ~85 modules from source again, ~0.1 s). ``--no-bytecode`` measures
that way instead.

``--compare REV`` runs the same measurements, interleaved run by run, on a git worktree of
revision REV (``/tmp/plan-bench-<rev>``; it needs ``output_range_ratio``, i.e. 288cbdd or
later, or pass --scenario with a scenario it can read) and prints the ratios: the
"faster than before, in the same run" figure.

Run:  .venv/bin/python benchmarks/engine_reference.py [--repeats 5] [--compare REV]
Targets (issue 16): whole <= 0.6 s (Vidur: 12.2 s), loop >= 10x faster than before.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "benchmarks" / "golden" / "vidur-reference.yaml"
LOOP = """
import json, sys, time
from pathlib import Path
from simulator import engine, simulation
from simulator.specs import Scenario
from simulator.specs.loading import load
took = []
run = engine.Engine.run
def timed(self):
    t0 = time.perf_counter(); out = run(self); took.append(time.perf_counter() - t0); return out
engine.Engine.run = timed
p = Path(sys.argv[1])
r = simulation.simulate(load(Scenario, p), base_dir=p.parent)
print(json.dumps({"loop_s": took[0], "requests": r.summary.requests_finished}))
"""


PY = str(ROOT / ".venv" / "bin" / "python")
PYC = Path("/tmp/plan-bench-pyc")


def environment(root: Path, bytecode: bool) -> dict[str, str]:
    """The runs' environment: one thread, ``root``'s code, bytecode kept (``bytecode``)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root)}
    if bytecode:  # as a pip-installed package runs: compiled once, read after
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(PYC)
    return env


def whole_run(root: Path, scenario: Path, env: dict[str, str]) -> float:
    """Wall seconds of ``plan run SCENARIO --json`` in a fresh process."""
    t0 = time.perf_counter()
    subprocess.run(
        [PY, "-c", "from simulator.cli import main; main()", "run", str(scenario), "--json"],
        cwd=root, env=env, check=True, capture_output=True,
    )  # fmt: skip
    return time.perf_counter() - t0


def measure(root: Path, scenario: Path, env: dict[str, str]) -> tuple[float, float, int]:
    whole = whole_run(root, scenario, env)
    out = subprocess.run(
        [PY, "-c", LOOP, str(scenario)], cwd=root, env=env, check=True, capture_output=True,
        text=True,
    )  # fmt: skip
    d = json.loads(out.stdout)
    return whole, d["loop_s"], d["requests"]


def worktree(rev: str) -> Path:
    path = Path(f"/tmp/plan-bench-{rev}")
    if not path.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(path), rev], cwd=ROOT,
                       check=True, capture_output=True)  # fmt: skip
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scenario", type=Path, default=SCENARIO)
    parser.add_argument("--compare", metavar="REV", help="git revision to compare against")
    parser.add_argument(
        "--no-bytecode", action="store_true",
        help="keep the shell's PYTHONDONTWRITEBYTECODE: compile the project in every run",
    )  # fmt: skip
    args = parser.parse_args()
    trees = {"now": ROOT} | ({args.compare: worktree(args.compare)} if args.compare else {})
    scenario = args.scenario.resolve()
    envs = {name: environment(root, not args.no_bytecode) for name, root in trees.items()}
    if not args.no_bytecode:
        for name, root in trees.items():  # writes the bytecode; not timed
            whole_run(root, scenario, envs[name])
    got: dict[str, list[tuple[float, float, int]]] = {k: [] for k in trees}
    for _ in range(args.repeats):
        for name, root in trees.items():  # interleaved: the same machine load for both
            got[name].append(measure(root, scenario, envs[name]))
    for name, runs in got.items():
        whole = statistics.median(r[0] for r in runs)
        loop = statistics.median(r[1] for r in runs)
        reqs = runs[0][2]
        print(f"{name:>10}: whole {whole:.2f} s, loop {loop:.2f} s, {reqs / whole:,.0f} requests"
              f"/s  (runs: {', '.join(f'{r[0]:.2f}/{r[1]:.2f}' for r in runs)})")  # fmt: skip
    if args.compare:
        base, now = got[args.compare], got["now"]
        w = statistics.median(b[0] for b in base) / statistics.median(n[0] for n in now)
        lp = statistics.median(b[1] for b in base) / statistics.median(n[1] for n in now)
        print(f"speed-up vs {args.compare}: whole {w:.2f}x, loop {lp:.2f}x")
    sys.exit(0)


if __name__ == "__main__":
    main()
