"""Throughput of ``plan workload stats`` on a generated stream (bounded memory).

    .venv/bin/python benchmarks/workload_stats.py [--generator agentic] [--requests 1000000]

Generates sessions until ``--requests`` requests, computes the full statistics (percentiles and
unlimited-cache reuse) in one streaming pass and prints requests/s and the peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

from simulator.workload import generator_source, workload_stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--generator", default="agentic", choices=("agentic", "chat", "random"))
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    sessions = args.requests  # an upper bound: every session has at least one request
    source = generator_source(args.generator, sessions, args.seed)
    start = time.perf_counter()
    stats = workload_stats(source, limit=args.requests)
    took = time.perf_counter() - start
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20
    reuse = "-" if stats.block_reuse is None else f"{100 * stats.block_reuse:.1f} %"
    print(
        f"{args.generator}: {stats.requests:,} requests, {stats.sessions:,} sessions, "
        f"{stats.prompt_blocks:,} prompt blocks in {took:.1f} s = "
        f"{stats.requests / took:,.0f} requests/s; block reuse {reuse}; "
        f"peak RSS {peak_mib:,.0f} MiB"
    )


if __name__ == "__main__":
    main()
