"""`plan memory --params ...`: the quick card's estimate, labelled as one."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from simulator.cli.base import console, gib, pool_gib, print_json, print_pairs
from simulator.cli.fit_table import plan_each, print_fit_table
from simulator.quick_card import QuickEstimate, estimate
from simulator.quick_flags import QuickCard, count_text
from simulator.specs import ServingConfig, SpecError
from simulator.specs.hardware import HardwareProfile


def run_quick_card(
    qc: QuickCard,
    devices: list[HardwareProfile],
    configs: list[tuple[ServingConfig, str]],
    context: int,
    num_seqs: int,
    as_json: bool,
    over: str,
    every: bool,
) -> None:
    if len(configs) > 1:
        raise SpecError("(arguments)", "dcp", "a quick card has no attention layout for DCP")
    cfg, source = configs[0]
    estimates, skipped = plan_each(
        devices, every, source, lambda dev: estimate(qc, dev, cfg, context, num_seqs, devices)
    )
    if as_json:
        data = [e.model_dump(mode="json") for e in estimates]
        print_json(data[0] if len(data) == 1 else data)
        return
    _print_given_and_assumed(estimates[0])
    if len(estimates) == 1:
        _print_detail(estimates[0])
    else:
        _print_comparison(estimates)
    print_fit_table(estimates, over, skipped)


def _value(flag: str, v: Any) -> str:
    if isinstance(v, float):
        return count_text(v) if flag.endswith("params") else f"{v:.4g}"
    return str(v)


def _print_given_and_assumed(e: QuickEstimate) -> None:
    con = console()
    con.print(f"ESTIMATE from headline numbers (no config.json): {e.model}")
    con.print("  given: " + ", ".join(f"{k} {_value(k, v)}" for k, v in e.given.items()))
    for note in e.assumed:
        con.print(f"  assumed: {note}")
    if e.kv_unknown_reason is not None:
        con.print(f"  not estimated: {e.kv_unknown_reason}; sequences that fit are not checked")


def _print_comparison(estimates: list[QuickEstimate]) -> None:
    e0 = estimates[0]
    t = Table(title=f"{e0.model}: memory per GPU, tp {e0.tp} (ESTIMATE)")
    columns = ("device", "usable GiB", "weights GiB", "reserves GiB", "KV left GiB", "KV B/token")
    for col in (*columns, "sessions"):
        t.add_column(col, justify="left" if col == "device" else "right")
    for e in estimates:
        known = e.kv_bytes_per_token_per_gpu is not None
        t.add_row(
            e.device,
            gib(e.usable_memory_bytes),
            gib(e.weight_bytes_per_gpu),
            gib(e.activation_reserve_bytes_per_gpu + e.runtime_reserve_bytes_per_gpu),
            gib(max(e.kv_cache_bytes_per_gpu, 0.0)),
            f"{e.kv_bytes_per_token_per_gpu:,.0f}" if known else "unknown",
            f"{e.max_seqs_at_context:,}" if e.max_seqs_at_context is not None else "unknown",
        )
    console().print(t)


def _print_detail(e: QuickEstimate) -> None:
    rows = [
        ("usable memory", f"{gib(e.usable_memory_bytes)} GiB"),
        ("budget (x gpu_memory_utilization)", f"{gib(e.budget_bytes_per_gpu)} GiB"),
        (
            f"weights ({e.bits_per_element:.4g} bits per element)",
            f"{gib(e.text_weight_bytes_per_gpu)} GiB",
        ),
    ]
    if e.vision_weight_bytes_per_gpu:
        rows.append(("vision weights", f"{gib(e.vision_weight_bytes_per_gpu)} GiB"))
    rows += [
        ("activation reserve (estimate)", f"{gib(e.activation_reserve_bytes_per_gpu)} GiB"),
        ("runtime reserve (assumption)", f"{gib(e.runtime_reserve_bytes_per_gpu)} GiB"),
        ("left for the KV cache", pool_gib(e.kv_cache_bytes_per_gpu)),
    ]
    if e.active_weight_bytes_per_token is not None:
        read = e.active_weight_bytes_per_token / 1e9
        rows.append(("active weights read per decode step", f"{read:,.2f} GB"))
    if e.kv_bytes_per_token_per_gpu is not None:
        rows += [
            ("KV per token (estimate)", f"{e.kv_bytes_per_token_per_gpu:,.0f} B"),
            (
                f"sequences of {e.context_tokens:,} tokens that fit",
                f"{e.max_seqs_at_context:,} per replica",
            ),
        ]
    else:
        rows.append(("KV per token", "unknown (see above)"))
    print_pairs(f"{e.device}, tp {e.tp}: memory per GPU (ESTIMATE)", rows)
