"""Admissions + frees per second of the KV cache manager (issue: the cache must not be the
bottleneck of a 710-session replay: ~50k requests, ~2M steps).

Requests of 100k tokens at block 768 (131 blocks; Kimi K3 at TP8) on a 3,000-block pool,
90 % of each prompt shared with earlier requests (8 prefix families), up to 16 running at
once (FIFO). One request = lookup + admit + prefill commits (at the mandatory checkpoint and
the prompt end) + 4 decode grow/commit steps + free. Two configs: full attention only, and
the Kimi K3 hybrid (1 MLA group + 3 KDA groups, default retention, 2 state pages).

Run:  .venv/bin/python benchmarks/cache_ops.py [--repeats 5] [--requests 3000]
Prints the median of the repeats (this machine is shared and noisy; medians, not means).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import deque

import numpy as np

from simulator.cache.config import CacheConfig
from simulator.cache.manager import KVCacheManager

PROMPT_TOKENS = 100_000
BLOCK_TOKENS = 768
NUM_BLOCKS = 3_000
SHARED_FRACTION = 0.9
FAMILIES = 8
MAX_RUNNING = 16


def prompts(n: int, seed: int) -> list[list[int]]:
    """Chain hashes of ``n`` prompts: a family's shared prefix, then unique blocks."""
    rng = np.random.default_rng(seed)
    full = PROMPT_TOKENS // BLOCK_TOKENS
    shared = int(full * SHARED_FRACTION)
    out = []
    for i, family in enumerate(rng.integers(0, FAMILIES, size=n)):
        parent, hashes = 0, []
        for b in range(full):
            parent = hash((parent, int(family), b) if b < shared else (parent, i, b))
            hashes.append(parent)
        out.append(hashes)
    return out


def run(config: CacheConfig, all_hashes: list[list[int]]) -> tuple[float, float]:
    """Requests per second, and the mean hit fraction."""
    m = KVCacheManager(config)
    running: deque[str] = deque()
    hit_tokens = 0
    start = time.perf_counter()
    for i, hashes in enumerate(all_hashes):
        rid = f"r{i}"
        while True:
            hit = m.lookup(rid, PROMPT_TOKENS, hashes)
            if m.admit(rid, PROMPT_TOKENS, hashes, hit):
                break
            m.free(running.popleft())  # the scheduler would wait; here the oldest finishes
        hit_tokens += hit.total_tokens
        running.append(rid)
        stop = m.next_checkpoint(rid)
        if stop is not None:
            m.commit(rid, stop)
        m.commit(rid, PROMPT_TOKENS)
        for t in range(PROMPT_TOKENS + 1, PROMPT_TOKENS + 5):
            if m.grow(rid, t):
                m.commit(rid, t)
        if len(running) > MAX_RUNNING:
            m.free(running.popleft())
    elapsed = time.perf_counter() - start
    m.check()
    return len(all_hashes) / elapsed, hit_tokens / (len(all_hashes) * PROMPT_TOKENS)


def decode_steps(config: CacheConfig, steps: int = 5000) -> float:
    """grow + commit pairs per second for 16 running 100k-token requests decoding."""
    m = KVCacheManager(config)
    rids = [f"r{r}" for r in range(MAX_RUNNING)]
    for r, rid in enumerate(rids):
        hashes = [hash((r, i)) for i in range(PROMPT_TOKENS // BLOCK_TOKENS)]
        assert m.admit(rid, PROMPT_TOKENS, hashes, m.lookup(rid, PROMPT_TOKENS, hashes))
        m.commit(rid, PROMPT_TOKENS)
    start = time.perf_counter()
    for t in range(PROMPT_TOKENS + 1, PROMPT_TOKENS + 1 + steps):
        for rid in rids:
            m.grow(rid, t + 1)
            m.commit(rid, t, (hash((rid, t)),) if t % BLOCK_TOKENS == 0 else ())
    elapsed = time.perf_counter() - start
    m.check()
    return steps * len(rids) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()
    all_hashes = prompts(args.requests, seed=0)
    configs = {
        "full attention": CacheConfig(block_tokens=BLOCK_TOKENS, num_blocks=NUM_BLOCKS),
        "hybrid (Kimi K3)": CacheConfig(
            block_tokens=BLOCK_TOKENS, num_blocks=NUM_BLOCKS, state_groups=3
        ),
    }
    for name, config in configs.items():
        rates, hit = [], 0.0
        for _ in range(args.repeats):
            rate, hit = run(config, all_hashes)
            rates.append(rate)
        print(
            f"{name:18s} {statistics.median(rates):9,.0f} requests/s"
            f" (admit + prefill + 4 decode steps + free; median of {args.repeats});"
            f" hit fraction {hit:.2f}"
        )
        decode = statistics.median(decode_steps(config) for _ in range(args.repeats))
        print(f"{name:18s} {decode:9,.0f} decode grow+commit pairs/s")


if __name__ == "__main__":
    main()
