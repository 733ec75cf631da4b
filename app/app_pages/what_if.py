"""What-if: one scenario (device, parallelism, offload, batch cap, users, think time, SLO)
simulated with the built-in agentic generator; throughput, interactivity, TTFT, hit rates,
KV usage over time and where the step time goes."""

from __future__ import annotations

from typing import Any

import streamlit as st
from dashboard import choices, controls, export, figures, runs
from dashboard.errors import inline_errors, kept_result

from simulator import catalog
from simulator.deployment import default_batch_limits
from simulator.specs import Scenario, SpecError
from simulator.specs.loading import parse
from simulator.window import quarters_text, unsteady

PAGE = "whatif"
SOURCE = "what-if"
THINK_SCALES = [0.25, 0.5, 1.0, 2.0, 4.0]
MIN_SESSIONS = 1000  # generated sessions; closed-loop users never run out in a short window
# metric tiles whose deltas are better when they go down
LOWER_IS_BETTER = {"P90 TTFT (s)"}
DEFAULT_DEVICE = "mi355x"
SHOWN = f"{PAGE}_shown"  # session state: (scenario, result) last drawn


def deployment(model: str) -> tuple[str, int, int, float]:
    """Device, TP, DCP and host KV tier: only the combinations the core accepts are offered
    (TP: the model's heads, the device's scale-up domain and the weights allow it; DCP: the
    divisors of TP that the KV heads allow; offload: what the host DRAM holds)."""
    state = st.session_state
    names = catalog.device_names()
    if state.get(f"{PAGE}_device") not in names:
        state[f"{PAGE}_device"] = DEFAULT_DEVICE if DEFAULT_DEVICE in names else names[0]
    device = st.selectbox(
        "Device", names, format_func=choices.device_label(model), key=f"{PAGE}_device",
        help=f"A device marked 'does not fit' cannot hold {model} at any TP within one scale-up"
        " domain",
    )  # fmt: skip
    unfit = [f for f in (choices.fit(model, d) for d in names) if not f.fits]
    if unfit:
        st.caption(
            f"Cannot hold {model}: "
            + ", ".join(f"{f.device} (needs {f.gpus_needed} GPUs)" for f in unfit)
        )
    fit = choices.fit(model, device)
    tp_options = list(
        fit.tp_sizes or choices.device_tp_sizes(model, device) or choices.model_tp_sizes(model)
    ) or [1]
    choices.keep_valid(f"{PAGE}_tp", tp_options, 8)
    left, right = st.columns(2)
    tp = int(left.selectbox(
        "TP", tp_options, key=f"{PAGE}_tp",
        help=f"The sizes that {model}'s heads and the scale-up domain of {device} allow, and at"
        " which its weights fit",
    ))  # fmt: skip
    dcp_options = list(choices.dcp_sizes(model, tp))
    choices.keep_valid(f"{PAGE}_dcp", dcp_options, 1)
    dcp = int(right.selectbox(
        "DCP", dcp_options, key=f"{PAGE}_dcp",
        help=f"Divisors of TP {tp} that the KV heads of {model} allow",
    ))  # fmt: skip
    profile = catalog.hardware_profile(device)
    offload_options = choices.offload_gib(profile, tp)
    choices.keep_valid(f"{PAGE}_offload_gib", offload_options, 0)
    offload_gib = st.select_slider(
        "CPU KV offload per replica", offload_options, format_func=controls.offload_label,
        key=f"{PAGE}_offload_gib",
    )  # fmt: skip
    host = profile.host_dram_bytes_per_gpu * tp / 2**30
    st.caption(f"Host DRAM of {tp}x {device} in its profile: {controls.offload_label(host)}.")
    return device, tp, dcp, float(offload_gib)


def inputs() -> dict[str, Any]:
    """The sidebar controls, as the scenario they describe (not validated yet)."""
    with st.sidebar:
        st.subheader("Deployment")
        model = controls.model_select(f"{PAGE}_model")
        device, tp, dcp, offload_gib = deployment(model)
        profile = catalog.hardware_profile(device)
        default_seqs = default_batch_limits(profile)[1]
        max_num_seqs = st.selectbox(
            "max_num_seqs", [0, 8, 16, 32, 64, 128, 256, 512, 1024],
            format_func=lambda v: str(v) if v else f"vLLM default ({default_seqs})",
            key=f"{PAGE}_max_num_seqs", help="Running requests per replica at most",
        )  # fmt: skip
        st.subheader("Traffic (built-in agentic sessions)")
        users = st.number_input(
            "Concurrent users (closed loop)", min_value=1, max_value=1024, value=32, step=8,
            key=f"{PAGE}_users",
        )  # fmt: skip
        think = st.select_slider(
            "Think time x", THINK_SCALES, value=1.0, key=f"{PAGE}_think_scale",
            help="Multiplies the generator's think times between the turns of a session",
        )  # fmt: skip
        left, right = st.columns(2)
        minutes = left.number_input(
            "Simulated min", min_value=1, max_value=480, value=30, key=f"{PAGE}_minutes"
        )
        warmup = right.number_input(
            "Warm-up min", min_value=0, max_value=120, value=5, key=f"{PAGE}_warmup",
            help="Requests arriving earlier are not measured",
        )  # fmt: skip
        st.subheader("SLO and cost")
        slo_inter = st.number_input(
            "P90 interactivity at least (tok/s/user)", min_value=0.0, value=50.0, step=5.0,
            key=f"{PAGE}_slo_interactivity", help="0: no interactivity target",
        )  # fmt: skip
        slo_ttft = st.number_input(
            "P90 TTFT at most (s)", min_value=0.0, value=0.0, step=1.0,
            key=f"{PAGE}_slo_ttft", help="0: no TTFT target",
        )  # fmt: skip
        cost_models = list(catalog.cost_models())
        cost_model = st.selectbox(
            "Cost model", cost_models, index=cost_models.index("semianalysis_tco_neocloud"),
            key=f"{PAGE}_cost_model",
        )  # fmt: skip
    choices.refuse_unfit(SOURCE, model, [device])
    if warmup >= minutes:
        raise SpecError(SOURCE, "warm-up", f"{warmup} min leaves nothing of {minutes} to measure")
    return {
        "name": SOURCE,
        "model": model,
        "device": device,
        "serving": {
            "tp": tp, "dcp": dcp, "cpu_offload_bytes": float(offload_gib) * 2**30,
            "max_num_seqs": max_num_seqs or None,
        },
        "workload": {
            "kind": "agentic", "sessions": max(MIN_SESSIONS, 4 * int(users)),
            "concurrency": int(users), "think_time_scale": think,
        },
        "duration_s": float(minutes) * 60,
        "warmup_s": float(warmup) * 60,
        "slo": {
            "interactivity_tok_per_s_p90": slo_inter or None, "ttft_s_p90": slo_ttft or None,
        },
        "cost_model": cost_model,
    }  # fmt: skip


def describe(sc: Scenario) -> str:
    serving = sc.serving
    parts = [f"TP{serving.tp}", f"DCP{serving.dcp}"]
    if serving.cpu_offload_bytes:
        parts.append(f"{controls.offload_label(serving.cpu_offload_bytes / 2**30)} CPU offload")
    if serving.max_num_seqs:
        parts.append(f"max_num_seqs {serving.max_num_seqs}")
    users = sc.workload.concurrency
    minutes = (sc.duration_s or 0) / 60
    return (
        f"**{sc.model}** on **{serving.num_gpus}x {sc.device}** ({', '.join(parts)}):"
        f" {users} agentic users, {minutes:g} simulated minutes, the first"
        f" {sc.warmup_s / 60:g} not measured."
    )


def tiles(key: str, values: dict[str, tuple[float | None, str, str]]) -> None:
    """Metric tiles with the change from the previous scenario shown in this session."""
    numbers = {label: v for label, (v, _, _) in values.items()}
    last = st.session_state.get(f"{PAGE}_last")
    if last is None or last[0] != key:
        st.session_state[f"{PAGE}_before"] = last
        st.session_state[f"{PAGE}_last"] = (key, numbers)
    before = st.session_state.get(f"{PAGE}_before")
    columns = st.columns(len(values))
    for col, (label, (value, spec, unit)) in zip(columns, values.items(), strict=True):
        old = before[1].get(label) if before else None
        delta = None
        if value is not None and old is not None and value != old:
            delta = f"{(value - old) * 100:+.1f} pp" if "%" in spec else format(value - old, spec)
        col.metric(
            label, controls.fmt(value, spec, unit), delta,
            delta_color="inverse" if label in LOWER_IS_BETTER else "normal",
        )  # fmt: skip


def page() -> None:
    st.title("What-if")
    scenario = parse(Scenario, inputs(), SOURCE)
    key = runs.simulated_part(scenario)
    with runs.StopButton(PAGE, key) as stop:
        if stop.stopped:
            return
        result = runs.what_if(key)
    st.session_state[SHOWN] = (scenario, result)
    show(scenario, result, PAGE)


def show(scenario: Scenario, result: runs.WhatIfResult, key: str) -> None:
    """The figures of one simulated scenario; ``key`` prefixes the element keys."""
    st.markdown(describe(scenario))
    tokens_per_usd, slo_met = runs.judged(scenario, result)
    s = result.summary
    tiles(
        scenario.model_dump_json(),
        {
            "Throughput (tok/s/GPU)": (s.throughput_tok_per_s_per_gpu, ",.0f", ""),
            "Output (tok/s/GPU)": (s.output_tok_per_s_per_gpu, ",.0f", ""),
            "P90 tok/s/user": (s.interactivity_tok_per_s_p90, ",.1f", ""),
            "P90 TTFT (s)": (s.ttft_s_p90, ",.2f", ""),
            "Prefix hit rate": (s.prefix_hit_rate, ".1%", ""),
            "Tokens per USD (M)": (
                tokens_per_usd and tokens_per_usd / 1e6,
                ",.2f",
                "",
            ),
        },
    )
    if s.saturated:
        st.error(
            f"SATURATED ({s.saturation_reason}): the deployment does not keep up with this"
            f" load ({s.requests_finished:,} requests finished in the window), so the"
            " percentiles above are of the few requests served while the queue grew, not of"
            " a steady state; fewer users or more GPUs (docs/metrics.md)."
        )
    slo = scenario.slo
    if slo_met is None:
        st.caption("No SLO given.")
    else:
        target = []
        if slo.interactivity_tok_per_s_p90 is not None:
            target.append(f"P90 interactivity >= {slo.interactivity_tok_per_s_p90:g} tok/s/user")
        if slo.ttft_s_p90 is not None:
            target.append(f"P90 TTFT <= {slo.ttft_s_p90:g} s")
        verdict = "meets" if slo_met else "misses"
        say = st.success if slo_met else st.warning
        why = " (saturated)" if s.saturated else ""
        say(f"This scenario **{verdict}** the SLO ({', '.join(target)}){why}.")
    if tokens_per_usd is None:
        st.caption(f"{scenario.cost_model} has no price for {scenario.device}.")
    if unsteady(s.prefix_hit_rate_quarters):
        st.warning(
            f"The prefix-hit rate changed state inside the measured window (by quarter:"
            f" {quarters_text(s.prefix_hit_rate_quarters)}): the cache is near its edge, so"
            " these figures depend on where the window falls; a longer run or more seeds show"
            " how often (docs/kv-pressure.md)."
        )

    left, right = st.columns(2)
    with left:
        st.subheader("Percentiles")
        st.dataframe(
            {
                "percentile": ["P50", "P90", "P99"],
                "interactivity (tok/s/user)": [
                    s.interactivity_tok_per_s_p50, s.interactivity_tok_per_s_p90,
                    s.interactivity_tok_per_s_p99,
                ],
                "TTFT (s)": [s.ttft_s_p50, s.ttft_s_p90, s.ttft_s_p99],
            },
            key=f"{key}_percentiles", hide_index=True,
            column_config={
                "interactivity (tok/s/user)": st.column_config.NumberColumn(format="%.1f"),
                "TTFT (s)": st.column_config.NumberColumn(format="%.2f"),
            },
        )  # fmt: skip
    with right:
        st.subheader("Prefix-cache hits")
        cols = st.columns(3)
        cols[0].metric("GPU hit rate", controls.fmt(s.gpu_hit_rate, ".1%"))
        cols[1].metric("CPU hit rate", controls.fmt(s.cpu_hit_rate, ".1%"))
        cols[2].metric("Recomputed tokens", f"{s.recomputed_prompt_tokens:,}")
        st.caption(
            "Share of prompt tokens served from the GPU block pool and from the host tier;"
            " recomputed: tokens past a hybrid model's last recurrent checkpoint."
        )
    left, right = st.columns(2)
    with left:
        st.subheader("KV cache usage")
        st.plotly_chart(
            figures.kv_usage_figure(result.kv_usage, scenario.warmup_s / 60),
            key=f"{key}_kv_usage",
        )
    with right:
        st.subheader("Step time breakdown")
        st.plotly_chart(figures.step_figure(result.step_ms), key=f"{key}_steps")
    m = result.memory
    st.caption(
        f"{s.requests_finished:,} requests measured ({s.requests_rejected:,} rejected),"
        f" {s.preemptions:,} preemptions, {s.steps:,} engine steps"
        f" (mean {controls.fmt(s.mean_step_s and s.mean_step_s * 1e3, ',.1f', 'ms')});"
        f" KV pool {m.kv_cache_bytes_per_gpu / 2**30:,.1f} GiB per GPU, {m.num_blocks:,} blocks"
        f" of {m.block_size_tokens} tokens; simulated in {result.wall_s:,.1f} s."
        f" {controls.caveat([scenario.device])}"
    )
    st.subheader("Export")
    export.scenario_export(scenario, key)


previous = kept_result(SHOWN, "The last scenario that ran", show, f"{PAGE}_previous")

with inline_errors(SOURCE, previous):
    page()
