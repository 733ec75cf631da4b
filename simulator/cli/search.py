"""`plan search`: the SLO-constrained search, its answer as tables, its report folder."""

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from simulator.cli.base import (
    JsonOpt,
    SetOpt,
    app,
    check_kind,
    command,
    console,
    print_json,
    read_spec,
)
from simulator.cli.tables import natural_width
from simulator.outputs import OutputFolder
from simulator.specs import SpecError
from simulator.specs.limits import MAX_SEARCH_RUNS, check_workers
from simulator.specs.loading import parse
from simulator.specs.overrides import apply_overrides, blamed, check_not_owned

if TYPE_CHECKING:
    import pandas as pd

    from simulator.planner.expand import Pruned
    from simulator.planner.space import SearchSpace


@command(app, "search", short_help="Best configuration per device under an SLO.")
def search(
    space_file: Annotated[
        Path, typer.Argument(metavar="SPACE", help="Search space YAML (devices, sweep, SLO).")
    ],
    out: Annotated[Path, typer.Option("--out", metavar="DIR", help="Report directory.")] = Path(
        "out"
    ),
    workers: Annotated[
        int, typer.Option(help="Worker processes (local, or CPUs of a local Ray).")
    ] = 2,
    executor: Annotated[
        str, typer.Option(metavar="local|ray", help="local (process pool) or ray.")
    ] = "local",
    address: Annotated[
        str | None,
        typer.Option(
            metavar="HOST:PORT", help="Ray cluster address (default: start a local instance)."
        ),
    ] = None,
    seeds: Annotated[
        int | None,
        typer.Option(help="Seeds per point (default: the space's `seeds`, 3); SLO on all."),
    ] = None,
    grid: Annotated[
        bool,
        typer.Option(
            "--grid", help="Run exactly the listed concurrencies instead of the max-load search."
        ),
    ] = False,
    max_runs: Annotated[
        int,
        typer.Option(
            "--max-runs",
            help="Refuse a search of more simulations than this (configurations as written x"
            f" loads x seeds; default {MAX_SEARCH_RUNS:,}).",
        ),
    ] = MAX_SEARCH_RUNS,
    sets: SetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """SLO-constrained search: best configuration per device, tokens per dollar, a report."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from simulator.planner.answer import refused_note
    from simulator.planner.run_count import check_run_count, count_runs, seeds_text
    from simulator.planner.search import (
        SEARCH_FILES,
        cached_batches,
        prepare,
        run_search,
        write_search_report,
    )
    from simulator.planner.space import SearchSpace

    if executor not in ("local", "ray"):
        raise SpecError(
            "(arguments)", "executor", f"unknown executor {executor!r}; use local or ray"
        )
    check_workers(workers, local=executor == "local")
    if executor == "local" and address is not None:
        raise SpecError("(arguments)", "address", "names a Ray cluster: add --executor ray")
    if seeds is not None and seeds < 1:
        raise SpecError("(arguments)", "seeds", f"must be at least 1, got {seeds}")
    if max_runs < 1:
        raise SpecError("(arguments)", "max_runs", f"must be at least 1, got {max_runs}")
    raw = read_spec(space_file)
    owned = {"seeds": "--seeds"} if seeds is not None else {}
    check_not_owned(sets or [], owned | ({"search": "--grid"} if grid else {}))
    data = apply_overrides(raw, sets, "(arguments)") if sets and isinstance(raw, dict) else raw
    check_kind(data, space_file, "search space")
    # an error of a value that --set gave names (arguments), not the file
    with blamed(data, sets, space_file):
        space = parse(SearchSpace, data, space_file)
    update: dict[str, Any] = {}
    if seeds is not None:
        update["seeds"] = seeds
    if grid:
        update["search"] = "grid"
    # the size of the space as written, refused above the cap before anything is expanded
    check_run_count(count_runs(space.model_copy(update=update), str(space_file)), max_runs,
                    str(space_file))  # fmt: skip
    # checked and marked in progress before any work; the report is written into a temporary
    # folder and swapped in whole; cache/ (the resume mechanism) is written in place and kept
    folder = OutputFolder(out, "plan search", SEARCH_FILES)
    stage = folder.open()
    space, candidates, pruned = prepare(
        space.model_copy(update=update), str(space_file), space_file.resolve().parent
    )
    # what will run, said before it starts: on stdout (stderr is kept for the one error line
    # a failure prints); with --json it is the answer's "planned"
    count = count_runs(space, str(space_file), configurations=len(candidates))
    dropped = sum(1 for p in pruned if " repeats " not in p.reason)
    planned = f"{count.text()}" + (f" ({dropped:,} pruned)" if dropped else "")
    if not as_json:
        typer.echo(f"plan search: {planned}")
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
        TimeRemainingColumn(), console=Console(stderr=True),
        disable=as_json or not sys.stderr.isatty(), transient=True,
    ) as bar:  # fmt: skip
        what = "grid" if space.search == "grid" else "max-load search"
        task = bar.add_task(f"{len(candidates)} configurations, {what}", total=None)
        with cached_batches(
            folder.target / "cache",
            workers,
            lambda done, submitted: bar.update(task, completed=done, total=submitted),
            executor,  # type: ignore[arg-type]
            address,
            str(space_file),
        ) as batch:
            found = run_search(space, candidates, batch)
    runs = found.runs
    paths, best, pruned_df = write_search_report(stage, space, runs, pruned)
    folder.commit()
    paths = [folder.final(p) for p in paths]
    if as_json:
        print_json(
            {
                "best": best.to_dict(orient="records"),
                "runs": len(runs),
                "simulations": found.simulations,
                "planned": {
                    "configurations": count.configurations,
                    "loads": count.loads,
                    "loads_upper_bound": count.bound,
                    "seeds": count.seeds,
                    "simulations": count.simulations,
                    "text": planned,
                },
                "search": space.search,
                "seeds": space.seeds,
                "refused_note": refused_note(runs),
                "pruned": pruned_df.to_dict(orient="records"),
                "files": [str(p) for p in paths],
            }
        )
        return
    print_answer(space, best, runs, pruned)
    refused = refused_note(runs)
    if refused:
        typer.echo(refused, err=True)
    typer.echo(f"{found.simulations} simulations ({seeds_text(space)})", err=True)
    typer.echo(f"wrote {', '.join(str(p) for p in paths)}", err=True)


# the answer's columns: (header, best.csv column, format); the fleet's only with a demand
BEST = [
    ("#", "rank", "d"), ("device", "device", ""), ("configuration", "config_id", ""),
    ("users", "concurrency", ",d"),
    ("tok/s per GPU", "throughput_tok_per_s_per_gpu", ",.0f"),
    ("P90 tok/s per user", "interactivity_p90", ",.1f"), ("TTFT P90 s", "ttft_p90_s", ",.2f"),
    ("$ per M out tok", "usd_per_m_output_tok", ",.2f"),
]  # fmt: skip
RANKED_BY = {"fleet_usd_per_hour": "the fleet's $ per hour", "tokens_per_usd": "tokens per $",
             "throughput_tok_per_s_per_gpu": "tok/s per GPU"}  # fmt: skip
# "nodes / racks": what the fleet is bought by (8-GPU nodes, or NVL72 racks of the scale-up
# domain: GPUs / 72 rounded up), as plan size counts it (best.csv's `units` and `unit`)
# GPUs in use, what is bought for them and its $ per hour (a rack's GPUs are paid for whole:
# the fleet's, where the space has a demand; else the GPUs in use x price)
FLEET = [("GPUs in use", "gpus", ",d"), ("nodes / racks", "units_bought", ">"),
         ("$ per hour", "fleet_usd_per_hour", ",.0f")]  # fmt: skip
FLEET_IN_USE = ("$ per hour", "usd_per_hour", ",.0f")


def _cell(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if spec.endswith("d") and isinstance(value, float) and value.is_integer():
        value = int(value)
    try:
        return format(value, spec)
    except (TypeError, ValueError):
        return str(value)


def _slo_text(space: "SearchSpace") -> str:
    slo = space.slo
    parts = []
    if slo.interactivity_tok_per_s_p90 is not None:
        parts.append(f"P90 interactivity >= {slo.interactivity_tok_per_s_p90:g} tok/s/user")
    if slo.ttft_s_p90 is not None:
        parts.append(f"P90 TTFT <= {slo.ttft_s_p90:g} s")
    return ", ".join(parts) or "no SLO"


def best_tables(space: "SearchSpace", best: "pd.DataFrame", width: int) -> list[Table]:
    """The best SLO-meeting configuration of each device, ranked (1 is the answer), with the
    fleet for the space's demand: one table, or, wider than ``width``, the configurations and
    then their fleets."""
    from simulator.planner.analysis import rank_basis

    demand = ""
    if space.demand_users:
        demand = f"{space.demand_users:,} concurrent users"
    elif space.demand_requests_per_s:
        demand = f"{space.demand_requests_per_s:g} requests/s"
    key = rank_basis(space, best)
    basis = RANKED_BY.get(key, key.replace("_", " "))
    title = f"Best configuration per device ({_slo_text(space)}), ranked by {basis}"
    caption = (
        "users: concurrent users per deployment (all its replicas); means over the seeds (95 %"
        " intervals in report.md); "
        + ("the SLO holds on every seed" if space.slo.has_target else "no SLO")
    )
    rows = best.to_dict(orient="records")
    for row in rows:
        if "units" in row and "unit" in row and row["units"] == row["units"]:
            n = int(row["units"])
            row["units_bought"] = f"{n:,d} {row['unit']}{'' if n == 1 else 's'}"

    def table(title: str, columns: list[tuple[str, str, str]], caption: str | None) -> Table:
        t = Table(title=title, caption=caption)
        for header, _, spec in columns:
            t.add_column(header, justify="right" if spec else "left")
        for row in rows:
            t.add_row(*(_cell(row.get(col), spec) for _, col, spec in columns))
        return t

    have = {*best.columns, "units_bought"} if "units" in best.columns else set(best.columns)
    fleet = [c for c in FLEET if c[1] in have] if demand else []
    if demand and "fleet_usd_per_hour" not in have and FLEET_IN_USE[1] in have:
        fleet.append(FLEET_IN_USE)
    columns = [c for c in BEST if c[1] in best.columns]
    one = table(f"{title}; fleet for {demand}" if fleet else title, columns + fleet, caption)
    if not fleet or natural_width(one) <= width:
        return [one]
    keys = [c for c in columns if c[1] in ("rank", "device")]
    return [table(title, columns, caption), table(f"Fleet for {demand}", keys + fleet, None)]


def modes_table(runs: "pd.DataFrame") -> Table | None:
    """Aggregated against disaggregated per device, when the search had both."""
    from simulator.planner.compare import mode_comparison

    modes = mode_comparison(runs)
    if modes.empty:
        return None
    unit = "tokens per $" if str(modes.key.iloc[0]) == "tokens_per_usd" else "tok/s per GPU"
    t = Table(title="Aggregated or disaggregated (best SLO-meeting configuration of each)")
    for header in ("device", "aggregated", unit, "disaggregated", unit, "best split", "winner"):
        t.add_column(header, justify="right" if header == unit else "left")
    for m in modes.to_dict(orient="records"):
        change = m.get("disaggregated_vs_aggregated")
        winner = str(m.get("winner", "-"))
        if change is not None and change == change:
            winner += f" ({change:+.0%} for disaggregated)"
        t.add_row(
            str(m["device"]), _cell(m.get("aggregated_config"), ""),
            _cell(m.get("aggregated_value"), ",.0f"), _cell(m.get("disaggregated_config"), ""),
            _cell(m.get("disaggregated_value"), ",.0f"), _cell(m.get("best_split"), ""), winner,
        )  # fmt: skip
    return t


def pruned_table_text(pruned: "list[Pruned]", shown: int = 3) -> Table | None:
    """Why configurations were not run: one row per reason, with its count and a few names."""
    from simulator.planner.expand import pruned_groups

    groups = pruned_groups(pruned)
    if not groups:
        return None
    t = Table(title=f"Not run, pruned or repeated: {len(pruned):,} configurations (pruned.csv)")
    t.add_column("count", justify="right")
    t.add_column("reason")
    t.add_column("configurations")
    for reason, names in groups:
        which = ", ".join(names[:shown])
        if len(names) > shown:
            which += f" and {len(names) - shown:,} more"
        t.add_row(f"{len(names):,}", reason, which)
    return t


def print_answer(
    space: "SearchSpace", best: "pd.DataFrame", runs: "pd.DataFrame", pruned: "list[Pruned]"
) -> None:
    """The search's answer on stdout: the ranked best configurations, the devices without
    one, aggregated against disaggregated, and the pruned configurations by reason."""
    con = console()
    con.print(
        f"{space.name}: {space.model} on {', '.join(space.devices)}; {len(runs):,} runs,"
        f" cost model {space.cost_model}"
    )
    if best.empty:
        con.print("No configuration meets the SLO.")
    else:
        for table in best_tables(space, best, con.width):
            con.print(table)
    answered = set(best.device) if not best.empty else set()
    missing = [d for d in space.devices if d not in answered]
    if missing and not best.empty:
        con.print(f"No configuration of {', '.join(missing)} meets the SLO (or fits).")
    for extra in (modes_table(runs), pruned_table_text(pruned)):
        if extra is not None:
            con.print(extra)
