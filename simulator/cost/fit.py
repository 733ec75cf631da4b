"""Fit latency models to measurements, and measure how well they predict held-out rows.

Measurement tables are shape tables (``simulator.cost.predict``) with a ``latency_us`` column
(the median of the repetitions) and optionally ``latency_us_p20``, ``latency_us_p80``,
``n_reps``. Each op class gets one model:

* compute ops: the roofline form of ``latency.roofline_seconds`` (efficiencies, launch cost,
  sharpness), fitted by ``scipy.optimize.least_squares`` on log(predicted / measured) with a
  soft-L1 loss (scale 0.05, i.e. residuals beyond ~5 % count linearly, not quadratically, so
  that a few cuBLAS heuristic outliers do not drag the fit);
* collectives: ``t = alpha_n + beta_n * bytes`` per world size n, by weighted (1/t)
  non-negative least squares, i.e. minimum relative error.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from simulator.cost import ops
from simulator.cost.latency import LatencyModels, roofline_seconds
from simulator.cost.latency_file import (
    MAX_COMPUTE_EFFICIENCY,
    MAX_LAUNCH_S,
    MAX_MEMORY_EFFICIENCY,
    AlphaBeta,
    FitError,
    FittedModel,
    Measurements,
    RooflineParams,
    ShapeTable,
    file_sha256,
)
from simulator.cost.predict import OpRows, op_rows, predict_seconds
from simulator.cost.shape_csv import numeric_column
from simulator.specs.hardware import HardwareProfile
from simulator.specs.loading import SpecError

if TYPE_CHECKING:
    import pandas as pd

Array = NDArray[np.float64]

BOUNDS_LO = (0.02, 0.02, 0.0, 1.0)  # compute_eff, memory_eff, launch_s, sharpness
BOUNDS_HI = (MAX_COMPUTE_EFFICIENCY, MAX_MEMORY_EFFICIENCY, MAX_LAUNCH_S, 30.0)
X0_SHARPNESS = 4.0
LOSS_SCALE = 0.05


def fit_roofline(
    flops: Array,
    bytes_moved: Array,
    peak_flops_per_s: Array,
    bw_bytes_per_s: float,
    kernels: Array,
    seconds: Array,
    x0: RooflineParams | None = None,
) -> RooflineParams:
    """Roofline parameters minimising the (soft-L1) log error against measured ``seconds``.

    ``x0`` (the profile's prior for this op class when given) only sets the starting point;
    the fit is deterministic.
    """
    from scipy.optimize import least_squares

    f, b, pk, k, t = (
        np.asarray(a, dtype=np.float64)
        for a in (flops, bytes_moved, peak_flops_per_s, kernels, seconds)
    )
    start = x0 or RooflineParams(compute_efficiency=0.7, memory_efficiency=0.8, launch_s=4e-6)
    sharp = start.sharpness if np.isfinite(start.sharpness) else X0_SHARPNESS
    x_start = np.clip(
        [start.compute_efficiency, start.memory_efficiency, start.launch_s, sharp],
        BOUNDS_LO,
        BOUNDS_HI,
    )
    log_t = np.log(t)

    def residuals(x: Array) -> Array:
        params = RooflineParams.model_construct(
            compute_efficiency=x[0], memory_efficiency=x[1], launch_s=x[2], sharpness=x[3]
        )
        pred = roofline_seconds(params, f, b, pk, bw_bytes_per_s, k)
        residual: Array = np.log(np.maximum(pred, 1e-30)) - log_t
        return residual

    result = least_squares(
        residuals,
        x_start,
        bounds=(BOUNDS_LO, BOUNDS_HI),
        loss="soft_l1",
        f_scale=LOSS_SCALE,
        x_scale=np.array([0.1, 0.1, 1e-6, 1.0]),
    )
    x = result.x
    return RooflineParams(
        compute_efficiency=float(x[0]),
        memory_efficiency=float(x[1]),
        launch_s=float(x[2]),
        sharpness=float(x[3]),
    )


def fit_alpha_beta(bytes_per_rank: Array, seconds: Array) -> AlphaBeta:
    """alpha + beta * bytes with minimum relative error (rows weighted 1/t), both >= 0."""
    from scipy.optimize import nnls

    s = np.asarray(bytes_per_rank, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    a = np.column_stack([1.0 / t, s / t])
    scale = np.maximum(np.abs(a).max(axis=0), 1e-300)  # condition: bytes ~1e7, 1/t ~1e5
    coef, _ = nnls(a / scale, np.ones_like(t))
    alpha, beta = coef / scale
    return AlphaBeta(alpha_s=float(alpha), beta_s_per_byte=float(beta))


def ape(predicted: Array, measured: Array) -> Array:
    """Absolute percentage error, in percent."""
    errors: Array = np.abs(predicted / measured - 1.0) * 100.0
    return errors


def fit_error(errors: Array) -> FitError:
    """Count, median and max of APEs (percent)."""
    return FitError(
        n=int(errors.size), median_ape=float(np.median(errors)), max_ape=float(np.max(errors))
    )


@dataclass(frozen=True)
class MeasuredOps:
    """Measurement rows of one op class: their Work and measured seconds."""

    op_class: str
    rows: OpRows
    seconds: Array

    def select(self, mask: NDArray[np.bool_]) -> MeasuredOps:
        return MeasuredOps(self.op_class, self.rows.select(mask), self.seconds[mask])


def measured_ops(
    op_class: str, table: pd.DataFrame, profile: HardwareProfile, file: str | Path
) -> MeasuredOps:
    """The rows of ``table`` whose op is ``op_class``, checked, with latency in seconds."""
    all_rows = op_rows(table, profile, file)
    idx = np.flatnonzero(all_rows.op == op_class)
    if idx.size == 0:
        raise SpecError(file, "column op", f"no rows of op {op_class}")
    us = numeric_column(table, "latency_us", idx, file, f"op {op_class}", positive=True)
    return MeasuredOps(op_class, all_rows.select(all_rows.op == op_class), us * 1e-6)


def _measurements(source_file: str | Path | Sequence[str | Path], rows: int) -> Measurements:
    """Provenance: one file and its sha256, or several (joined by ' + ') and the sha256 of
    their bytes concatenated in that order."""
    files = [source_file] if isinstance(source_file, str | Path) else list(source_file)
    if len(files) == 1:
        return Measurements(file=str(files[0]), sha256=file_sha256(files[0]), rows=rows)
    h = hashlib.sha256()
    for f in files:
        h.update(Path(f).read_bytes())
    return Measurements(file=" + ".join(map(str, files)), sha256=h.hexdigest(), rows=rows)


def fit_measured(
    m: MeasuredOps, profile: HardwareProfile, tables: bool = True
) -> tuple[FittedModel, Array]:
    """Fit one op class; returns the model (with a placeholder provenance) and training APEs."""
    r = m.rows
    placeholder = Measurements(file="", sha256="", rows=len(r))
    bytes_range = (float(r.bytes.min()), float(r.bytes.max()))
    if m.op_class in ops.COLLECTIVE_CLASSES:
        by_world: dict[int, AlphaBeta] = {}
        for n in np.unique(r.world_size):
            sel = r.world_size == n
            if n > 1:
                by_world[int(n)] = fit_alpha_beta(r.bytes[sel], m.seconds[sel])
        model = FittedModel(
            op_class=m.op_class,
            form="alpha_beta",
            alpha_beta=by_world,
            bytes_range=bytes_range,
            fit_error=FitError(n=1, median_ape=0.0, max_ape=0.0),
            measurements=placeholder,
        )
    else:
        prior = LatencyModels(profile).prior_params(m.op_class)
        params = fit_roofline(
            r.flops, r.bytes, r.peak_flops_per_s, profile.memory_bw_bytes_per_s, r.kernels,
            m.seconds, x0=prior,
        )  # fmt: skip
        model = FittedModel(
            op_class=m.op_class,
            form="roofline",
            roofline=params,
            shape_tables=shape_tables(m) if tables and m.op_class == "gemm" else [],
            flops_range=(float(r.flops.min()), float(r.flops.max())),
            bytes_range=bytes_range,
            fit_error=FitError(n=1, median_ape=0.0, max_ape=0.0),
            measurements=placeholder,
        )
    errors = ape(_predict(model, m.rows, profile), m.seconds)
    return model.model_copy(update={"fit_error": fit_error(errors)}), errors


# Parameters of each fitted form: the roofline (compute and memory efficiency, launch cost,
# sharpness), alpha-beta (alpha, beta) per world size. A fit needs one row more than its
# parameters, or its training error is 0 % by construction (one row fits any curve).
ROOFLINE_PARAMETERS = 4
ALPHA_BETA_PARAMETERS = 2


def min_rows(op_class: str) -> int:
    """Rows a fit of ``op_class`` needs (per world size for collectives)."""
    if op_class in ops.COLLECTIVE_CLASSES:
        return ALPHA_BETA_PARAMETERS + 1
    return ROOFLINE_PARAMETERS + 1


def _form(op_class: str) -> str:
    if op_class in ops.COLLECTIVE_CLASSES:
        return f"its {ALPHA_BETA_PARAMETERS}-parameter alpha-beta fit"
    return f"its {ROOFLINE_PARAMETERS}-parameter roofline fit"


def check_rows(m: MeasuredOps, file: str | Path) -> None:
    """Enough rows to fit ``m``'s op class (``min_rows``), else a SpecError on ``file``."""
    need = min_rows(m.op_class)
    if m.op_class in ops.COLLECTIVE_CLASSES:
        for n in np.unique(m.rows.world_size):
            sel = m.rows.world_size == n
            have = _distinct(m.rows.bytes[sel])
            if n > 1 and have < need:
                raise SpecError(
                    file, "(rows)", f"{m.op_class} at world size {int(n)} has {have} distinct"
                    f" message size{'s' if have != 1 else ''}; {_form(m.op_class)} needs at"
                    f" least {need}",
                )  # fmt: skip
        return
    # repeats of one shape measure its noise, not how the time grows: shapes are counted
    have = _distinct(m.rows.flops, m.rows.bytes, m.rows.kernels)
    if have < need:
        raise SpecError(
            file, "(rows)", f"{m.op_class} has {have} distinct shape{'s' if have != 1 else ''}"
            f" ({len(m.rows)} rows); {_form(m.op_class)} needs at least {need}",
        )  # fmt: skip


def _distinct(*columns: Array) -> int:
    """Distinct rows of the columns taken together (NaN equal to NaN)."""
    return len({tuple(row) for row in np.nan_to_num(np.column_stack(columns), nan=-1.0)})


def check_folds(m: MeasuredOps, folds: int, source: str = "(arguments)") -> None:
    """k-fold cross-validation of ``m``: at most one fold per row, and every training set
    (the rows of the other folds) large enough to fit (``min_rows``)."""
    n = len(m.rows)
    if folds > n:
        raise SpecError(
            source, "folds", f"{folds} folds for {n} {m.op_class} rows: folds must not exceed"
            " the rows (each fold holds out at least one)",
        )  # fmt: skip
    train = n - -(-n // folds)  # the largest fold held out
    need = min_rows(m.op_class)
    if m.op_class not in ops.COLLECTIVE_CLASSES and train < need:
        raise SpecError(
            source, "folds", f"{folds} folds of {n} {m.op_class} rows leave {train} rows to fit;"
            f" {_form(m.op_class)} needs at least {need} (fewer folds, or more rows)",
        )  # fmt: skip


def shape_tables(m: MeasuredOps) -> list[ShapeTable]:
    """One table per measured (n, k, weight format) with at least two distinct m: the median
    latency at each m, sorted by m (``LatencyModels.table_ratio`` corrects the fit with it)."""
    shape = m.rows.gemm_shape
    keys = np.column_stack([np.round(shape[:, 1]), np.round(shape[:, 2]), shape[:, 3]])
    tables = []
    for key in np.unique(keys, axis=0):
        sel = np.all(keys == key, axis=1)
        ms = shape[sel, 0]
        distinct = np.unique(ms)
        if distinct.size < 2:
            continue
        med = [float(np.median(m.seconds[sel][ms == v])) for v in distinct]
        tables.append(
            ShapeTable(
                n=float(key[0]),
                k=float(key[1]),
                weight_bytes_per_elem=float(key[2]),
                peak_flops_per_s=float(m.rows.peak_flops_per_s[sel][0]),
                m=[float(v) for v in distinct],
                seconds=med,
            )
        )
    return tables


def _predict(model: FittedModel | None, rows: OpRows, profile: HardwareProfile) -> Array:
    from simulator.cost.latency_file import LatencyModelFile

    fitted = None
    if model is not None:
        fitted = LatencyModelFile(device=profile.name, description="", models=[model])
    seconds, _, _ = predict_seconds(rows, LatencyModels(profile, fitted), prior=model is None)
    return seconds


def fit_op_class(
    op_class: str,
    rows: pd.DataFrame | MeasuredOps,
    profile: HardwareProfile,
    source_file: str | Path | Sequence[str | Path],
    tables: bool = True,
) -> FittedModel:
    """Fit ``op_class`` on measurement rows (a table, or rows already checked).

    Valid ranges are the min/max of the training FLOPs and bytes; ``fit_error`` is the
    training APE; ``tables`` keeps per-shape GEMM tables (``shape_tables``) next to the fit;
    ``measurements`` names the source file(s) with their sha256.
    """
    m = rows if isinstance(rows, MeasuredOps) else measured_ops(
        op_class, rows, profile, _first(source_file)
    )  # fmt: skip
    model, _ = fit_measured(m, profile, tables)
    return model.model_copy(update={"measurements": _measurements(source_file, len(m.rows))})


def _first(source_file: str | Path | Sequence[str | Path]) -> str | Path:
    return source_file if isinstance(source_file, str | Path) else source_file[0]


@dataclass(frozen=True)
class KFoldErrors:
    op_class: str
    heldout_ape: Array  # one per row: error of the model fitted on the other folds
    prior_ape: Array  # one per row: error of the profile's prior
    # one per row (NaN for ops without shapes): error of the model fitted on all OTHER
    # shapes, i.e. how the fit generalises to a GEMM shape it never saw
    unseen_shape_ape: Array


def kfold_errors(
    op_class: str,
    rows: MeasuredOps,
    profile: HardwareProfile,
    folds: int = 5,
    seed: int = 0,
) -> KFoldErrors:
    """Held-out APE of every row under k-fold cross-validation, and the prior's APE."""
    n = len(rows.rows)
    prior = ape(_predict(None, rows.rows, profile), rows.seconds)
    k = min(folds, n)
    heldout = np.full(n, np.nan)
    unseen = np.full(n, np.nan)
    if k < 2:
        return KFoldErrors(op_class, heldout, prior, unseen)
    rng = np.random.default_rng(seed)
    fold_of = np.empty(n, dtype=np.intp)
    fold_of[rng.permutation(n)] = np.arange(n) % k
    for f in range(k):
        test = fold_of == f
        model, _ = fit_measured(rows.select(~test), profile)
        heldout[test] = ape(_predict(model, rows.rows.select(test), profile), rows.seconds[test])
    shape = rows.rows.gemm_shape
    if op_class == "gemm" and np.isfinite(shape).all():
        groups = np.unique(shape[:, 1:3], axis=0, return_inverse=True)[1].ravel()
        if groups.max() > 0:
            for g in range(groups.max() + 1):
                test = groups == g
                model, _ = fit_measured(rows.select(~test), profile)
                unseen[test] = ape(
                    _predict(model, rows.rows.select(test), profile), rows.seconds[test]
                )
    return KFoldErrors(op_class, heldout, prior, unseen)
