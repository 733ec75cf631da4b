"""Compare: two to four devices on the same traffic; a small sweep per device (DCP, offload,
users), their throughput-vs-interactivity frontiers and tokens per dollar under a cost model."""

from __future__ import annotations

import os
from typing import Any

import streamlit as st
from dashboard import controls, figures, runs
from dashboard.errors import inline_errors

from simulator import catalog
from simulator.planner.analysis import best_per_device, pruned_table, runs_table
from simulator.planner.space import SearchSpace
from simulator.specs import SpecError
from simulator.specs.loading import parse

PAGE = "compare"
SOURCE = "compare"
USERS = [4, 8, 16, 24, 32, 48, 64, 96, 128]
WORKERS = max(1, min(4, os.cpu_count() or 1))


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def inputs() -> tuple[dict[str, Any], dict[str, Any]]:
    """What to simulate (a search space), and how to judge it (SLO, cost model, demand)."""
    names = catalog.device_names()
    with st.sidebar:
        st.subheader("Devices and deployment")
        model = controls.model_select(f"{PAGE}_model")
        devices = st.multiselect(
            "Devices (two to four)", names,
            default=[d for d in ("mi355x", "b300") if d in names], max_selections=4,
            key=f"{PAGE}_devices",
        )  # fmt: skip
        tp = st.selectbox("TP", controls.TP_SIZES, index=3, key=f"{PAGE}_tp")
        dcp = st.multiselect("DCP sizes", controls.DCP_SIZES, default=[1], key=f"{PAGE}_dcp")
        offload = st.multiselect(
            "CPU KV offload per replica", controls.OFFLOAD_GIB, default=[0],
            format_func=controls.offload_label, key=f"{PAGE}_offload_gib",
        )  # fmt: skip
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
    if not 2 <= len(devices) <= 4:
        raise SpecError(SOURCE, "devices", f"pick two to four devices, not {len(devices)}")
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
    }  # fmt: skip
    judged = {
        "slo": {"interactivity_tok_per_s_p90": slo},
        "cost_model": cost_model,
        "demand_users": int(demand) or None,
    }
    return simulated, judged


def page() -> None:
    st.title("Compare devices")
    simulated, judged = inputs()
    # the SLO, prices and demand do not change a run: they judge the same runs
    run_space = parse(SearchSpace, simulated, SOURCE)
    key = run_space.model_dump_json()
    space = parse(SearchSpace, {**simulated, **judged}, SOURCE)
    n_runs, n_pruned = runs.sweep_size(key)
    if st.button("Compare", key=f"{PAGE}_start", type="primary", icon=":material/play_arrow:"):
        st.session_state[f"{PAGE}_requested"] = key
    if st.session_state.get(f"{PAGE}_requested") != key:
        pruned = f", {plural(n_pruned, 'configuration')} pruned" if n_pruned else ""
        st.info(
            f"Press Compare to run {plural(n_runs, 'simulation')} ({WORKERS} at a time; a few"
            f" seconds each){pruned}."
        )
        return
    with runs.StopButton(PAGE, key) as stop:
        if stop.stopped:
            return
        result = runs.sweep(key, WORKERS)
    table = runs_table(space, result.candidates, result.results)
    best = best_per_device(space, table)
    st.markdown(
        f"**{space.model}**, {', '.join(space.devices)}: {len(table)} runs of"
        f" {simulated['duration_s'] / 60:g} simulated minutes (first"
        f" {simulated['warmup_s'] / 60:g} not measured); SLO P90 interactivity"
        f" >= {judged['slo']['interactivity_tok_per_s_p90']:g} tok/s/user; prices:"
        f" {space.cost_model}."
    )
    columns = st.columns(len(space.devices))
    for col, device in zip(columns, space.devices, strict=True):
        mine = best[best.device == device] if not best.empty else best
        if mine.empty:
            col.metric(f"{device} tokens per USD", "-", help="no configuration meets the SLO")
            col.caption("No configuration meets the SLO (or fits).")
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
            + (f"; {int(b.nodes)} nodes for {space.demand_users:,} users" if "nodes" in b else "")
        )
    figs = figures.search_figures(space, table, best)
    for i, fig in enumerate(figs):
        st.plotly_chart(fig, key=f"{PAGE}_figure_{i}")
    if not best.empty:
        st.subheader("Best configuration per device")
        controls.table(best, f"{PAGE}_best")
    if result.pruned:
        st.subheader("Pruned (not run)")
        controls.table(pruned_table(result.pruned), f"{PAGE}_pruned")
    with st.expander(f"All {len(table)} runs"):
        controls.table(table, f"{PAGE}_runs")


with inline_errors(SOURCE):
    page()
