"""Sane bounds on the numbers a user writes, each with the reason it is where it is.

Every spec number is finite (``Spec``, ``simulator/specs/frozen.py``); these are the upper
bounds on top. They are far above anything real (so no real deployment meets them) and far
below what makes the planner hang or answer nonsense.
"""

from __future__ import annotations

import os
from typing import Annotated, Any

from pydantic import AfterValidator

# Replicas of one simulated deployment (serving.dp, or prefill + decode replicas). Each one is
# simulated (its own scheduler and block pool: ~20 ms of set-up per replica on one core, so
# 100,000 replicas took half an hour before the first step); a bigger fleet is N copies of a
# deployment, which the search sizes without simulating them (demand_users).
MAX_REPLICAS = 1024
# Simulations one `plan search` runs unless --max-runs raises it (a few seconds each: 20,000
# is a night on a laptop; the Kimi K3 demo search runs 432 at most).
MAX_SEARCH_RUNS = 20_000
# Sessions (requests, for `random`) a built-in generator makes: 10^6 agentic sessions are
# ~70 M requests, already hours of generation at ~10,000 requests/s.
MAX_GENERATED_SESSIONS = 1_000_000
MAX_GENERATED_REQUESTS = 10_000_000
# Tokens of one generated prompt or output: 10x the longest context of any card (1 M tokens).
MAX_GENERATED_TOKENS = 10_000_000
# vLLM's block sizes (vllm/config/cache.py: ``BlockSize = Literal[1, 8, 16, 32, 64, 128,
# 256]``, powers of two up to 256); hybrid models then raise the block to align pages
# (``_align_hybrid_block_size``, simulator/memory.py).
VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)

# Hardware profiles: about 30-100x the largest part shipping or announced, so a unit mix-up
# (GB for B, ms for s, bits for bytes) is caught and no real part is.
MAX_PEAK_FLOPS_PER_S = 1e18  # B300 dense FP4: 1.5e16
MAX_MEMORY_BYTES = 1e13  # MI355X: 3.1e11 (288 GiB)
MAX_MEMORY_BW_BYTES_PER_S = 1e15  # MI355X / B300: 8e12
MAX_LINK_BW_BYTES_PER_S = 1e14  # NVLink 5: 9e11 per direction
MAX_LATENCY_S = 1.0  # every link and kernel latency of the profiles is below 1e-4 s
MAX_HOST_DRAM_BYTES_PER_GPU = 1e14  # GB300: 2.4e11 per GPU
MAX_POWER_W = 1e5  # B300: 1,400 W
MAX_DOMAIN_GPUS = 100_000  # NVL576 (Rubin Ultra) is the largest announced scale-up domain
# ... and the lower bounds, far below the slowest part a profile could describe (a laptop
# GPU: ~1e13 FLOP/s, 1e11 B/s): 1e-30 B/s priced a step at 6e37 s and a run of nothing.
MIN_PEAK_FLOPS_PER_S = 1e9
MIN_MEMORY_BW_BYTES_PER_S = 1e8
MIN_LINK_BW_BYTES_PER_S = 1e6
MIN_EFFICIENCY = 1e-3  # of a roofline efficiency (the profiles' lowest: 0.40)

# Model cards: layers of one model (the released ones have at most a few hundred: Llama 3.1
# 405B 126, DeepSeek-V3 61 + 1 MTP); an imported card lists every layer, so 10^9 of them
# filled the memory before any check ran.
MAX_LAYERS = 10_000
# Any integer of a config.json (a dimension, a count, a context length): the largest real
# ones are ~10^7 (context lengths); 10^400 overflowed the arithmetic as an internal error.
MAX_CONFIG_INT = 10**12
# A cell of an op-shape or measurement CSV (a dimension, a count, bytes, microseconds): the
# largest real ones are ~10^11 (bytes of one collective); 1e30 priced to 4.6e28 us.
MAX_SHAPE_VALUE = 1e13
# A time of a trace record (an arrival, a think or API time; seconds): 10^9 s is 32 years,
# past any recording; 1e30 made a session span 1e30 s and its arrival rate 6e-30 per s.
MAX_TRACE_TIME_S = 1e9
# The same bound on every simulated time a spec gives or implies (duration, warm-up, ramp,
# think-time cap, the span of Poisson arrivals): past ~1e15 s a float clock has no
# sub-second resolution left, and a TTFT read 0.0 s there (a TTFT target "met").
SIM_TIME_WHY = "seconds of simulated time (10^9 s is 32 years)"
# A multiplier of think times or trace timestamps: 10^4 stretches a one-hour think to 14
# months; 10^15 put the next turn past the clock's resolution.
MAX_TIME_SCALE = 1e4
# Concurrency of one measured benchmark point (a validation CSV's conc): 8x the largest in
# the public sets (8,192, InferenceMAX v1); 10^9 built a billion-request scenario.
MAX_BENCHMARK_CONCURRENCY = 65_536
# (most, least) of a measured point's rates (tok/s per GPU, tok/s per user) and latencies
# (E2E s): far beyond the public sets both ways (InferenceMAX v1: 23-37,000 tok/s/GPU,
# 7-440 tok/s/user, 2-620 s); 1e-300 tok/s printed an error of 10^302 %.
BENCHMARK_TOK_PER_S = (1e7, 1e-3)
BENCHMARK_LATENCY_S = (1e6, 1e-4)


# SLO targets: a P90 interactivity from a token every 1,000 s to a million tokens/s per user,
# a P90 TTFT from 0.1 ms to 11 days (1e-300 tok/s printed a margin of 9e303 %)
SLO_INTERACTIVITY_BOUNDS = (1e-3, 1e6)
SLO_TTFT_BOUNDS_S = (1e-4, 1e6)


def at_most(bound: float, why: str) -> AfterValidator:
    """A field validator: ``value <= bound`` (None passes), else ``'{value} exceeds {bound}:
    {why}'``."""

    def check(value: Any) -> Any:
        if value is not None and value > bound:
            raise ValueError(f"{_num(value)} exceeds {_num(bound)}: {why}")
        return value

    return AfterValidator(check)


def at_least(bound: float, why: str) -> AfterValidator:
    """A field validator: ``value >= bound`` (None passes), else ``'{value} is below {bound}:
    {why}'``."""

    def check(value: Any) -> Any:
        if value is not None and value < bound:
            raise ValueError(f"{_num(value)} is below {_num(bound)}: {why}")
        return value

    return AfterValidator(check)


def _non_negative_seed(value: int) -> int:
    if value < 0:
        raise ValueError(f"must be >= 0 (numpy seeds are non-negative), got {value}")
    return value


# a seed of a spec: numpy's generators take non-negative integers only
Seed = Annotated[int, AfterValidator(_non_negative_seed)]


def check_seed(value: int, file: str = "(arguments)", field: str = "seed") -> int:
    """A seed from the command line: the SpecError of ``Seed``."""
    from simulator.specs.loading import SpecError

    try:
        return _non_negative_seed(value)
    except ValueError as exc:
        raise SpecError(file, field, str(exc)) from None


def _num(x: float) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:.4g}"


# local worker processes per CPU a command may start: each holds the op tables and its
# pricing templates (~0.3-0.5 GB), so far past the CPUs they only queue for the cores and
# fill the memory (a pool of 100,000 was seen to hang for minutes starting)
WORKERS_PER_CPU = 4


def check_workers(workers: Any, local: bool = True) -> None:
    """``--workers`` (``workers=`` from Python): an integer of at least 1; for local processes
    at most WORKERS_PER_CPU x this machine's CPUs (a Ray cluster may have more CPUs)."""
    from simulator.specs.loading import SpecError

    cpus = os.cpu_count() or 1
    if isinstance(workers, bool) or not isinstance(workers, int):
        raise SpecError("(arguments)", "workers", f"must be an integer, got {workers!r}")
    if workers < 1:
        raise SpecError("(arguments)", "workers", f"must be at least 1, got {workers}")
    if local and workers > WORKERS_PER_CPU * cpus:
        raise SpecError(
            "(arguments)",
            "workers",
            f"{workers:,} local worker processes for {cpus} CPUs: at most {WORKERS_PER_CPU * cpus}"
            f" ({WORKERS_PER_CPU} per CPU; each holds the op tables)",
        )


# k of a k-fold check: a fold per row at most is checked where the rows are known; past 100
# folds the held-out error is that of leave-one-out on any table here, and 10^11 folds spun
MAX_FOLDS = 100


def check_fold_count(folds: Any) -> int:
    """``--folds``: 2 to MAX_FOLDS."""
    from simulator.specs.loading import SpecError

    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise SpecError("(arguments)", "folds", f"must be at least 2, got {folds}")
    if folds > MAX_FOLDS:
        raise SpecError(
            "(arguments)", "folds", f"{folds:,} exceeds {MAX_FOLDS} (simulator/specs/limits.py)"
        )
    return folds
