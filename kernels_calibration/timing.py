"""How one kernel launch is timed: ``triton.testing.do_bench`` on a GPU, a wall clock on a CPU.

Both return every repetition's time in milliseconds; ``summarize`` turns them into the
measurement columns (median, 20th and 80th percentile, count). ``do_bench`` runs the kernel
once, estimates its time from 5 runs, warms up for ``warmup_ms``, then times as many runs as
fit in ``rep_ms`` with device events, flushing the L2 cache before each run (so weights are
read from HBM as in serving, where a layer's weights are evicted by the other layers').
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Bench = Callable[[Callable[[], object]], list[float]]


@dataclass(frozen=True)
class Stats:
    median_us: float
    p20_us: float
    p80_us: float
    n_reps: int


def summarize(times_ms: list[float]) -> Stats:
    t = np.asarray(times_ms, dtype=np.float64) * 1e3
    p20, med, p80 = np.quantile(t, [0.2, 0.5, 0.8])
    return Stats(float(med), float(p20), float(p80), int(t.size))


def gpu_bench(warmup_ms: float, rep_ms: float) -> Bench:
    """``triton.testing.do_bench`` with every repetition returned (CUDA and ROCm alike)."""
    import triton.testing

    def bench(fn: Callable[[], object]) -> list[float]:
        times = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="all")
        return [float(x) for x in times]

    return bench


def wall_bench(warmup_ms: float, rep_ms: float, max_reps: int = 1000) -> Bench:
    """The same protocol on the host clock, for CPU tensors (no cache flush: there is no
    device cache to flush that the OS would not refill)."""

    def bench(fn: Callable[[], object]) -> list[float]:
        t0 = time.perf_counter()
        fn()
        first_ms = (time.perf_counter() - t0) * 1e3
        n_warm = max(1, int(warmup_ms / max(first_ms, 1e-3)))
        for _ in range(n_warm):
            fn()
        n_rep = max(3, min(max_reps, int(rep_ms / max(first_ms, 1e-3))))
        times = []
        for _ in range(n_rep):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return times

    return bench
