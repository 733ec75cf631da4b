"""The TP-scaling diagnostic of the silicon validation: which configurations form a family,
the medians over repeated rows, the ratios and the per-system sentence."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.validation.silicon_scaling import families, ratios, scaling_rows, scaling_summary
from simulator.validation.silicon_sim import SiliconResult
from tests.simulator.test_silicon_spread import BASE


def result(tp: int, measured_ms: float, sim_ms: float, conc: int = 4) -> SiliconResult:
    p = dataclasses.replace(BASE, tp=tp, conc=conc, ttft_ms=measured_ms)
    return SiliconResult(p, 10 * conc, "ok", 10 * conc, sim_ms, 10.0, sim_ms, 10.0, sim_ms)


# measured TTFT flat with TP (a fixed cost), simulated halving at each doubling
FLAT = [result(1, 100.0, 80.0), result(2, 95.0, 40.0), result(4, 90.0, 20.0)]


def test_a_family_needs_three_tp_degrees_at_low_load() -> None:
    assert len(families(FLAT)) == 1
    assert families(FLAT[:2]) == {}  # two TP degrees: no trend to read
    busy = [dataclasses.replace(r, point=dataclasses.replace(r.point, conc=64)) for r in FLAT]
    assert families(busy) == {}  # queueing, not fixed costs, decides TTFT there


def test_the_lowest_concurrency_and_the_median_of_repeats() -> None:
    rows = [*FLAT, result(4, 110.0, 30.0), result(4, 130.0, 40.0), result(8, 50.0, 5.0, conc=8)]
    ((conc, tps),) = families(rows).values()
    assert conc == 4
    assert tps[4] == (110.0, 30.0)  # median of 90 / 110 / 130 and of 20 / 30 / 40
    assert 8 not in tps  # another concurrency


def test_versions_and_lengths_are_separate_families() -> None:
    other = [dataclasses.replace(r, point=dataclasses.replace(r.point, isl=8192)) for r in FLAT]
    newer = [
        dataclasses.replace(r, point=dataclasses.replace(r.point, backend_version="9.9"))
        for r in FLAT
    ]
    assert len(families([*FLAT, *other, *newer])) == 3


def test_ratios_rows_and_summary() -> None:
    ((_, tps),) = families(FLAT).values()
    assert ratios(tps) == pytest.approx((0.9, 0.25))
    (row,) = scaling_rows(families(FLAT))
    assert row[6:] == ["1/2/4", "100/95/90", "80/40/20", "0.90", "0.25"]
    text = scaling_summary(families(FLAT))
    assert f"{BASE.device}: measured 0.90, simulated 0.25 (1 family)" in text


def test_failed_points_are_left_out() -> None:
    failed = dataclasses.replace(FLAT[0], status="not simulated: x")
    assert families([failed, *FLAT[1:]]) == {}
    assert "No configuration" in scaling_summary(families([failed, *FLAT[1:]]))
