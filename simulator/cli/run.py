"""`plan run` and `plan search`."""

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console

from simulator.cli.base import JsonOpt, app, command, print_json, print_pairs
from simulator.outputs import OutputFolder
from simulator.specs import (
    Scenario,
    SpecError,
)
from simulator.specs.limits import MAX_SEARCH_RUNS
from simulator.specs.loading import parse, read_yaml

# ------------------------------------------------------------------------------------ run

# what `plan run --out` writes (a folder written before manifests existed drops these)
RUN_FILES = ("requests.csv", "steps.csv", "summary.json", "transfers.csv", "pins.csv")
# what `plan search --out` writes beside its cache/ (which is kept across runs)
SEARCH_FILES = ("report.html", "report.md", "runs.csv", "best.csv", "sensitivity.csv",
                "pruned.csv", "modes.csv", "space.yaml", "figure_*.png")  # fmt: skip


@command(app, "run")
def run(
    scenario_file: Annotated[
        Path, typer.Argument(help="Scenario YAML (model, device, serving, workload).")
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Write requests.csv, steps.csv, summary.json (and, disaggregated,"
            " transfers.csv, pins.csv) here.",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Simulate a scenario: throughput per GPU, interactivity, TTFT, prefix-cache hit rates."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from simulator.simulation import simulate, slo_met, tokens_per_dollar

    scenario = parse(Scenario, read_yaml(scenario_file), scenario_file)
    base = scenario_file.resolve().parent
    # checked and marked in progress before anything is simulated; written into a temporary
    # folder beside it, swapped in whole at the end (removed if the command fails)
    folder = OutputFolder(out, "plan run", RUN_FILES) if out is not None else None
    stage = folder.open() if folder is not None else None
    show = not as_json and sys.stderr.isatty()
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
        console=Console(stderr=True), disable=not show, transient=True,
    ) as bar:  # fmt: skip
        task = bar.add_task("simulating", total=None)

        def progress(now_s: float, done: int) -> None:
            if done % 100 == 0:
                bar.update(task, description=f"simulated {now_s:,.0f} s, {done:,} requests done")

        result = simulate(scenario, scenario_file, base, progress)
    summary = result.summary
    price = tokens_per_dollar(scenario, summary.throughput_tok_per_s_per_gpu)
    data = {
        "scenario": scenario.name,
        "model": scenario.model,
        "device": scenario.device,
        "gpus": scenario.num_gpus,
        "disaggregation": (
            scenario.disaggregation.label if scenario.disaggregation is not None else None
        ),
        **summary.model_dump(mode="json"),
        "tokens_per_usd": price,
        "slo_met": slo_met(scenario, summary),
        "wall_s": result.wall_s,
        "latency": result.latency,
    }
    if folder is not None and stage is not None:
        result.request_table().to_csv(stage / "requests.csv", index=False)
        result.step_table().to_csv(stage / "steps.csv", index=False)
        (stage / "summary.json").write_text(json.dumps(data, indent=2) + "\n")
        names = "requests.csv, steps.csv, summary.json"
        if scenario.disaggregation is not None:
            result.transfer_table().to_csv(stage / "transfers.csv", index=False)
            result.pin_table().to_csv(stage / "pins.csv", index=False)
            names += ", transfers.csv, pins.csv"
        folder.commit()
        typer.echo(f"wrote {out}/{names}", err=True)
    if as_json:
        print_json(data)
        return

    def fmt(x: float | None, spec: str) -> str:
        return "-" if x is None else format(x, spec)

    s = summary
    rows = [
        ("throughput per GPU (total tokens/s)", fmt(s.throughput_tok_per_s_per_gpu, ",.1f")),
        ("output tokens/s per GPU", fmt(s.output_tok_per_s_per_gpu, ",.1f")),
        ("interactivity P50 / P90 / P99 (tok/s/user)",
         " / ".join(fmt(x, ",.1f") for x in (s.interactivity_tok_per_s_p50,
                                              s.interactivity_tok_per_s_p90,
                                              s.interactivity_tok_per_s_p99))),
        ("TTFT P50 / P90 / P99 (s)",
         " / ".join(fmt(x, ",.2f") for x in (s.ttft_s_p50, s.ttft_s_p90, s.ttft_s_p99))),
        ("prefix-cache hit rate (GPU + CPU)",
         f"{s.prefix_hit_rate:.1%} ({s.gpu_hit_rate:.1%} + {s.cpu_hit_rate:.1%})"),
        ("prompt tokens recomputed (hybrid resume)", f"{s.recomputed_prompt_tokens:,}"),
        ("requests finished / rejected", f"{s.requests_finished:,} / {s.requests_rejected:,}"),
        ("requests in flight / waiting at the end",
         f"{s.requests_in_flight_at_end:,} / {s.requests_waiting_at_end:,}"),
        ("queue", _saturation_text(s.saturated, s.saturation_reason)),
        ("preemptions", f"{s.preemptions:,}"),
        ("engine steps (mean step ms)",
         f"{s.steps:,} ({fmt(s.mean_step_s and s.mean_step_s * 1e3, ',.1f')})"),
        ("measured window (simulated)",
         f"{s.window_s:,.0f} s ({s.window_start_s:,.0f} to {s.window_end_s:,.0f} s)"),
        ("tokens per USD", fmt(price, ",.0f") + f" ({scenario.cost_model})"),
        ("SLO met", {True: "yes", False: "no", None: "no SLO given"}[slo_met(scenario, s)]),
        ("wall time", f"{result.wall_s:,.1f} s"),
    ]  # fmt: skip
    d = scenario.disaggregation
    if d is not None:
        rows[4] = (
            "prefix-cache hit rate (prefill GPU + CPU + pulled from decode)",
            f"{s.prefix_hit_rate:.1%} ({s.gpu_hit_rate:.1%} + {s.cpu_hit_rate:.1%}"
            f" + {s.remote_hit_rate:.1%})",
        )
        rows[-3:-3] = _pool_rows(scenario, s)
    title = f"{scenario.name}: {scenario.model} on {scenario.num_gpus}x {scenario.device}"
    if d is not None:
        title += f" ({d.label}, TP{scenario.serving.tp} replicas)"
    print_pairs(title, rows)
    if s.window_end_reason == "workload_ended" and scenario.duration_s is not None:
        typer.echo(
            f"  note: the workload ended at {s.window_end_s:,.1f} s, before duration_s"
            f" {scenario.duration_s:,.0f} s: the window ends at its last token"
        )
    from simulator.measured.summary import one_line

    typer.echo("  " + one_line(result.latency))


def _saturation_text(saturated: bool, reason: str | None) -> str:
    """``SATURATED (queue grows)`` / ``SATURATED (queue never drains)`` (the figures behind
    it are in ``saturation_reason``, ``--json``), or ``drains``."""
    if not saturated:
        return "drains (not saturated)"
    return f"SATURATED ({(reason or 'queue grows').partition(': ')[0]})"


def _pool_rows(scenario: Scenario, s: Any) -> list[tuple[str, str]]:
    """The disaggregated run's per-pool figures."""
    d = scenario.disaggregation
    assert d is not None

    def fmt(x: float | None, spec: str) -> str:
        return "-" if x is None else format(x, spec)

    def share(x: float | None) -> str:
        return "-" if x is None else f"{x:.1%}"

    serving = scenario.serving
    mean = s.kv_transfer_bytes_per_gpu_mean
    gb = None if mean is None else mean / 1e9
    rows = [
        ("prefill pool: input tokens/s per prefill GPU",
         f"{fmt(s.prefill_input_tok_per_s_per_gpu, ',.1f')} ({s.prefill_gpus} GPUs)"),
        ("decode pool: output tokens/s per decode GPU",
         f"{fmt(s.decode_output_tok_per_s_per_gpu, ',.1f')} ({s.decode_gpus} GPUs)"),
        ("decode KV use mean / peak (pinned by send-back)",
         f"{share(s.decode_kv_usage_mean)} / {share(s.decode_kv_usage_peak)}"
         f" ({share(s.decode_kv_pinned_share_mean)} / {share(s.decode_kv_pinned_share_peak)})"),
        ("prefill KV use mean", share(s.prefill_kv_usage_mean)),
        ("P -> D KV read P50 / P90 (s), mean GB per GPU",
         f"{fmt(s.kv_transfer_s_p50, ',.3f')} / {fmt(s.kv_transfer_s_p90, ',.3f')},"
         f" {fmt(gb, ',.2f')}"),
        ("preemptions on decode", f"{s.decode_preemptions or 0:,}"),
        ("link per GPU (each direction)",
         f"{d.link_bw_bytes_per_s / 1e9:g} GB/s, {d.link_latency_s * 1e6:g} us"),
    ]  # fmt: skip
    if d.send_back:
        rows += [
            ("send-back: pulls / recomputes / pins expired",
             f"{s.send_back_pulls:,} / {s.send_back_recomputes:,} / {s.send_back_expired:,}"),
            ("send-back: prompt tokens pulled back", f"{s.remote_hit_rate:.1%}"),
            ("send-back: pull P50 (s)", fmt(s.send_back_pull_s_p50, ",.3f")),
            ("send-back: TTL, recompute threshold",
             f"{serving.decoder_kv_blocks_ttl_s:g} s, {serving.kv_recompute_threshold_tokens}"
             " tokens"),
        ]  # fmt: skip
    return rows


# ------------------------------------------------------------------------------------ search


@command(app, "search")
def search(
    space_file: Annotated[Path, typer.Argument(help="Search space YAML (devices, sweep, SLO).")],
    out: Annotated[Path, typer.Option("--out", help="Report directory.")] = Path("out"),
    workers: Annotated[
        int, typer.Option(help="Worker processes (local, or CPUs of a local Ray).")
    ] = 2,
    executor: Annotated[str, typer.Option(help="local (process pool) or ray.")] = "local",
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address (default: start a local instance).")
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
    as_json: JsonOpt = False,
) -> None:
    """SLO-constrained search: best configuration per device, tokens per dollar, a report."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from simulator.planner.analysis import best_per_device, pruned_table, sensitivity
    from simulator.planner.executor import run_all
    from simulator.planner.report import markdown, write_report
    from simulator.planner.search import run_search
    from simulator.planner.space import (
        SearchSpace,
        check_run_count,
        count_runs,
        disaggregation_text,
        expand,
    )
    from simulator.simulation import check_workload_files, resolve_workload

    if workers < 1:
        raise SpecError("(arguments)", "workers", f"must be at least 1, got {workers}")
    if executor not in ("local", "ray"):
        raise SpecError(
            "(arguments)", "executor", f"unknown executor {executor!r}; use local or ray"
        )
    if seeds is not None and seeds < 1:
        raise SpecError("(arguments)", "seeds", f"must be at least 1, got {seeds}")
    if max_runs < 1:
        raise SpecError("(arguments)", "max_runs", f"must be at least 1, got {max_runs}")
    space = parse(SearchSpace, read_yaml(space_file), space_file)
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
    # a relative trace path is relative to the space file, as a scenario's is to its file;
    # the traces are checked whole (gzip, UTF-8) before the first simulation
    update["workload"] = resolve_workload(space.workload, space_file.resolve().parent)
    space = space.model_copy(update=update)
    check_workload_files(space.workload)
    candidates, pruned = expand(space, str(space_file))
    if not candidates:
        raise SpecError(space_file, "(configurations)", _all_pruned(pruned))
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
        done_before = 0

        def batch(scenarios: list[Any]) -> dict[str, dict[str, Any]]:
            nonlocal done_before
            start = done_before
            bar.update(task, total=start + len(scenarios))
            got = run_all(
                scenarios,
                folder.target / "cache",
                workers,
                lambda done, total: bar.update(task, completed=start + done),
                executor,  # type: ignore[arg-type]
                address,
            )
            done_before = start + len(scenarios)
            return got

        found = run_search(space, candidates, batch)
    runs = found.runs
    best = best_per_device(space, runs)
    sens = sensitivity(space, runs, best)
    pruned_df = pruned_table(pruned)
    paths = write_report(stage, space, runs, best, sens, pruned_df)
    # the space beside its results, so that a reader (the dashboard) needs only the folder
    (stage / "space.yaml").write_text(
        yaml.safe_dump(space.model_dump(mode="json"), sort_keys=False)
    )
    paths.append(stage / "space.yaml")
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
                "pruned": pruned_df.to_dict(orient="records"),
                "files": [str(p) for p in paths],
            }
        )
        return
    sys.stdout.write(markdown(space, best, runs, len(pruned)))
    typer.echo(
        f"{found.simulations} simulations ({space.search.replace('_', '-')}, {space.seeds}"
        f" seed{'s' if space.seeds > 1 else ''} per point)",
        err=True,
    )
    for p in pruned:
        knobs = {**p.knobs, "disaggregation": disaggregation_text(p.knobs.get("disaggregation"))}
        typer.echo(f"pruned {p.device} {knobs}: {p.reason}", err=True)
    typer.echo(f"wrote {', '.join(str(p) for p in paths)}", err=True)


def _all_pruned(pruned: list[Any]) -> str:
    """``every configuration was pruned: <reason> (<configurations>); ...``: the distinct
    reasons, most frequent first, each with the configurations it pruned (a few named)."""
    from simulator.planner.space import knob_label

    real = [p for p in pruned if " repeats " not in p.reason] or pruned
    by_reason: dict[str, list[str]] = {}
    for p in real:
        try:
            name = f"{p.device}-{knob_label(p.knobs)}"
        except (KeyError, TypeError, ValueError):  # knobs that did not validate
            name = p.device
        by_reason.setdefault(p.reason, []).append(name)
    parts = []
    for reason, names in sorted(by_reason.items(), key=lambda kv: -len(kv[1]))[:3]:
        shown = ", ".join(names[:2]) + (f" and {len(names) - 2} more" if len(names) > 2 else "")
        parts.append(f"{reason} ({shown})")
    more = len(by_reason) - 3
    tail = f"; and {more} other reason{'s' if more > 1 else ''}" if more > 0 else ""
    return f"every configuration was pruned: {'; '.join(parts)}{tail}"
