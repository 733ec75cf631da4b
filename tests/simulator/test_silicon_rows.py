"""Silicon-sample rows whose parallel layout cannot be trusted are skipped, with a reason; a
run listed twice counts once."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.validation.silicon import SiliconPoint
from simulator.validation.silicon_rows import (
    SKIP_ID_LAYOUT,
    SKIP_REPEATED,
    SKIP_TWO_LAYOUTS,
    named_layout,
    repeated_rows,
    untrusted_layouts,
)
from tests.simulator.test_silicon_spread import BASE


def row(
    n: int, id_: str, tp: int = 4, dp: int = 1, ep: int = 4, ttft: float = 169.94
) -> SiliconPoint:
    return dataclasses.replace(BASE, row=n, id=id_, tp=tp, dp=dp, ep=ep, ttft_ms=ttft)


SIXTEEN = {"tp": 4, "dp": 4, "ep": 16}  # the columns' layout of the mislabelled rows
# (rows, row -> expected reason); rows not named are kept
CASES = {
    "id and columns agree": ([row(1, "x_c4_tp4_ep4_1294")], {}),
    "the id names tp4 ep4, the columns 16 GPUs": (
        [row(1, "x_c4_tp4_ep4_1294", **SIXTEEN)],
        {1: SKIP_ID_LAYOUT},
    ),
    "the _0 form of the id": ([row(1, "x_c4_tp4_0_ep4_0_572", **SIXTEEN)], {1: SKIP_ID_LAYOUT}),
    "no layout in the id, no twin": ([row(1, "x_c4_cfg635", **SIXTEEN)], {}),
    "a twin under an id-confirmed layout": (
        [row(1, "x_c4_cfg635", **SIXTEEN), row(2, "gap_c4_tp4_ep4_3", ttft=169.940709)],
        {1: SKIP_TWO_LAYOUTS},
    ),
    "twins and no layout confirmed: both go": (
        [row(1, "x_cfg635", **SIXTEEN), row(2, "y_cfg1")],
        {1: SKIP_TWO_LAYOUTS, 2: SKIP_TWO_LAYOUTS},
    ),
    "another measurement is no twin": (
        [row(1, "x_cfg635", **SIXTEEN), row(2, "y_tp4_ep4_3", ttft=176.8)],
        {},
    ),
    "the same layout twice is a duplicate, not a conflict": (
        [row(1, "x_cfg635"), row(2, "y_tp4_ep4_3")],
        {},
    ),
}


@pytest.mark.parametrize(("rows", "expected"), CASES.values(), ids=CASES)
def test_untrusted_layouts(rows: list[SiliconPoint], expected: dict[int, str]) -> None:
    assert untrusted_layouts(rows) == expected


def test_named_layout() -> None:
    assert named_layout(row(1, "a_agg_1024x1024_c4_tp8_ep1_18")) == (8, 1)
    assert named_layout(row(1, "a_c8_tp4_0_ep4_0_567")) == (4, 4)
    assert named_layout(row(1, "kimik2_5_b200_vllm_fp4_agg_1024x1024_c4_cfg635")) is None


# (rows, rows skipped as the same run listed again): the first row of a run is kept
REPEATS = {
    "one run listed twice": ([row(1, "a_121"), row(2, "a_1346")], {2}),
    "three times": ([row(1, "a"), row(2, "b"), row(3, "c")], {2, 3}),
    "the last digit only (the same run written by another file)": (
        [row(1, "a", ttft=305.6292179040611), row(2, "b", ttft=305.62921790406114)],
        {2},
    ),
    "two runs of one configuration differ: both count": (
        [row(1, "a", ttft=169.94), row(2, "b", ttft=172.10)],
        set(),
    ),
    "another layout is another configuration": ([row(1, "a"), row(2, "b", tp=8, ep=8)], set()),
}


@pytest.mark.parametrize(("rows", "skipped"), REPEATS.values(), ids=REPEATS)
def test_a_run_listed_again_counts_once(rows: list[SiliconPoint], skipped: set[int]) -> None:
    out = repeated_rows(rows)
    assert set(out) == skipped
    assert set(out.values()) <= {SKIP_REPEATED}


def test_another_engine_version_is_another_run() -> None:
    a, b = row(1, "a"), dataclasses.replace(row(2, "b"), backend_version="0.20.0")
    assert repeated_rows([a, b]) == {}
