"""Replicates: the same scenario under several seeds, their mean and a 95 % interval.

A search runs every point under ``seeds`` seeds (default 3). Every headline figure is the
mean over the seeds with a Student-t 95 % confidence interval of that mean
(``mean +- t(0.975, n - 1) x s / sqrt(n)``); with one seed the interval is the point
itself. The SLO counts as met only if it holds on every seed, and a point whose run
saturates on any seed (its queue grows through the window) fails it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from simulator.specs.scenario import SLO, Scenario
from simulator.window import unsteady

# Student-t 0.975 quantiles by degrees of freedom (scipy.stats.t.ppf(0.975, df)), so the core
# does not need scipy at import time for a handful of constants
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262, 10: 2.228, 15: 2.131, 20: 2.086, 30: 2.042}  # fmt: skip
Z975 = 1.960


def t975(df: int) -> float:
    if df <= 0:
        return math.nan
    if df in T975:
        return T975[df]
    below = max(k for k in T975 if k < df) if df < 30 else 30
    return T975[below] if df < 30 else Z975


@dataclass(frozen=True)
class Interval:
    mean: float | None
    low: float | None
    high: float | None
    n: int

    @classmethod
    def of(cls, values: Sequence[float | None]) -> Interval:
        xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
        if not xs:
            return cls(None, None, None, 0)
        m = sum(xs) / len(xs)
        if len(xs) == 1:
            return cls(m, m, m, 1)
        var = sum((x - m) ** 2 for x in xs) / (len(xs) - 1)
        half = t975(len(xs) - 1) * math.sqrt(var / len(xs))
        # every figure here is non-negative: a t interval reaching below zero is cut at zero
        return cls(m, max(m - half, 0.0), m + half, len(xs))


def variant(scenario: Scenario, name: str, seed: int, users: int | None = None) -> Scenario:
    """The scenario under another seed (and, given ``users``, another closed-loop load)."""
    update: dict[str, Any] = {"seed": seed, "name": name}
    if users is not None:
        update["workload"] = scenario.workload.model_copy(update={"concurrency": users})
    return scenario.model_copy(update=update)


def seeds_of(base_seed: int, seeds: int) -> list[int]:
    return [base_seed + i for i in range(seeds)]


@dataclass(frozen=True)
class Chain:
    """Runs made in turn by one worker, so the later ones reuse what the first loaded and
    priced (a max-load probe's seeds share step-pricing templates), stopping after the first
    whose result misses ``until_miss`` (a probe fails on one seed that misses); None: all.
    Which runs are made depends on the results alone, never on the workers' timing."""

    scenarios: tuple[Scenario, ...]
    until_miss: SLO | None = None

    @classmethod
    def of(cls, item: Scenario | Chain) -> Chain:
        """``item``, a scenario as a chain of one."""
        return item if isinstance(item, Chain) else cls((item,))

    def misses(self, result: dict[str, Any]) -> bool:
        return self.until_miss is not None and not passes(self.until_miss, [result])


def passes(slo: SLO, results: Sequence[dict[str, Any]]) -> bool:
    """The SLO holds on every seed and no seed saturated."""
    if not results:
        return False
    for r in results:
        if r.get("saturated"):
            return False
        if slo.met(r.get("interactivity_tok_per_s_p90"), r.get("ttft_s_p90")) is False:
            return False
    return True


# figures aggregated across seeds: summary key -> column stem in the runs table
FIGURES = {
    "throughput_tok_per_s_per_gpu": "throughput_tok_per_s_per_gpu",
    "output_tok_per_s_per_gpu": "output_tok_per_s_per_gpu",
    "interactivity_tok_per_s_p50": "interactivity_p50",
    "interactivity_tok_per_s_p90": "interactivity_p90",
    "ttft_s_p50": "ttft_p50_s",
    "ttft_s_p90": "ttft_p90_s",
    "prefix_hit_rate": "prefix_hit_rate",
}


def aggregate(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean and interval of every figure over the seeds' results, plus the worst seed of the
    two SLO figures (lowest P90 interactivity, highest P90 TTFT)."""
    out: dict[str, Any] = {"seeds": len(results)}
    for key, stem in FIGURES.items():
        iv = Interval.of([r.get(key) for r in results])
        out[stem] = iv.mean
        out[f"{stem}_ci_low"] = iv.low
        out[f"{stem}_ci_high"] = iv.high
    inter = [
        r["interactivity_tok_per_s_p90"] for r in results if r.get("interactivity_tok_per_s_p90")
    ]
    ttft = [r["ttft_s_p90"] for r in results if r.get("ttft_s_p90") is not None]
    out["interactivity_p90_worst"] = min(inter) if inter else None
    out["ttft_p90_s_worst"] = max(ttft) if ttft else None
    out["saturated_seeds"] = sum(1 for r in results if r.get("saturated"))
    # seeds whose cache switched state inside the window (metrics.unsteady)
    out["unsteady_seeds"] = sum(
        1 for r in results if unsteady(r.get("prefix_hit_rate_quarters") or ())
    )
    return out
