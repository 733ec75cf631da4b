"""Max-load search: per configuration, the most closed-loop users that meet the SLO.

For each configuration the search brackets the load, then bisects on integers, within the
space's bounds ``[min_users, max_users]``:

1. probe ``min_users``; if it fails the configuration cannot meet the SLO at all;
2. double the load from there (capped at ``max_users``) until a probe fails, or the bound
   passes (then the answer is "at least max_users");
3. bisect between the last passing and the first failing load until they are adjacent, or
   the gap is below ``tolerance`` of the passing load.

A probe passes only if the SLO holds on every seed and no seed saturates
(``replicates.passes``). Its seeds run in turn in one worker (``replicates.Chain``: the
later seeds reuse the first's step-pricing templates) and stop at the first that misses:
the probe fails whatever the rest would give (``every_seed`` runs them all regardless).
Which seeds run depends on the results alone, so a search makes the same runs however its
workers interleave. The search assumes passing is monotone in the load (more users never
make the SLO easier); a probe that contradicts it is kept in the table but does not move the
bracket back. All configurations advance together, one probe each per round, so a round is
one batch for the worker pool.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from simulator.planner.expand import Candidate
from simulator.planner.replicates import Chain, passes, seeds_of, variant
from simulator.specs.scenario import SLO, Scenario

# runs a batch (a chain a probe), results by scenario name
Runner = Callable[[list[Scenario | Chain]], dict[str, dict[str, Any]]]


@dataclass
class Probe:
    users: int
    scenarios: list[Scenario]  # one a seed, run in turn up to the first that misses
    results: list[dict[str, Any]] = field(default_factory=list)  # of the seeds run
    passed: bool = False


@dataclass
class LoadSearch:
    """The search of one configuration."""

    candidate: Candidate
    lo: int
    hi: int
    tolerance: float
    probes: list[Probe] = field(default_factory=list)
    best: int | None = None  # most users that passed so far
    worst: int | None = None  # fewest users that failed so far
    done: bool = False
    note: str = ""

    def next_users(self) -> int | None:
        if self.done:
            return None
        if not self.probes:
            return self.lo
        if self.best is None:  # min_users failed
            self.done, self.note = True, f"misses the SLO at the lower bound ({self.lo} users)"
            return None
        if self.worst is None:
            if self.best >= self.hi:
                self.done, self.note = True, f"meets the SLO at the upper bound ({self.hi} users)"
                return None
            return min(2 * self.best, self.hi)
        gap = self.worst - self.best
        if gap <= 1 or gap <= self.tolerance * self.best:
            self.done = True
            self.note = f"between {self.best} (meets) and {self.worst} users (misses)"
            return None
        return (self.best + self.worst) // 2

    def record(self, probe: Probe) -> None:
        self.probes.append(probe)
        if probe.passed:
            if self.worst is None or probe.users < self.worst:
                self.best = max(self.best or 0, probe.users)
        elif self.best is None or probe.users > self.best:
            self.worst = probe.users if self.worst is None else min(self.worst, probe.users)

    @property
    def simulations(self) -> int:
        return sum(len(p.results) for p in self.probes)

    def best_probe(self) -> Probe | None:
        return next((p for p in self.probes if p.passed and p.users == self.best), None)


def probe_scenarios(cand: Candidate, users: int, seeds: list[int]) -> list[Scenario]:
    base = cand.scenarios[0]
    return [variant(base, f"{cand.config_id}-c{users}-s{s}", s, users) for s in seeds]


def max_load(
    candidates: list[Candidate],
    slo: SLO,
    run: Runner,
    lo: int,
    hi: int,
    seeds: int,
    base_seed: int = 0,
    tolerance: float = 0.05,
    progress: Callable[[int, int], None] | None = None,
    every_seed: bool = False,
) -> list[LoadSearch]:
    """The max-load search of every candidate; ``run`` runs a batch of scenarios."""
    searches = [LoadSearch(c, lo, hi, tolerance) for c in candidates]
    seed_list = seeds_of(base_seed, seeds)
    rounds = 0
    while True:
        batch: list[tuple[LoadSearch, Probe]] = []
        for s in searches:
            users = s.next_users()
            if users is not None:
                batch.append((s, Probe(users, probe_scenarios(s.candidate, users, seed_list))))
        if not batch:
            break
        rounds += 1
        until_miss = None if every_seed else slo
        results = run([Chain(tuple(p.scenarios), until_miss) for _, p in batch])
        for s, p in batch:
            p.results = [results[sc.name] for sc in p.scenarios if sc.name in results]
            p.passed = passes(slo, p.results)
            s.record(p)
        if progress is not None:
            progress(sum(s.simulations for s in searches), rounds)
    return searches
