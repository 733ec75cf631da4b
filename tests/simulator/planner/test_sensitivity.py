"""Sensitivity compares each device's best configuration with those one knob one step away
at their operating points, steps only to values that device was offered, and names the
reason where the neighbour was pruned or never met the SLO; ties between configurations
that ran identically go to the smaller, simpler one whatever the row order.

The runs tables are synthetic (tests/simulator/planner/test_report_decision.py's helpers):
every expectation is read from the table the test builds."""

from __future__ import annotations

import pandas as pd
import pytest

from simulator.planner.analysis import best_per_device, operating_points
from simulator.planner.compare import sensitivity
from simulator.planner.report import markdown
from simulator.planner.space import KNOBS
from tests.simulator.planner.test_report_decision import run_row, runs_of, space_of

TIB = float(2**40)


def maxload_rows(space, device, loads, scale=1.0, **kw):  # type: ignore[no-untyped-def]
    """A configuration run at its own loads (as the max-load search does), the last load that
    meets the SLO its operating point."""
    rows = [run_row(space, device, u, scale * 100 * u**0.7, 400 / u**0.5, **kw) for u in loads]
    met = [r for r in rows if r["slo_met"]]
    for r in rows:
        r["operating_point"] = bool(met) and r is met[-1]
    return rows


def test_neighbours_at_other_loads_are_compared_at_their_operating_points() -> None:
    space = space_of(devices=["h100"], sweep={"tp": [8], "dcp": [1, 8]})
    # 400/sqrt(u) >= 20/0.98: dcp8 meets up to 384 users, dcp1 (run at other loads) up to 256
    runs = runs_of(
        maxload_rows(space, "h100", [64, 256, 384, 512], dcp=8)
        + maxload_rows(space, "h100", [32, 128, 256, 400], scale=0.8)
    )
    best = best_per_device(space, runs)
    sens = sensitivity(space, runs, best)
    assert len(sens) == 1
    s = sens.iloc[0]
    points = operating_points(runs).set_index("config_id")
    here, there = points.loc["h100-tp8-dcp8"], points.loc["h100-tp8-dcp1"]
    assert (s.knob, s["from"], s.to) == ("dcp", 8, 1)
    assert (s.users_from, s.users_to) == (here.concurrency, there.concurrency) == (384, 256)
    change = there.throughput_tok_per_s_per_gpu / here.throughput_tok_per_s_per_gpu - 1
    assert s.throughput_change == pytest.approx(change)
    row = next(line for line in markdown(space, best, runs, 0).splitlines() if "(DCP)" in line)
    assert "| 384 -> 256 |" in row
    assert f"| {100 * change:+.1f} % |" in row


def test_a_step_goes_to_a_value_this_device_was_offered_not_another_devices() -> None:
    # as plan size merges them: h100 tried TP8 with 1 TiB of offload, b200 TP4 and TP8 with
    # half and all of it; the merged sweep holds every value
    space = space_of(
        devices=["h100", "b200"],
        sweep={"tp": [4, 8], "dcp": [1], "cpu_offload_bytes": [0.0, TIB / 2, TIB]},
    )
    loads = [16, 64, 256]
    runs = runs_of(
        maxload_rows(space, "h100", loads)
        + maxload_rows(space, "h100", loads, scale=1.1, offload=TIB)
        + maxload_rows(space, "b200", loads, tp=4)
        + maxload_rows(space, "b200", loads, tp=8, scale=1.5)
        + maxload_rows(space, "b200", loads, tp=8, offload=TIB / 2)
    )
    sens = sensitivity(space, runs, best_per_device(space, runs))
    h100 = sens[sens.device == "h100"]
    assert list(h100.knob) == ["cpu_offload_bytes"]  # no TP step: h100 was offered TP8 only
    assert list(h100.to) == [0.0]  # from 1 TiB to none, not to b200's 512 GiB
    b200 = sens[sens.device == "b200"]
    assert sorted(zip(b200.knob, b200.to, strict=True)) == [("cpu_offload_bytes", TIB / 2),
                                                            ("tp", 4)]  # fmt: skip


def test_a_pruned_or_never_meeting_neighbour_says_so() -> None:
    space = space_of(devices=["h100"], sweep={"tp": [4, 8, 16], "dcp": [1]})
    runs = runs_of(
        maxload_rows(space, "h100", [16, 64])
        + maxload_rows(space, "h100", [900, 1000], tp=16)  # 400/sqrt(900) < 20: never meets
    )
    reason = "weights exceed gpu_memory_utilization x usable memory"
    knobs = [k for k in KNOBS if k in runs.columns]
    pruned = pd.DataFrame([{"device": "h100", **runs.iloc[0][knobs], "tp": 4, "reason": reason}])
    sens = sensitivity(space, runs, best_per_device(space, runs), pruned).set_index("to")
    assert sens.loc[4, "note"] == f"pruned: {reason}"
    assert sens.loc[16, "note"] == "misses the SLO at every load tried"
    assert sens.users_to.isna().all()
    assert sens.throughput_change.isna().all()
    # without the pruned table the TP4 step is not offered at all
    assert list(sensitivity(space, runs, best_per_device(space, runs)).to) == [16]


@pytest.mark.parametrize("twin_first", [True, False])
def test_an_offload_twin_that_ran_identically_loses_the_tie(twin_first: bool) -> None:
    space = space_of(devices=["h100"], sweep={"tp": [8], "cpu_offload_bytes": [0.0, TIB]})
    plain = maxload_rows(space, "h100", [16, 64, 256])
    twin = maxload_rows(space, "h100", [16, 64, 256], offload=TIB)
    # (enough other configurations that the sort is not an insertion sort, which is stable)
    others = [{**r, "config_id": f"h100-other{i}"} for i in range(40)
              for r in maxload_rows(space, "h100", [16, 64, 256], scale=0.5 + i / 100)]  # fmt: skip
    runs = runs_of(others + (twin + plain if twin_first else plain + twin))
    (b,) = best_per_device(space, runs).itertuples()
    assert b.config_id == "h100-tp8-dcp1"
