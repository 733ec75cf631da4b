"""Latency from measured tables: one ``KindModel`` per kind of table on one device.

A query names a family (the exact-match columns of its kind) and axis values. The answer:

* ``MEASURED``: the family is in the tables and the point inside its grid: interpolation;
* ``EXTRAPOLATED``: the family is measured, the point outside its grid: the nearest grid
  value times the fitted baseline's ratio between the point and that value;
* ``TRANSFERRED``: the family was never measured: the nearest measured family (same formats,
  closest numeric fields in log distance) at the same axis values, times the baseline's
  ratio between the two families.

The baseline is the roofline form of ``simulator.cost.latency`` (alpha-beta for collectives)
fitted to this kind's rows on this device: "the roofline fitted to the tables".
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from numpy.typing import NDArray

from simulator.cost.fit import fit_alpha_beta, fit_roofline
from simulator.cost.latency import roofline_seconds
from simulator.cost.latency_file import AlphaBeta, RooflineParams
from simulator.measured.grid import Family, Grid, LazyGrids
from simulator.measured.kinds import KINDS
from simulator.measured.work import Device, work

if TYPE_CHECKING:
    import pandas as pd

Array = NDArray[np.float64]
MEASURED, EXTRAPOLATED, TRANSFERRED = 0, 1, 2
COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "moe_alltoall")
FIT_ROWS = 3000  # rows the baseline is fitted on (an even subsample: the fit is smooth)
# 1-D query values a curve remembers before it starts afresh (a bound on memory)
MEMO_MAX = 8192


class Baseline:
    """The fitted roofline (or alpha-beta per world size) of one kind on one device."""

    def __init__(
        self,
        kind: str,
        device: Device,
        roofline: RooflineParams | None = None,
        alpha_beta: dict[int, AlphaBeta] | None = None,
    ) -> None:
        self.kind, self.device = kind, device
        self.roofline, self.alpha_beta = roofline, alpha_beta or {}

    @classmethod
    def fit(cls, kind: str, frame: pd.DataFrame, device: Device) -> Baseline:
        spec = KINDS[kind]
        step = max(1, len(frame) // FIT_ROWS)
        sub = frame.iloc[::step]
        if kind in COLLECTIVES:
            world = sub["world"].to_numpy(dtype=np.float64)
            by_world = {
                int(w): fit_alpha_beta(
                    sub["bytes"].to_numpy(float)[world == w],
                    sub["seconds"].to_numpy(float)[world == w],
                )
                for w in np.unique(world)
            }
            return cls(kind, device, alpha_beta=by_world)
        groups = by_family(sub, spec.family, spec.axes)
        parts = [
            work(
                kind,
                dict(zip(spec.family, fam, strict=True)),
                {a: coords[:, j] for j, a in enumerate(spec.axes)},
                device,
            )
            for fam, coords, _, _ in groups
        ]
        flops = np.concatenate([p[0] for p in parts])
        moved = np.concatenate([p[1] for p in parts])
        peak = np.concatenate([p[2] for p in parts])
        kernels = np.concatenate([np.full(p[0].size, p[3]) for p in parts])
        seconds = np.concatenate([t for _, _, t, _ in groups])
        params = fit_roofline(flops, moved, peak, device.memory_bw, kernels, seconds)
        return cls(kind, device, roofline=params)

    def on(self, device: Device) -> Baseline:
        """The same fitted efficiencies and fixed costs, priced with another device's peaks
        (collectives: latency and byte terms scaled by the two links' spec sheets)."""
        if self.kind not in COLLECTIVES:
            return Baseline(self.kind, device, self.roofline)
        lat = device.link_latency_s / self.device.link_latency_s
        per_byte = self.device.link_bw / device.link_bw
        scaled = {
            w: AlphaBeta(alpha_s=ab.alpha_s * lat, beta_s_per_byte=ab.beta_s_per_byte * per_byte)
            for w, ab in self.alpha_beta.items()
        }
        return Baseline(self.kind, device, alpha_beta=scaled)

    def log_seconds(self, family: dict[str, Any], points: Array) -> Array:
        spec = KINDS[self.kind]
        x = {a: points[:, j] for j, a in enumerate(spec.axes)}
        if self.kind in COLLECTIVES:
            world = int(family["world"])
            ab = self.alpha_beta.get(world) or self._nearest_world(world)
            return np.log(ab.alpha_s + ab.beta_s_per_byte * x["bytes"])
        assert self.roofline is not None
        flops, moved, peak, kernels = work(self.kind, family, x, self.device)
        t = roofline_seconds(
            self.roofline, flops, moved, peak, self.device.memory_bw, np.full(flops.size, kernels)
        )
        out: Array = np.log(np.maximum(t, 1e-12))
        return out

    def _nearest_world(self, world: int) -> AlphaBeta:
        """A world size without a fit: the nearest one, its byte term scaled by the ring's
        (n - 1) / n and its latency term by (n - 1), from the nearest measured size."""
        if not self.alpha_beta:
            return AlphaBeta(
                alpha_s=self.device.link_latency_s, beta_s_per_byte=1 / self.device.link_bw
            )
        near = min(self.alpha_beta, key=lambda w: (abs(math.log(w / world)), w))
        ab = self.alpha_beta[near]
        scale = ((world - 1) / world) / ((near - 1) / near) if near > 1 else 1.0
        lat = (world - 1) / (near - 1) if near > 1 else 1.0
        return AlphaBeta(alpha_s=ab.alpha_s * lat, beta_s_per_byte=ab.beta_s_per_byte * scale)


class FamilyBaseline:
    """A baseline bound to one family: the ``Grid``'s fill and extrapolation model."""

    def __init__(self, baseline: Baseline, family: dict[str, Any]) -> None:
        self.baseline, self.family = baseline, family

    def __call__(self, points: Array) -> Array:
        return self.baseline.log_seconds(self.family, points)


def by_family(
    frame: pd.DataFrame, family: Sequence[str], axes: Sequence[str]
) -> list[tuple[Family, Array, Array, NDArray[np.intp]]]:
    """(family, axis coordinates, seconds, row positions) of every family of ``frame``
    (numpy grouping: a pandas groupby over a thousand MoE families costs seconds)."""
    import pandas as pd

    codes, uniques = pd.MultiIndex.from_frame(frame[list(family)]).factorize()
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    coords = frame[list(axes)].to_numpy(dtype=np.float64)[order]
    seconds = (
        frame["seconds"].to_numpy(dtype=np.float64)[order]
        if "seconds" in frame.columns
        else np.full(len(frame), np.nan)
    )
    out = []
    for pos, c, t in zip(
        np.split(order, bounds),
        np.split(coords, bounds),
        np.split(seconds, bounds),
        strict=True,
    ):
        values = cast("tuple[Any, ...]", uniques[int(codes[pos[0]])])
        fam = tuple(_key(v) for v in values)
        out.append((fam, c, t, pos))
    return out


def _key(value: Any) -> Any:
    """Family values as plain Python scalars (numbers as float) so that lookups match."""
    if isinstance(value, str):
        return value
    return float(value)


class KindModel:
    """Every measured family of one kind on one device, and its fitted baseline."""

    def __init__(
        self, kind: str, frame: pd.DataFrame, device: Device, baseline: Baseline | None = None
    ) -> None:
        spec = KINDS[kind]
        self.kind, self.spec, self.device = kind, spec, device
        self.baseline = baseline or Baseline.fit(kind, frame, device)
        self.rows = len(frame)
        grids: dict[Family, Grid] = {}
        for fam, coords, seconds, _ in by_family(frame, spec.family, spec.axes):
            values = dict(zip(spec.family, fam, strict=True))
            same = [(a, lim) for col, v, a, lim in spec.same_kernel if values.get(col) == v]
            grids[fam] = Grid(spec.axes, coords, seconds, self._bind(fam), spec.monotone, same)
        self.grids: Mapping[Family, Grid] = grids

    def _bind(self, family: Family) -> FamilyBaseline:
        return FamilyBaseline(self.baseline, dict(zip(self.spec.family, family, strict=True)))

    def __getstate__(self) -> dict[str, Any]:
        """Each grid pickled on its own, without the baseline it shares with the others."""
        state = dict(self.__dict__)
        g = self.grids
        state["grids"] = (
            g.blobs() if isinstance(g, LazyGrids) else {f: v.blob() for f, v in g.items()}
        )
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.grids = LazyGrids(dict(state["grids"]), self._bind)

    def family(self, **values: Any) -> Family:
        return tuple(_key(values[c]) for c in self.spec.family)

    def nearest(self, family: Family) -> Family | None:
        """The measured family with the same text fields and the closest numbers."""
        best, best_d = None, math.inf
        for fam in self.grids:
            d = 0.0
            for a, b in zip(fam, family, strict=True):
                if isinstance(a, str) or isinstance(b, str):
                    if a != b:
                        d = math.inf
                        break
                elif a != b:
                    d += abs(math.log(a / b)) if a > 0 and b > 0 else math.inf
            if d < best_d:
                best, best_d = fam, d
        return best

    def log_seconds(self, family: Family, points: Array) -> tuple[Array, NDArray[np.int8]]:
        pts = np.asarray(points, dtype=np.float64).reshape(-1, len(self.spec.axes))
        grid = self.grids.get(family)
        if grid is not None:
            value, outside = grid.log_seconds(pts)
            return value, np.where(outside, EXTRAPOLATED, MEASURED).astype(np.int8)
        near = self.nearest(family)
        if near is None:
            fdict = dict(zip(self.spec.family, family, strict=True))
            return self.baseline.log_seconds(fdict, pts), np.full(len(pts), TRANSFERRED, np.int8)
        value, _ = self.grids[near].log_seconds(pts)
        qf = dict(zip(self.spec.family, family, strict=True))
        nf = dict(zip(self.spec.family, near, strict=True))
        value = value + self.baseline.log_seconds(qf, pts) - self.baseline.log_seconds(nf, pts)
        return value, np.full(len(pts), TRANSFERRED, np.int8)

    def axis_values(self, family: Family) -> list[Array]:
        """The grid values of each axis for ``family`` (its nearest measured family's)."""
        grid = self.grids.get(family) or self.grids.get(self.nearest(family) or ())
        if grid is not None:
            return list(grid.values_per_axis)
        # no family with these formats at all (the baseline answers): every family's values
        per_axis = zip(*(g.values_per_axis for g in self.grids.values()), strict=True)
        return [np.unique(np.concatenate(v)) for v in per_axis]


class Curve:
    """One family of one kind with some axes fixed: fast scalar queries of the rest.

    The values on the free axes' grid points are computed once (``log_seconds`` of the
    model, fixed axes interpolated); a query interpolates them in log space, and outside
    them scales the nearest one by the baseline's ratio.
    """

    __slots__ = (
        "_memo", "_t1", "_t2", "family", "fdict", "fixed", "free", "last_outside", "logs", "model",
        "outside", "queries", "status", "table", "values",
    )  # fmt: skip

    def __init__(
        self,
        model: KindModel,
        family: Family,
        fixed: dict[str, float],
        free: Sequence[str],
    ) -> None:
        self.model, self.family, self.free = model, family, tuple(free)
        spec = model.spec
        self.fdict = dict(zip(spec.family, family, strict=True))
        self.fixed = {a: float(v) for a, v in fixed.items()}
        grid_values = model.axis_values(family)
        self.values = [grid_values[spec.axes.index(a)] for a in self.free]
        self.logs = [np.log(v).tolist() for v in self.values]  # Python floats: faster sums
        mesh = np.meshgrid(*self.values, indexing="ij")
        pts = self._points([m.ravel() for m in mesh])
        log_t, status = model.log_seconds(family, pts)
        self.table = log_t.reshape(mesh[0].shape)
        self.status = int(status.max()) if status.size else TRANSFERRED
        self.queries = 0
        self.outside = 0
        self.last_outside = False
        # the 1-D fast path (GEMMs, MoE, collectives: most lines of a step)
        self._t1 = [float(v) for v in self.table] if self.table.ndim == 1 else []
        # 1-D queries inside the grid, by value: a replay asks the same token counts again
        # and again (a new step template prices every GEMM at its padded token count)
        self._memo: dict[float, float] = {}
        # the 2-D one (MLA decode over batch x context, KDA prefill over batch x length: a
        # query every step), where both axes have two or more points; Python floats, whose
        # products are the numpy scalars' (IEEE binary64 either way)
        t2 = self.table.tolist() if self.table.ndim == 2 else []
        self._t2: list[list[float]] = t2 if len(t2) > 1 and len(t2[0]) > 1 else []

    def _points(self, free_values: Sequence[Array]) -> Array:
        spec = self.model.spec
        n = len(free_values[0])
        cols: list[Array] = []
        for a in spec.axes:
            if a in self.fixed:
                cols.append(np.full(n, self.fixed[a]))
            else:
                cols.append(np.asarray(free_values[self.free.index(a)], dtype=np.float64))
        return np.column_stack(cols)

    def seconds(self, *x: float) -> float:
        if self._t1 and len(self._t1) > 1:
            v = x[0]
            known = self._memo.get(v)
            if known is not None:
                self.queries += 1
                self.last_outside = False
                return known
            logs = self.logs[0]
            lx = math.log(v) if v > 0 else -math.inf
            if logs[0] <= lx <= logs[-1]:
                self.queries += 1
                self.last_outside = False
                i = min(bisect.bisect_right(logs, lx) - 1, len(logs) - 2)
                t0, t1 = self._t1[i], self._t1[i + 1]
                out = math.exp(t0 + (t1 - t0) * (lx - logs[i]) / (logs[i + 1] - logs[i]))
                if len(self._memo) >= MEMO_MAX:
                    self._memo.clear()
                self._memo[v] = out
                return out
        elif self._t2:
            la, lb = self.logs
            a, b = x
            xa = math.log(a) if a > 0 else -math.inf
            xb = math.log(b) if b > 0 else -math.inf
            if la[0] <= xa <= la[-1] and lb[0] <= xb <= lb[-1]:  # inside: ``_seconds``' sums
                self.queries += 1
                self.last_outside = False
                i = min(bisect.bisect_right(la, xa) - 1, len(la) - 2)
                j = min(bisect.bisect_right(lb, xb) - 1, len(lb) - 2)
                u = (xa - la[i]) / (la[i + 1] - la[i])
                w = (xb - lb[j]) / (lb[j + 1] - lb[j])
                r0, r1 = self._t2[i], self._t2[i + 1]
                val = (1 - u) * ((1 - w) * r0[j] + w * r0[j + 1]) + u * (
                    (1 - w) * r1[j] + w * r1[j + 1]
                )
                return math.exp(val)
        return self._seconds(*x)

    def _seconds(self, *x: float) -> float:
        self.queries += 1
        idx, wts, clamped, out = [], [], [], False
        for j, v in enumerate(x):
            logs = self.logs[j]
            lx = math.log(v) if v > 0 else logs[0] - 1.0
            c = min(max(lx, logs[0]), logs[-1])
            out = out or abs(c - lx) > 1e-9
            clamped.append(c)
            if len(logs) == 1:
                idx.append(0)
                wts.append(0.0)
                continue
            i = min(max(bisect.bisect_right(logs, c) - 1, 0), len(logs) - 2)
            idx.append(i)
            wts.append((c - logs[i]) / (logs[i + 1] - logs[i]))
        t = self.table
        if len(x) == 1:
            i, w = idx[0], wts[0]
            val = float(t[i]) if w == 0.0 else float(t[i] * (1 - w) + t[i + 1] * w)
        else:
            (i, j), (u, w) = idx, wts
            i1 = i + 1 if t.shape[0] > 1 else i
            j1 = j + 1 if t.shape[1] > 1 else j
            val = float(
                (1 - u) * ((1 - w) * t[i, j] + w * t[i, j1])
                + u * ((1 - w) * t[i1, j] + w * t[i1, j1])
            )
        self.last_outside = out
        if out:
            self.outside += 1
            # the query and its clamped point in one baseline call (row 0, row 1)
            both = zip(x, clamped, strict=True)
            pts = self._points([np.array([v, math.exp(c)]) for v, c in both])
            logs2 = self.model.baseline.log_seconds(self.fdict, pts)
            val += float(logs2[0] - logs2[1])
        return math.exp(val)
