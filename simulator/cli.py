"""`plan`: the one command-line entry point. Thin adapters over the core; no modelling here.

Exit codes: 0 success, 2 bad input (one line naming file, field and reason), 1 internal error.
"""

import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
import yaml
from rich.console import Console
from rich.table import Table

from simulator import catalog
from simulator.specs import (
    CostModelCatalog,
    HardwareProfile,
    ModelCard,
    Scenario,
    ServingConfig,
    SpecError,
)
from simulator.specs.loading import parse, read_yaml

GIB = float(1 << 30)


def _console() -> Console:
    """Rich console on the current stdout; wide tables when piped or captured."""
    return Console(highlight=False, width=None if sys.stdout.isatty() else 160)


F = TypeVar("F", bound=Callable[..., None])


def _fail(message: str, code: int) -> NoReturn:
    typer.echo(message, err=True)
    raise typer.Exit(code)


def _command(group: typer.Typer, name: str) -> Callable[[F], F]:
    """Register a command whose bad input ends in one line on stderr and exit code 2."""

    def register(func: F) -> F:
        @functools.wraps(func)
        def run(*args: Any, **kwargs: Any) -> None:
            try:
                func(*args, **kwargs)
            except SpecError as exc:
                _fail(f"error: {exc}", 2)
            except (typer.Exit, typer.Abort):
                raise
            except Exception as exc:
                if os.environ.get("PLAN_DEBUG"):
                    raise
                _fail(
                    f"internal error: {type(exc).__name__}: {exc} (PLAN_DEBUG=1 for a traceback)", 1
                )

        group.command(name)(run)
        return func

    return register


def _typer(help_text: str) -> typer.Typer:
    return typer.Typer(
        help=help_text,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,  # usage errors as plain text ending in one "Error: ..." line
    )


app = _typer("Capacity planner for hybrid-attention LLM serving.")
profiles_app = _typer("Hardware profiles, model cards and cost models shipped with the planner.")
models_app = _typer("Model cards: list them, or import one from a Hugging Face config.json.")
app.add_typer(profiles_app, name="profiles")
app.add_typer(models_app, name="models")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=float) + "\n")


def _print_pairs(title: str, rows: list[tuple[str, str]]) -> None:
    """A two-column table: label, right-aligned value."""
    t = Table(show_header=False, title=title)
    t.add_column()
    t.add_column(justify="right")
    for k, v in rows:
        t.add_row(k, v)
    _console().print(t)


def _gib(x: float) -> str:
    return f"{x / GIB:,.1f}"


# ------------------------------------------------------------------------------------ profiles

SCHEMAS: dict[str, type[Any]] = {
    "model-card": ModelCard,
    "hardware-profile": HardwareProfile,
    "serving-config": ServingConfig,
    "scenario": Scenario,
    "cost-models": CostModelCatalog,
}


@_command(profiles_app, "list")
def profiles_list(as_json: JsonOpt = False) -> None:
    """List hardware profiles, model cards and cost models."""
    devices = [catalog.hardware_profile(n) for n in catalog.device_names()]
    models = [catalog.model_card(n) for n in catalog.model_names()]
    costs = catalog.cost_models()
    if as_json:
        _print_json(
            {
                "devices": [d.name for d in devices],
                "models": [m.name for m in models],
                "cost_models": {c.name: sorted(c.usd_per_gpu_hour) for c in costs.values()},
            }
        )
        return
    from simulator.weights import total_params

    table = Table(title="Hardware profiles (hardware_profiles/<name>/profile.yaml)")
    for col in (
        "name",
        "device",
        "usable GiB",
        "HBM TB/s",
        "BF16 PF",
        "FP8 PF",
        "FP4 PF",
        "scale-up",
        "status",
        "calibrated",
    ):
        table.add_column(col, justify="right" if col[0].isupper() or "GiB" in col else "left")
    for d in devices:
        pf = d.peak_flops_per_s
        table.add_row(
            d.name,
            d.display_name,
            _gib(d.usable_memory_bytes),
            f"{d.memory_bw_bytes_per_s / 1e12:.1f}",
            f"{pf.bf16 / 1e15:.2f}",
            f"{pf.fp8 / 1e15:.2f}" if pf.fp8 else "-",
            f"{pf.fp4 / 1e15:.2f}" if pf.fp4 else "-",
            f"{d.scale_up.kind} x{d.scale_up.domain_size}" if d.scale_up else "none",
            d.status,
            str(d.calibrated).lower(),
        )
    _console().print(table)
    mt = Table(title="Model cards (simulator/model_cards/<name>.yaml)")
    for col in ("name", "hf id", "layers", "mixers", "params (B)"):
        mt.add_column(col)
    for m in models:
        mixers = ", ".join(f"{len(v)} {k}" for k, v in m.layers.mixers.items() if v)
        mt.add_row(m.name, m.hf_id, str(m.layers.count), mixers, f"{total_params(m) / 1e9:,.1f}")
    _console().print(mt)
    ct = Table(title="Cost models (hardware_profiles/cost_models.yaml), USD per GPU-hour")
    ct.add_column("name")
    ct.add_column("prices")
    for c in costs.values():
        ct.add_row(c.name, ", ".join(f"{k} {v:.2f}" for k, v in c.usd_per_gpu_hour.items()))
    _console().print(ct)


@_command(profiles_app, "show")
def profiles_show(
    name: Annotated[str, typer.Argument(help="A device, model card or cost model name.")],
    as_json: JsonOpt = False,
) -> None:
    """Print one hardware profile, model card or cost model."""
    obj: Any
    if name in catalog.device_names():
        obj = catalog.hardware_profile(name)
    elif name in catalog.model_names():
        obj = catalog.model_card(name)
    elif name in catalog.cost_models():
        obj = catalog.cost_models()[name]
    else:
        known = catalog.device_names() + catalog.model_names() + list(catalog.cost_models())
        raise SpecError(
            "(arguments)", "name", f"unknown profile {name!r}; known: {', '.join(known)}"
        )
    data = obj.model_dump(mode="json")
    if as_json:
        _print_json(data)
    else:
        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100))


@_command(profiles_app, "schema")
def profiles_schema(
    kind: Annotated[str | None, typer.Argument(help=f"One of: {', '.join(SCHEMAS)}.")] = None,
) -> None:
    """Print the JSON Schema of the spec files (all of them when no kind is given)."""
    if kind is None:
        _print_json({k: cls.model_json_schema() for k, cls in SCHEMAS.items()})
        return
    if kind not in SCHEMAS:
        raise SpecError(
            "(arguments)", "kind", f"unknown schema {kind!r}; known: {', '.join(SCHEMAS)}"
        )
    _print_json(SCHEMAS[kind].model_json_schema())


# ------------------------------------------------------------------------------------ models


@_command(models_app, "list")
def models_list(as_json: JsonOpt = False) -> None:
    """List the built-in model cards."""
    names = catalog.model_names()
    if as_json:
        _print_json(names)
    else:
        for n in names:
            _console().print(n)


@_command(models_app, "import")
def models_import(
    config: Annotated[Path, typer.Argument(help="A Hugging Face config.json.")],
    name: Annotated[
        str | None, typer.Option(help="Card name (default: from the file name).")
    ] = None,
    output: Annotated[Path | None, typer.Option("--out", help="Write the card here.")] = None,
) -> None:
    """Build a model card from a Hugging Face config.json (Kimi, DeepSeek, Qwen3.5, Llama, ...)."""
    from simulator.model_import import card_to_yaml, import_hf_config, load_hf_config

    card_name = (
        name or config.name.removesuffix(".json").removesuffix("_config").split("--")[-1].lower()
    )
    card = import_hf_config(load_hf_config(config), name=card_name, source=str(config))
    text = card_to_yaml(card)
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text)
        typer.echo(f"wrote {output} ({card.layers.count} layers)", err=True)


# ------------------------------------------------------------------------------------ memory


def _serving(serving_file: Path | None, **flags: Any) -> tuple[ServingConfig, str]:
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


@_command(app, "memory")
def memory(
    model: Annotated[str, typer.Option(help="Model card name or path to a card YAML.")],
    device: Annotated[
        list[str], typer.Option(help="Device profile name or path; repeat to compare.")
    ],
    context: Annotated[int, typer.Option(help="Context length per sequence (tokens).")] = 8192,
    num_seqs: Annotated[int, typer.Option(help="Sequences that must fit at --context.")] = 1,
    tp: Annotated[int | None, typer.Option(help="Tensor parallel size (GPUs per replica).")] = None,
    dp: Annotated[int | None, typer.Option(help="Data parallel replicas.")] = None,
    ep: Annotated[int | None, typer.Option(help="1, or tp*dp for expert parallelism.")] = None,
    dcp: Annotated[
        list[int] | None, typer.Option(help="Decode context parallel size; repeat to compare.")
    ] = None,
    kv_cache_dtype: Annotated[str | None, typer.Option(help="auto|bf16|fp8|fp8_ds_mla|...")] = None,
    gpu_memory_utilization: Annotated[float | None, typer.Option()] = None,
    max_num_batched_tokens: Annotated[int | None, typer.Option()] = None,
    max_num_seqs: Annotated[int | None, typer.Option()] = None,
    block_size: Annotated[int | None, typer.Option(help="vLLM --block-size (tokens).")] = None,
    serving: Annotated[
        Path | None, typer.Option(help="ServingConfig YAML; flags override it.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Weights, KV cache and state per GPU; sequences that fit; the smallest device that fits."""
    from simulator.memory import plan_memory

    for value, flag in ((context, "context"), (num_seqs, "num_seqs")):
        if value < 1:
            raise SpecError("(arguments)", flag, f"must be at least 1, got {value}")
    card = catalog.model_card(model)
    devices = [catalog.hardware_profile(d) for d in device]
    all_devices = [catalog.hardware_profile(n) for n in catalog.device_names()]
    dcp_sizes: list[int | None] = list(dcp) if dcp else [None]
    configs = [
        _serving(
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
        )
        for dcp_size in dcp_sizes
    ]
    reports = []
    for dev in devices:
        for cfg, source in configs:
            try:
                reports.append(plan_memory(card, dev, cfg, context, num_seqs, all_devices))
            except SpecError as exc:
                raise SpecError(source, exc.field, exc.reason) from None
    if as_json:
        data = [r.model_dump(mode="json") for r in reports]
        _print_json(data[0] if len(data) == 1 else data)
    elif len(reports) == 1:
        _print_memory_detail(reports[0])
    else:
        _print_memory_comparison(reports)


def _print_memory_detail(r: Any) -> None:
    t = Table(title=f"{r.model} on {r.device}: weights per GPU (tp {r.tp}, ep {r.ep})")
    for col in ("module group", "precision", "params (B)", "GiB", "placement"):
        t.add_column(col, justify="right" if col in ("params (B)", "GiB") else "left")
    for g in r.weight_groups:
        t.add_row(
            g.group,
            g.precision,
            f"{g.params_per_gpu / 1e9:,.2f}",
            _gib(g.bytes_per_gpu),
            g.placement,
        )
    t.add_row("total", "", "", _gib(r.weight_bytes_per_gpu), "")
    _console().print(t)
    rows = [
        ("usable memory", f"{_gib(r.usable_memory_bytes)} GiB"),
        ("budget (x gpu_memory_utilization)", f"{_gib(r.budget_bytes_per_gpu)} GiB"),
        ("weights", f"{_gib(r.weight_bytes_per_gpu)} GiB"),
        ("activation reserve (estimate)", f"{_gib(r.activation_reserve_bytes_per_gpu)} GiB"),
        ("runtime reserve (assumption)", f"{_gib(r.runtime_reserve_bytes_per_gpu)} GiB"),
        ("KV cache + state pool", f"{_gib(r.kv_cache_bytes_per_gpu)} GiB"),
        ("KV per token (full attention)", f"{r.kv_bytes_per_token_per_gpu:,.0f} B"),
        (
            f"KV per sequence at {r.context_tokens:,} tokens",
            f"{_gib(r.kv_bytes_per_seq_per_gpu)} GiB",
        ),
    ]
    if r.swa_kv_bytes_per_seq_per_gpu:
        rows.append(
            ("sliding-window KV per sequence", f"{_gib(r.swa_kv_bytes_per_seq_per_gpu)} GiB")
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
        ("fits", f"{'yes' if r.fits else 'NO'}: {r.fits_reason}"),
        ("fits on (model alone)", r.fits_on),
    ]
    _print_pairs("KV cache and capacity (per GPU unless stated)", rows)


def _print_memory_comparison(reports: list[Any]) -> None:
    r0 = reports[0]
    t = Table(
        title=f"{r0.model}: {r0.context_tokens:,}-token sequences, tp {r0.tp},"
        f" kv {r0.kv_cache_dtype} (per GPU; sessions per replica of tp GPUs)"
    )
    cols = (
        "device",
        "dcp",
        "fits",
        "weights GiB",
        "KV+state GiB",
        "KV B/token",
        "KV/seq GiB",
        "state/seq MiB",
        "state pages MiB",
        "block tokens",
        "sessions",
        "sessions/GPU",
    )
    for col in cols:
        t.add_column(col, justify="left" if col in ("device", "fits") else "right")
    for r in reports:
        t.add_row(
            r.device,
            str(r.dcp),
            "yes" if r.fits else "NO",
            _gib(r.weight_bytes_per_gpu),
            _gib(max(r.kv_cache_bytes_per_gpu, 0.0)),
            f"{r.kv_bytes_per_token_per_gpu:,.0f}",
            f"{r.kv_bytes_per_seq_per_gpu / GIB:,.2f}",
            f"{r.state_bytes_per_seq_per_gpu / 2**20:,.1f}",
            f"{r.state_pool_bytes_per_seq_per_gpu / 2**20:,.1f}",
            str(r.block_size_tokens),
            f"{r.max_seqs_at_context:,}",
            f"{r.max_seqs_at_context_per_gpu:,.1f}",
        )
    _console().print(t)
    for r in reports:
        if not r.fits:
            _console().print(f"  {r.device} dcp {r.dcp}: {r.fits_reason}")
    _console().print(f"  fits on (model alone): {r0.fits_on}")


@_command(app, "demo")
def demo(
    simulate_minutes: Annotated[
        float, typer.Option(help="Simulated minutes of agent traffic (0: memory table only).")
    ] = 120.0,
) -> None:
    """Kimi K3: memory on 8x MI355X / B300 / GB300 / H200, then 64 coding agents on 8x MI355X."""
    memory(
        model="kimi-k3",
        device=["mi355x", "b300", "gb300", "h200"],
        context=142_000,
        tp=8,
        dcp=[1, 8],
    )
    if simulate_minutes <= 0:
        return
    from simulator.simulation import simulate

    t = Table(
        title=f"Kimi K3, 8x MI355X TP8: 64 coding-agent users, {simulate_minutes:g} simulated"
        " minutes (built-in agentic generator, closed loop; first 15 min not measured)"
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
                "warmup_s": min(900.0, simulate_minutes * 60 / 4),
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
    _console().print(t)


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


@_command(app, "step")
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
    cfg, source = _serving(
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
        "extrapolated_queries": dict(latency.extrapolations),
        "ops": [
            {"name": x.name, "op_class": x.op_class, "category": x.category, "count": x.count,
             "flops": x.flops, "bytes": x.bytes, "seconds": x.seconds}
            for x in lines
        ],
    }  # fmt: skip
    if as_json:
        _print_json(result)
        return
    console = _console()
    title = (
        f"{card.name} on {profile.name} (tp {cfg.tp}, dcp {cfg.dcp}): {decode} decodes at"
        f" {context:,} tokens" + "".join(f", {n}x{t}@{p}" for n, t, p in chunks)
    )
    console.print(title)
    t = Table(title="Step time by category")
    for col in ("category", "ms", "share"):
        t.add_column(col, justify="left" if col == "category" else "right")
    for cat, secs in cost.breakdown_s.items():
        t.add_row(cat, f"{secs * 1e3:,.3f}", f"{secs / cost.seconds:.0%}")
    t.add_row("step", f"{cost.seconds * 1e3:,.3f}", "100%")
    console.print(t)
    o = Table(title=f"Most expensive ops (all layers; {cost.padded_tokens} tokens after padding)")
    for col in ("op", "class", "layers", "us", "share", "GFLOP/layer", "MB/layer"):
        o.add_column(col, justify="left" if col in ("op", "class") else "right")
    for x in lines[:top]:
        o.add_row(
            x.name, x.op_class, f"{x.count:g}", f"{x.seconds * 1e6:,.1f}",
            f"{x.seconds / cost.seconds:.0%}", f"{x.flops / 1e9:,.3f}", f"{x.bytes / 1e6:,.2f}",
        )  # fmt: skip
    console.print(o)
    console.print(
        f"  GPU {cost.gpu_s * 1e3:,.3f} ms, CPU {cost.cpu_s * 1e3:,.3f} ms (async scheduling:"
        f" step = max); {cost.gpu_s / card.layers.count * 1e6:,.1f} us of GPU time per layer"
    )
    if decode:
        console.print(f"  interactivity of this step: {1 / cost.seconds:,.1f} tok/s per user")
    console.print(
        "  latency models: "
        + ", ".join(f"{c} {latency.source(c)}" for c in classes)
        + (
            f"; extrapolated: {dict(latency.extrapolations)}"
            if sum(latency.extrapolations.values())
            else ""
        )
    )


# ------------------------------------------------------------------------------------ run


@_command(app, "run")
def run(
    scenario_file: Annotated[
        Path, typer.Argument(help="Scenario YAML (model, device, serving, workload).")
    ],
    out: Annotated[
        Path | None, typer.Option("--out", help="Write requests.csv, steps.csv, summary.json here.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Simulate a scenario: throughput per GPU, interactivity, TTFT, prefix-cache hit rates."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from simulator.simulation import simulate

    scenario = parse(Scenario, read_yaml(scenario_file), scenario_file)
    base = scenario_file.resolve().parent
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
    price = _tokens_per_dollar(scenario, summary.throughput_tok_per_s_per_gpu)
    data = {
        "scenario": scenario.name,
        "model": scenario.model,
        "device": scenario.device,
        "gpus": scenario.serving.num_gpus,
        **summary.model_dump(mode="json"),
        "tokens_per_usd": price,
        "slo_met": _slo_met(scenario, summary),
        "wall_s": result.wall_s,
    }
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        result.request_table().to_csv(out / "requests.csv", index=False)
        result.step_table().to_csv(out / "steps.csv", index=False)
        (out / "summary.json").write_text(json.dumps(data, indent=2) + "\n")
        typer.echo(f"wrote {out}/requests.csv, steps.csv, summary.json", err=True)
    if as_json:
        _print_json(data)
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
        ("preemptions", f"{s.preemptions:,}"),
        ("engine steps (mean step ms)",
         f"{s.steps:,} ({fmt(s.mean_step_s and s.mean_step_s * 1e3, ',.1f')})"),
        ("measured window (simulated)", f"{s.window_s:,.0f} s"),
        ("tokens per USD", fmt(price, ",.0f") + f" ({scenario.cost_model})"),
        ("SLO met", {True: "yes", False: "no", None: "no SLO given"}[_slo_met(scenario, s)]),
        ("wall time", f"{result.wall_s:,.1f} s"),
    ]  # fmt: skip
    title = f"{scenario.name}: {scenario.model} on {scenario.serving.num_gpus}x {scenario.device}"
    _print_pairs(title, rows)


def _tokens_per_dollar(scenario: Scenario, tok_per_s_per_gpu: float) -> float | None:
    """throughput_per_gpu x 3600 / (USD per GPU-hour); None when the device is not priced."""
    model = catalog.cost_model(scenario.cost_model)
    device = catalog.hardware_profile(scenario.device).name
    if device not in model.usd_per_gpu_hour:
        return None
    return tok_per_s_per_gpu * 3600 / model.price(device)


def _slo_met(scenario: Scenario, s: Any) -> bool | None:
    slo = scenario.slo
    checks = []
    if slo.interactivity_tok_per_s_p90 is not None:
        value = s.interactivity_tok_per_s_p90
        checks.append(value is not None and value >= slo.interactivity_tok_per_s_p90)
    if slo.ttft_s_p90 is not None:
        checks.append(s.ttft_s_p90 is not None and s.ttft_s_p90 <= slo.ttft_s_p90)
    return all(checks) if checks else None


# ------------------------------------------------------------------------------------ search


@_command(app, "search")
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
    as_json: JsonOpt = False,
) -> None:
    """SLO-constrained search: best configuration per device, tokens per dollar, a report."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from simulator.planner.analysis import best_per_device, pruned_table, runs_table, sensitivity
    from simulator.planner.executor import run_all
    from simulator.planner.report import markdown, write_report
    from simulator.planner.space import SearchSpace, expand

    if workers < 1:
        raise SpecError("(arguments)", "workers", f"must be at least 1, got {workers}")
    if executor not in ("local", "ray"):
        raise SpecError(
            "(arguments)", "executor", f"unknown executor {executor!r}; use local or ray"
        )
    space = parse(SearchSpace, read_yaml(space_file), space_file)
    candidates, pruned = expand(space, str(space_file))
    scenarios = [sc for c in candidates for sc in c.scenarios]
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
        TimeRemainingColumn(), console=Console(stderr=True),
        disable=as_json or not sys.stderr.isatty(), transient=True,
    ) as bar:  # fmt: skip
        task = bar.add_task(f"{len(scenarios)} runs", total=len(scenarios))
        results = run_all(
            scenarios,
            out / "cache",
            workers,
            lambda done, total: bar.update(task, completed=done),
            executor,  # type: ignore[arg-type]
            address,
        )
    runs = runs_table(space, candidates, results)
    best = best_per_device(space, runs)
    sens = sensitivity(space, runs, best)
    pruned_df = pruned_table(pruned)
    paths = write_report(out, space, runs, best, sens, pruned_df)
    if as_json:
        _print_json(
            {
                "best": best.to_dict(orient="records"),
                "runs": len(runs),
                "pruned": pruned_df.to_dict(orient="records"),
                "files": [str(p) for p in paths],
            }
        )
        return
    sys.stdout.write(markdown(space, best, runs, len(pruned)))
    for p in pruned:
        typer.echo(f"pruned {p.device} {p.knobs}: {p.reason}", err=True)
    typer.echo(f"wrote {', '.join(str(p) for p in paths)}", err=True)


# ------------------------------------------------------------------------------ ops, fit, validate

ops_app = _typer("Op latencies: price a CSV of op shapes on a device.")
validate_app = _typer("Validate models against measurements.")
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


@_command(ops_app, "predict")
def ops_predict(
    device: Annotated[str, typer.Option(help="Device profile name or path.")],
    input_csv: Annotated[
        Path, typer.Option("--input", help="CSV of op shapes: op, dtype and shape columns.")
    ],
    output: Annotated[
        Path | None, typer.Option("--output", help="Write the CSV here (default: stdout).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Add latency_us, source (fitted/prior) and extrapolated to every row of a shape CSV."""
    from simulator.cost.latency import LatencyModels
    from simulator.cost.predict import predict_table, read_table, records

    profile = catalog.hardware_profile(device)
    table = predict_table(
        read_table(input_csv), profile, input_csv, LatencyModels.for_device(profile)
    )
    if output is not None:
        table.to_csv(output, index=False)
        typer.echo(f"wrote {output} ({len(table)} rows)", err=True)
    elif as_json:
        _print_json(records(table))
    else:
        sys.stdout.write(table.to_csv(index=False))


@_command(app, "fit")
def fit(
    device: Annotated[str, typer.Option(help="Device profile name (the measurements' device).")],
    measurements: MeasurementsOpt = None,
    vidur: VidurOpt = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Output JSON (default hardware_profiles/<device>/latency_models.json)."),
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
    from hardware_profiles import PROFILES_DIR
    from simulator.cost.fit import fit_op_class
    from simulator.cost.latency import LatencyModelFile

    profile = catalog.hardware_profile(device)
    by_class = _measured_by_class(measurements, vidur, profile)
    if op_class:
        missing = sorted(set(op_class) - set(by_class))
        if missing:
            raise SpecError(
                "(arguments)", "op_class", f"no measurements of {missing}; have {list(by_class)}"
            )
        by_class = {c: v for c, v in by_class.items() if c in op_class}
    models = [
        fit_op_class(cls, m, profile, files, shape_tables) for cls, (m, files) in by_class.items()
    ]
    sources = sorted({m.measurements.file for m in models})
    doc = LatencyModelFile(
        device=profile.name,
        description=f"plan fit --device {profile.name} on {'; '.join(sources)}",
        models=models,
    )
    path = out or PROFILES_DIR / profile.name / "latency_models.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc.model_dump_json(indent=2) + "\n")
    t = Table(title=f"Fitted latency models for {profile.name} (training errors)")
    for col in ("op class", "form", "rows", "median APE %", "max APE %", "FLOPs range",
                "bytes range"):  # fmt: skip
        t.add_column(col, justify="left" if col in ("op class", "form") else "right")
    for m in models:
        t.add_row(
            m.op_class, m.form, str(m.measurements.rows), f"{m.fit_error.median_ape:.1f}",
            f"{m.fit_error.max_ape:.1f}", _range(m.flops_range), _range(m.bytes_range),
        )  # fmt: skip
    _console().print(t)
    typer.echo(f"wrote {path}", err=True)


@_command(validate_app, "ops")
def validate_ops(
    device: Annotated[str, typer.Option(help="Device profile name (the measurements' device).")],
    measurements: MeasurementsOpt = None,
    vidur: VidurOpt = None,
    folds: Annotated[int, typer.Option(help="k of the k-fold cross-validation.")] = 5,
    seed: Annotated[int, typer.Option(help="Seed of the fold shuffle.")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Prior vs fitted (k-fold held-out) absolute percentage errors per op class."""
    import numpy as np

    from simulator.cost.fit import kfold_errors

    if folds < 2:
        raise SpecError("(arguments)", "folds", f"must be at least 2, got {folds}")
    profile = catalog.hardware_profile(device)
    by_class = _measured_by_class(measurements, vidur, profile)
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
        _print_json({"device": profile.name, "folds": folds, "seed": seed, "op_classes": results})
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
    _console().print(t)
    typer.echo(
        "fitted: k-fold held-out rows (measured shape tables interpolate GEMMs of measured"
        " (n, k)); unseen-shape: fitted on all other (n, k) shapes, so only the roofline fit"
        " answers",
        err=True,
    )


@_command(validate_app, "inferencemax")
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
    as_json: JsonOpt = False,
) -> None:
    """Simulate the InferenceMAX v1 points; median APE of throughput/GPU and interactivity."""
    import datetime
    import shlex
    import time

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from simulator import validation as v

    path = data if data is not None else v.DEFAULT_DATA
    if workers < 1:
        raise SpecError("(arguments)", "workers", f"must be >= 1, got {workers}")
    start = time.perf_counter()
    show = not as_json and sys.stderr.isatty()
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(), console=Console(stderr=True), disable=not show, transient=True,
    ) as bar:  # fmt: skip
        task = bar.add_task("simulating", total=None)

        def progress(done: int, total: int, _: v.PointResult) -> None:
            bar.update(task, completed=done, total=total)

        report = v.validate(
            path, models or (), devices or (), limit_per_curve, requests_per_conc, seed,
            workers, progress,
        )  # fmt: skip
    wall_s = time.perf_counter() - start
    if out is not None:
        v.write_points_csv(report.results, out / "points.csv")
        typer.echo(f"wrote {out / 'points.csv'} ({len(report.results)} points)", err=True)
    if markdown is not None:
        args = ["plan", "validate", "inferencemax"]
        if data is not None:
            args += ["--data", str(data)]
        if limit_per_curve is not None:
            args += ["--limit-per-curve", str(limit_per_curve)]
        for m in models or ():
            args += ["--models", m]
        for d in devices or ():
            args += ["--devices", d]
        if requests_per_conc != 10:
            args += ["--requests-per-conc", str(requests_per_conc)]
        if seed != 0:
            args += ["--seed", str(seed)]
        args += ["--workers", str(workers)]
        if out is not None:
            args += ["--out", str(out)]
        args += ["--markdown", str(markdown)]
        date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(v.render_markdown(report, shlex.join(args), date, wall_s, workers))
        typer.echo(f"wrote {markdown}", err=True)
    if as_json:
        _print_json(_finite({**report.to_json(), "wall_s": wall_s}))
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
    _console().print(t)
    skipped = ", ".join(f"{n} {reason}" for reason, n in report.skipped.most_common())
    typer.echo(f"skipped rows: {skipped or 'none'}", err=True)
    typer.echo(
        "APE = |sim - measured| / measured; bias = median (sim - measured) / measured"
        " (positive: simulator optimistic)",
        err=True,
    )


# ------------------------------------------------------------------------------------ workload

workload_app = _typer("Workloads: statistics of trace files and built-in generators.")
app.add_typer(workload_app, name="workload")


def _finite(data: Any) -> Any:
    """NaN -> None, recursively (JSON has no NaN)."""
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_finite(v) for v in data]
    if isinstance(data, float) and data != data:
        return None
    return data


def _pcts(p: dict[str, float] | None, unit: str = "") -> str:
    if p is None:
        return "-"
    if p["p50"] != p["p50"]:
        return "(none)"

    def num(x: float) -> str:
        return f"{x:,.1f}".removesuffix(".0") if abs(x) < 100 else f"{x:,.0f}"

    body = " / ".join(num(p[k]) for k in ("p10", "p50", "p90", "p99"))
    return f"{body}{unit} (mean {num(p['mean'])})"


@_command(workload_app, "stats")
def workload_stats_command(
    source: Annotated[
        str,
        typer.Argument(help="A trace file or directory, or a generator: agentic, chat, random."),
    ],
    trace_format: Annotated[
        str | None,
        typer.Option("--format", help="agentic|mooncake|azure (default: detected from content)."),
    ] = None,
    sessions: Annotated[
        int, typer.Option(help="Generator: sessions to generate (random: requests).")
    ] = 200,
    seed: Annotated[int, typer.Option(help="Generator: seed.")] = 0,
    isl: Annotated[int, typer.Option(help="random: input tokens (ISL).")] = 1024,
    osl: Annotated[int, typer.Option(help="random: output tokens (OSL).")] = 1024,
    range_ratio: Annotated[
        float, typer.Option(help="random: lengths uniform in [ratio*ISL, ISL].")
    ] = 0.8,
    skip_bad: Annotated[
        bool, typer.Option("--skip-bad", help="Skip malformed records (counted), don't stop.")
    ] = False,
    limit: Annotated[int | None, typer.Option(help="Read at most N requests.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Requests, sessions, span, rate, length and think-time percentiles, unlimited-cache reuse."""
    from simulator.workload import GENERATORS, generator_source, trace_source, workload_stats

    for value, flag in ((sessions, "sessions"), (limit or 1, "limit"), (isl, "isl"), (osl, "osl")):
        if value < 1:
            raise SpecError("(arguments)", flag, f"must be at least 1, got {value}")
    if not 0 <= range_ratio <= 1:
        raise SpecError("(arguments)", "range_ratio", f"must be in [0, 1], got {range_ratio}")
    if source in GENERATORS and not Path(source).exists():
        if trace_format is not None:
            raise SpecError("(arguments)", "format", f"{source!r} is a generator, not a file")
        src = generator_source(source, sessions, seed, isl, osl, range_ratio)
    else:
        src = trace_source(source, trace_format, skip_bad=skip_bad)
    st = workload_stats(src, limit=limit)
    if as_json:
        _print_json(_finite(st.to_dict()))
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
    _print_pairs("Workload statistics", rows)
    for reason in st.bad_reasons:
        _console().print(f"  skipped: {reason}")


def main() -> None:
    """Console entry point (``plan``)."""
    app()


if __name__ == "__main__":
    main()
