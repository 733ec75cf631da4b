"""`plan size`: one command from a model, a demand and an SLO to a ranked sizing answer."""

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from simulator.cli.base import JsonOpt, SetOpt, app, command, console, print_json
from simulator.specs import SpecError
from simulator.specs.limits import MAX_SEARCH_RUNS, check_workers

# SizeRequest fields whose option is named otherwise
_FLAG = {
    "slo_interactivity_tok_per_s": "slo-interactivity",
    "slo_ttft_p90_s": "slo-ttft-p90",
    "cost_model": "cost-model",
}


@command(app, "size")
def size(
    model: Annotated[str, typer.Option("--model", help="Model card name or path.")],
    users: Annotated[int, typer.Option("--users", help="Concurrent users to serve.")],
    slo_interactivity: Annotated[
        float,
        typer.Option("--slo-interactivity", help="P90 interactivity target, tok/s per user."),
    ],
    slo_ttft_p90: Annotated[
        float | None, typer.Option("--slo-ttft-p90", help="P90 TTFT target, seconds.")
    ] = None,
    devices: Annotated[
        str | None,
        typer.Option(
            "--devices", metavar="A,B,...", help="Devices to size (default: every priced one)."
        ),
    ] = None,
    workload: Annotated[
        str,
        typer.Option(
            "--workload", metavar="agentic|chat|random|PATH", help="Traffic (default agentic)."
        ),
    ] = "agentic",
    isl: Annotated[int | None, typer.Option("--isl", help="random: input tokens [8192].")] = None,
    osl: Annotated[int | None, typer.Option("--osl", help="random: output tokens [1024].")] = None,
    cost_model: Annotated[
        str, typer.Option("--cost-model", help="USD per GPU-hour table.")
    ] = "semianalysis_tco_neocloud",
    seeds: Annotated[
        int | None, typer.Option("--seeds", help="Seeds per load (default 3; --quick 2).")
    ] = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="20-minute windows, 2 seeds, 10 % load steps.")
    ] = False,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write size.md, deploy.sh and the report here.")
    ] = None,
    workers: Annotated[int, typer.Option("--workers", help="Worker processes.")] = 2,
    sets: SetOpt = None,
    max_runs: Annotated[
        int, typer.Option("--max-runs", help="Refuse a sizing of more simulations than this.")
    ] = MAX_SEARCH_RUNS,
    as_json: JsonOpt = False,
) -> None:
    """Size a deployment: cheapest SLO-meeting fleet per device, ranked, with vllm serve."""
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from simulator.planner.answer import refused_note
    from simulator.planner.report_tables import plural
    from simulator.planner.run_count import seeds_text
    from simulator.planner.sizing import SizeRequest, check_lengths, run_size
    from simulator.planner.sizing_report import as_json as result_json
    from simulator.planner.sizing_report import repeat_notes, terminal_table
    from simulator.specs.loading import parse

    check_workers(workers)
    if max_runs < 1:
        raise SpecError("(arguments)", "max_runs", f"must be at least 1, got {max_runs}")
    check_lengths(workload, isl, osl)
    names = None if devices is None else [d.strip() for d in devices.split(",") if d.strip()]
    if names == []:
        raise SpecError(
            "(arguments)", "devices",
            f"{devices!r} names no device: give e.g. h100,h200, or leave --devices out to size"
            " every priced one",
        )  # fmt: skip
    fields = {
        "model": model,
        "users": users,
        "slo_interactivity_tok_per_s": slo_interactivity,
        "slo_ttft_p90_s": slo_ttft_p90,
        "devices": names,
        "workload": workload,
        "isl": 8192 if isl is None else isl,
        "osl": 1024 if osl is None else osl,
        "cost_model": cost_model,
        "seeds": seeds,
        "quick": quick,
    }
    try:
        request = parse(SizeRequest, fields, "(arguments)")
    except SpecError as exc:  # named by the option the user gave, not the request's field
        raise exc.remapped(
            lambda e: SpecError(e.file, _FLAG.get(e.field.partition(".")[0], e.field), e.reason)
        ) from None
    show = not as_json and sys.stderr.isatty()
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
        TextColumn("simulations at most; elapsed"), TimeElapsedColumn(),
        TextColumn("left at most"), TimeRemainingColumn(), console=Console(stderr=True),
        disable=not show, transient=True,
    ) as bar:  # fmt: skip
        task = bar.add_task("sizing", total=None)

        def progress(done: int, at_most: int) -> None:
            bar.update(task, completed=done, total=at_most)

        result = run_size(request, out, workers, progress, overrides=sets or [], max_runs=max_runs)
    if as_json:
        print_json(result_json(result))
        return
    out_console = console()
    out_console.print(result.answer, markup=False)  # wrapped to the terminal
    if not result.best.empty:
        table = terminal_table(result)
        t = Table(title=f"{result.space.model}, {users:,} users: ranked by the fleet's $/hour")
        for header in table.headers:
            left = header in ("device", "config")
            t.add_column(header, overflow="fold", justify="left" if left else "right")
        for row in table.rows:
            t.add_row(*row)
        out_console.print(t)
    for line in result.not_served:
        out_console.print(f"not served: {line}", markup=False)
    if not result.table.empty:
        top = result.table.iloc[0]
        many = plural(int(top.replicas), "deployment")
        typer.echo(f"\ndeploy {top.config_id} ({many} of this; all in deploy.sh):")
        typer.echo(result.commands[top.config_id])
    for note in repeat_notes(result):
        typer.echo(f"note: {note}", err=True)
    refused = refused_note(result.runs)
    if refused:
        typer.echo(refused, err=True)
    typer.echo(f"{result.simulations:,} simulations ({seeds_text(result.space)})", err=True)
    if result.report_dir is not None:
        typer.echo(f"wrote {result.report_dir}/size.md, deploy.sh, report.html", err=True)
