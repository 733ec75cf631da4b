"""`plan memory` and `plan demo`."""

import functools
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from simulator import catalog
from simulator.cli.base import (
    GIB,
    JsonOpt,
    app,
    command,
    console,
    gib,
    pool_gib,
    print_json,
    print_pairs,
)
from simulator.cli.fit_table import plan_each, print_fit_table
from simulator.cli.tables import natural_width
from simulator.specs import (
    Scenario,
    ServingConfig,
    SpecError,
)
from simulator.specs.hardware import HardwareProfile
from simulator.specs.loading import parse, read_yaml

# ------------------------------------------------------------------------------------ memory


def serving_from(serving_file: Path | None, **flags: Any) -> tuple[ServingConfig, str]:
    """A ServingConfig from an optional YAML file, with explicitly given flags on top."""
    base: dict[str, Any] = {}
    source = "(arguments)"
    if serving_file is not None:
        source = str(serving_file)
        base = parse(ServingConfig, read_yaml(serving_file), source, prefix="serving").model_dump(
            exclude_unset=True
        )
    base.update({k: v for k, v in flags.items() if v is not None})
    return parse(ServingConfig, base, source, prefix="serving"), source


@command(app, "memory", short_help="Memory per GPU and the sequences that fit.")
def memory(
    model: Annotated[
        str | None,
        typer.Option(metavar="NAME|FILE", help="Model card name or path to a card YAML."),
    ] = None,
    device: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME|FILE",
            help="Device profile name or path; repeat to compare (default: every device).",
        ),
    ] = None,
    context: Annotated[int, typer.Option(help="Context length per sequence (tokens).")] = 8192,
    num_seqs: Annotated[int, typer.Option(help="Sequences that must fit at --context.")] = 1,
    tp: Annotated[int | None, typer.Option(help="Tensor parallel size (GPUs per replica).")] = None,
    dp: Annotated[int | None, typer.Option(help="Data parallel replicas.")] = None,
    ep: Annotated[int | None, typer.Option(help="1, or tp*dp for expert parallelism.")] = None,
    dcp: Annotated[
        list[int] | None, typer.Option(help="Decode context parallel size; repeat to compare.")
    ] = None,
    kv_cache_dtype: Annotated[
        str | None, typer.Option(metavar="DTYPE", help="auto|bf16|fp8|fp8_ds_mla|...")
    ] = None,
    gpu_memory_utilization: Annotated[
        float | None, typer.Option(help="vLLM --gpu-memory-utilization (0 to 1).")
    ] = None,
    max_num_batched_tokens: Annotated[
        int | None, typer.Option(help="vLLM --max-num-batched-tokens.")
    ] = None,
    max_num_seqs: Annotated[int | None, typer.Option(help="vLLM --max-num-seqs.")] = None,
    block_size: Annotated[int | None, typer.Option(help="vLLM --block-size (tokens).")] = None,
    max_model_len: Annotated[
        int | None,
        typer.Option(help="vLLM --max-model-len (default: the model's context)."),
    ] = None,
    serving: Annotated[
        Path | None, typer.Option(metavar="FILE", help="ServingConfig YAML; flags override it.")
    ] = None,
    params: Annotated[
        float | None,
        typer.Option(help="Total parameters (a quick card instead of --model)."),
    ] = None,
    active_params: Annotated[
        float | None, typer.Option(help="Active parameters per token.")
    ] = None,
    precision: Annotated[
        str | None,
        typer.Option(metavar="FORMAT", help="Weight format: bf16, fp8, int4_g128, int2_g64, ..."),
    ] = None,
    vision_params: Annotated[
        float | None, typer.Option(help="Vision encoder + projector parameters.")
    ] = None,
    vision_precision: Annotated[
        str | None, typer.Option(metavar="FORMAT", help="Vision weight format (default bf16).")
    ] = None,
    vision_activation_bytes_per_image: Annotated[
        float | None, typer.Option(help="Activation bytes of encoding one image.")
    ] = None,
    layers: Annotated[int | None, typer.Option(help="Decoder layers (for the KV cache).")] = None,
    hidden: Annotated[int | None, typer.Option(help="Hidden size (KV rule of thumb).")] = None,
    kv_heads: Annotated[int | None, typer.Option(help="KV heads per layer.")] = None,
    head_dim: Annotated[int | None, typer.Option(help="Head dimension.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Weights, KV cache and state per GPU; sequences that fit; the smallest device that fits.

    Give --model (a card), or --params and --precision for a quick card: an estimate from a
    release's headline numbers, with every assumption printed."""
    for value, flag in ((context, "context"), (num_seqs, "num_seqs")):
        if value < 1:
            raise SpecError("(arguments)", flag, f"must be at least 1, got {value}")
    quick = {
        "--active-params": active_params, "--precision": precision,
        "--vision-params": vision_params, "--vision-precision": vision_precision,
        "--vision-activation-bytes-per-image": vision_activation_bytes_per_image,
        "--layers": layers, "--hidden": hidden, "--kv-heads": kv_heads, "--head-dim": head_dim,
    }  # fmt: skip
    if model is not None and params is not None:
        raise SpecError(
            "(arguments)", "--params", "give --model (a card) or --params (a quick card), not both"
        )
    if model is None and params is None:
        raise SpecError(
            "(arguments)", "--model", "give --model NAME|FILE, or --params for a quick card"
        )
    if model is not None:
        given = [flag for flag, value in quick.items() if value is not None]
        if given:
            raise SpecError(
                "(arguments)", given[0], "a quick-card option: use it with --params, not --model"
            )
    twice = [d for d, n in Counter(device or []).items() if n > 1]
    if twice:  # as plan size's --devices: one row each, or a typo
        raise SpecError("(arguments)", "device", f"{twice[0]!r} is given twice")
    devices = (
        [catalog.hardware_profile(d) for d in device]
        if device
        else [catalog.hardware_profile(n) for n in catalog.device_names()]
    )
    over = "the --device profiles given" if device else "every device of the catalog"
    dcp_sizes: list[int | None] = list(dcp) if dcp else [None]
    configs = [
        serving_from(
            serving,
            tp=tp,
            dp=dp,
            ep=ep,
            dcp=dcp_size,
            kv_cache_dtype=kv_cache_dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            block_size_tokens=block_size,
            max_model_len=max_model_len,
        )
        for dcp_size in dcp_sizes
    ]
    if params is not None:
        from simulator.cli.quick_memory import run_quick_card
        from simulator.quick_flags import quick_card

        qc = quick_card(
            params, precision, active_params, vision_params, vision_precision,
            vision_activation_bytes_per_image, layers, hidden, kv_heads, head_dim,
        )  # fmt: skip
        run_quick_card(qc, devices, configs, context, num_seqs, as_json, over, device is None)
        return
    assert model is not None
    card = catalog.model_card(model)
    reports: list[Any] = []
    skipped: list[str] = []
    for cfg, source in configs:
        plan = functools.partial(_plan_one, card, cfg, context, num_seqs, devices)
        done, missed = plan_each(devices, device is None, source, plan)
        reports += done
        skipped += missed
    reports.sort(key=lambda r: [d.name for d in devices].index(r.device))
    if as_json:
        data = [r.model_dump(mode="json") for r in reports]
        print_json(data[0] if len(data) == 1 else data)
        return
    if len(reports) == 1:
        _print_memory_detail(reports[0])
    else:
        _print_memory_comparison(reports)
    print_fit_table(reports, over, skipped)


def _print_memory_detail(r: Any) -> None:
    t = Table(title=f"{r.model} on {r.device}: weights per GPU (tp {r.tp}, ep {r.ep})")
    for col in ("module group", "precision", "params (B)", "GiB", "placement"):
        t.add_column(col, justify="right" if col in ("params (B)", "GiB") else "left")
    for g in r.weight_groups:
        t.add_row(
            g.group,
            g.precision,
            f"{g.params_per_gpu / 1e9:,.2f}",
            gib(g.bytes_per_gpu),
            g.placement,
        )
    t.add_row("total", "", "", gib(r.weight_bytes_per_gpu), "")
    console().print(t)
    rows = [
        ("usable memory", f"{gib(r.usable_memory_bytes)} GiB"),
        ("budget (x gpu_memory_utilization)", f"{gib(r.budget_bytes_per_gpu)} GiB"),
        ("weights", f"{gib(r.weight_bytes_per_gpu)} GiB"),
        ("activation reserve (estimate)", f"{gib(r.activation_reserve_bytes_per_gpu)} GiB"),
        *(
            [
                (
                    f"  of which vision ({r.vision_images_profiled} image(s) profiled)",
                    f"{gib(r.vision_activation_reserve_bytes_per_gpu)} GiB",
                )
            ]
            if r.vision_images_profiled
            else []
        ),
        ("runtime reserve (assumption)", f"{gib(r.runtime_reserve_bytes_per_gpu)} GiB"),
        ("KV cache + state pool", pool_gib(r.kv_cache_bytes_per_gpu)),
        ("KV per token (full attention)", f"{r.kv_bytes_per_token_per_gpu:,.0f} B"),
        (
            f"KV per sequence at {r.context_tokens:,} tokens",
            f"{gib(r.kv_bytes_per_seq_per_gpu)} GiB",
        ),
    ]
    if r.swa_kv_bytes_per_seq_per_gpu:
        rows.append(
            ("sliding-window KV per sequence", f"{gib(r.swa_kv_bytes_per_seq_per_gpu)} GiB")
        )
    if r.state_bytes_per_seq_per_gpu:
        rows += [
            ("recurrent state per sequence", f"{r.state_bytes_per_seq_per_gpu / 2**20:,.1f} MiB"),
            (
                f"state pages held per running request ({r.state_pages_per_seq})",
                f"{r.state_pool_bytes_per_seq_per_gpu / 2**20:,.1f} MiB",
            ),
        ]
    rows += [
        (
            "block size / bytes per block",
            f"{r.block_size_tokens} tokens x dcp {r.dcp} / {r.bytes_per_block / 2**20:,.2f} MiB",
        ),
        ("KV cache groups", f"{r.num_kv_groups} ({', '.join(r.kv_group_kinds)})"),
        ("blocks in pool / per sequence", f"{r.num_blocks:,} / {r.blocks_per_seq:,}"),
        ("KV capacity (tokens per replica)", f"{r.kv_capacity_tokens:,}"),
        (
            f"sequences of {r.context_tokens:,} tokens that fit",
            f"{r.max_seqs_at_context:,} per replica, "
            f"{r.max_seqs_at_context_per_gpu:,.2f} per GPU (max_num_seqs {r.max_num_seqs})",
        ),
        (f"max context for {r.num_seqs} sequence(s)", f"{r.max_context_for_num_seqs:,} tokens"),
        ("max_model_len (longest request vLLM accepts)", f"{r.max_model_len:,} tokens"),
        ("fits", f"{'yes' if r.fits else 'NO'}: {r.fits_reason}"),
    ]
    print_pairs("KV cache and capacity (per GPU unless stated)", rows)


# the comparison's columns: (header, value of a report); device and dcp lead both halves
COMPARISON: list[tuple[str, Callable[[Any], str]]] = [
    ("device", lambda r: r.device),
    ("dcp", lambda r: str(r.dcp)),
    ("fits", lambda r: "yes" if r.fits else "NO"),
    ("weights GiB", lambda r: gib(r.weight_bytes_per_gpu)),
    ("KV+state GiB", lambda r: gib(max(r.kv_cache_bytes_per_gpu, 0.0))),
    ("KV B/token", lambda r: f"{r.kv_bytes_per_token_per_gpu:,.0f}"),
    ("KV/seq GiB", lambda r: f"{r.kv_bytes_per_seq_per_gpu / GIB:,.2f}"),
    ("state/seq MiB", lambda r: f"{r.state_bytes_per_seq_per_gpu / 2**20:,.1f}"),
    ("state pages MiB", lambda r: f"{r.state_pool_bytes_per_seq_per_gpu / 2**20:,.1f}"),
    ("block tokens", lambda r: str(r.block_size_tokens)),
    ("sessions", lambda r: f"{r.max_seqs_at_context:,}"),
    ("sessions/GPU", lambda r: f"{r.max_seqs_at_context_per_gpu:,.1f}"),
]
SPLIT = 7  # a narrow terminal: columns [:SPLIT] (memory), then device, dcp and the rest


def memory_comparison_tables(reports: list[Any], width: int) -> list[Table]:
    """One table of every report, or, if that is wider than ``width``, two: the memory
    (weights, KV) and the capacity (state, blocks, sessions), each keyed by device and dcp."""
    r0 = reports[0]
    title = (
        f"{r0.model}: {r0.context_tokens:,}-token sequences, tp {r0.tp}, kv {r0.kv_cache_dtype}"
        " (per GPU; sessions per replica of tp GPUs)"
    )

    def table(title: str, columns: list[tuple[str, Callable[[Any], str]]]) -> Table:
        t = Table(title=title)
        for header, _ in columns:
            t.add_column(header, justify="left" if header in ("device", "fits") else "right")
        for r in reports:
            t.add_row(*(value(r) for _, value in columns))
        return t

    whole = table(title, COMPARISON)
    if natural_width(whole) <= width:
        return [whole]
    what = f"{r0.context_tokens:,}-token sequences, tp {r0.tp}, kv {r0.kv_cache_dtype}"
    return [
        table(f"{r0.model}: memory per GPU ({what})", COMPARISON[:SPLIT]),
        table(
            f"{r0.model}: capacity (sessions per replica of tp GPUs)",
            [*COMPARISON[:2], *COMPARISON[SPLIT:]],
        ),
    ]


def _plan_one(
    card: Any,
    cfg: ServingConfig,
    context: int,
    num_seqs: int,
    devices: list[HardwareProfile],
    dev: HardwareProfile,
) -> Any:
    from simulator.memory import plan_memory

    return plan_memory(card, dev, cfg, context, num_seqs, devices)


def _print_memory_comparison(reports: list[Any]) -> None:
    con = console()
    for t in memory_comparison_tables(reports, con.width):
        con.print(t)


# plan demo --simulate-minutes: 0 (memory only) or within these. Below 20 min the window
# holds few turns after the 64 agents' first ones (prompts of 50-140k tokens, minutes to
# prefill): at 10 min DCP 8 reads P90 1.5 tok/s/user, at 20 / 30 / 120 min 29 / 33 / 43. A day
# is far past the 1,000 sessions' end.
DEMO_MINUTES = (20.0, 1440.0)


@command(app, "demo", short_help="Kimi K3 on four devices: memory, then 64 agents.")
def demo(
    simulate_minutes: Annotated[
        float, typer.Option(help="Simulated minutes of agent traffic (0: memory table only).")
    ] = 120.0,
) -> None:
    """Kimi K3: memory on 8x MI355X / B300 / GB300 / H200, then 64 coding agents on 8x MI355X."""
    lo, hi = DEMO_MINUTES
    if simulate_minutes != 0 and not lo <= simulate_minutes <= hi:  # NaN fails both
        raise SpecError(
            "(arguments)",
            "simulate-minutes",
            f"0 (the memory table only) or {lo:g} to {hi:,g} minutes, got {simulate_minutes:g}"
            f" (below {lo:g} min the window holds few turns after the agents' long first ones)",
        )
    memory(
        model="kimi-k3",
        device=["mi355x", "b300", "gb300", "h200"],
        context=142_000,
        tp=8,
        dcp=[1, 8],
    )
    if simulate_minutes == 0:
        return
    from simulator.simulation import simulate

    warmup_s = min(900.0, simulate_minutes * 60 / 4)
    t = Table(
        title=f"Kimi K3, 8x MI355X TP8: 64 coding-agent users, {simulate_minutes:g} simulated"
        f" minutes (built-in agentic generator, closed loop; first {warmup_s / 60:g} min not"
        " measured)"
    )
    for col in ("DCP", "CPU offload", "tok/s/GPU", "P90 tok/s/user", "TTFT P50 s",
                "TTFT P90 s", "hit rate (GPU+CPU)", "wall s"):  # fmt: skip
        t.add_column(col, justify="right")
    for dcp_size, offload in ((1, 0.0), (8, 0.0), (1, float(1 << 40))):
        scenario = Scenario.model_validate(
            {
                "name": "demo",
                "model": "kimi-k3",
                "device": "mi355x",
                "serving": {"tp": 8, "dcp": dcp_size, "cpu_offload_bytes": offload},
                "workload": {"kind": "agentic", "sessions": 1000, "concurrency": 64},
                "duration_s": simulate_minutes * 60,
                "warmup_s": warmup_s,
            }
        )
        r = simulate(scenario, "(demo)")
        s = r.summary
        t.add_row(
            str(dcp_size), "1 TiB" if offload else "-", f"{s.throughput_tok_per_s_per_gpu:,.0f}",
            f"{s.interactivity_tok_per_s_p90 or 0:,.1f}", f"{s.ttft_s_p50 or 0:,.2f}",
            f"{s.ttft_s_p90 or 0:,.2f}",
            f"{s.prefix_hit_rate:.0%} ({s.gpu_hit_rate:.0%}+{s.cpu_hit_rate:.0%})",
            f"{r.wall_s:,.1f}",
        )  # fmt: skip
    console().print(t)
    from simulator.measured.summary import one_line
    from simulator.planner.uncertainty import stated_error_line

    typer.echo("  " + one_line(r.latency))  # the last run's: every run is on the same device
    typer.echo("  " + stated_error_line(r.scenario.device))
