"""`plan ops predict`, `plan fit`, `plan validate ops` (the other `plan validate` commands:
``simulator.cli.validate``)."""

import sys
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from simulator import catalog
from simulator.cli.base import JsonOpt, app, command, console, file_path, make_typer, print_json
from simulator.output_files import check_output_file, write_file
from simulator.specs import HardwareProfile, SpecError
from simulator.specs.limits import check_fold_count
from simulator.specs.loading import check_dir, check_text_file
from simulator.userdata import user_device_dir

# ------------------------------------------------------------------------ ops, fit, validate ops

ops_app = make_typer("Op latencies: price a CSV of op shapes on a device.")
validate_app = make_typer("Validate models against measurements.")
app.add_typer(ops_app, name="ops")
app.add_typer(validate_app, name="validate")

MeasurementsOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--measurements", help="Measurement CSV (shape columns + latency_us); repeatable."
    ),
]
VidurOpt = Annotated[
    Path | None,
    typer.Option("--vidur", help="Folder of Vidur's H100 profiling CSVs (vidur_profiling)."),
]


def _measurement_tables(measurements: list[Path] | None, vidur: Path | None) -> list[Any]:
    from simulator.cost.measurements import load_measurements
    from simulator.cost.vidur import vidur_tables

    if vidur is not None:
        check_dir(vidur, "--vidur")
    tables = load_measurements(measurements or [])
    if vidur is not None:
        tables += vidur_tables(vidur)
    if not tables:
        raise SpecError("(arguments)", "measurements", "give --measurements and/or --vidur")
    return tables


def _measured_by_class(
    measurements: list[Path] | None, vidur: Path | None, profile: HardwareProfile
) -> dict[str, Any]:
    from simulator.cost.measurements import measured_by_class

    tables = _measurement_tables(measurements, vidur)
    by_class = measured_by_class(tables, profile)
    if not by_class:
        files = ", ".join(str(t.file) for t in tables)
        raise SpecError(files, "(rows)", "no measurement rows")
    return by_class


def _range(lo_hi: tuple[float, float] | None) -> str:
    return "-" if lo_hi is None else f"{lo_hi[0]:.3g} .. {lo_hi[1]:.3g}"


@command(ops_app, "predict", short_help="Price a CSV of op shapes on a device.")
def ops_predict(
    device: Annotated[str, typer.Option(help="Device profile name or path.")],
    input_csv: Annotated[
        Path, typer.Option("--input", help="CSV of op shapes: op, dtype and shape columns.")
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Write the CSV here (default: stdout).", parser=file_path),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", hidden=True, help="The old name of --out.", parser=file_path),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Add latency_us, source (fitted/prior) and extrapolated to every row of a shape CSV."""
    from simulator.cost.latency import LatencyModels
    from simulator.cost.predict import predict_table, records
    from simulator.cost.shape_csv import read_table

    if out is not None and output is not None:
        raise SpecError("(arguments)", "out", "give --out or --output (its old name), not both")
    output = out if out is not None else output
    if output is not None and as_json:
        raise SpecError(
            "(arguments)", "json", "--json prints the rows; --out writes them to a file: give one"
        )
    if output is not None:
        check_output_file(output, "--out", inputs=[input_csv])
    check_text_file(input_csv)
    profile = catalog.hardware_profile(device)
    table = predict_table(
        read_table(input_csv), profile, input_csv, LatencyModels.for_device(profile)
    )
    if output is not None:
        write_file(output, table.to_csv(index=False))
        typer.echo(f"wrote {output} ({len(table)} rows)", err=True)
    elif as_json:
        print_json(records(table))
    else:
        sys.stdout.write(table.to_csv(index=False))


@command(app, "fit", short_help="Fit latency models to op measurements.")
def fit(
    device: Annotated[str, typer.Option(help="Device profile name (the measurements' device).")],
    measurements: MeasurementsOpt = None,
    vidur: VidurOpt = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Output JSON (default: <user data>/profiles/<device>/latency_models.json, the"
            " user data folder being $PLAN_HOME or ~/.local/share/hybrid-capacity-planner).",
            parser=file_path,
        ),
    ] = None,
    op_class: Annotated[
        list[str] | None,
        typer.Option("--op-class", help="Fit only these op classes (repeatable; default all)."),
    ] = None,
    shape_tables: Annotated[
        bool,
        typer.Option(
            help="Keep per-shape GEMM tables (measured medians) next to the roofline fit."
        ),
    ] = True,
) -> None:
    """Fit one latency model per op class to measurements; write latency_models.json."""
    from simulator.cost.fit import check_rows, fit_op_class
    from simulator.cost.latency_file import LatencyModelFile

    profile = catalog.hardware_profile(device)
    # never into the installed package: the user's data folder unless --out says where
    path = out or user_device_dir(profile.name) / "latency_models.json"
    # without --out the path is the user data folder's: blame what set it, not --out
    option = "--out" if out is not None else "(user data folder)"
    check_output_file(path, option, inputs=[*(measurements or ()), vidur])
    by_class = _measured_by_class(measurements, vidur, profile)
    if op_class:
        missing = sorted(set(op_class) - set(by_class))
        if missing:
            raise SpecError(
                "(arguments)", "op_class", f"no measurements of {missing}; have {list(by_class)}"
            )
        by_class = {c: v for c, v in by_class.items() if c in op_class}
    for m, files in by_class.values():  # enough rows for the parameters of each fit
        check_rows(m, ", ".join(map(str, files)))
    models = [
        fit_op_class(cls, m, profile, files, shape_tables) for cls, (m, files) in by_class.items()
    ]
    sources = sorted({m.measurements.file for m in models})
    doc = LatencyModelFile(
        device=profile.name,
        description=f"plan fit --device {profile.name} on {'; '.join(sources)}",
        models=models,
    )
    write_file(path, doc.model_dump_json(indent=2) + "\n", option)
    t = Table(title=f"Fitted latency models for {profile.name} (training errors)")
    for col in ("op class", "form", "rows", "median APE %", "max APE %", "FLOPs range",
                "bytes range"):  # fmt: skip
        t.add_column(col, justify="left" if col in ("op class", "form") else "right")
    for m in models:
        t.add_row(
            m.op_class, m.form, str(m.measurements.rows), f"{m.fit_error.median_ape:.1f}",
            f"{m.fit_error.max_ape:.1f}", _range(m.flops_range), _range(m.bytes_range),
        )  # fmt: skip
    console().print(t)
    typer.echo(f"wrote {path}", err=True)


@command(validate_app, "ops", short_help="Op latency errors: prior vs fitted, k-fold.")
def validate_ops(
    device: Annotated[
        str | None,
        typer.Option(
            help="Device profile name: the measurements' device; with --tables, the one"
            " device to score (default: every device with measured tables)."
        ),
    ] = None,
    measurements: MeasurementsOpt = None,
    vidur: VidurOpt = None,
    tables: Annotated[
        bool,
        typer.Option(
            "--tables", help="Score the public measured tables' lookup, k-fold held out by shape."
        ),
    ] = False,
    leave_device_out: Annotated[
        list[str] | None,
        typer.Option(
            "--leave-device-out",
            help="Predict this measured device's tables from the other devices only"
            " (repeatable: each is predicted without any of them).",
        ),
    ] = None,
    folds_given: Annotated[
        int | None,
        typer.Option("--folds", help="k of the k-fold cross-validation [5]."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the fold shuffle.")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Prior vs fitted (k-fold held-out) absolute percentage errors per op class; with
    --tables or --leave-device-out, of the public measured tables."""
    import numpy as np

    from simulator.cost.fit import check_folds, check_rows, kfold_errors
    from simulator.specs.limits import check_seed

    folds = 5 if folds_given is None else folds_given
    check_fold_count(folds)
    check_seed(seed)
    if leave_device_out:  # it predicts whole devices: no device to score, no folds
        repeated = [d for d, n in Counter(leave_device_out).items() if n > 1]
        for flag, given in (("device", device is not None), ("folds", folds_given is not None)):
            if given:
                raise SpecError(
                    "(arguments)", flag, "does not apply to --leave-device-out (it predicts"
                    " each device it names from the other devices' tables, whole)",
                )  # fmt: skip
        if repeated:
            raise SpecError("(arguments)", "leave-device-out", f"{repeated[0]!r} is given twice")
    if device is not None and not device.strip():
        raise SpecError("(arguments)", "device", "is empty: give a device name")
    if tables or leave_device_out:
        if measurements or vidur:
            raise SpecError(
                "(arguments)", "tables", "--tables / --leave-device-out score the public"
                " tables; --measurements / --vidur score your own: give one kind",
            )  # fmt: skip
        _validate_tables(device, tables, leave_device_out or [], folds, seed, as_json)
        return
    if device is None:
        raise SpecError("(arguments)", "device", "give --device (the measurements' device)")
    profile = catalog.hardware_profile(device)
    by_class = _measured_by_class(measurements, vidur, profile)
    for m, files in by_class.values():  # enough rows to fit, and to fit without each fold
        check_rows(m, ", ".join(map(str, files)))
        check_folds(m, folds)
    results: list[dict[str, Any]] = []
    for cls, (m, _) in by_class.items():
        kf = kfold_errors(cls, m, profile, folds=folds, seed=seed)
        held = kf.heldout_ape[np.isfinite(kf.heldout_ape)]
        unseen = kf.unseen_shape_ape[np.isfinite(kf.unseen_shape_ape)]
        results.append(
            {
                "op_class": cls,
                "rows": len(m.rows),
                "prior_median_ape": float(np.median(kf.prior_ape)),
                "prior_max_ape": float(np.max(kf.prior_ape)),
                "fitted_heldout_median_ape": float(np.median(held)) if held.size else None,
                "fitted_heldout_max_ape": float(np.max(held)) if held.size else None,
                # fitted on the other GEMM shapes only: generalisation to an unseen (n, k)
                "fitted_unseen_shape_median_ape": (
                    float(np.median(unseen)) if unseen.size else None
                ),
                "fitted_unseen_shape_max_ape": float(np.max(unseen)) if unseen.size else None,
            }
        )
    if as_json:
        print_json({"device": profile.name, "folds": folds, "seed": seed, "op_classes": results})
        return
    t = Table(title=f"{profile.name}: absolute percentage error (%), {folds}-fold held-out")
    for col in ("op class", "rows", "prior median", "prior max", "fitted median", "fitted max",
                "unseen-shape median", "unseen-shape max"):  # fmt: skip
        t.add_column(col, justify="left" if col == "op class" else "right")

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f}"

    for r in results:
        t.add_row(
            str(r["op_class"]), str(r["rows"]), pct(r["prior_median_ape"]),
            pct(r["prior_max_ape"]), pct(r["fitted_heldout_median_ape"]),
            pct(r["fitted_heldout_max_ape"]), pct(r["fitted_unseen_shape_median_ape"]),
            pct(r["fitted_unseen_shape_max_ape"]),
        )  # fmt: skip
    console().print(t)
    typer.echo(
        "fitted: k-fold held-out rows (measured shape tables interpolate GEMMs of measured"
        " (n, k)); unseen-shape: fitted on all other (n, k) shapes, so only the roofline fit"
        " answers",
        err=True,
    )


def _validate_tables(
    device: str | None, by_shape: bool, leave_out: list[str], folds: int, seed: int, as_json: bool
) -> None:
    """`plan validate ops --tables` / `--leave-device-out`: score the table lookup."""
    from simulator.measured.device import measured_device_names, tables_for
    from simulator.measured.package import data_source, switched_off, unavailable_note
    from simulator.measured.tables import read_frames
    from simulator.measured.validate import Score, by_class, kfold, leave_device_out

    if by_shape and leave_out:
        raise SpecError("(arguments)", "tables", "give --tables or --leave-device-out, not both")
    if switched_off():  # (a typo such as offf is refused in there too)
        raise SpecError(
            "(environment)", "PLAN_MEASURED", "off switches the tables off, which --tables /"
            " --leave-device-out score: unset it",
        )  # fmt: skip
    source = data_source()
    if source is None:
        raise SpecError("(arguments)", "tables", unavailable_note())
    measured = measured_device_names()
    names = leave_out or ([device] if device else list(measured))
    for n in names:
        if n not in measured:
            raise SpecError(
                "(arguments)", "device",
                f"{n!r} has no measured tables; measured: {', '.join(measured)}",
            )  # fmt: skip
    results: list[dict[str, Any]] = []
    for n in names:
        profile = catalog.hardware_profile(n)
        assert profile.measured_tables is not None
        frames = read_frames(source.tables(profile.measured_tables))
        if by_shape:
            scores = kfold(frames, profile, folds=folds, seed=seed)
            basis = f"{folds}-fold held out by shape"
        else:
            transferred = tables_for(profile, exclude=tuple(leave_out))
            if transferred is None:
                raise SpecError("(arguments)", "leave_device_out", "no measured device is left")
            scores = leave_device_out(frames, transferred, profile)
            basis = transferred.basis
        for level, group in (("kind", scores), ("op_class", by_class(scores))):
            results += [
                {"device": n, "level": level, "basis": basis, **sc.as_dict()} for sc in group
            ]
    if as_json:
        print_json({"package_version": source.package_version, "scores": results})
        return
    what = "k-fold held-out" if by_shape else "leave-device-out"
    t = Table(title=f"Measured-table lookup, {what}: absolute percentage error (%) per op class")
    for col in ("device", "op class", "rows", "prior median", "median", "P90", "basis"):
        t.add_column(col, justify="left" if col in ("device", "op class", "basis") else "right")
    for r in results:
        if r["level"] != "op_class":
            continue
        prior = r["prior_median_ape"]
        t.add_row(
            r["device"], r["op_class"], f"{r['rows']:,}", "-" if prior is None else f"{prior:.1f}",
            f"{r['median_ape']:.1f}", f"{r['p90_ape']:.1f}", r["basis"],
        )  # fmt: skip
    console().print(t)
    typer.echo(
        f"tables: aiconfigurator-core {source.package_version} (vLLM backend, newest version per"
        " op); --json lists every kind of table separately",
        err=True,
    )
    _ = Score
