"""`plan step`, `plan ops predict`, `plan fit`, `plan validate ops|inferencemax`."""

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from simulator import catalog
from simulator.cli.base import JsonOpt, app, command, console, make_typer, print_json
from simulator.cli.memory import serving_from
from simulator.outputs import OutputFolder, check_output_file, finite, write_file
from simulator.specs import (
    HardwareProfile,
    SpecError,
)
from simulator.specs.loading import check_dir, check_text_file
from simulator.userdata import user_device_dir

NoCacheOpt = Annotated[
    bool,
    typer.Option(
        "--no-cache",
        help="Simulate every point again and keep nothing: without it each point's result"
        " is kept in OUT/cache (without --out: $PLAN_CACHE_DIR/validate or"
        " ~/.cache/hybrid-capacity-planner/validate), so a rerun or a killed run resumes.",
    ),
]

# ------------------------------------------------------------------------------------ step


def _parse_prefill(spec: str) -> tuple[int, int, int]:
    """``[COUNTx]TOKENS[@PREFIX]`` -> (count, new tokens, cached prefix)."""
    count, _, rest = spec.rpartition("x") if "x" in spec else ("1", "", spec)
    tokens, _, prefix = rest.partition("@")
    try:
        values = int(count), int(tokens), int(prefix or 0)
    except ValueError:
        raise SpecError(
            "(arguments)", "prefill", f"{spec!r} is not [COUNTx]TOKENS[@PREFIX], e.g. 4x2048@50000"
        ) from None
    if values[0] < 1 or values[1] < 1 or values[2] < 0:
        raise SpecError("(arguments)", "prefill", f"{spec!r}: counts and tokens must be positive")
    return values


@command(app, "step", short_help="One engine step's time, by category and op.")
def step(
    model: Annotated[str, typer.Option(help="Model card name or path to a card YAML.")],
    device: Annotated[str, typer.Option(help="Device profile name or path.")],
    decode: Annotated[int, typer.Option(help="Decoding requests in the step.")] = 0,
    context: Annotated[int, typer.Option(help="Context (cached tokens) of each decode.")] = 8192,
    prefill: Annotated[
        list[str] | None,
        typer.Option(help="Prefill chunk [COUNTx]TOKENS[@PREFIX]; repeat for more."),
    ] = None,
    tp: Annotated[int | None, typer.Option(help="Tensor parallel size.")] = None,
    dp: Annotated[int | None, typer.Option(help="Data parallel replicas.")] = None,
    ep: Annotated[int | None, typer.Option(help="1, or tp*dp for expert parallelism.")] = None,
    dcp: Annotated[int | None, typer.Option(help="Decode context parallel size.")] = None,
    kv_cache_dtype: Annotated[str | None, typer.Option(help="auto|bf16|fp8|fp8_ds_mla|...")] = None,
    fused_decode_kernels: Annotated[
        bool | None, typer.Option("--fused/--no-fused", help="Fused per-layer decode kernels.")
    ] = None,
    serving: Annotated[
        Path | None, typer.Option(help="ServingConfig YAML; flags override it.")
    ] = None,
    priors_only: Annotated[
        bool, typer.Option("--priors", help="Ignore fitted latency models; use roofline priors.")
    ] = False,
    top: Annotated[int, typer.Option(help="Ops to list, most expensive first.")] = 12,
    as_json: JsonOpt = False,
) -> None:
    """Time of one engine step and where it goes (attention, recurrent, MoE, dense, comms)."""
    import numpy as np

    from simulator.cost.latency import LatencyModels
    from simulator.cost.step import StepCostModel
    from simulator.measured.device import basis_of
    from simulator.memory import batch_limits, check_deployment, check_device

    if decode < 0 or context < 0:
        raise SpecError("(arguments)", "decode", "decode and context must not be negative")
    chunks = [_parse_prefill(p) for p in prefill or []]
    if decode == 0 and not chunks:
        raise SpecError(
            "(arguments)", "decode", "the step is empty: give --decode and/or --prefill"
        )
    card = catalog.model_card(model)
    profile = catalog.hardware_profile(device)
    cfg, source = serving_from(
        serving, tp=tp, dp=dp, ep=ep, dcp=dcp, kv_cache_dtype=kv_cache_dtype,
        fused_decode_kernels=fused_decode_kernels,
    )  # fmt: skip
    try:
        check_deployment(card, cfg)
        check_device(cfg, profile)
    except SpecError as exc:
        raise SpecError(source, exc.field, exc.reason) from None
    q = 1 + cfg.num_speculative_tokens
    new = [q] * decode + [t for n, t, _ in chunks for _ in range(n)]
    ctx = [context] * decode + [p for n, _, p in chunks for _ in range(n)]
    latency = LatencyModels.for_device(profile, use_fitted=not priors_only)
    cost_model = StepCostModel(card, profile, cfg, latency, batch_limits(profile, cfg)[1])
    cost = cost_model.step(np.array(new), np.array(ctx), detail=True)
    lines = sorted(cost.lines, key=lambda x: -x.seconds)
    classes = sorted({x.op_class for x in cost.lines})
    result = {
        "model": card.name, "device": profile.name, "tp": cfg.tp, "dcp": cfg.dcp,
        "decodes": decode, "context_tokens": context,
        "prefill_chunks": [{"count": n, "tokens": t, "prefix": p} for n, t, p in chunks],
        "step_s": cost.seconds, "gpu_s": cost.gpu_s, "cpu_s": cost.cpu_s,
        "padded_tokens": cost.padded_tokens, "breakdown_s": cost.breakdown_s,
        "per_layer_gpu_s": cost.gpu_s / card.layers.count,
        "decode_tokens_per_s_per_user": (1.0 / cost.seconds) if decode else None,
        "latency_sources": {c: latency.source(c) for c in classes},
        "tables_basis": basis_of(profile, latency.tables),
        "moe_kernel": cfg.moe_kernel,
        "extrapolated_queries": dict(latency.extrapolations),
        "ops": [
            {"name": x.name, "op_class": x.op_class, "category": x.category, "count": x.count,
             "flops": x.flops, "bytes": x.bytes, "seconds": x.seconds}
            for x in lines
        ],
    }  # fmt: skip
    if as_json:
        print_json(result)
        return
    con = console()
    title = (
        f"{card.name} on {profile.name} (tp {cfg.tp}, dcp {cfg.dcp}): {decode} decodes at"
        f" {context:,} tokens" + "".join(f", {n}x{t}@{p}" for n, t, p in chunks)
    )
    con.print(title)
    t = Table(title="Step time by category")
    for col in ("category", "ms", "share"):
        t.add_column(col, justify="left" if col == "category" else "right")
    for cat, secs in cost.breakdown_s.items():
        t.add_row(cat, f"{secs * 1e3:,.3f}", f"{secs / cost.seconds:.0%}")
    t.add_row("step", f"{cost.seconds * 1e3:,.3f}", "100%")
    con.print(t)
    o = Table(title=f"Most expensive ops (all layers; {cost.padded_tokens} tokens after padding)")
    for col in ("op", "class", "layers", "us", "share", "GFLOP/layer", "MB/layer"):
        o.add_column(col, justify="left" if col in ("op", "class") else "right")
    for x in lines[:top]:
        o.add_row(
            x.name, x.op_class, f"{x.count:g}", f"{x.seconds * 1e6:,.1f}",
            f"{x.seconds / cost.seconds:.0%}", f"{x.flops / 1e9:,.3f}", f"{x.bytes / 1e6:,.2f}",
        )  # fmt: skip
    con.print(o)
    con.print(
        f"  GPU {cost.gpu_s * 1e3:,.3f} ms, CPU {cost.cpu_s * 1e3:,.3f} ms (async scheduling:"
        f" step = max); {cost.gpu_s / card.layers.count * 1e6:,.1f} us of GPU time per layer"
    )
    if decode:
        con.print(f"  interactivity of this step: {1 / cost.seconds:,.1f} tok/s per user")
    con.print(
        "  latency models: "
        + ", ".join(f"{c} {latency.source(c)}" for c in classes)
        + (
            f"; extrapolated: {dict(latency.extrapolations)}"
            if sum(latency.extrapolations.values())
            else ""
        )
    )
    kernel = f" (MoE kernel: {cfg.moe_kernel})" if cfg.moe_kernel != "auto" else ""
    con.print(f"  op tables: {result['tables_basis']}{kernel}")


# ------------------------------------------------------------------------------ ops, fit, validate

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
    from simulator.cost.fit import load_measurements
    from simulator.cost.vidur import vidur_tables

    for m in measurements or []:  # regular files, UTF-8, within the table limit
        check_text_file(m)
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
    from simulator.cost.fit import measured_by_class

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
        Path | None, typer.Option("--out", help="Write the CSV here (default: stdout).")
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", hidden=True, help="The old name of --out.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Add latency_us, source (fitted/prior) and extrapolated to every row of a shape CSV."""
    from simulator.cost.latency import LatencyModels
    from simulator.cost.predict import predict_table, read_table, records

    if out is not None and output is not None:
        raise SpecError("(arguments)", "out", "give --out or --output (its old name), not both")
    output = out if out is not None else output
    if output is not None:
        check_output_file(output, "--out")
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
            " user data folder being $PLAN_HOME or ~/.local/share/hybrid-capacity-planner)."
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
    from simulator.cost.latency import LatencyModelFile

    profile = catalog.hardware_profile(device)
    # never into the installed package: the user's data folder unless --out says where
    path = out or user_device_dir(profile.name) / "latency_models.json"
    check_output_file(path, "--out")
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
    write_file(path, doc.model_dump_json(indent=2) + "\n")
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
    folds: Annotated[int, typer.Option(help="k of the k-fold cross-validation.")] = 5,
    seed: Annotated[int, typer.Option(help="Seed of the fold shuffle.")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Prior vs fitted (k-fold held-out) absolute percentage errors per op class; with
    --tables or --leave-device-out, of the public measured tables."""
    import numpy as np

    from simulator.cost.fit import check_folds, check_rows, kfold_errors
    from simulator.specs.limits import check_seed

    if folds < 2:
        raise SpecError("(arguments)", "folds", f"must be at least 2, got {folds}")
    check_seed(seed)
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
    from simulator.measured.package import data_source, unavailable_note
    from simulator.measured.tables import read_frames
    from simulator.measured.validate import Score, by_class, kfold, leave_device_out

    if by_shape and leave_out:
        raise SpecError("(arguments)", "tables", "give --tables or --leave-device-out, not both")
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


POINTS = ("points.csv",)  # what `plan validate inferencemax|silicon --out` writes beside cache/
R = TypeVar("R")


def _with_progress(
    show: bool, run: Callable[[Callable[[int, int, Any], None]], R]
) -> tuple[R, float]:
    """``run(progress)`` under a progress bar on stderr (a terminal only); its result and
    the wall seconds it took."""
    import time

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    start = time.perf_counter()
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(), console=Console(stderr=True), transient=True,
        disable=not (show and sys.stderr.isatty()),
    ) as bar:  # fmt: skip
        task = bar.add_task("simulating", total=None)
        result = run(lambda done, total, _: bar.update(task, completed=done, total=total))
    return result, time.perf_counter() - start


def _run_args(
    requests_per_conc: int, seed: int, workers: int, out: Path | None, markdown: Path | None
) -> list[str]:
    """The options every `plan validate` run shares, as the document's command line."""
    args = [] if requests_per_conc == 10 else ["--requests-per-conc", str(requests_per_conc)]
    args += [] if seed == 0 else ["--seed", str(seed)]
    args += ["--workers", str(workers)]
    args += [] if out is None else ["--out", str(out)]
    return args + ([] if markdown is None else ["--markdown", str(markdown)])


def _write_validation(
    report: Any,
    render: Callable[[Any, str, str, float, int], str],
    wall_s: float,
    cache: Path | None,
    folder: OutputFolder | None,
    stage: Path | None,
    markdown: Path | None,
    args: list[str],
    workers: int,
) -> None:
    """What a validation leaves: the cache note, ``points.csv`` swapped into ``--out`` and
    the ``--markdown`` document (its command line: ``args``)."""
    import datetime
    import shlex

    from simulator.validation.run import write_points_csv

    if cache is not None:
        typer.echo(f"per-point results kept in {cache} (--no-cache: simulate all again)", err=True)
    if folder is not None and stage is not None:
        write_points_csv(report.results, stage / "points.csv")
        folder.commit()
        typer.echo(f"wrote {folder.path / 'points.csv'} ({len(report.results)} points)", err=True)
    if markdown is not None:
        date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        write_file(markdown, render(report, shlex.join(args), date, wall_s, workers), "--markdown")
        typer.echo(f"wrote {markdown}", err=True)


@command(validate_app, "inferencemax", short_help="Simulate InferenceMAX v1 points; APE.")
def validate_inferencemax(
    data: Annotated[
        Path | None,
        typer.Option(
            "--data",
            help="InferenceMAX dashboard CSV (default ../shared/data/inferencemax/"
            "inferencemax_v1_dashboard_20251025.csv beside the checkout).",
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write points.csv (measured vs simulated) here.")
    ] = None,
    markdown: Annotated[
        Path | None, typer.Option("--markdown", help="Write the validation document here.")
    ] = None,
    limit_per_curve: Annotated[
        int | None,
        typer.Option(
            "--limit-per-curve",
            help="Keep at most N concurrencies per curve (evenly spaced, ends kept).",
        ),
    ] = None,
    models: Annotated[
        list[str] | None,
        typer.Option("--models", help="Only these model cards (repeatable)."),
    ] = None,
    devices: Annotated[
        list[str] | None,
        typer.Option("--devices", help="Only these devices (repeatable)."),
    ] = None,
    requests_per_conc: Annotated[
        int, typer.Option(help="Requests per point = this x concurrency (InferenceMAX: 10).")
    ] = 10,
    workers: Annotated[int, typer.Option(help="Worker processes.")] = 2,
    seed: Annotated[int, typer.Option(help="Seed of every scenario.")] = 0,
    no_cache: NoCacheOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Simulate the InferenceMAX v1 points; median APE of throughput/GPU and interactivity."""

    from simulator import validation as v
    from simulator.validation.run import user_cache_dir

    path = data if data is not None else v.DEFAULT_DATA
    if workers < 1:
        raise SpecError("(arguments)", "workers", f"must be >= 1, got {workers}")
    # outputs checked before any work (the folder marked in progress, written whole)
    folder = None if out is None else OutputFolder(out, "plan validate inferencemax", POINTS)
    stage = folder.open() if folder is not None else None
    if markdown is not None:
        check_output_file(markdown, "--markdown")
    check_text_file(path)
    # the cache lives in the real folder (carried over by the swap), not in the stage
    cache = (None if no_cache else folder.target / "cache" if folder is not None
             else user_cache_dir())  # fmt: skip
    report, wall_s = _with_progress(
        not as_json,
        lambda progress: v.validate(
            path, models or (), devices or (), limit_per_curve, requests_per_conc, seed,
            workers, progress, cache,
        ),
    )  # fmt: skip
    args = ["plan", "validate", "inferencemax"]
    if data is not None:
        args += ["--data", str(data)]
    if limit_per_curve is not None:
        args += ["--limit-per-curve", str(limit_per_curve)]
    for m in models or ():
        args += ["--models", m]
    for d in devices or ():
        args += ["--devices", d]
    _write_validation(
        report, v.render_markdown, wall_s, cache, folder, stage, markdown,
        [*args, *_run_args(requests_per_conc, seed, workers, out, markdown)], workers,
    )  # fmt: skip
    if as_json:
        print_json(finite({**report.to_json(), "wall_s": wall_s}))
        return
    t = Table(title=f"InferenceMAX v1 vs simulation: {sum(r.ok for r in report.results)} points")
    for col in v.GROUP_HEADER:
        t.add_column(col, justify="left" if col in ("model", "device", "ISL/OSL",
                                                     "measured on") else "right")  # fmt: skip
    for row in v.group_rows(report.groups):
        t.add_row(*row)
    t.add_section()
    for row in v.group_rows(report.totals.values()):
        t.add_row(*row)
    console().print(t)
    skipped = ", ".join(f"{n} {reason}" for reason, n in report.skipped.most_common())
    typer.echo(f"skipped rows: {skipped or 'none'}", err=True)
    typer.echo(
        "APE = |sim - measured| / measured; bias = median (sim - measured) / measured"
        " (positive: simulator optimistic)",
        err=True,
    )


@command(validate_app, "silicon", short_help="Simulate aiconfigurator silicon points; APE.")
def validate_silicon(
    data: Annotated[
        Path | None,
        typer.Option(
            "--data",
            help="silicon_sample.csv (default: the one of the installed aiconfigurator-core,"
            " beside its systems/data).",
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write points.csv (measured vs simulated) here.")
    ] = None,
    markdown: Annotated[
        Path | None, typer.Option("--markdown", help="Write the validation document here.")
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option("--limit", help="Keep at most N points (evenly spaced in file order)."),
    ] = None,
    models: Annotated[
        list[str] | None,
        typer.Option("--models", help="Only these model cards (repeatable)."),
    ] = None,
    requests_per_conc: Annotated[
        int, typer.Option(help="Requests per point = this x concurrency (the client: 10).")
    ] = 10,
    workers: Annotated[int, typer.Option(help="Worker processes.")] = 2,
    seed: Annotated[int, typer.Option(help="Seed of every scenario.")] = 0,
    replicates: Annotated[
        int,
        typer.Option(
            help="Simulate every point under this many seeds (--seed, --seed + 1, ...) and"
            " state the headline's range; the tables are the first seed's."
        ),
    ] = 1,
    no_cache: NoCacheOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Simulate aiconfigurator-core's measured vLLM serving points; median APE of TTFT, TPOT."""

    from simulator.validation import silicon_report as s
    from simulator.validation.run import user_cache_dir
    from simulator.validation.silicon_document import HEADER, render_markdown, rows

    for name, value in (("workers", workers), ("replicates", replicates)):
        if value < 1:
            raise SpecError("(arguments)", name, f"must be >= 1, got {value}")
    # outputs checked before any work (the folder marked in progress, written whole)
    folder = None if out is None else OutputFolder(out, "plan validate silicon", POINTS)
    stage = folder.open() if folder is not None else None
    if markdown is not None:
        check_output_file(markdown, "--markdown")
    if data is not None and not data.is_dir():  # a folder: the loader says which file to give
        check_text_file(data)
    # the cache lives in the real folder (carried over by the swap), not in the stage
    cache = (None if no_cache else folder.target / "cache" if folder is not None
             else user_cache_dir())  # fmt: skip
    report, wall_s = _with_progress(
        not as_json,
        lambda progress: s.validate(
            data, models or (), limit, requests_per_conc, seed, workers, progress, cache,
            replicates,
        ),
    )  # fmt: skip
    args = ["plan", "validate", "silicon"]
    if data is not None:
        args += ["--data", str(data)]
    if limit is not None:
        args += ["--limit", str(limit)]
    for m in models or ():
        args += ["--models", m]
    if replicates != 1:
        args += ["--replicates", str(replicates)]
    _write_validation(
        report, render_markdown, wall_s, cache, folder, stage, markdown,
        [*args, *_run_args(requests_per_conc, seed, workers, out, markdown)], workers,
    )  # fmt: skip
    if as_json:
        print_json(finite({**report.to_json(), "wall_s": wall_s}))
        return
    simulated = sum(r.ok for r in report.results)
    t = Table(title=f"aiconfigurator-core silicon points vs simulation: {simulated} points")
    for col in HEADER:
        t.add_column(col, justify="left" if col in ("model", "system") else "right")
    for row in rows(s.by_model_system(report.results)):
        t.add_row(*row)
    t.add_section()
    for row in rows([*s.by_model(report.results), *s.by_system(report.results)]):
        t.add_row(*row)
    t.add_section()
    for row in rows([report.overall]):
        t.add_row(*row)
    console().print(t)
    if len(report.replicates) > 1:
        per_seed = "; ".join(
            f"seed {k}: {g.median_ape_ttft_pct:.1f} / {g.median_ape_tpot_pct:.1f} %"
            for k, g in report.replicates
            if g.median_ape_ttft_pct is not None and g.median_ape_tpot_pct is not None
        )
        typer.echo(f"median APE TTFT / TPOT by seed: {per_seed} (tables: the first)")
    skipped = ", ".join(f"{n} {reason}" for reason, n in report.skipped.most_common())
    typer.echo(f"skipped rows: {skipped or 'none'}", err=True)
    typer.echo(
        "APE = |sim - measured| / measured; bias = median (sim - measured) / measured"
        " (negative: simulated latency lower, simulator optimistic)",
        err=True,
    )
