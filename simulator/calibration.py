"""Fit a device's latency models from its measurements, and compare measured / prior / fitted.

The calibration job (``kernels_calibration``, ``calibrate measure``) writes
``hardware_profiles/<device>/measurements/<op>.csv``; this module, which needs no GPU, torch
or triton, turns them into ``latency_models.json`` (one fitted model per op class, with its
training and k-fold held-out error), marks the profile ``calibrated: true``, and renders the
report ``calibrate report`` writes (and the dashboard's Calibration page shows).

Each op class is fitted on the rows of the implementation vLLM serves it with
(``PREFERRED_IMPL``: cuBLAS / hipBLASLt through torch for dense GEMMs, the Triton kernels for
the rest); when a class has no such rows (a CPU fixture measures only torch ops) its other
rows are used and the summary says so.
"""

from __future__ import annotations

import html
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.cost.fit import (
    KFoldErrors,
    MeasuredOps,
    check_folds,
    check_rows,
    fit_error,
    fit_op_class,
    kfold_errors,
)
from simulator.cost.latency import LatencyModels
from simulator.cost.latency_file import FitError, LatencyModelFile, load_latency_models
from simulator.cost.measurements import (
    MeasurementTable,
    load_measurements,
    measured_by_class,
    measured_latency_us,
)
from simulator.cost.predict import OP_COLUMNS, op_rows, predict_seconds
from simulator.specs.hardware import HardwareProfile
from simulator.specs.loading import SpecError, os_reason, read_yaml

if TYPE_CHECKING:
    import pandas as pd

PREFERRED_IMPL: dict[str, str] = {
    "gemm": "torch",
    **dict.fromkeys(("allreduce", "allgather", "reducescatter", "alltoall"), "torch"),
}
DEFAULT_IMPL = "triton"
FOLDS = 5


def preferred_impl(op_class: str) -> str:
    return PREFERRED_IMPL.get(op_class, DEFAULT_IMPL)


def measurement_files(device_dir: Path) -> list[Path]:
    """The measurement CSVs of a device, one per op class, in op-class order."""
    mdir = device_dir / "measurements"
    # (a dangling symlink is kept: its reader refuses it, rather than the op going unfitted)
    return [mdir / f"{op}.csv" for op in OP_COLUMNS if os.path.lexists(mdir / f"{op}.csv")]


def _fit_rows(tables: list[MeasurementTable]) -> tuple[list[MeasurementTable], dict[str, str]]:
    """Each table cut to the preferred implementation's rows where it has any."""
    out, used = [], {}
    for t in tables:
        df = t.table
        op = df["op"].iloc[0] if len(df) else t.file.stem
        impl = preferred_impl(str(op))
        if "impl" in df.columns and (df["impl"] == impl).any():
            df = df[df["impl"] == impl].reset_index(drop=True)
            used[str(op)] = impl
        else:
            used[str(op)] = ", ".join(sorted(set(df["impl"]))) if "impl" in df.columns else "all"
        out.append(MeasurementTable(t.file, df))
    return out, used


@dataclass(frozen=True)
class OpSummary:
    op_class: str
    impl: str  # implementation(s) fitted
    rows: int
    prior_median_ape: float
    prior_max_ape: float
    fitted_median_ape: float  # training rows
    heldout_median_ape: float | None  # k-fold, rows never seen by the model that predicted them
    heldout_max_ape: float | None


def _summary(
    cls: str, impl: str, kf: KFoldErrors, train: FitError, heldout: FitError | None
) -> OpSummary:
    return OpSummary(
        op_class=cls,
        impl=impl,
        rows=int(kf.prior_ape.size),
        prior_median_ape=float(np.median(kf.prior_ape)),
        prior_max_ape=float(np.max(kf.prior_ape)),
        fitted_median_ape=train.median_ape,
        heldout_median_ape=heldout.median_ape if heldout else None,
        heldout_max_ape=heldout.max_ape if heldout else None,
    )


def fit_device(
    device_dir: Path, profile: HardwareProfile, folds: int = FOLDS, seed: int = 0
) -> tuple[LatencyModelFile, list[OpSummary], list[str]]:
    """Fit every measured op class of ``device_dir`` (its ``measurements/`` folder) with
    enough distinct shapes for its parameters; the third item says why each other class
    stays on its prior. No class with enough is a SpecError (nothing to call calibrated)."""
    files = measurement_files(device_dir)
    if not files:
        raise SpecError(
            device_dir / "measurements", "(folder)",
            "no measurements (<op>.csv); run `calibrate measure` on the device first",
        )  # fmt: skip
    tables, impls = _fit_rows(load_measurements(files))
    models, summaries = [], []
    by_class, skipped = _enough_rows(measured_by_class(tables, profile))
    # a fold per row at most: of the largest class (a class too small for the folds gets no
    # held-out error, as before; 99,999 folds of 72 rows ran and labelled the table with it)
    largest = max((m for m, _ in by_class.values()), key=lambda m: len(m.rows), default=None)
    if largest is not None and folds > len(largest.rows):
        check_folds(largest, folds)
    for cls, (m, srcs) in by_class.items():
        model = fit_op_class(cls, m, profile, srcs)
        kf = kfold_errors(cls, m, profile, folds=folds, seed=seed)
        held = kf.heldout_ape[np.isfinite(kf.heldout_ape)]
        heldout = fit_error(held) if held.size else None
        models.append(model.model_copy(update={"heldout_error": heldout}))
        summaries.append(_summary(cls, impls.get(cls, "all"), kf, model.fit_error, heldout))
    doc = LatencyModelFile(
        device=profile.name,
        description=(
            f"calibrate fit {profile.name}: measurements/ of this folder, {folds}-fold held-out"
            " errors in heldout_error"
        ),
        models=models,
    )
    return doc, summaries, skipped


def _enough_rows(
    by_class: dict[str, tuple[MeasuredOps, list[Path]]],
) -> tuple[dict[str, tuple[MeasuredOps, list[Path]]], list[str]]:
    """The op classes with enough distinct shapes for their parameters, and why each other
    one is left out; none with enough is the first class's SpecError (4 parameters fitted to
    1 shape read 0 % and marked the profile calibrated)."""
    kept, skipped, first = {}, [], None
    for cls, (m, srcs) in by_class.items():
        try:
            check_rows(m, ", ".join(map(str, srcs)))
        except SpecError as exc:
            first = first or exc
            skipped.append(f"{exc.reason}; it stays on its prior")
            continue
        kept[cls] = (m, srcs)
    if not kept and first is not None:
        raise first
    return kept, skipped


CALIBRATED_LINE = re.compile(r"^calibrated:\s*(true|false)\s*(#.*)?$", re.MULTILINE)


def mark_calibrated(profile_yaml: Path) -> None:
    """Set ``calibrated: true`` in the profile, keeping its comments and layout."""
    text = profile_yaml.read_text()
    if CALIBRATED_LINE.search(text):
        text = CALIBRATED_LINE.sub("calibrated: true", text, count=1)
    else:
        text = re.sub(r"^(status:.*)$", r"\1\ncalibrated: true", text, count=1, flags=re.M)
        if "calibrated: true" not in text:
            text = text.rstrip("\n") + "\ncalibrated: true\n"
    tmp = profile_yaml.with_name(f".{profile_yaml.name}.tmp")
    tmp.write_text(text)
    tmp.replace(profile_yaml)


def write_fit(device_dir: Path, doc: LatencyModelFile) -> Path:
    path = device_dir / "latency_models.json"
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(doc.model_dump_json(indent=2) + "\n")
        tmp.replace(path)
    except OSError as exc:  # (a folder of that name; a full disk): no .tmp left behind
        tmp.unlink(missing_ok=True)
        raise SpecError(path, "(write)", f"cannot write: {os_reason(exc)}") from None
    mark_calibrated(device_dir / "profile.yaml")
    return path


# ------------------------------------------------------------------------------ comparison


def comparison(device_dir: Path, profile: HardwareProfile) -> pd.DataFrame:
    """Every measured row with its prior and fitted prediction (us) and which rows the fit
    used (``fitted_on``); fitted is NaN where the device has no latency_models.json."""
    import pandas as pd

    path = device_dir / "latency_models.json"
    fitted = load_latency_models(path, profile.name) if path.exists() else None
    models = LatencyModels(profile, fitted)
    frames = []
    for t in load_measurements(measurement_files(device_dir)):
        rows = op_rows(t.table, profile, t.file)
        prior, _, _ = predict_seconds(rows, models, prior=True)
        df = t.table.copy()
        df["measured_us"] = measured_latency_us(t, np.arange(len(df)), f"op {t.file.stem}")
        df["prior_us"] = prior * 1e6
        if fitted is not None:
            fit, source, extrapolated = predict_seconds(rows, models)
            df["fitted_us"] = np.where(source == "fitted", fit * 1e6, np.nan)
            df["extrapolated"] = extrapolated
        else:
            df["fitted_us"] = np.nan
            df["extrapolated"] = False
        op = str(df["op"].iloc[0]) if len(df) else ""
        impl = preferred_impl(op)
        has = "impl" in df.columns and bool((df["impl"] == impl).any())
        df["fitted_on"] = (df["impl"] == impl) if has else True
        df["shape"] = [
            " ".join(f"{c}={r[c]}" for c in OP_COLUMNS[op] if r.get(c, "") != "")
            for r in df.to_dict(orient="records")
        ]
        frames.append(df)
    if not frames:
        raise SpecError(device_dir / "measurements", "(folder)", "no measurements (<op>.csv)")
    keep = ["op", "kernel", "impl", "dtype", "shape", "measured_us", "latency_us_p20",
            "latency_us_p80", "prior_us", "fitted_us", "extrapolated", "fitted_on",
            "source"]  # fmt: skip
    out = pd.concat(frames, ignore_index=True)
    return out[[c for c in keep if c in out.columns]]


def error_table(cmp: pd.DataFrame, fitted: LatencyModelFile | None) -> pd.DataFrame:
    """Per op class: rows, prior / fitted APE on the fitted-on rows, held-out error."""
    import pandas as pd

    held: dict[str, FitError | None] = {
        m.op_class: m.heldout_error for m in (fitted.models if fitted else [])
    }
    out = []
    for op, g in cmp[cmp.fitted_on.astype(bool)].groupby("op", sort=False):
        prior = np.abs(g.prior_us / g.measured_us - 1) * 100
        fit = np.abs(g.fitted_us / g.measured_us - 1) * 100
        h = held.get(str(op))
        out.append({
            "op class": op,
            "kernels": ", ".join(sorted(set(g.kernel))) if "kernel" in g else "",
            "rows": len(g),
            "prior median APE %": float(np.median(prior)),
            "prior max APE %": float(np.max(prior)),
            "fitted median APE % (training)": float(np.nanmedian(fit)) if fit.notna().any()
            else np.nan,
            "held-out median APE %": h.median_ape if h else np.nan,
            "held-out max APE %": h.max_ape if h else np.nan,
        })  # fmt: skip
    return pd.DataFrame(out)


def report_html(device_dir: Path, profile: HardwareProfile) -> str:
    """One page: the error table, then per op class measured vs prior vs fitted."""
    import plotly.io as pio

    path = device_dir / "latency_models.json"
    fitted = load_latency_models(path, profile.name) if path.exists() else None
    cmp = comparison(device_dir, profile)
    errors = error_table(cmp, fitted)
    meta = _meta_text(device_dir / "measurements" / "meta.yaml")
    parts = []
    for i, (op, g) in enumerate(cmp.groupby("op", sort=False)):
        parts.append(f"<h2>{html.escape(str(op))}</h2>")
        parts.append(pio.to_html(parity_figure(str(op), g), full_html=False,
                                 include_plotlyjs=(i == 0)))  # fmt: skip
    status = (
        "calibrated: fitted models from these measurements"
        if fitted is not None
        else "not fitted yet: run `calibrate fit` (fitted columns are empty)"
    )
    body = [
        f"<h1>Calibration of {html.escape(profile.display_name)} ({html.escape(profile.name)})"
        "</h1>",
        f"<p>{html.escape(status)}. Prior: the profile's roofline numbers; fitted:"
        " latency_models.json; APE = |predicted / measured - 1|. Held-out: each row predicted"
        f" by a model fitted without it ({FOLDS}-fold).</p>",
        f"<p><small>{meta}</small></p>",
        errors.to_html(index=False, float_format=lambda x: f"{x:,.1f}", na_rep="-"),
        *parts,
    ]
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>Calibration {html.escape(profile.name)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;"
        "font-size:12px}td,th{border:1px solid #ccc;padding:3px 6px}</style></head><body>"
        + "\n".join(body)
        + "</body></html>"
    )


def parity_figure(op: str, g: pd.DataFrame) -> Any:
    """Predicted vs measured latency (log-log) of one op class: prior and fitted, y = x."""
    import plotly.graph_objects as go

    fig = go.Figure()
    text = np.array([f"{k} {d} {s}" for k, d, s in zip(g.kernel, g.dtype, g["shape"], strict=True)])
    used = g.fitted_on.astype(bool).to_numpy()
    for name, col, sym in (("prior", "prior_us", "x"), ("fitted", "fitted_us", "circle")):
        if g[col].notna().any():
            fig.add_trace(go.Scatter(
                x=g.measured_us[used], y=g[col][used], mode="markers", name=name,
                marker={"symbol": sym, "size": 7}, text=text[used],
                hovertemplate="%{text}<br>measured %{x:.3g} us, predicted %{y:.3g} us",
            ))  # fmt: skip
    if (~used).any():
        fig.add_trace(go.Scatter(
            x=g.measured_us[~used], y=g.fitted_us[~used] if g.fitted_us.notna().any()
            else g.prior_us[~used], mode="markers", name="other kernel (not fitted on)",
            marker={"symbol": "diamond-open", "size": 7},
            text=text[~used],
            hovertemplate="%{text}<br>measured %{x:.3g} us, predicted %{y:.3g} us",
        ))  # fmt: skip
    lo = float(np.nanmin(g[["measured_us", "prior_us", "fitted_us"]].to_numpy()))
    hi = float(np.nanmax(g[["measured_us", "prior_us", "fitted_us"]].to_numpy()))
    fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="predicted = measured",
                             line={"dash": "dash", "color": "grey"}))  # fmt: skip
    fig.update_layout(
        title=f"{op}: predicted vs measured latency", height=460, width=720,
        xaxis={"type": "log", "title": "measured (us, median)"},
        yaxis={"type": "log", "title": "predicted (us)"},
    )  # fmt: skip
    return fig


def _meta_text(path: Path) -> str:
    """The measurement run's environment, from ``meta.yaml`` (what ``calibrate measure``
    writes): a mapping with a ``runs`` list of mappings."""
    if not os.path.lexists(path):
        return "no meta.yaml"
    meta = read_yaml(path) or {}
    if not isinstance(meta, dict):
        raise SpecError(path, "(yaml)", f"a mapping expected, got {type(meta).__name__}")
    runs = meta.get("runs") or []
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise SpecError(path, "runs", "a list of mappings expected (one per measurement run)")
    last = runs[-1] if runs else {}
    fields = [f"{k}: {meta.get(k)}" for k in ("gpu", "runtime", "driver", "torch", "triton")]
    fields.append(f"runs: {len(runs)}; last: {last.get('mode')} {last.get('started')}"
                  f" git {last.get('git_sha')} ({last.get('stopped')})")  # fmt: skip
    return html.escape("; ".join(fields))
