"""Compare: two to four devices on the same traffic; a small sweep per device (DCP, offload,
users), their throughput-vs-interactivity frontiers and tokens per dollar under a cost model."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import streamlit as st
from dashboard import checks, choices, controls, export, figures, runs
from dashboard.errors import inline_errors, kept_result

from simulator import catalog
from simulator.planner.analysis import best_per_device, pruned_table, runs_table
from simulator.planner.space import SearchSpace
from simulator.planner.verdicts import verdicts
from simulator.specs import SpecError
from simulator.specs.loading import parse

PAGE = "compare"
SOURCE = "compare"
USERS = [4, 8, 16, 24, 32, 48, 64, 96, 128]
WORKERS = max(1, min(4, os.cpu_count() or 1))
SHOWN = f"{PAGE}_shown"  # session state: (space, result) last drawn


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def deployment(model: str) -> tuple[list[str], int, list[int], list[int]]:
    """Devices, TP, DCP and offload sizes: only what the core accepts is offered. A device the
    model does not fit on (at any TP within its scale-up domain) says so in its label and is
    refused; TP: what the model's heads and every chosen device's scale-up domain allow, at
    which the weights fit on one of them; DCP: the divisors of TP the KV heads allow;
    offload: what the smallest host DRAM among the devices holds."""
    names = catalog.device_names()
    devices = st.multiselect(
        "Devices (two to four)", names,
        default=[d for d in ("mi355x", "b300") if d in names], max_selections=4,
        format_func=choices.device_label(model), key=f"{PAGE}_devices",
    )  # fmt: skip
    unfit = [d for d in names if not choices.fit(model, d).fits]
    if unfit:
        st.caption(f"Cannot hold {model}: {', '.join(unfit)}.")
    usable = [d for d in devices if choices.fit(model, d).fits] or names[:1]
    tp_options = [
        tp for tp in choices.TP_SIZES
        if all(tp in choices.device_tp_sizes(model, d) for d in usable)
        and any(tp in choices.fit(model, d).tp_sizes for d in usable)
    ] or list(choices.model_tp_sizes(model)) or [1]  # fmt: skip
    choices.keep_valid(f"{PAGE}_tp", tp_options, 8)
    tp = int(st.selectbox(
        "TP", tp_options, key=f"{PAGE}_tp",
        help=f"Allowed by {model}'s heads and the scale-up domain of every device chosen, and"
        " the weights fit on one of them at least",
    ))  # fmt: skip
    dcp_options = list(choices.dcp_sizes(model, tp))
    choices.keep_valid_many(f"{PAGE}_dcp", dcp_options, [1])
    dcp = st.multiselect(
        "DCP sizes", dcp_options, key=f"{PAGE}_dcp",
        help=f"Divisors of TP {tp} that the KV heads of {model} allow",
    )  # fmt: skip
    hosts = [catalog.hardware_profile(d) for d in usable]
    offload_options = min((choices.offload_gib(h, tp) for h in hosts), key=len)
    choices.keep_valid_many(f"{PAGE}_offload_gib", offload_options, [0])
    offload = st.multiselect(
        "CPU KV offload per replica", offload_options, format_func=controls.offload_label,
        key=f"{PAGE}_offload_gib", help=f"What the host DRAM behind {tp} GPUs holds",
    )  # fmt: skip
    return devices, tp, dcp, offload


def inputs() -> tuple[dict[str, Any], dict[str, Any], str]:
    """What to simulate (a search space), how to judge it (SLO, cost model, demand), and the
    run cache folder."""
    with st.sidebar:
        st.subheader("Devices and deployment")
        model = controls.model_select(f"{PAGE}_model")
        devices, tp, dcp, offload = deployment(model)
        st.subheader("Traffic (built-in agentic sessions)")
        users = st.multiselect(
            "Users per replica (one point each)", USERS, default=[8, 16, 32],
            key=f"{PAGE}_users",
        )  # fmt: skip
        left, right = st.columns(2)
        minutes = left.number_input(
            "Simulated min", min_value=1, max_value=240, value=20, key=f"{PAGE}_minutes"
        )
        warmup = right.number_input(
            "Warm-up min", min_value=0, max_value=60, value=5, key=f"{PAGE}_warmup"
        )
        st.subheader("SLO and cost")
        slo = st.number_input(
            "P90 interactivity at least (tok/s/user)", min_value=1.0, value=50.0, step=5.0,
            key=f"{PAGE}_slo_interactivity",
        )  # fmt: skip
        cost_models = list(catalog.cost_models())
        cost_model = st.selectbox(
            "Cost model", cost_models, index=cost_models.index("semianalysis_tco_neocloud"),
            key=f"{PAGE}_cost_model",
        )  # fmt: skip
        demand = st.number_input(
            "Demand: concurrent users (0: none)", min_value=0, value=1000, step=100,
            key=f"{PAGE}_demand_users",
        )  # fmt: skip
        st.subheader("Run cache")
        cache = st.text_input(
            "Folder", value=runs.default_run_cache(), key=f"{PAGE}_cache",
            help="One JSON per finished run, keyed as plan search keys them: give OUT/cache of"
            " a `plan search --out OUT` to reuse its runs (and leave these for it)",
        )  # fmt: skip
    if not 2 <= len(devices) <= 4:
        raise SpecError(SOURCE, "devices", f"pick two to four devices, not {len(devices)}")
    try:
        choices.refuse_unfit(SOURCE, model, devices)
    except SpecError as exc:
        raise SpecError(SOURCE, "devices", exc.reason) from None
    checks.cache_folder(SOURCE, cache)  # a file, a NUL byte, a name too long: one line
    for field, chosen in (("DCP sizes", dcp), ("offload", offload), ("users", users)):
        if not chosen:
            raise SpecError(SOURCE, field, "pick at least one value")
    if warmup >= minutes:
        raise SpecError(SOURCE, "warm-up", f"{warmup} min leaves nothing of {minutes} to measure")
    simulated = {
        "name": SOURCE, "model": model, "devices": devices, "serving": {"tp": tp},
        "sweep": {"tp": [tp], "dcp": sorted(dcp),
                  "cpu_offload_bytes": [float(g) * 2**30 for g in sorted(offload)]},
        "concurrency": sorted(users),
        "workload": {"kind": "agentic", "sessions": 1000, "concurrency": 1},
        "slo": {}, "duration_s": float(minutes) * 60, "warmup_s": float(warmup) * 60,
        "seeds": 1, "search": "grid",  # one run per point, as `plan search --grid --seeds 1`
    }  # fmt: skip
    judged = {
        "slo": {"interactivity_tok_per_s_p90": slo},
        "cost_model": cost_model,
        "demand_users": int(demand) or None,
    }
    return simulated, judged, cache.strip()


def page() -> None:
    st.title("Compare devices")
    simulated, judged, cache = inputs()
    # the SLO, prices and demand do not change a run: they judge the same runs
    run_space = parse(SearchSpace, simulated, SOURCE)
    key = run_space.model_dump_json()
    space = parse(SearchSpace, {**simulated, **judged}, SOURCE)
    _, pruned, scenarios = runs.sweep_scenarios(space)
    n_pruned = sum(1 for p in pruned if " repeats " not in p.reason)
    # another run cache is another sweep (its runs read from, or written to, that folder): it
    # waits for Compare like any other change
    request = f"{key}|{Path(cache).expanduser()}"
    if st.button("Compare", key=f"{PAGE}_start", type="primary", icon=":material/play_arrow:"):
        st.session_state[f"{PAGE}_requested"] = request
    if st.session_state.get(f"{PAGE}_requested") != request:
        n_cached = runs.cached_runs(scenarios, Path(cache).expanduser())
        pruned_text = f", {plural(n_pruned, 'configuration')} pruned" if n_pruned else ""
        cached_text = f"; {n_cached} of them in the run cache already" if n_cached else ""
        st.info(
            f"Press Compare to run {plural(len(scenarios), 'simulation')} ({WORKERS} at a time;"
            f" a few seconds each){pruned_text}{cached_text}."
        )
        with st.expander("Export as a search space"):
            export.space_export(space, f"{PAGE}_space", Path(cache))
        return
    with runs.StopButton(PAGE, request) as stop:
        if stop.stopped:
            return
        result = runs.sweep(key, WORKERS, str(Path(cache).expanduser()), space)
    st.session_state[SHOWN] = (space, result)
    show(space, result, PAGE)
    with st.expander("Export as a search space"):
        export.space_export(space, f"{PAGE}_space", Path(cache))


def show(space: SearchSpace, result: runs.SweepResult, key: str) -> None:
    """The comparison of ``space``'s runs; ``key`` prefixes the element keys."""
    table = runs_table(space, result.candidates, result.results)
    best = best_per_device(space, table)
    slo = space.slo.interactivity_tok_per_s_p90
    st.markdown(
        f"**{space.model}**, {', '.join(space.devices)}: {len(table)} runs of"
        f" {space.duration_s / 60:g} simulated minutes (first {space.warmup_s / 60:g} not"
        f" measured); SLO P90 interactivity >= {slo or 0:g} tok/s/user; prices:"
        f" {space.cost_model}."
    )
    why_not = {v.device: v.text for v in verdicts(space, table, best)}
    columns = st.columns(len(space.devices))
    for col, device in zip(columns, space.devices, strict=True):
        mine = best[best.device == device] if not best.empty else best
        if mine.empty:
            why = why_not[device]  # does not fit, or misses the SLO, never both in one line
            col.metric(f"{device} tokens per USD", "-", help=why)
            col.caption(why[0].upper() + why[1:] + ".")
            continue
        b = mine.iloc[0]
        col.metric(
            f"{device} tokens per USD", controls.tokens(b.tokens_per_usd),
            help="At the best configuration meeting the SLO: throughput x 3600 / USD per GPU-h",
        )  # fmt: skip
        col.caption(
            f"{b.config_id.removeprefix(device + '-')} at {b.concurrency} users:"
            f" {b.throughput_tok_per_s_per_gpu:,.0f} tok/s/GPU,"
            f" P90 {b.interactivity_p90:,.1f} tok/s/user"
            + (
                f"; {int(b.units)} {b.unit}{'' if int(b.units) == 1 else 's'}"  # racks on NVL72
                f" for {space.demand_users:,} users"
                if "units" in b and "unit" in b
                else ""
            )
        )
    figs = figures.search_figures(space, table, best)
    for i, fig in enumerate(figs):
        st.plotly_chart(fig, key=f"{key}_figure_{i}")
    if not best.empty:
        st.subheader("Best configuration per device")
        controls.table(best, f"{key}_best")
    if result.pruned:
        st.subheader("Pruned (not run)")
        controls.table(pruned_table(result.pruned), f"{key}_pruned")
    with st.expander(f"All {len(table)} runs"):
        controls.table(table, f"{key}_runs")


previous = kept_result(SHOWN, "The last comparison that ran", show, f"{PAGE}_previous")

with inline_errors(SOURCE, previous):
    page()
