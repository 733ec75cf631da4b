"""Sizing: ``plan size`` on a page. A model, a demand (concurrent users) and an SLO become the
cheapest SLO-meeting fleet per device, ranked by its USD per hour, with the ``vllm serve``
line of the answer and why the other devices do not serve it."""

from __future__ import annotations

import os
import shlex
from typing import Any

import pandas as pd
import streamlit as st
from dashboard import checks, controls, runs
from dashboard.errors import inline_errors, kept_result

from simulator import catalog
from simulator.planner.run_count import seeds_text
from simulator.planner.sizing import WORKLOADS, SizeRequest, SizeResult
from simulator.specs.loading import parse

PAGE = "sizing"
SOURCE = "sizing"
WORKERS = max(1, min(4, os.cpu_count() or 1))
SEEDS = [0, 1, 2, 3, 5]  # 0: plan size's default (3; quick: 2)
SHOWN = f"{PAGE}_shown"  # session state: (request, result) last drawn
# the ranked table's columns shown first, as plan size prints them (the rest in the expander)
RANKED = [
    "rank", "device", "label", "users_per_deployment", "gpus", "unit", "units", "usd_per_hour",
    "usd_per_month", "usd_per_m_output_tok", "usd_per_user_hour", "interactivity_p90",
    "interactivity_p90_ci_low", "interactivity_p90_ci_high", "slo_margin_pct", "verdict",
    "ttft_p90_s", "model_error_pct",
]  # fmt: skip
FORMATS = {
    "usd_per_hour": "dollar", "usd_per_month": "dollar", "usd_per_m_output_tok": "$%.3f",
    "usd_per_user_hour": "$%.3f", "interactivity_p90": "%.1f", "interactivity_p90_ci_low": "%.1f",
    "interactivity_p90_ci_high": "%.1f", "slo_margin_pct": "%+.0f %%", "ttft_p90_s": "%.2f",
    "model_error_pct": "±%.0f %%",
}  # fmt: skip


def inputs() -> tuple[dict[str, Any], str]:
    """The sizing request the sidebar describes (not validated yet), and the run cache."""
    names = catalog.device_names()
    with st.sidebar:
        st.subheader("Demand and SLO")
        model = controls.model_select(f"{PAGE}_model")
        users = st.number_input(
            "Concurrent users", min_value=1, max_value=1_000_000, value=1000, step=100,
            key=f"{PAGE}_users",
        )  # fmt: skip
        slo = st.number_input(
            "P90 interactivity at least (tok/s/user)", min_value=1.0, value=50.0, step=5.0,
            key=f"{PAGE}_slo_interactivity",
        )  # fmt: skip
        ttft = st.number_input(
            "P90 TTFT at most (s)", min_value=0.0, value=0.0, step=1.0, key=f"{PAGE}_slo_ttft",
            help="0: no TTFT target",
        )  # fmt: skip
        st.subheader("Devices and traffic")
        cost_models = list(catalog.cost_models())
        cost_model = st.selectbox(
            "Cost model", cost_models, index=cost_models.index("semianalysis_tco_neocloud"),
            key=f"{PAGE}_cost_model",
        )  # fmt: skip
        priced = catalog.cost_model(cost_model).usd_per_gpu_hour
        devices = st.multiselect(
            "Devices", names, key=f"{PAGE}_devices",
            placeholder=f"every device {cost_model} prices",
            format_func=lambda d: d if d in priced else f"{d} (no price: not ranked)",
            help="None chosen: every device the cost model prices (as plan size)",
        )  # fmt: skip
        workload = st.selectbox("Workload", WORKLOADS, key=f"{PAGE}_workload")
        isl = osl = None
        if workload == "random":
            left, right = st.columns(2)
            isl = left.number_input("Input tokens", min_value=1, value=8192, key=f"{PAGE}_isl")
            osl = right.number_input("Output tokens", min_value=1, value=1024, key=f"{PAGE}_osl")
        st.subheader("Search")
        quick = st.checkbox(
            "Quick", value=True, key=f"{PAGE}_quick",
            help="20-minute windows after 5 minutes of warm-up, 2 seeds, 10 % load steps"
            " (else 60 and 10 minutes, 3 seeds, 5 %)",
        )  # fmt: skip
        seeds = st.selectbox(
            "Seeds per load", SEEDS, key=f"{PAGE}_seeds",
            format_func=lambda v: str(v) if v else f"default ({2 if quick else 3})",
        )  # fmt: skip
        cache = st.text_input(
            "Run cache folder", value=runs.default_run_cache(), key=f"{PAGE}_cache",
            help="One JSON per finished simulation, shared with plan size and plan search",
        )  # fmt: skip
    checks.cache_folder(SOURCE, cache)  # a file, a NUL byte, a name too long: one line
    request: dict[str, Any] = {
        "model": model, "users": int(users), "slo_interactivity_tok_per_s": float(slo),
        "slo_ttft_p90_s": float(ttft) or None, "devices": devices or None,
        "workload": workload, "cost_model": cost_model, "seeds": seeds or None, "quick": quick,
    }  # fmt: skip
    if isl is not None and osl is not None:
        request |= {"isl": int(isl), "osl": int(osl)}
    return request, cache.strip()


def command(request: SizeRequest) -> str:
    """The ``plan size`` command line of the request."""
    words = ["plan", "size", "--model", request.model, "--users", str(request.users),
             "--slo-interactivity", f"{request.slo_interactivity_tok_per_s:g}"]  # fmt: skip
    if request.slo_ttft_p90_s is not None:
        words += ["--slo-ttft-p90", f"{request.slo_ttft_p90_s:g}"]
    if request.devices:
        words += ["--devices", ",".join(request.devices)]
    default = SizeRequest.model_fields
    if request.workload != default["workload"].default:
        words += ["--workload", request.workload]
    if request.workload == "random":
        words += ["--isl", str(request.isl), "--osl", str(request.osl)]
    if request.cost_model != default["cost_model"].default:
        words += ["--cost-model", request.cost_model]
    if request.seeds is not None:
        words += ["--seeds", str(request.seeds)]
    if request.quick:
        words.append("--quick")
    return " ".join(shlex.quote(w) for w in words)


def page() -> None:
    st.title("Sizing")
    data, cache = inputs()
    request = parse(SizeRequest, data, SOURCE)
    key = request.model_dump_json()
    at_most = runs.size_planned(key)
    # another run cache is another sizing (read from, or written to, that folder)
    wanted = f"{key}|{cache}"
    if st.button("Size", key=f"{PAGE}_start", type="primary", icon=":material/play_arrow:"):
        st.session_state[f"{PAGE}_requested"] = wanted
    if st.session_state.get(f"{PAGE}_requested") != wanted:
        st.info(
            f"Press Size to search at most {at_most:,} simulations ({WORKERS} at a time):"
            f" {request.users:,} users of {request.model} at"
            f" {request.slo_interactivity_tok_per_s:g} tok/s/user P90."
        )
        st.caption("The same from the command line:")
        st.code(command(request), language="bash")
        return
    with runs.StopButton(PAGE, wanted) as stop:
        if stop.stopped:
            return
        result = runs.size(key, WORKERS, cache)
    st.session_state[SHOWN] = (request, result)
    show(request, result, PAGE)


def ranked(table: pd.DataFrame, key: str) -> None:
    """The ranked devices, in plan size's columns (every column in the expander below)."""
    config = controls.column_config(table)
    for column, spec in FORMATS.items():
        if column in table:
            config[column] = st.column_config.NumberColumn(format=spec)
    st.dataframe(
        table, key=key, hide_index=True, column_config=config,
        column_order=[c for c in RANKED if c in table.columns],
    )  # fmt: skip


def show(request: SizeRequest, result: SizeResult, key: str) -> None:
    """The answer, the ranked devices, the deploy line and what is not served."""
    say = st.success if not result.table.empty else st.warning
    say(result.answer, icon=":material/check_circle:" if not result.table.empty else None)
    if not result.table.empty:
        st.subheader("Devices ranked by fleet USD per hour")
        ranked(result.table, f"{key}_ranked")
        top = result.table.iloc[0]
        st.subheader(f"Deploy {top.config_id}")
        st.caption(
            f"One deployment of {int(top.gpus_per_deployment)} GPUs; the answer runs"
            f" {int(top.replicas):,} of them."
        )
        st.code(result.commands[top.config_id], language="bash")
        with st.expander("Every column of the ranked table"):
            st.dataframe(
                result.table, key=f"{key}_table", hide_index=True,
                column_config=controls.column_config(result.table),
            )  # fmt: skip
    if result.not_served:
        st.subheader("Not served")
        st.markdown("\n".join(f"- {line}" for line in result.not_served))
    st.caption(
        f"{result.simulations:,} simulations ({seeds_text(result.space)})."
        f" {controls.caveat(list(result.space.devices))}"
    )
    st.caption("The same from the command line:")
    st.code(command(request), language="bash")


previous = kept_result(SHOWN, "The last sizing that ran", show, f"{PAGE}_previous")

with inline_errors(SOURCE, previous):
    page()
