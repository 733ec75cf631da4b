"""`plan step`: one engine step's time, by category and op."""

import re
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from simulator import catalog
from simulator.cli.base import JsonOpt, app, command, console, print_json
from simulator.cli.memory import serving_from
from simulator.specs import HardwareProfile, ModelCard, ServingConfig, SpecError

# ------------------------------------------------------------------------------------ step


# ASCII digits only: int() also takes ' 1_000', '+5' and other scripts' digits, and '100@'
# read as prefix 0
_PREFILL = re.compile(r"(?:([0-9]+)x)?([0-9]+)(?:@([0-9]+))?")


def _parse_prefill(spec: str) -> tuple[int, int, int]:
    """``[COUNTx]TOKENS[@PREFIX]`` -> (count, new tokens, cached prefix)."""
    match = _PREFILL.fullmatch(spec)
    if match is None:
        raise SpecError(
            "(arguments)", "prefill", f"{spec!r} is not [COUNTx]TOKENS[@PREFIX], e.g. 4x2048@50000"
        )
    count, tokens, prefix = match.groups()
    values = int(count or 1), int(tokens), int(prefix or 0)
    if values[0] < 1 or values[1] < 1 or values[2] < 0:
        raise SpecError("(arguments)", "prefill", f"{spec!r}: counts and tokens must be positive")
    return values


def _check_kv(
    card: ModelCard, cfg: ServingConfig, pool: int, new: list[int], ctx: list[int], given: str
) -> None:
    """The step's running requests hold their KV blocks together: more than the pool holds is
    no step vLLM runs (it preempts first). 512 decodes at 60,000 tokens were priced, and said
    to fit, where the pool holds 4 of them."""
    from simulator.kv_layout import blocks_per_seq, kv_layout

    layout = kv_layout(card, cfg)
    need = sum(blocks_per_seq(layout, cfg, c + n) for c, n in zip(ctx, new, strict=True))
    if need > pool:
        raise SpecError(
            "(arguments)", given,
            f"the step's {len(new):,} requests hold {need:,} KV blocks; the pool holds {pool:,}"
            " (plan memory): vLLM preempts before it runs such a step",
        )  # fmt: skip


def _check_fits(
    card: ModelCard,
    profile: HardwareProfile,
    cfg: ServingConfig,
    decode: int,
    context: int,
    chunks: list[tuple[int, int, int]],
) -> None:
    """A step vLLM could schedule: at most max_num_seqs requests, a chunk within the token
    budget, every request within max_model_len (beyond, the price is of no step vLLM runs)."""
    from simulator.deployment import batch_limits, effective_max_model_len

    budget, seqs = batch_limits(profile, cfg)
    longest = effective_max_model_len(card, cfg)
    requests = decode + sum(n for n, _, _ in chunks)
    # the options the count came from (a step of prefills alone was blamed on --decode)
    given = " / ".join(name for name, n in (("decode", decode), ("prefill", chunks)) if n)
    if requests > seqs:
        raise SpecError(
            "(arguments)",
            given,
            f"{requests:,} requests in one step exceed max_num_seqs {seqs:,}",
        )
    if decode and context + 1 > longest:
        raise SpecError(
            "(arguments)", "context", f"{context:,} tokens reach max_model_len {longest:,}"
        )
    for n, tokens, prefix in chunks:
        if prefix + tokens > longest:
            raise SpecError(
                "(arguments)", "prefill",
                f"{prefix:,} + {tokens:,} tokens exceed max_model_len {longest:,}",
            )  # fmt: skip
        if n * tokens > budget:
            raise SpecError(
                "(arguments)", "prefill",
                f"{n:,} x {tokens:,} tokens exceed max_num_batched_tokens {budget:,} (vLLM"
                " chunks a prompt to the budget)",
            )  # fmt: skip
    # the step as a whole: every decode's tokens (1 + the drafts) and every chunk share one
    # budget (checked per --prefill before: 1,000 decodes beside a 7,500-token chunk priced)
    decode_tokens = decode * (1 + cfg.num_speculative_tokens)
    total = decode_tokens + sum(n * tokens for n, tokens, _ in chunks)
    if total > budget:
        raise SpecError(
            "(arguments)", given,
            f"{decode_tokens:,} decode + {total - decode_tokens:,} prefill tokens ="
            f" {total:,} exceed max_num_batched_tokens {budget:,}",
        )  # fmt: skip


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
    from simulator.deployment import batch_limits, check_deployment, check_device
    from simulator.measured.device import basis_of
    from simulator.memory import plan_memory

    for flag, value in (("decode", decode), ("context", context), ("top", top)):
        if value < 0:
            raise SpecError("(arguments)", flag, f"must not be negative, got {value}")
    if decode and context < 1:
        raise SpecError(
            "(arguments)", "context", "a decoding request holds at least its prompt: give >= 1"
        )
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
    _check_fits(card, profile, cfg, decode, context, chunks)
    # a step of a model that cannot be loaded here is still priced as asked, and said so
    memory = plan_memory(card, profile, cfg, context_tokens=1)
    if not memory.fits:
        typer.echo(
            f"note: {card.name} does not fit on {profile.name} at tp {cfg.tp}"
            f" ({memory.fits_reason}): no vLLM server runs this step",
            err=True,
        )
    q = 1 + cfg.num_speculative_tokens
    new = [q] * decode + [t for n, t, _ in chunks for _ in range(n)]
    ctx = [context] * decode + [p for n, _, p in chunks for _ in range(n)]
    if memory.fits:
        _check_kv(
            card, cfg, memory.num_blocks, new, ctx, "decode / context" if decode else "prefill"
        )
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
        "fits": memory.fits,
        "fits_reason": memory.fits_reason,
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
