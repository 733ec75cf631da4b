"""`plan run`: simulate one scenario."""

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from simulator.cli.base import (
    JsonOpt,
    SetOpt,
    app,
    check_kind,
    command,
    print_json,
    print_pairs,
    read_spec,
)
from simulator.outputs import OutputFolder
from simulator.specs import Scenario, SpecError
from simulator.specs.loading import parse
from simulator.specs.overrides import apply_overrides, blamed

# below this many requests finished in the window, plan run says its TTFT tail is rough:
# the P90 of fewer than 20 values is one of its two largest
FEW_REQUESTS = 20

# what `plan run --out` writes, in either format (a folder written before manifests existed
# drops these; a rerun drops what the last one wrote, so csv and parquet files never mix)
TABLES = ("requests", "steps", "transfers", "pins")
RUN_FILES = ("summary.json", *(f"{t}.{ext}" for t in TABLES for ext in ("csv", "parquet")))
FORMATS = {"csv": ("csv",), "parquet": ("parquet",), "both": ("csv", "parquet")}


def check_format(fmt: str) -> tuple[str, ...]:
    """The file formats of ``--format`` (parquet needs pyarrow, checked before any work)."""
    if fmt not in FORMATS:
        raise SpecError(
            "(arguments)", "format", f"unknown format {fmt!r}; use csv, parquet or both"
        )
    if "parquet" in FORMATS[fmt]:
        import importlib.util

        if importlib.util.find_spec("pyarrow") is None:
            raise SpecError(
                "(arguments)", "format", "parquet needs pyarrow: pip install pyarrow (or use csv)"
            )
    return FORMATS[fmt]


def write_tables(stage: Path, tables: dict[str, Any], formats: tuple[str, ...]) -> list[str]:
    """Each pandas table as ``<name>.csv`` and/or ``<name>.parquet``; the names written."""
    names = []
    for name, table in tables.items():
        if "csv" in formats:
            table.to_csv(stage / f"{name}.csv", index=False)
            names.append(f"{name}.csv")
        if "parquet" in formats:
            table.to_parquet(stage / f"{name}.parquet", index=False)
            names.append(f"{name}.parquet")
    return names


@command(app, "run", short_help="Simulate one scenario (one device).")
def run(
    scenario_file: Annotated[
        Path,
        typer.Argument(
            metavar="SCENARIO", help="Scenario YAML (model, device, serving, workload)."
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="DIR",
            help="Write requests, steps, summary.json (and, disaggregated, transfers, pins) here.",
        ),
    ] = None,
    table_format: Annotated[
        str | None,
        typer.Option(
            "--format",
            metavar="csv|parquet|both",
            help="The tables' format under --out (parquet: pyarrow) [csv].",
        ),
    ] = None,
    sets: SetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Simulate a scenario: throughput per GPU, interactivity, TTFT, prefix-cache hit rates."""
    formats = check_format("csv" if table_format is None else table_format)
    if table_format is not None and out is None:
        raise SpecError(
            "(arguments)", "format", "sets the format of the tables --out writes; give --out DIR"
        )
    raw = read_spec(scenario_file)
    sets = sets or []
    data = apply_overrides(raw, sets, "(arguments)") if sets and isinstance(raw, dict) else raw
    check_kind(data, scenario_file, "scenario")
    # an error of a value that --set gave names (arguments), not the file
    with blamed(data, sets, scenario_file):
        _run(parse(Scenario, data, scenario_file), scenario_file, out, formats, sets, as_json)


@contextmanager
def _spinner() -> Iterator[Callable[[float, int], None]]:
    """A transient spinner on stderr and the ``progress`` callback that updates it."""
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
        console=Console(stderr=True), transient=True,
    ) as bar:  # fmt: skip
        task = bar.add_task("simulating", total=None)

        def progress(now_s: float, done: int) -> None:
            if done % 100 == 0:
                bar.update(task, description=f"simulated {now_s:,.0f} s, {done:,} requests done")

        yield progress


def _run(
    scenario: Scenario,
    scenario_file: Path,
    out: Path | None,
    formats: tuple[str, ...],
    sets: list[str],
    as_json: bool,
) -> None:
    from simulator.planner.uncertainty import stated_error, stated_error_line
    from simulator.simulation import simulate, slo_met, tokens_per_dollar
    from simulator.window import quarters_text, unsteady

    base = scenario_file.resolve().parent
    # checked and marked in progress before anything is simulated; written into a temporary
    # folder beside it, swapped in whole at the end (removed if the command fails)
    folder = OutputFolder(out, "plan run", RUN_FILES) if out is not None else None
    stage = folder.open() if folder is not None else None
    if not as_json and sys.stderr.isatty():
        with _spinner() as progress:
            result = simulate(scenario, scenario_file, base, progress)
    else:  # no terminal to draw on: rich is not even imported
        result = simulate(scenario, scenario_file, base)
    summary = result.summary
    price = tokens_per_dollar(scenario, summary.throughput_tok_per_s_per_gpu)
    summary_data = {
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
        "stated_error": stated_error(scenario.device),
        "overrides": sets,  # the --set items the scenario file was run with
        "records_skipped": result.skipped_records,  # malformed trace records (skip_bad)
        "records_skipped_reasons": result.skipped_reasons,
    }
    if folder is not None and stage is not None:
        tables = {"requests": result.request_table(), "steps": result.step_table()}
        if scenario.disaggregation is not None:
            tables |= {"transfers": result.transfer_table(), "pins": result.pin_table()}
        names = write_tables(stage, tables, formats)
        (stage / "summary.json").write_text(json.dumps(summary_data, indent=2) + "\n")
        folder.commit()
        typer.echo(f"wrote {out}/{', '.join([*names, 'summary.json'])}", err=True)
    if as_json:
        print_json(summary_data)
        return

    def fmt(x: float | None, spec: str) -> str:
        return "-" if x is None else format(x, spec)

    s = summary
    w = 1 if s.window_end_s < 100 else 0  # a short run's window in tenths of a second
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
         f"{s.prefix_hit_rate:.1%} ({s.gpu_hit_rate:.1%} + {s.cpu_hit_rate:.1%})")
        if scenario.kv_store is None else
        ("prefix-cache hit rate (GPU + CPU + KV store)",
         f"{s.prefix_hit_rate:.1%} ({s.gpu_hit_rate:.1%} + {s.cpu_hit_rate:.1%}"
         f" + {s.store_hit_rate:.1%})"),
        ("prefix-hit rate by quarter of the window",
         quarters_text(s.prefix_hit_rate_quarters)
         + ("  (not steady)" if unsteady(s.prefix_hit_rate_quarters) else "")),
        ("prompt tokens recomputed (hybrid resume)", f"{s.recomputed_prompt_tokens:,}"),
        ("requests finished / rejected", f"{s.requests_finished:,} / {s.requests_rejected:,}"),
        ("requests in flight / waiting at the end",
         f"{s.requests_in_flight_at_end:,} / {s.requests_waiting_at_end:,}"),
        ("queue", _saturation_text(s.saturated, s.saturation_reason)),
        ("preemptions", f"{s.preemptions:,}"),
        ("engine steps (mean step ms)",
         f"{s.steps:,} ({fmt(s.mean_step_s and s.mean_step_s * 1e3, ',.1f')})"),
        ("measured window (simulated)",
         f"{s.window_s:,.{w}f} s ({s.window_start_s:,.{w}f} to {s.window_end_s:,.{w}f} s)"),
        ("tokens per USD", fmt(price, ",.0f") + f" ({scenario.cost_model})"),
        ("SLO met", {True: "yes", False: "no", None: "no SLO given"}[slo_met(scenario, s)]),
        ("wall time", f"{result.wall_s:,.1f} s"),
    ]  # fmt: skip
    d = scenario.disaggregation
    if d is not None:
        rows[4] = (
            "prefix-cache hit rate (prefill GPU + CPU + KV store + pulled from decode)",
            f"{s.prefix_hit_rate:.1%} ({s.gpu_hit_rate:.1%} + {s.cpu_hit_rate:.1%}"
            f" + {s.store_hit_rate:.1%} + {s.remote_hit_rate:.1%})",
        )
        rows[-3:-3] = _pool_rows(scenario, s)
    title = f"{scenario.name}: {scenario.model} on {scenario.num_gpus}x {scenario.device}"
    if d is not None:
        pools = [d.pool_serving(scenario.serving, p) for p in ("prefill", "decode")]
        shapes = [f"TP{p.tp}" + (f" DP{p.dp}" if p.dp > 1 else "") for p in pools]
        what = shapes[0] if shapes[0] == shapes[1] else f"P {shapes[0]}, D {shapes[1]}"
        title += f" ({d.label}, {what} instances)"
    print_pairs(title, rows)
    if unsteady(s.prefix_hit_rate_quarters):
        typer.echo(
            "  note: the prefix-hit rate changes inside the window (by quarter, above): the"
            " cache switched state, so these figures depend on the window; a longer run or"
            " several seeds show how often (docs/kv-pressure.md)"
        )
    if s.window_end_reason == "workload_ended" and scenario.duration_s is not None:
        typer.echo(
            f"  note: the workload ended at {s.window_end_s:,.1f} s, before duration_s"
            f" {scenario.duration_s:,.0f} s: the window ends at its last token"
        )
    if 0 < s.requests_finished < FEW_REQUESTS:
        typer.echo(
            f"  note: only {s.requests_finished:,} request{'s' if s.requests_finished != 1 else ''}"
            " finished inside the measured window: the TTFT P90 / P99 rest on one or two of"
            " them (a longer run or more requests read steadier figures)"
        )
    if s.requests_rejected:
        from simulator.metrics import requests_seen
        from simulator.states import Status

        first = next((r for r in result.recorder.requests if r.status is Status.REJECTED), None)
        total = requests_seen(s.model_dump())
        example = f"; e.g. request {first.req_id}: {first.reject_reason}" if first else ""
        typer.echo(
            f"  note: {s.requests_rejected:,} of {total:,} requests"
            f" ({s.requests_rejected / total:.0%}) were refused, not served (the figures are"
            f" of the rest){example}"
        )
    if result.skipped_records:
        n = result.skipped_records
        typer.echo(
            f"  note: {n:,} malformed trace record{'s' if n != 1 else ''} skipped (skip_bad),"
            f" not replayed; the first: {result.skipped_reasons[0]}"
        )
    from simulator.measured.summary import one_line

    typer.echo("  " + one_line(result.latency))
    typer.echo("  " + stated_error_line(scenario.device))


def _saturation_text(saturated: bool, reason: str | None) -> str:
    """``SATURATED (queue grows)`` / ``SATURATED (queue never drains)`` (the figures behind
    it are in ``saturation_reason``, ``--json``), or ``drains``."""
    if not saturated:
        return "drains (not saturated)"
    return f"SATURATED ({(reason or 'queue grows').partition(': ')[0]})"


def _pool_rows(scenario: Scenario, s: Any) -> list[tuple[str, str]]:
    """The disaggregated run's per-pool figures."""
    from simulator import catalog

    d = scenario.disaggregation
    assert d is not None
    bw, lat, desc = d.link(catalog.hardware_profile(scenario.device))

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
         f"{bw / 1e9:g} GB/s, {lat * 1e6:g} us, {desc * 1e6:g} us per descriptor"),
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
