"""How many simulations a search runs, counted before the first starts (configurations x
loads x seeds), and the ``--max-runs`` cap."""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.planner.expand import knob_values
from simulator.planner.space import SearchSpace
from simulator.specs.loading import SpecError


@dataclass(frozen=True)
class RunCount:
    """What a search will run: configurations x loads x seeds simulations (for the max-load
    search the loads are an upper bound: the probes of bracketing and bisection)."""

    configurations: int
    loads: int
    seeds: int
    bound: bool  # loads is an upper bound (max-load search), not exact (grid)

    @property
    def simulations(self) -> int:
        return self.configurations * self.loads * self.seeds

    def text(self) -> str:
        most = "at most " if self.bound else ""

        def n(x: int, what: str) -> str:
            return f"{x:,} {what}{'' if x == 1 else 's'}"

        return (
            f"{n(self.configurations, 'configuration')} x {most}{n(self.loads, 'load')} x"
            f" {n(self.seeds, 'seed')} = {most}{n(self.simulations, 'simulation')}"
        )


def seeds_text(space: SearchSpace) -> str:
    """How a point's seeds were run: "max-load, 3 seeds per point; ..." (a max-load probe's
    seeds stop at the first that misses, unless ``every_seed``)."""
    seeds = f"{space.seeds} seed{'' if space.seeds == 1 else 's'}"
    text = f"{space.search.replace('_', '-')}, {seeds} per point"
    if space.seeds_can_stop:
        text += "; a load's seeds stop at the first that misses"
    return text


def max_load_probes(lo: int, hi: int) -> int:
    """Most probes the max-load search makes between ``lo`` and ``hi`` users: the lower
    bound, the doublings up to ``hi``, the bisection of the last gap (never more than the
    loads in between)."""
    if hi <= lo:
        return 1
    doublings = math.ceil(math.log2(hi / lo))
    bisections = max(math.ceil(math.log2(hi / 2)), 0) if hi >= 2 else 0
    return min(hi - lo + 1, 1 + doublings + bisections)


def count_runs(
    space: SearchSpace, source: str = "(search)", configurations: int | None = None
) -> RunCount:
    """The simulations a search of ``space`` runs: ``configurations`` (default: the space as
    written, every device x knob combination before pruning) x loads x seeds."""
    if configurations is None:
        values = knob_values(space, source)
        configurations = len(space.devices) * math.prod(len(v) for v in values.values())
    if space.search == "grid":
        return RunCount(configurations, len(space.concurrency), space.seeds, bound=False)
    lo, hi = min(space.concurrency), max(space.concurrency)
    return RunCount(configurations, max_load_probes(lo, hi), space.seeds, bound=True)


def check_run_count(count: RunCount, max_runs: int, source: str) -> None:
    """Refuse a search above ``max_runs`` simulations (``--max-runs``)."""
    if count.simulations > max_runs:
        raise SpecError(
            source,
            "(search size)",
            f"{count.text()} exceed the cap of {max_runs:,} (narrow devices, sweep,"
            f" concurrency or seeds, or raise it with --max-runs {count.simulations})",
        )
