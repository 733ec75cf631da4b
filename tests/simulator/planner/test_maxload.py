"""Max-load search and replicate intervals, on a synthetic runner (no simulation)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.planner.expand import expand
from simulator.planner.maxload import max_load
from simulator.planner.replicates import Chain, Interval, aggregate, passes
from simulator.planner.space import SearchSpace
from simulator.specs.scenario import SLO, Scenario

SPACE = {
    "name": "ml", "model": "llama-3.3-70b", "devices": ["h100", "h200"],
    "sweep": {"tp": [4, 8]}, "concurrency": [1, 64],
    "workload": {"kind": "random", "input_tokens": 512, "output_tokens": 32,
                 "num_requests": 640, "concurrency": 1},
    "slo": {"interactivity_tok_per_s_p90": 20.0}, "duration_s": 600.0, "warmup_s": 0.0,
}  # fmt: skip
SLO20 = SLO(interactivity_tok_per_s_p90=20.0)


def fake_runner(
    capacity: dict[str, int], noise: dict[int, float] | None = None, order_seed: int = 0
):  # type: ignore[no-untyped-def]
    """Meets the SLO (25 tok/s/user) up to each config's capacity, 15 above it; ``noise``
    lowers one seed's interactivity by that factor. A chain's runs are made in turn up to
    the first that misses; the chains of a batch in an order shuffled by ``order_seed``
    (a pool's workers interleave)."""
    calls: list[str] = []
    rng = np.random.default_rng(order_seed)

    def result(sc: Scenario) -> dict[str, Any]:
        calls.append(sc.name)
        config = sc.name.rsplit("-c", 1)[0]
        users = sc.workload.concurrency
        inter = 25.0 if users <= capacity[config] else 15.0
        inter *= (noise or {}).get(sc.seed, 1.0)
        return {"interactivity_tok_per_s_p90": inter, "ttft_s_p90": 0.5,
                "throughput_tok_per_s_per_gpu": 100.0 * users, "saturated": False}  # fmt: skip

    def run(batch: list[Scenario | Chain]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for i in rng.permutation(len(batch)):
            chain = Chain.of(batch[i])
            for sc in chain.scenarios:
                out[sc.name] = result(sc)
                if chain.misses(out[sc.name]):
                    break
        return out

    return run, calls


def candidates():  # type: ignore[no-untyped-def]
    cands, _ = expand(SearchSpace.model_validate(SPACE))
    return cands


@given(st.integers(1, 70), st.integers(1, 70))
def test_finds_the_capacity_of_each_configuration(c1: int, c2: int) -> None:
    cands = candidates()[:2]
    cap = {cands[0].config_id: c1, cands[1].config_id: c2}
    run, calls = fake_runner(cap)
    found = max_load(cands, SLO20, run, lo=1, hi=64, seeds=3, tolerance=0.0)
    for s in found:
        want = cap[s.candidate.config_id]
        if want >= 64:
            assert s.best == 64
            assert "upper bound" in s.note
        else:
            assert s.best == want
            assert s.worst == want + 1
        # a probe's seeds stop at the first that misses: here every seed alike, so a failing
        # probe is one run
        assert [len(p.results) for p in s.probes] == [3 if p.passed else 1 for p in s.probes]
        assert s.simulations == sum(len(p.results) for p in s.probes)
        # bracketing + bisection: far fewer probes than a full integer sweep
        assert len(s.probes) <= 2 * math.ceil(math.log2(64)) + 2
    assert len(calls) == sum(s.simulations for s in found)


@given(st.integers(1, 70), st.integers(0, 2**32 - 1))
def test_skipping_a_failed_probes_other_seeds_changes_no_answer(cap: int, order: int) -> None:
    """every_seed runs every seed of every probe; the default stops a probe's seeds at the
    first that misses: the same probes, bests and notes, fewer runs, and the same runs
    whatever order the probes run in."""
    cands = candidates()[:1]
    cid = cands[0].config_id
    run_all, calls_all = fake_runner({cid: cap}, noise={1: 0.7} if cap % 3 == 0 else None)
    run_some, calls_some = fake_runner({cid: cap}, noise={1: 0.7} if cap % 3 == 0 else None,
                                       order_seed=order)  # fmt: skip
    (every,) = max_load(cands, SLO20, run_all, lo=1, hi=64, seeds=3, every_seed=True)
    (some,) = max_load(cands, SLO20, run_some, lo=1, hi=64, seeds=3)
    assert [(p.users, p.passed) for p in some.probes] == [(p.users, p.passed) for p in every.probes]
    assert (some.best, some.worst, some.note) == (every.best, every.worst, every.note)
    assert every.simulations == 3 * len(every.probes) == len(calls_all)
    assert len(calls_some) == some.simulations <= every.simulations
    # the seeds after a probe's first miss are what is skipped
    skipped = 0
    for p in every.probes:
        first_miss = next((i for i, r in enumerate(p.results) if not passes(SLO20, [r])), None)
        skipped += 0 if first_miss is None else len(p.results) - first_miss - 1
    assert every.simulations - some.simulations == skipped
    run_other, calls_other = fake_runner({cid: cap}, noise={1: 0.7} if cap % 3 == 0 else None,
                                         order_seed=order + 1)  # fmt: skip
    max_load(cands, SLO20, run_other, lo=1, hi=64, seeds=3)
    assert sorted(calls_other) == sorted(calls_some)


def test_a_configuration_that_fails_at_the_lower_bound_has_no_capacity() -> None:
    cands = candidates()[:1]
    run, _ = fake_runner({cands[0].config_id: 0})
    (s,) = max_load(cands, SLO20, run, lo=4, hi=64, seeds=2)
    assert s.best is None
    assert "lower bound" in s.note
    assert len(s.probes) == 1


def test_one_bad_seed_fails_the_probe() -> None:
    cands = candidates()[:1]
    run, _ = fake_runner({cands[0].config_id: 40}, noise={1: 0.7})  # seed 1: 17.5 tok/s
    (s,) = max_load(cands, SLO20, run, lo=1, hi=64, seeds=3)
    assert s.best is None  # every probe has the bad seed


def test_tolerance_stops_early() -> None:
    cands = candidates()[:1]
    run, _ = fake_runner({cands[0].config_id: 37})
    (exact,) = max_load(cands, SLO20, run, lo=1, hi=64, seeds=1, tolerance=0.0)
    run, _ = fake_runner({cands[0].config_id: 37})
    (rough,) = max_load(cands, SLO20, run, lo=1, hi=64, seeds=1, tolerance=0.25)
    assert exact.best == 37
    assert rough.best is not None
    assert rough.best <= 37
    assert rough.worst is not None
    assert rough.worst - rough.best <= 0.25 * rough.best
    assert len(rough.probes) < len(exact.probes)


def test_saturated_seed_fails() -> None:
    ok = {"interactivity_tok_per_s_p90": 30.0, "ttft_s_p90": 0.1}
    assert passes(SLO20, [ok, ok])
    assert not passes(SLO20, [ok, {**ok, "saturated": True}])
    assert not passes(SLO20, [])


@pytest.mark.parametrize(
    ("values", "mean", "half"),
    [
        ([10.0], 10.0, 0.0),
        ([10.0, 12.0], 11.0, 12.706 * math.sqrt(2.0 / 2)),
        ([1.0, 2.0, 3.0], 2.0, 4.303 * 1.0 / math.sqrt(3)),
        ([5.0, None, 7.0], 6.0, 12.706 * math.sqrt(2.0 / 2)),
    ],
)
def test_t_interval_of_the_mean(values: list[float | None], mean: float, half: float) -> None:
    iv = Interval.of(values)
    assert iv.mean == pytest.approx(mean)
    assert iv.high - iv.mean == pytest.approx(half, rel=1e-3)  # type: ignore[operator]
    # the figures are non-negative: the lower end is cut at zero
    assert iv.low == pytest.approx(max(mean - half, 0.0), rel=1e-3, abs=1e-12)


def test_aggregate_keeps_the_worst_seed_of_the_slo_figures() -> None:
    rs = [{"interactivity_tok_per_s_p90": x, "ttft_s_p90": y, "throughput_tok_per_s_per_gpu": z}
          for x, y, z in ((50.0, 1.0, 100.0), (40.0, 3.0, 120.0), (45.0, 2.0, 110.0))]  # fmt: skip
    agg = aggregate(rs)
    assert agg["seeds"] == 3
    assert agg["interactivity_p90_worst"] == 40.0
    assert agg["ttft_p90_s_worst"] == 3.0
    assert agg["throughput_tok_per_s_per_gpu"] == pytest.approx(110.0)
    assert (
        agg["throughput_tok_per_s_per_gpu_ci_low"]
        < 110.0
        < agg["throughput_tok_per_s_per_gpu_ci_high"]
    )


def test_seeds_whose_cache_switched_state_are_counted_and_reported() -> None:
    import pandas as pd

    from simulator.planner.report_tables import unsteady_note

    switched, steady = [0.9, 0.9, 0.0, 0.0], [0.9, 0.88, 0.92, 0.9]
    rs = [{"prefix_hit_rate_quarters": q} for q in (switched, steady, steady)]
    assert aggregate(rs)["unsteady_seeds"] == 1
    assert aggregate(rs[1:])["unsteady_seeds"] == 0
    assert aggregate([{}])["unsteady_seeds"] == 0  # a result from before the field
    best = pd.DataFrame({"device": ["b200", "h200"], "unsteady_seeds": [0, 1], "seeds": [3, 3]})
    note = unsteady_note(best)
    assert "h200 on 1 of 3 seeds" in note
    assert "b200" not in note
    assert unsteady_note(best.assign(unsteady_seeds=0)) == ""
