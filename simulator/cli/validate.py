"""`plan validate inferencemax|silicon`: the end-to-end checks (`plan validate ops`:
``simulator.cli.ops``, which this imports)."""

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from simulator.cli.base import JsonOpt, command, console, file_path, print_json
from simulator.cli.ops import validate_app
from simulator.output_files import check_output_file, finite, write_file
from simulator.outputs import OutputFolder
from simulator.specs import SpecError
from simulator.specs.limits import check_seed, check_workers
from simulator.specs.loading import check_text_file

MAX_REPLICATES = 100  # seeds per point; the validation's headline uses 3

NoCacheOpt = Annotated[
    bool,
    typer.Option(
        "--no-cache",
        help="Simulate every point again and keep nothing: without it each point's result"
        " is kept in OUT/cache (without --out: $PLAN_CACHE_DIR/validate or"
        " ~/.cache/hybrid-capacity-planner/validate), so a rerun or a killed run resumes.",
    ),
]


PointsOutOpt = Annotated[
    Path | None, typer.Option("--out", help="Write points.csv (measured vs simulated) here.")
]
MarkdownOpt = Annotated[
    Path | None,
    typer.Option("--markdown", help="Write the validation document here.", parser=file_path),
]
ModelsOpt = Annotated[
    list[str] | None, typer.Option("--models", help="Only these model cards (repeatable).")
]
WorkersOpt = Annotated[int, typer.Option(help="Worker processes.")]
SeedOpt = Annotated[int, typer.Option(help="Seed of every scenario.")]

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

    if folder is not None and stage is not None:
        write_points_csv(report.results, stage / "points.csv")
        folder.commit()
        typer.echo(f"wrote {folder.path / 'points.csv'} ({len(report.results)} points)", err=True)
    if markdown is not None:
        date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        write_file(markdown, render(report, shlex.join(args), date, wall_s, workers), "--markdown")
        typer.echo(f"wrote {markdown}", err=True)
    if cache is not None and cache.is_dir():  # (a cache that could not be made kept nothing)
        typer.echo(f"per-point results kept in {cache} (--no-cache: simulate all again)", err=True)


def check_markdown(markdown: Path, out: Path | None, data: Path | None) -> None:
    """``--markdown`` can be written, is not the ``--data`` it reads and is outside the
    ``--out`` folder (replaced whole by the points: the document would be lost, or be
    overwritten by ``points.csv``)."""
    import os

    if out is not None:
        folder = os.path.realpath(out)
        if os.path.realpath(markdown).startswith(folder + os.sep):
            raise SpecError(
                markdown, "--markdown", f"is inside the --out folder {out}, which is replaced"
                " whole: give a path outside it",
            )  # fmt: skip
    check_output_file(markdown, "--markdown", inputs=[data])


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
    out: PointsOutOpt = None,
    markdown: MarkdownOpt = None,
    limit_per_curve: Annotated[
        int | None,
        typer.Option(
            "--limit-per-curve",
            help="Keep at most N concurrencies per curve (evenly spaced, ends kept).",
        ),
    ] = None,
    models: ModelsOpt = None,
    devices: Annotated[
        list[str] | None,
        typer.Option("--devices", help="Only these devices (repeatable)."),
    ] = None,
    requests_per_conc: Annotated[
        int, typer.Option(help="Requests per point = this x concurrency (InferenceMAX: 10).")
    ] = 10,
    workers: WorkersOpt = 2,
    seed: SeedOpt = 0,
    no_cache: NoCacheOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Simulate the InferenceMAX v1 points; median APE of throughput/GPU and interactivity."""

    from simulator import validation as v
    from simulator.validation.runner import user_cache_dir

    path = data if data is not None else v.DEFAULT_DATA
    check_workers(workers)
    check_seed(seed)
    # outputs checked before any work (the folder marked in progress, written whole)
    folder = None if out is None else OutputFolder(out, "plan validate inferencemax", POINTS)
    stage = folder.open() if folder is not None else None
    if markdown is not None:
        check_markdown(markdown, out, path)
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
    failed = v.not_simulated(report.results)
    if failed:
        typer.echo(
            "points not simulated: " + ", ".join(f"{n} {s}" for s, n in failed.most_common()),
            err=True,
        )
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
    out: PointsOutOpt = None,
    markdown: MarkdownOpt = None,
    limit: Annotated[
        int | None,
        typer.Option("--limit", help="Keep at most N points (evenly spaced in file order)."),
    ] = None,
    models: ModelsOpt = None,
    requests_per_conc: Annotated[
        int, typer.Option(help="Requests per point = this x concurrency (the client: 10).")
    ] = 10,
    workers: WorkersOpt = 2,
    seed: SeedOpt = 0,
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
    from simulator.validation.runner import user_cache_dir
    from simulator.validation.silicon_document import HEADER, render_markdown, rows

    check_workers(workers)
    check_seed(seed)
    if replicates < 1:
        raise SpecError("(arguments)", "replicates", f"must be >= 1, got {replicates}")
    if replicates > MAX_REPLICATES:  # a seed a replicate: 10^11 never ended
        raise SpecError(
            "(arguments)", "replicates",
            f"{replicates:,} exceeds {MAX_REPLICATES} seeds a point",
        )  # fmt: skip
    # outputs checked before any work (the folder marked in progress, written whole)
    folder = None if out is None else OutputFolder(out, "plan validate silicon", POINTS)
    stage = folder.open() if folder is not None else None
    if markdown is not None:
        check_markdown(markdown, out, data)
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
    if data is None and limit is None and not models and seed == 0:
        _check_stated_latency(report, out)


def _check_stated_latency(report: Any, out: Path | None) -> None:
    """A whole run of the default file: say so when the TTFT / TPOT errors the planner states
    (hardware_profiles/model_error.json) are not this run's."""
    from simulator.planner.uncertainty import stale_latency_devices

    errors: dict[str, list[tuple[float, float]]] = {}
    for r in report.results:
        ttft, tpot = r.err_ttft_pct, r.err_tpot_pct
        if r.ok and ttft is not None and tpot is not None:
            errors.setdefault(r.point.device, []).append((ttft, tpot))
    stale = stale_latency_devices(errors)
    if stale:
        where = f"{out}/points.csv" if out is not None else "OUT/points.csv (run with --out)"
        typer.echo(
            f"note: the TTFT / TPOT errors the planner states for {', '.join(stale)} are not"
            " this run's: rewrite hardware_profiles/model_error.json with"
            f" scripts/model_error.py --silicon {where}",
            err=True,
        )
