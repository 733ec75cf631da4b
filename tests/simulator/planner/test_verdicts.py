"""A device whose every configuration was pruned for something other than memory is told
"has no valid configuration" with the reason, never that its weights do not fit; expert
parallelism swept on a dense model does not change what the weights need."""

from __future__ import annotations

import math

from simulator.planner.analysis import best_per_device, pruned_table
from simulator.planner.expand import expand
from simulator.planner.verdicts import min_gpus_for_weights, verdicts
from tests.simulator.planner.test_report_decision import run_row, runs_of, space_of


def test_an_invalid_sweep_is_not_called_too_big() -> None:
    # Llama 3.3 70B is dense: EP 8 with DP 2 is no deployment (EP spans TP x DP, and there are
    # no experts); the weights fit 8 H100s
    space = space_of(devices=["h100"], sweep={"tp": [8], "dcp": [1], "dp": [2], "ep": [8]})
    candidates, pruned = expand(space)
    assert not candidates
    assert all(p.reason.startswith("serving.ep") for p in pruned)
    runs = runs_of([])
    (v,) = verdicts(space, runs, best_per_device(space, runs), pruned_table(pruned))
    assert v.kind == "no_valid_configuration"
    assert v.text == f"has no valid configuration: {pruned[0].reason}"
    plain = space_of(devices=["h100"])
    need = min_gpus_for_weights(plain, "h100")
    assert need is not None
    assert min_gpus_for_weights(space, "h100") == need  # not None ("beyond 1,024 GPUs")


def test_a_run_that_measured_no_gap_says_so_not_a_dash() -> None:
    space = space_of(devices=["h100"], sweep={"tp": [8], "dcp": [1]})
    rows = [run_row(space, "h100", u, 100.0 * u, math.nan) for u in space.concurrency]
    runs = runs_of(rows)
    (v,) = verdicts(space, runs, best_per_device(space, runs))
    assert v.kind == "misses_slo"
    window = space.duration_s - space.warmup_s
    assert v.text.startswith("misses the SLO: no inter-token gap was measured at the lowest load")
    assert f"in a {window:,.0f} s window after the warm-up" in v.text
