"""Measured latencies on a tensor grid, interpolated in log space.

A ``Grid`` holds log(seconds) of one kernel family on the tensor product of the distinct
values of its continuous coordinates (tokens, context, bytes, ...), all in log space.

* Inside the grid: multilinear interpolation of log(seconds) over log(coordinates). At a
  measured point it returns the cell's value (the measurement, unless one of the two
  clean-ups below changed it); between points it never leaves the range of the surrounding
  corners, so it is monotone along every axis on which the cells are.
* Spikes are timing noise: a measured cell above both its measured neighbours and
  more than ``SPIKE_RATIO`` times above the log-log line through them, along two axes (the
  one axis of a 1-D grid), is lowered to the highest of those lines (``despiked`` counts
  them). Noise comes in bursts along the axis the collector swept, so two axes, not every
  one, must agree. A kernel switch is a step that persists to the next point, and a slow
  row (every n of one m) is smooth along n and k: both are kept. docs/measured.md has the
  counts.
* Where vLLM runs one kernel configuration for every coordinate up to a limit
  (``same_kernel``: per-tensor FP8 GEMMs at m <= 16), a cell is lowered to the fastest
  cell above it up to the limit (a reverse running minimum): the same work cannot cost
  more at fewer rows, so a slower cell there is the collection's, not the kernel's.
* Then, along axes where one kernel does more work (``monotone``: attention over more keys or
  requests, collectives over more bytes), the cells are replaced by their least-squares
  non-decreasing fit in log space (pool adjacent violators, line by line): a later point
  faster than an earlier one is timing noise, and the fit averages it instead of lifting
  every later point to the slowest earlier one, as a running maximum would (the running
  maximum is kept after the fits, where one axis's fit undid another's by a little).
  GEMM and MoE latencies are left as measured: their kernels switch with the token count.
* Cells the tables lack (a shape that failed or was never collected) are filled with the
  baseline (the roofline fitted to the same tables) times the mean measured/baseline ratio
  of their filled neighbours, spreading out from the measured cells.
* Outside the grid: the value at the nearest grid point, scaled by the baseline's ratio
  between the query and that point (``extrapolated`` is set).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import accumulate, pairwise
from typing import Any

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]
# log-seconds of the baseline model at points given as rows of coordinates (not logs)
Baseline = Callable[[Array], Array]
FILL_SWEEPS = 200
# assumption: a cell this many times above the line through its neighbours on two axes is
# noise; a real tile or wave boundary raises the neighbour beyond it as well (measured.md)
SPIKE_RATIO = 1.5


class Grid:
    def __init__(
        self,
        names: Sequence[str],
        coords: Array,
        seconds: Array,
        baseline: Baseline,
        monotone: Sequence[str] = (),
        same_kernel: Sequence[tuple[str, float]] = (),
    ) -> None:
        pts = np.asarray(coords, dtype=np.float64).reshape(len(seconds), len(names))
        t = np.asarray(seconds, dtype=np.float64)
        if t.size == 0 or np.any(pts <= 0) or np.any(t <= 0):
            raise ValueError("a grid needs at least one point with positive coordinates and time")
        self.names = tuple(names)
        self.baseline = baseline
        self.values_per_axis = [np.unique(pts[:, j]) for j in range(len(names))]
        self.axes = [np.log(v) for v in self.values_per_axis]
        shape = tuple(v.size for v in self.values_per_axis)
        index = tuple(np.searchsorted(v, pts[:, j]) for j, v in enumerate(self.values_per_axis))
        # duplicates (one shape timed twice) keep their median
        flat = np.ravel_multi_index(index, shape)
        logs = np.log(t)
        order = np.lexsort((logs, flat))
        flat_s, log_s = flat[order], logs[order]
        cells, start, counts = np.unique(flat_s, return_index=True, return_counts=True)
        medians = (log_s[start + (counts - 1) // 2] + log_s[start + counts // 2]) / 2.0
        log_t = np.full(int(np.prod(shape)), np.nan)
        log_t[cells] = medians
        self.measured = ~np.isnan(log_t.reshape(shape))
        despiked, self.despiked = _despike(log_t.reshape(shape), self.measured, self.axes)
        self.log_t = _fill(despiked, self._cell_baseline(shape))
        for name, limit in same_kernel:  # one kernel up to ``limit``: fewer rows cost no more
            j = self.names.index(name)
            upto = int(np.searchsorted(self.values_per_axis[j], limit, side="right"))
            if upto > 1:
                lines = np.moveaxis(self.log_t, j, -1)  # a view: written through
                head = lines[..., :upto]
                lines[..., :upto] = np.minimum.accumulate(head[..., ::-1], axis=-1)[..., ::-1]
        for name in monotone:
            self.log_t = np.apply_along_axis(_isotonic, self.names.index(name), self.log_t)
        for name in monotone:  # one axis's fit can undo another's by a little
            self.log_t = np.maximum.accumulate(self.log_t, axis=self.names.index(name))

    @property
    def ndim(self) -> int:
        return len(self.names)

    # A device's built tables hold thousands of grids and are read back from the on-disk
    # cache by every process (``device.load_measured``): one buffer a grid instead of five
    # arrays (an unpickled array costs ~3 us) reads the H100's 4,592 grids in 29 ms instead of
    # 79. The arrays come back as read-only views of that buffer, with the same bytes. Each
    # grid is then read only when a run first asks it (``LazyGrids``).
    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        values = state.pop("values_per_axis")
        axes = state.pop("axes")
        log_t = state.pop("log_t")
        measured = state.pop("measured")
        floats = np.concatenate([*values, *axes, log_t.ravel()])
        state["_packed"] = (floats.tobytes(), tuple(v.size for v in values), measured.tobytes())
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        if "_packed" not in state:  # pickled before the packing (a kept benchmark capture)
            self.__dict__.update(state)
            return
        packed: tuple[bytes, tuple[int, ...], bytes] = state.pop("_packed")  # type: ignore[assignment]
        buf, sizes, measured = packed
        floats = np.frombuffer(buf, dtype=np.float64)
        cuts = list(accumulate((0, *sizes, *sizes)))
        parts = [floats[a:b] for a, b in pairwise(cuts)]
        state["values_per_axis"] = parts[: len(sizes)]
        state["axes"] = parts[len(sizes) :]
        state["log_t"] = floats[cuts[-1] :].reshape(sizes)
        state["measured"] = np.frombuffer(measured, dtype=np.bool_).reshape(sizes)
        self.__dict__.update(state)

    def blob(self) -> bytes:
        """The grid pickled without its baseline (``LazyGrids`` binds one at load)."""
        state = self.__getstate__()
        del state["baseline"]
        return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)

    def _cell_baseline(self, shape: tuple[int, ...]) -> Array:
        mesh = np.meshgrid(*self.values_per_axis, indexing="ij")
        points = np.column_stack([m.ravel() for m in mesh])
        return self.baseline(points).reshape(shape)

    def log_seconds(self, points: Array) -> tuple[Array, NDArray[np.bool_]]:
        """log(seconds) at ``points`` (rows of coordinates) and whether each was outside."""
        x = np.log(np.asarray(points, dtype=np.float64).reshape(-1, self.ndim))
        clamped = np.empty_like(x)
        outside = np.zeros(x.shape[0], dtype=bool)
        for j, axis in enumerate(self.axes):
            c = np.clip(x[:, j], axis[0], axis[-1])
            outside |= np.abs(c - x[:, j]) > 1e-9
            clamped[:, j] = c
        value = self._interpolate(clamped)
        if outside.any():
            sel = np.flatnonzero(outside)
            value[sel] += self.baseline(np.exp(x[sel])) - self.baseline(np.exp(clamped[sel]))
        return value, outside

    def _interpolate(self, x: Array) -> Array:
        """Multilinear interpolation of ``log_t`` at log-coordinates ``x`` inside the grid."""
        lo_idx: list[NDArray[np.intp]] = []
        weights: list[Array] = []
        for j, axis in enumerate(self.axes):
            if axis.size == 1:
                lo_idx.append(np.zeros(x.shape[0], dtype=np.intp))
                weights.append(np.zeros(x.shape[0]))
                continue
            i = np.clip(np.searchsorted(axis, x[:, j], side="right") - 1, 0, axis.size - 2)
            w = (x[:, j] - axis[i]) / (axis[i + 1] - axis[i])
            lo_idx.append(i)
            weights.append(np.clip(w, 0.0, 1.0))
        out = np.zeros(x.shape[0])
        for corner in range(1 << self.ndim):
            idx: list[NDArray[np.intp]] = []
            wt: Array = np.ones(x.shape[0])
            for j in range(self.ndim):
                up = (corner >> j) & 1
                if up and self.axes[j].size == 1:
                    wt = np.zeros(x.shape[0])
                    idx.append(lo_idx[j])
                    continue
                idx.append(lo_idx[j] + up)
                wt = wt * (weights[j] if up else 1.0 - weights[j])
            out += wt * self.log_t[tuple(idx)]
        return out


def _isotonic(y: Array) -> Array:
    """The least-squares non-decreasing fit to ``y`` (pool adjacent violators): a run of
    points that falls is replaced by its mean, not lifted to its first point."""
    if y.size < 2 or np.all(np.diff(y) >= 0):
        return y
    means: list[float] = []
    sizes: list[int] = []
    for v in y.tolist():
        means.append(v)
        sizes.append(1)
        while len(means) > 1 and means[-2] > means[-1]:
            n = sizes[-2] + sizes[-1]
            means[-2] = (means[-2] * sizes[-2] + means[-1] * sizes[-1]) / n
            sizes[-2] = n
            means.pop()
            sizes.pop()
    return np.repeat(np.array(means), sizes)


def _despike(log_t: Array, measured: NDArray[np.bool_], axes: list[Array]) -> tuple[Array, int]:
    """Lower every spike (module docstring) to the highest of the neighbour lines that call
    it one; returns the new values and how many cells were lowered."""
    need = min(2, log_t.ndim)
    flagged = np.zeros(log_t.shape, dtype=np.int64)
    least = np.full(log_t.shape, np.inf)  # the smallest excess over a line that flags it
    for j, ax in enumerate(axes):
        if ax.size < 3:
            continue

        def part(lo: int, hi: int | None, j: int = j) -> tuple[slice, ...]:
            return tuple(slice(lo, hi) if i == j else slice(None) for i in range(log_t.ndim))

        shape = [1] * log_t.ndim
        shape[j] = -1
        w = ((ax[1:-1] - ax[:-2]) / (ax[2:] - ax[:-2])).reshape(shape)
        line = log_t[part(0, -2)] * (1.0 - w) + log_t[part(2, None)] * w
        inner = part(1, -1)
        both = measured[part(0, -2)] & measured[part(2, None)] & measured[inner]
        excess = np.where(both, log_t[inner] - line, -np.inf)
        # above the line and above both neighbours: the first point of a step is above the
        # line through its neighbours too, but not above the one after it
        peak = (log_t[inner] > log_t[part(0, -2)]) & (log_t[inner] > log_t[part(2, None)])
        spike = (excess > np.log(SPIKE_RATIO)) & peak
        flagged[inner] += spike
        least[inner] = np.where(spike, np.minimum(least[inner], excess), least[inner])
    lowered = flagged >= need
    if not lowered.any():
        return log_t, 0
    out = log_t.copy()
    out[lowered] -= least[lowered]
    return out, int(lowered.sum())


def _fill(log_t: Array, base: Array) -> Array:
    """Missing cells: baseline + the mean residual of their filled neighbours, spreading out
    from the measured cells one ring per sweep (the mean residual where nothing reaches)."""
    if not np.isnan(log_t).any():
        return log_t
    resid = log_t - base
    known = ~np.isnan(resid)
    for _ in range(FILL_SWEEPS):
        if known.all():
            break
        total = np.zeros_like(resid)
        count = np.zeros_like(resid)
        filled = np.where(known, resid, 0.0)
        for axis in range(resid.ndim):
            for shift in (1, -1):
                total += _shifted(filled, shift, axis)
                count += _shifted(known.astype(np.float64), shift, axis)
        new = ~known & (count > 0)
        if not new.any():
            break
        resid[new] = total[new] / count[new]
        known = known | new
    resid[~known] = np.nanmean(resid[known]) if known.any() else 0.0
    out: Array = base + resid
    return out


def _shifted(a: Array, shift: int, axis: int) -> Array:
    """``a`` moved by one cell along ``axis`` with zeros shifted in (no wrap-around)."""
    out = np.zeros_like(a)
    src = [slice(None)] * a.ndim
    dst = [slice(None)] * a.ndim
    if shift > 0:
        src[axis], dst[axis] = slice(0, -1), slice(1, None)
    else:
        src[axis], dst[axis] = slice(1, None), slice(0, -1)
    out[tuple(dst)] = a[tuple(src)]
    return out


Family = tuple[Any, ...]


class LazyGrids(Mapping[Family, Grid]):
    """A kind's grids by family, each unpickled from its ``Grid.blob`` at its first use and
    given the baseline ``bind(family)`` then. A run asks a few grids of a device's thousands
    (a dense model none of the 3,694 MoE ones of the H100): reading them all back from the
    on-disk cache took ~70 ms of every process. Iteration keeps the families' order."""

    __slots__ = ("_bind", "_items")

    def __init__(self, items: dict[Family, Grid | bytes], bind: Callable[[Family], Baseline]):
        self._items = items
        self._bind = bind

    def __getitem__(self, family: Family) -> Grid:
        grid = self._items[family]
        if isinstance(grid, bytes):
            state = pickle.loads(grid)
            grid = Grid.__new__(Grid)
            grid.__setstate__(state)
            grid.baseline = self._bind(family)
            self._items[family] = grid  # the same key: the order stays
        return grid

    def __contains__(self, family: object) -> bool:
        return family in self._items

    def __iter__(self) -> Iterator[Family]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def blobs(self) -> dict[Family, bytes]:
        """Every grid as its blob (those never read as they came)."""
        return {f: g if isinstance(g, bytes) else g.blob() for f, g in self._items.items()}
