"""Interpolation on measured grids: exact at measured points, bounded and monotone between
them, continuous into the extrapolation, missing cells filled from their neighbours."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.measured.grid import Grid


def power_law(points: np.ndarray) -> np.ndarray:
    """A baseline: t = 1e-6 * m^0.8 * n^0.5 (log-seconds)."""
    p = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    return np.log(1e-6 * p[:, 0] ** 0.8 * p[:, 1] ** 0.5)


def mesh(ms: list[float], ns: list[float]) -> np.ndarray:
    a, b = np.meshgrid(ms, ns, indexing="ij")
    return np.column_stack([a.ravel(), b.ravel()])


MS = [1.0, 4.0, 16.0, 64.0, 256.0]
NS = [128.0, 1024.0, 8192.0]


def noisy_grid(seed: int, monotone: tuple[str, ...] = ()) -> tuple[Grid, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    pts = mesh(MS, NS)
    t = np.exp(power_law(pts)) * np.exp(rng.normal(0, 0.05, len(pts)))
    return Grid(("m", "n"), pts, t, power_law, monotone), pts, t


def test_measured_points_come_back_exactly() -> None:
    grid, pts, t = noisy_grid(0)
    log_t, outside = grid.log_seconds(pts)
    assert np.allclose(np.exp(log_t), t, rtol=1e-12)
    assert not outside.any()


@given(st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.integers(0, 50))
def test_between_points_the_value_stays_within_its_corners(u: float, w: float, seed: int) -> None:
    grid, _, _ = noisy_grid(seed)
    i, j = 1, 1  # the cell [4, 16] x [1024, 8192]
    m = np.exp(np.log(MS[i]) + u * (np.log(MS[i + 1]) - np.log(MS[i])))
    n = np.exp(np.log(NS[j]) + w * (np.log(NS[j + 1]) - np.log(NS[j])))
    value, outside = grid.log_seconds(np.array([[m, n]]))
    corners = grid.log_t[i : i + 2, j : j + 2]
    assert corners.min() - 1e-12 <= value[0] <= corners.max() + 1e-12
    assert not outside[0]


@given(st.integers(0, 50))
def test_monotone_data_interpolates_monotonically(seed: int) -> None:
    grid, _, _ = noisy_grid(seed, monotone=("m",))
    m = np.geomspace(1, 256, 200)
    for n in (128.0, 500.0, 8192.0):
        v, _ = grid.log_seconds(np.column_stack([m, np.full(m.size, n)]))
        assert np.all(np.diff(v) >= -1e-12)


def test_monotone_enforcement_is_the_least_squares_monotone_fit() -> None:
    pts = np.array([[1.0], [2.0], [4.0], [8.0]])
    t = np.array([5.0, 3.0, 6.0, 7.0])  # 2 tokens "faster" than 1: noise on one kernel
    flat = Grid(("b",), pts, t, lambda p: np.zeros(len(p)))
    mono = Grid(("b",), pts, t, lambda p: np.zeros(len(p)), monotone=("b",))
    assert np.allclose(np.exp(flat.log_t), t)
    # the falling pair pooled to its mean in log space (sqrt(5 x 3)), not lifted to 5
    assert np.allclose(np.exp(mono.log_t), [15**0.5, 15**0.5, 6.0, 7.0])


def test_one_kernel_up_to_a_limit_costs_no_more_at_fewer_rows() -> None:
    """Per-tensor FP8 at m <= 16 is one CUTLASS configuration in vLLM: a slow m = 1 row
    (Blackwell's read ~3x m = 2) is lowered to the fastest cell above it up to the limit;
    past the limit (another kernel) and along the other axis nothing moves."""
    m = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    pts = np.array([[a, n] for a in m for n in (1024.0, 4096.0)])
    row = np.array([21.0, 7.3, 7.9, 6.9, 7.2, 4.0])  # 32: a faster kernel, kept as is
    t = np.concatenate([[v, 2 * v] for v in row])
    grid = Grid(("m", "n"), pts, t, lambda p: np.zeros(len(p)), same_kernel=[("m", 16.0)])
    want = np.array([6.9, 6.9, 6.9, 6.9, 7.2, 4.0])
    assert np.allclose(np.exp(grid.log_t[:, 0]), want)
    assert np.allclose(np.exp(grid.log_t[:, 1]), 2 * want)
    plain = Grid(("m", "n"), pts, t, lambda p: np.zeros(len(p)))
    assert np.allclose(np.exp(plain.log_t[:, 0]), row)


def test_monotone_fit_pools_a_long_falling_run() -> None:
    pts = np.array([[1.0], [2.0], [4.0], [8.0], [16.0]])
    t = np.array([4.0, 5.0, 4.0, 3.2, 16.0])  # no spike: 5 is only 1.25x above its line
    mono = Grid(("b",), pts, t, lambda p: np.zeros(len(p)), monotone=("b",))
    assert mono.despiked == 0
    # (5 x 4 x 3.2)^(1/3) = 4: the falling run pooled, and equal to the first point
    assert np.allclose(np.exp(mono.log_t), [4.0, 4.0, 4.0, 4.0, 16.0])
    assert np.all(np.diff(mono.log_t) >= 0)


def test_extrapolation_follows_the_baseline_from_the_edge() -> None:
    grid, _, _ = noisy_grid(3)
    edge, _ = grid.log_seconds(np.array([[256.0, 1024.0]]))
    for m in (300.0, 1000.0, 1e5):
        far, outside = grid.log_seconds(np.array([[m, 1024.0]]))
        assert outside[0]
        expected = edge[0] + 0.8 * np.log(m / 256.0)  # the baseline's slope in m
        assert far[0] == pytest.approx(expected, rel=1e-9)
    # continuous at the edge
    just, _ = grid.log_seconds(np.array([[256.0 * (1 + 1e-9), 1024.0]]))
    assert just[0] == pytest.approx(edge[0], abs=1e-6)


def test_missing_cells_are_filled_from_their_neighbours_residuals() -> None:
    pts = mesh(MS, NS)
    t = np.exp(power_law(pts)) * 1.3  # every measurement 30 % above the baseline
    keep = np.ones(len(pts), dtype=bool)
    keep[7] = False  # one cell missing (a failed shape)
    grid = Grid(("m", "n"), pts[keep], t[keep], power_law)
    assert not grid.measured.ravel()[7]
    value, _ = grid.log_seconds(pts[7:8])
    assert np.exp(value[0]) == pytest.approx(t[7], rel=1e-9)


def test_duplicate_points_keep_their_median() -> None:
    pts = np.array([[1.0], [1.0], [1.0], [2.0]])
    t = np.array([1.0, 10.0, 2.0, 4.0])
    grid = Grid(("b",), pts, t, lambda p: np.zeros(len(p)))
    assert np.exp(grid.log_t[0]) == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("pts", "t"),
    [
        (np.zeros((0, 1)), np.zeros(0)),
        (np.array([[0.0]]), np.array([1.0])),
        (np.array([[1.0]]), np.array([-1.0])),
    ],
)
def test_bad_grids_are_refused(pts: np.ndarray, t: np.ndarray) -> None:
    with pytest.raises(ValueError, match="positive"):
        Grid(("b",), pts, t, lambda p: np.zeros(len(p)))


def line(points: np.ndarray) -> np.ndarray:
    return np.log(1e-6 * np.asarray(points, dtype=np.float64).reshape(-1, 1)[:, 0] ** 0.7)


def test_a_pickled_grid_comes_back_with_the_same_numbers() -> None:
    import pickle

    one_axis = Grid(("m",), np.array([[1.0], [8.0], [64.0]]), np.array([1e-6, 3e-6, 2e-5]), line)
    for grid in (noisy_grid(3, ("m",))[0], one_axis):
        back = pickle.loads(pickle.dumps(grid, protocol=pickle.HIGHEST_PROTOCOL))
        for name in ("values_per_axis", "axes"):
            for a, b in zip(getattr(grid, name), getattr(back, name), strict=True):
                assert a.tobytes() == b.tobytes()
        assert back.log_t.shape == grid.log_t.shape
        assert back.log_t.tobytes() == grid.log_t.tobytes()
        assert np.array_equal(back.measured, grid.measured)
        assert (back.names, back.despiked) == (grid.names, grid.despiked)
        q = np.array([[1.5, 200.0], [300.0, 50.0]])[:, : grid.ndim]
        assert back.log_seconds(q)[0].tobytes() == grid.log_seconds(q)[0].tobytes()
