"""`plan workload stats`."""

from pathlib import Path
from typing import Annotated

import typer

from simulator.cli.base import (
    JsonOpt,
    app,
    command,
    console,
    make_typer,
    print_json,
    print_pairs,
)
from simulator.output_files import finite
from simulator.specs import SpecError

# ------------------------------------------------------------------------------------ workload

workload_app = make_typer("Workloads: statistics of trace files and built-in generators.")
app.add_typer(workload_app, name="workload")


def _pcts(p: dict[str, float] | None, unit: str = "") -> str:
    if p is None:
        return "-"
    if p["p50"] != p["p50"]:
        return "(none)"

    def num(x: float) -> str:
        return f"{x:,.1f}".removesuffix(".0") if abs(x) < 100 else f"{x:,.0f}"

    body = " / ".join(num(p[k]) for k in ("p10", "p50", "p90", "p99"))
    return f"{body}{unit} (mean {num(p['mean'])})"


@command(workload_app, "stats", short_help="Statistics of a trace or a generator.")
def workload_stats_command(
    source: Annotated[
        str,
        typer.Argument(
            metavar="TRACE|GENERATOR",
            help="A trace file or directory, or a generator: agentic, chat, random.",
        ),
    ],
    trace_format: Annotated[
        str | None,
        typer.Option(
            "--format",
            metavar="agentic|mooncake|azure",
            help="The trace's format (default: detected from its content).",
        ),
    ] = None,
    sessions: Annotated[
        int | None, typer.Option(help="Generator: sessions to generate (random: requests) [200].")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Generator: seed [0].")] = None,
    isl: Annotated[int | None, typer.Option(help="random: input tokens (ISL) [1024].")] = None,
    osl: Annotated[int | None, typer.Option(help="random: output tokens (OSL) [1024].")] = None,
    range_ratio: Annotated[
        float | None, typer.Option(help="random: lengths uniform in [ratio*ISL, ISL] [0.8].")
    ] = None,
    skip_bad: Annotated[
        bool, typer.Option("--skip-bad", help="Skip malformed records (counted), don't stop.")
    ] = False,
    limit: Annotated[int | None, typer.Option(help="Read at most N requests.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Requests, sessions, span, rate, length and think-time percentiles, unlimited-cache reuse."""
    from simulator.workload import GENERATORS, generator_source, trace_source, workload_stats

    generator = source in GENERATORS and not Path(source).exists()
    # an option the source does not read is refused, not ignored (its figures would not be
    # of what was asked)
    given = {"format": trace_format, "skip-bad": skip_bad or None, "sessions": sessions,
             "seed": seed, "isl": isl, "osl": osl, "range-ratio": range_ratio}  # fmt: skip
    if generator:
        reads = {"sessions", "seed"} | (
            {"isl", "osl", "range-ratio"} if source == "random" else set()
        )
        what = f"the {source} generator"
    else:
        reads, what = {"format", "skip-bad"}, "a trace file"
    for flag, value in given.items():
        if value is not None and flag not in reads:
            raise SpecError("(arguments)", flag, f"--{flag} does not apply to {what}")
    for value, flag in ((sessions, "sessions"), (limit, "limit"), (isl, "isl"), (osl, "osl")):
        if value is not None and value < 1:
            raise SpecError("(arguments)", flag, f"must be at least 1, got {value}")
    ratio = 0.8 if range_ratio is None else range_ratio
    if not 0 <= ratio <= 1:
        raise SpecError("(arguments)", "range_ratio", f"must be in [0, 1], got {ratio}")
    if generator:
        src = generator_source(source, sessions or 200, seed or 0, isl or 1024, osl or 1024, ratio)
    else:
        from simulator.workload.traces import check_trace

        check_trace(source, trace_format)  # a FIFO, a truncated gzip, non-UTF-8: before reading
        src = trace_source(source, trace_format, skip_bad=skip_bad)
    st = workload_stats(src, limit=limit)
    if as_json:
        print_json(finite(st.to_dict()))
        return

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.1f} %"

    subagents = f" (+ {st.subagent_sessions:,} sub-agents)" if st.subagent_sessions else ""
    rate = st.arrival_rate_per_s
    rows = [
        ("source", f"{st.source} ({st.kind})"),
        ("requests", f"{st.requests:,}"),
        ("sessions", f"{st.sessions:,}{subagents}"),
        ("requests per session p10/p50/p90/p99", _pcts(st.requests_per_session)),
        ("span", f"{st.span_s:,.0f} s"),
        ("arrival rate", "-" if rate != rate else f"{rate:,.2f} req/s"),
        ("prompt tokens p10/p50/p90/p99", _pcts(st.prompt_tokens)),
        ("output tokens p10/p50/p90/p99", _pcts(st.output_tokens)),
        ("think time p10/p50/p90/p99", _pcts(st.think_time_s, " s")),
        ("block size", "-" if st.block_tokens is None else f"{st.block_tokens} tokens"),
        ("block reuse (unlimited cache)", pct(st.block_reuse)),
        ("token reuse (unlimited cache)", pct(st.token_reuse)),
        ("bad records skipped", f"{st.bad_records:,}"),
    ]
    print_pairs("Workload statistics", rows)
    for reason in st.bad_reasons:
        console().print(f"  skipped: {reason}")
