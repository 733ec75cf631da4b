"""Timing spikes in measured grids are lowered; kernel switches and slow rows are kept.

The grids are built on a smooth power law (t ~ m^0.8 n^0.5 k^0.3) so that every cell of the
clean data lies on the log-log line through its neighbours: only what a case adds differs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from simulator.measured.grid import SPIKE_RATIO, Grid

MS = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
NS = [256.0, 512.0, 1024.0, 2048.0, 4096.0]
KS = [512.0, 1024.0, 2048.0, 4096.0]
AXES = ("m", "n", "k")


def smooth(points: np.ndarray) -> np.ndarray:
    p = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    return np.log(1e-6 * p[:, 0] ** 0.8 * p[:, 1] ** 0.5 * p[:, 2] ** 0.3)


def cube() -> tuple[np.ndarray, np.ndarray]:
    mesh = np.meshgrid(MS, NS, KS, indexing="ij")
    pts = np.column_stack([a.ravel() for a in mesh])
    return pts, np.exp(smooth(pts))


def at(
    pts: np.ndarray, m: float | None = None, n: float | None = None, k: float | None = None
) -> np.ndarray:
    sel = np.ones(len(pts), dtype=bool)
    for j, v in enumerate((m, n, k)):
        if v is not None:
            sel &= pts[:, j] == v
    return sel


def build(pts: np.ndarray, t: np.ndarray) -> Grid:
    return Grid(AXES, pts, t, smooth)


def ratio_to_clean(grid: Grid, pts: np.ndarray) -> np.ndarray:
    """Each cell's value over the clean power law, at the given points."""
    value, _ = grid.log_seconds(pts)
    return np.exp(value - smooth(pts))


def inner_burst(pts: np.ndarray) -> np.ndarray:
    """Every n of m = 4, k = 1024 but the first and last: the collector recovered."""
    return at(pts, m=4.0, k=1024.0) & (pts[:, 1] != NS[0]) & (pts[:, 1] != NS[-1])


UNDER = SPIKE_RATIO * 0.95
# (case, which cells are raised, factor, cells expected lowered, each raised cell's value
# over the clean surface afterwards)
CASES = [
    ("one cell 3x", lambda p: at(p, m=4.0, n=1024.0, k=1024.0), 3.0, 1, [1.0]),
    # lowered to the highest line that calls it a spike: back on the surface where the n
    # line runs through the burst too, halfway (in log) at the burst's last cell
    ("a burst along n (the collector's sweep) 2.5x", inner_burst, 2.5, 3, [1.0, 1.0, 2.5**0.5]),
    # kept as measured
    (
        "one cell just under the ratio",
        lambda p: at(p, m=4.0, n=1024.0, k=1024.0),
        UNDER,
        0,
        [UNDER],
    ),
]


@pytest.mark.parametrize(
    ("case", "where", "factor", "lowered", "after"), CASES, ids=[c[0] for c in CASES]
)
def test_spikes_are_lowered_to_their_neighbour_line(
    case: str,
    where: Callable[[np.ndarray], np.ndarray],
    factor: float,
    lowered: int,
    after: list[float],
) -> None:
    pts, t = cube()
    raised = where(pts)
    assert raised.sum() == len(after)
    grid = build(pts, np.where(raised, t * factor, t))
    assert grid.despiked == lowered
    assert np.allclose(ratio_to_clean(grid, pts[raised]), after, rtol=1e-9)


KEPT = [
    # every n and k of one m slow: a kernel that is slow at that token count (FP8 at m = 1
    # on Blackwell), smooth along n and k
    ("a slow row", lambda p: p[:, 0] == 4.0, 3.0),
    # a kernel switch: every m from 8 on twice as slow, a step that persists
    ("a step in m", lambda p: p[:, 0] >= 8.0, 2.0),
    ("a step in k", lambda p: p[:, 2] >= 2048.0, 2.0),
]


@pytest.mark.parametrize(("case", "where", "factor"), KEPT, ids=[c[0] for c in KEPT])
def test_structure_that_persists_is_kept(case: str, where, factor: float) -> None:
    pts, t = cube()
    t = np.where(where(pts), t * factor, t)
    grid = build(pts, t)
    assert grid.despiked == 0
    value, _ = grid.log_seconds(pts)
    assert np.allclose(np.exp(value), t, rtol=1e-9)


def test_one_axis_grids_lower_a_lone_point_and_keep_a_step() -> None:
    pts = np.array([[1.0], [2.0], [4.0], [8.0], [16.0]])
    flat = lambda p: np.zeros(len(p))  # noqa: E731
    spike = Grid(("b",), pts, np.array([1.0, 1.0, 4.0, 1.0, 1.0]), flat)
    assert spike.despiked == 1
    assert np.allclose(np.exp(spike.log_t), 1.0)
    step = Grid(("b",), pts, np.array([1.0, 1.0, 4.0, 4.0, 4.0]), flat)
    assert step.despiked == 0
    assert np.allclose(np.exp(step.log_t), [1.0, 1.0, 4.0, 4.0, 4.0])


def test_a_spike_on_a_monotone_axis_no_longer_lifts_every_later_point() -> None:
    # before despiking, the running maximum carried the 6.0 to 8 and 16 tokens
    pts = np.array([[1.0], [2.0], [4.0], [8.0], [16.0]])
    t = np.array([1.0, 1.2, 6.0, 1.6, 2.0])
    grid = Grid(("b",), pts, t, lambda p: np.zeros(len(p)), monotone=("b",))
    assert grid.despiked == 1
    assert np.exp(grid.log_t[-1]) == pytest.approx(2.0)
    assert np.all(np.diff(grid.log_t) >= 0)
