"""Engine speed: replay the 710 WEKA agentic sessions on one 8-GPU Kimi K3 replica.

Closed loop with 64 concurrent users (each user runs sessions back to back, as AgentX
does), Kimi K3 TP8 on MI355X, roofline priors. Reports wall time (median of --repeats),
engine events per second (recorded step runs + request arrivals and finishes) and simulated
tokens per second of wall time (prompt + output tokens of all requests).

Run:  .venv/bin/python benchmarks/engine_agentic.py [--dcp 8] [--repeats 3]
      [--trace ../shared/data/agentic_cc_traces_weka/cc_traces_weka_710.jsonl.gz]
      [--split 1P1D [--send-back]]   (prefill/decode disaggregation instead of one replica)
      [--compare REV]   (``--repeats`` alternating pairs, each run a fresh process: REV's code
                         from a worktree ``/tmp/plan-bench-<rev>``, then this tree's; prints
                         every pair, the medians, the paired ratios, whether the summaries agree)
Targets (issue 16): <= 10 s wall on one core, peak RSS <= 500 MB (docs/engine-speed.md).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from simulator.simulation import simulate
from simulator.specs import Scenario

TRACE = (
    Path(__file__).resolve().parents[1].parent
    / "shared/data/agentic_cc_traces_weka/cc_traces_weka_710.jsonl.gz"
)


def agentic_scenario(
    trace: Path, dcp: int = 8, users: int = 64, disaggregation: dict[str, object] | None = None
) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "bench-agentic-710",
            "model": "kimi-k3",
            "device": "mi355x",
            "serving": {"tp": 8, "dcp": dcp},
            "workload": {
                "kind": "trace",
                "path": str(trace),
                "format": "agentic",
                "concurrency": users,
            },
            "disaggregation": disaggregation,
        }
    )


def _read(out: str, pattern: str) -> str:
    found = re.search(pattern, out, re.M)
    if found is None:
        raise SystemExit(f"unexpected output of a run: nothing matches {pattern!r}\n{out}")
    return found[1]


def compare(rev: str, repeats: int, argv: list[str]) -> None:
    """``repeats`` alternating pairs of one-run processes: ``rev``'s code, then this tree's."""
    from engine_reference import ROOT, worktree

    trees = {rev: worktree(rev), "now": ROOT}
    runs: dict[str, list[tuple[float, float, str]]] = {k: [] for k in trees}
    for i in range(repeats):
        for name, root in trees.items():
            env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root)}
            out = subprocess.run(
                [sys.executable, __file__, *argv, "--repeats", "1"], env=env, check=True,
                capture_output=True, text=True,
            ).stdout  # fmt: skip
            wall = float(_read(out, r"^wall .*?([\d.]+) s "))
            rss = float(_read(out, r"^peak RSS\s+([\d,]+) MB").replace(",", ""))
            summary = next(line for line in out.splitlines() if line.startswith("throughput/GPU"))
            runs[name].append((wall, rss, summary))
        b, n = runs[rev][-1], runs["now"][-1]
        print(
            f"pair {i + 1}: {rev} {b[0]:.1f} s, now {n[0]:.1f} s ({b[0] / n[0]:.2f}x)", flush=True
        )
    for name, got in runs.items():
        walls = ", ".join(f"{w:.1f}" for w, _, _ in got)
        print(f"{name:>10}: median {statistics.median(w for w, _, _ in got):.1f} s ({walls}),"
              f" peak RSS {max(r for _, r, _ in got):,.0f} MB")  # fmt: skip
    ratios = [b[0] / n[0] for b, n in zip(runs[rev], runs["now"], strict=True)]
    same = {s for _, _, s in runs[rev] + runs["now"]}
    print(f"paired speed-up vs {rev}: median {statistics.median(ratios):.2f}x;"
          f" summaries {'the same' if len(same) == 1 else 'DIFFER'}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--dcp", type=int, default=8)
    parser.add_argument("--users", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--split", help="xPyD, e.g. 1P1D: a disaggregated deployment")
    parser.add_argument("--send-back", action="store_true", help="with --split: D->P send-back")
    parser.add_argument("--compare", metavar="REV", help="alternate with REV's code, in pairs")
    args = parser.parse_args()
    if args.compare:
        argv = ["--trace", str(args.trace.resolve()), "--dcp", str(args.dcp),
                "--users", str(args.users)]  # fmt: skip
        argv += ["--split", args.split] if args.split else []
        argv += ["--send-back"] if args.send_back else []
        compare(args.compare, args.repeats, argv)
        return
    disaggregation = None
    if args.split:
        m = re.fullmatch(r"(\d+)P(\d+)D", args.split, re.IGNORECASE)
        if m is None:
            raise SystemExit(f"--split {args.split!r}: expected xPyD, e.g. 1P1D")
        disaggregation = {
            "prefill_replicas": int(m[1]),
            "decode_replicas": int(m[2]),
            "send_back": args.send_back,
        }
    if not args.trace.exists():
        raise SystemExit(f"trace not found: {args.trace} (clone beside ../shared or pass --trace)")
    scenario = agentic_scenario(args.trace, args.dcp, args.users, disaggregation)
    walls, result = [], None
    for _ in range(args.repeats):
        result = simulate(scenario)
        walls.append(result.wall_s)
    assert result is not None
    rec = result.recorder
    tokens = sum(r.prompt_tokens + r.generated for r in rec.requests)
    events = len(rec.steps) + 2 * len(rec.requests)
    wall = statistics.median(walls)
    s = result.summary
    print(f"requests            {len(rec.requests):,} ({s.requests_rejected} rejected)")
    print(f"simulated span      {s.window_s:,.0f} s, {s.steps:,} engine steps")
    runs = ", ".join(f"{w:.1f}" for w in walls)
    print(f"wall (median of {args.repeats})  {wall:.1f} s   runs: {runs}")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6  # Linux: KiB
    print(f"peak RSS            {peak_mb:,.0f} MB (the whole process, all repeats)")
    print(f"events/s            {events / wall:,.0f}  ({events:,} events)")
    print(f"simulated tokens/s  {tokens / wall:,.0f}  ({tokens:,} tokens)")
    print(
        f"throughput/GPU {s.throughput_tok_per_s_per_gpu:,.0f} tok/s, hit rate"
        f" {s.prefix_hit_rate:.1%}, P90 interactivity {s.interactivity_tok_per_s_p90 or 0:.1f}"
    )


if __name__ == "__main__":
    main()
