"""How far the measured serving points move on their own: the validation set's floor.

The silicon sample holds some configurations more than once. Two kinds of pair say how much
a measurement moves with no change to the configuration:

- **repeat runs**: the same configuration on the same ``backend_version``, measured twice
  with different results (identical TTFT and TPOT is one record stored twice: not counted);
- **vLLM versions**: the same configuration on two ``backend_version`` values (each side the
  median of its repeats), i.e. what an engine upgrade alone did to the same benchmark.

A simulator that does not model the engine version cannot be expected to do better than
the second spread. A pair's spread is max/min - 1 of its two values (symmetric in the two).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # silicon.py imports this module
    from simulator.validation.silicon import SiliconPoint

Config = tuple[object, ...]
Latency = tuple[float, float]  # (TTFT ms, TPOT ms)
Pair = tuple[Config, Latency, Latency]


def config_key(p: SiliconPoint) -> Config:
    """Everything the simulator reads from a row, except the engine version."""
    return (
        p.card,
        p.system,
        p.precision,
        p.gemm_quant_mode,
        p.moe_quant_mode,
        p.isl,
        p.osl,
        p.conc,
        p.tp,
        p.dp,
        p.ep,
    )


@dataclass(frozen=True)
class Spread:
    kind: str  # "repeat runs" / "vLLM versions"
    pairs: int
    configs: int  # distinct configurations the pairs come from
    # None: no pair of this kind
    ttft_median_pct: float | None
    ttft_p75_pct: float | None
    tpot_median_pct: float | None
    tpot_p75_pct: float | None


def _quantile_pct(values: list[float], q: int) -> float:
    """The q-quantile of log ratios, as a percentage max/min - 1."""
    return 100.0 * (math.exp(statistics.quantiles(values, n=4, method="inclusive")[q]) - 1.0)


def _spread(kind: str, pairs: list[Pair]) -> Spread:
    if not pairs:
        return Spread(kind, 0, 0, None, None, None, None)
    ttft = [abs(math.log(a[0] / b[0])) for _, a, b in pairs]
    tpot = [abs(math.log(a[1] / b[1])) for _, a, b in pairs]
    if len(pairs) == 1:  # quantiles need two values
        ttft, tpot = ttft * 2, tpot * 2
    return Spread(
        kind,
        len(pairs),
        len({k for k, _, _ in pairs}),
        _quantile_pct(ttft, 1),
        _quantile_pct(ttft, 2),
        _quantile_pct(tpot, 1),
        _quantile_pct(tpot, 2),
    )


def spreads(points: Sequence[SiliconPoint]) -> list[Spread]:
    """The repeat-run and cross-version spreads of ``points`` (all mappable rows)."""
    runs: dict[Config, dict[str, list[Latency]]] = defaultdict(lambda: defaultdict(list))
    for p in points:
        runs[config_key(p)][p.backend_version].append((p.ttft_ms, p.tpot_ms))
    repeats: list[Pair] = []
    versions: list[Pair] = []
    for key, by_version in runs.items():
        medians = []
        for measured in by_version.values():
            distinct = sorted(set(measured))
            repeats += [(key, a, b) for a, b in itertools.combinations(distinct, 2)]
            ttft, tpot = zip(*measured, strict=True)
            medians.append((statistics.median(ttft), statistics.median(tpot)))
        versions += [(key, a, b) for a, b in itertools.combinations(medians, 2)]
    return [_spread("repeat runs", repeats), _spread("vLLM versions", versions)]
