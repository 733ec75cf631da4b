"""The silicon sample's own spread: repeat runs and vLLM versions of one configuration."""

from __future__ import annotations

import dataclasses
import math

import pytest

from simulator.validation.silicon import SiliconPoint
from simulator.validation.silicon_spread import spreads

BASE = SiliconPoint(
    row=1,
    id="x",
    model_path="m",
    card="llama-3.3-70b",
    system="h200_sxm",
    device="h200",
    backend_version="0.19.0",
    precision="fp8",
    gemm_quant_mode="fp8",
    moe_quant_mode="fp8",
    weight_precision=(),
    isl=1024,
    osl=1024,
    batch_size=4,
    conc=4,
    tp=2,
    dp=1,
    ep=1,
    ttft_ms=100.0,
    tpot_ms=10.0,
)


def pt(
    version: str = "0.19.0", ttft: float = 100.0, tpot: float = 10.0, isl: int = 1024, tp: int = 2
) -> SiliconPoint:
    return dataclasses.replace(
        BASE, backend_version=version, ttft_ms=ttft, tpot_ms=tpot, isl=isl, tp=tp
    )


# (points, repeat pairs, version pairs, repeat TTFT median %, version TTFT median %)
CASES = {
    "one record stored twice is no repeat": ([pt(), pt()], 0, 0, None, None),
    "a repeat 10 % apart": ([pt(), pt(ttft=110.0)], 1, 0, 10.0, None),
    "the spread is symmetric": ([pt(ttft=110.0), pt()], 1, 0, 10.0, None),
    "two versions 25 % apart": ([pt(), pt("nightly", ttft=125.0)], 0, 1, None, 25.0),
    "a version's side is the median of its repeats": (
        [pt(ttft=90.0), pt(ttft=110.0), pt("0.18.0", ttft=150.0)],
        1,
        1,
        100.0 * (110 / 90 - 1),
        50.0,
    ),
    "another configuration pairs with nothing": (
        [pt(), pt("0.18.0", ttft=200.0, tp=4)],
        0,
        0,
        None,
        None,
    ),
    "three versions make three pairs": (
        [pt(), pt("0.18.0", ttft=120.0), pt("0.17.0", ttft=150.0)],
        0,
        3,
        None,
        25.0,
    ),
}


@pytest.mark.parametrize(
    ("points", "repeats", "versions", "repeat_ttft", "version_ttft"), CASES.values(), ids=CASES
)
def test_spreads(
    points: list[SiliconPoint],
    repeats: int,
    versions: int,
    repeat_ttft: float | None,
    version_ttft: float | None,
) -> None:
    rep, ver = spreads(points)
    assert (rep.kind, ver.kind) == ("repeat runs", "vLLM versions")
    assert (rep.pairs, ver.pairs) == (repeats, versions)
    for got, want in ((rep.ttft_median_pct, repeat_ttft), (ver.ttft_median_pct, version_ttft)):
        if want is None:
            assert got is None
        else:
            assert got is not None
            assert math.isclose(got, want, rel_tol=1e-9)


def test_tpot_and_the_upper_quartile() -> None:
    # four version pairs of one configuration each: TPOT 0, 10, 20, 40 % apart
    points = []
    for i, gap in enumerate((1.0, 1.1, 1.2, 1.4)):
        points += [pt(isl=1000 + i), pt("0.18.0", tpot=10.0 * gap, isl=1000 + i)]
    ver = spreads(points)[1]
    assert (ver.pairs, ver.configs) == (4, 4)
    assert ver.ttft_median_pct == pytest.approx(0.0)
    assert ver.tpot_median_pct == pytest.approx(100 * (math.sqrt(1.1 * 1.2) - 1), rel=1e-9)
    assert ver.tpot_p75_pct is not None
    assert 20.0 < ver.tpot_p75_pct < 40.0
