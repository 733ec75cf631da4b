"""Engine speed: replay the 710 WEKA agentic sessions on one 8-GPU Kimi K3 replica.

Closed loop with 64 concurrent users (each user runs sessions back to back, as AgentX
does), Kimi K3 TP8 on MI355X, roofline priors. Reports wall time (median of --repeats),
engine events per second (recorded step runs + request arrivals and finishes) and simulated
tokens per second of wall time (prompt + output tokens of all requests).

Run:  .venv/bin/python benchmarks/engine_agentic.py [--dcp 8] [--repeats 3]
      [--trace ../shared/data/agentic_cc_traces_weka/cc_traces_weka_710.jsonl.gz]
      [--split 1P1D [--send-back]]   (prefill/decode disaggregation instead of one replica)
Targets (issue 16): <= 10 s wall on one core, peak RSS <= 500 MB (docs/engine-speed.md).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--dcp", type=int, default=8)
    parser.add_argument("--users", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--split", help="xPyD, e.g. 1P1D: a disaggregated deployment")
    parser.add_argument("--send-back", action="store_true", help="with --split: D->P send-back")
    args = parser.parse_args()
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
