"""Golden summaries: the engine's answers on eight scenarios, kept to show that a speed change
changed no result.

The scenarios (``benchmarks/golden/*.yaml``) cover the paths an optimisation can break: a
hybrid agentic replay with a host tier (offload), DCP, speculative decoding, prefill/decode
disaggregation with send-back, DP-replicated random prompts, Vidur's reference workload,
P/D pools of their own parallelism with a DP16 / EP16 DeepEP decode pool, and the first hour
of the 710 WEKA agentic traces (read from ``../shared/data``; skipped where absent).
``--write`` stores each summary as ``benchmarks/golden/<name>.json``; without it each run is
compared with the stored one: integers and strings exactly, floats within ``--rtol``
(default 1e-9: bit-for-bit up to the order of floating-point sums).

The stored goldens hold on the machine that wrote them. Another CPU can differ in the last
bits (most likely numpy's exp / log kernels, picked by instruction set), and a long run
carries such a difference into event times: on 2026-12-03's machine the unchanged code
differed from the goldens then stored by up to 8e-10 relative. The stored ones were
rewritten on that machine after the measured grids' spike rule (a model change, so every
summary moved). So on a new machine write the base revision's summaries first, into a
directory of their own (``--store``), and compare against those.

Run:  .venv/bin/python benchmarks/golden.py [--write] [--rtol 1e-9] [--store DIR] [NAME ...]
Prints one line per scenario (wall time, differences) and exits 1 when any differ.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

from simulator.simulation import simulate
from simulator.specs import Scenario
from simulator.specs.loading import SpecError, load

GOLDEN = Path(__file__).resolve().parent / "golden"
SKIP = {"wall_s"}  # the one field that measures the machine, not the model


def summary(path: Path) -> tuple[dict[str, Any], float]:
    scenario = load(Scenario, path)
    t0 = time.perf_counter()
    result = simulate(scenario, base_dir=path.parent)
    wall = time.perf_counter() - t0
    data = json.loads(result.summary.model_dump_json())
    return {k: v for k, v in data.items() if k not in SKIP}, wall


def differences(got: Any, want: Any, rtol: float, where: str = "") -> list[str]:
    if isinstance(want, dict) and isinstance(got, dict):
        out = []
        for k in sorted(set(want) | set(got)):
            if k not in got or k not in want:
                out.append(f"{where}{k}: only in {'the golden' if k in want else 'this run'}")
            else:
                out += differences(got[k], want[k], rtol, f"{where}{k}.")
        return out
    if isinstance(want, float) and isinstance(got, (int, float)):
        if math.isclose(got, want, rel_tol=rtol, abs_tol=1e-12):
            return []
        return [f"{where.rstrip('.')}: {got!r} != {want!r} ({got / want - 1:+.2e})" if want
                else f"{where.rstrip('.')}: {got!r} != {want!r}"]  # fmt: skip
    return [] if got == want else [f"{where.rstrip('.')}: {got!r} != {want!r}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="scenario stems (default: all)")
    parser.add_argument("--write", action="store_true", help="store the summaries as golden")
    parser.add_argument("--rtol", type=float, default=1e-9)
    parser.add_argument(
        "--store", type=Path, default=GOLDEN, help="where the golden JSON files are kept"
    )
    args = parser.parse_args()
    if args.write:
        args.store.mkdir(parents=True, exist_ok=True)
    paths = sorted(GOLDEN.glob("*.yaml"))
    if args.names:
        paths = [p for p in paths if p.stem in args.names]
    failed = 0
    for path in paths:
        try:
            got, wall = summary(path)
        except SpecError as exc:  # a scenario on ../shared data this clone has not got
            if exc.reason != "no such file or directory":
                raise
            print(f"{path.stem:24s}   skipped: {exc}")
            continue
        target = args.store / f"{path.stem}.json"
        if args.write:
            target.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
            print(f"{path.stem:24s} {wall:6.2f} s  written")
            continue
        if not target.exists():
            print(f"{path.stem:24s} {wall:6.2f} s  no golden (run with --write)")
            failed += 1
            continue
        diff = differences(got, json.loads(target.read_text()), args.rtol)
        failed += bool(diff)
        print(f"{path.stem:24s} {wall:6.2f} s  {'same' if not diff else f'{len(diff)} differ'}")
        for line in diff[:20]:
            print(f"    {line}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
