"""Memory: a model on devices under a parallelism; weights, reserves, KV cache, state and
what is free per GPU, the sessions that fit at a context length, and what it fits on."""

from __future__ import annotations

import pandas as pd
import streamlit as st
from dashboard import choices, controls, figures
from dashboard.errors import inline_errors, kept_result, one_line

from simulator import catalog
from simulator.cli.memory import serving_from
from simulator.memory import MemoryReport, plan_memory
from simulator.specs import SpecError

PAGE = "memory"
SOURCE = "memory"
KV_DTYPES = ["auto", "bf16", "fp8", "fp8_ds_mla", "nvfp4_ds_mla"]
DEFAULT_DEVICES = ["mi355x", "b300", "gb300", "h200"]
GIB = float(1 << 30)
SHOWN = f"{PAGE}_shown"  # session state: (description, reports) last drawn


def page() -> None:
    st.title("Memory")
    names = catalog.device_names()
    with st.sidebar:
        st.subheader("Model and deployment")
        model = controls.model_select(f"{PAGE}_model")
        devices = st.multiselect(
            "Devices", names, default=[d for d in DEFAULT_DEVICES if d in names],
            key=f"{PAGE}_devices",
        )  # fmt: skip
        # TP: what the model's heads allow (a device whose scale-up domain is smaller gets its
        # own line below); DCP: the divisors of TP that its KV heads allow
        tp_options = list(choices.model_tp_sizes(model)) or [1]
        choices.keep_valid(f"{PAGE}_tp", tp_options, 8)
        left, right = st.columns(2)
        tp = int(left.selectbox("TP", tp_options, key=f"{PAGE}_tp"))
        dcp_options = list(choices.dcp_sizes(model, tp))
        choices.keep_valid(f"{PAGE}_dcp", dcp_options, 1)
        dcp = int(right.selectbox("DCP", dcp_options, key=f"{PAGE}_dcp"))
        kv_options = list(choices.kv_dtypes(model, tuple(KV_DTYPES)))
        if st.session_state.get(f"{PAGE}_kv_dtype", "auto") not in kv_options:
            st.session_state[f"{PAGE}_kv_dtype"] = kv_options[0]
        kv_dtype = st.selectbox(
            "KV cache dtype", kv_options, key=f"{PAGE}_kv_dtype",
            help=f"The dtypes {model} takes (the *_ds_mla ones need MLA layers)",
        )  # fmt: skip
        utilization = st.slider(
            "gpu_memory_utilization", min_value=0.5, max_value=1.0, value=0.92, step=0.01,
            key=f"{PAGE}_gpu_memory_utilization",
        )  # fmt: skip
        st.subheader("Sessions")
        context = st.number_input(
            "Context per session (tokens)", min_value=1, max_value=10_000_000, value=142_000,
            step=1000, key=f"{PAGE}_context",
        )  # fmt: skip
        num_seqs = st.number_input(
            "Sessions that must fit (per replica)", min_value=1, max_value=100_000, value=1,
            key=f"{PAGE}_num_seqs",
        )  # fmt: skip
    if not devices:
        st.info("Pick at least one device in the sidebar.")
        return
    card = catalog.model_card(model)
    try:
        serving, _ = serving_from(
            None, tp=tp, dcp=dcp, kv_cache_dtype=kv_dtype, gpu_memory_utilization=utilization
        )
    except SpecError as exc:
        raise SpecError(SOURCE, exc.field, exc.reason) from None
    everything = [catalog.hardware_profile(n) for n in names]
    reports: list[MemoryReport] = []
    for name in devices:
        try:
            reports.append(
                plan_memory(
                    card, catalog.hardware_profile(name), serving, int(context), int(num_seqs),
                    everything,
                )
            )  # fmt: skip
        except SpecError as exc:
            st.error(one_line(SpecError(f"{SOURCE} ({name})", exc.field, exc.reason), SOURCE))
    if not reports:
        previous()
        return
    described = (
        f"**{card.name}** at TP{tp} DCP{dcp}, KV cache {kv_dtype}, sessions of"
        f" {int(context):,} tokens. Memory per GPU; sessions per replica of {tp} GPUs."
    )
    st.session_state[SHOWN] = (described, reports)
    show(described, reports, PAGE)


def show(described: str, reports: list[MemoryReport], key: str) -> None:
    """The memory plan of ``reports``; ``key`` prefixes the element keys."""
    st.markdown(described)
    columns = st.columns(len(reports) + 1)
    for col, r in zip(columns, reports, strict=False):
        col.metric(
            f"{r.device} sessions", f"{r.max_seqs_at_context:,}" if r.fits else "0",
            help=f"{r.max_seqs_at_context_per_gpu:,.1f} per GPU; {r.fits_reason}",
        )  # fmt: skip
    columns[-1].metric(
        "Fits on (model alone)", reports[0].fits_on,
        help="The smallest device that holds the weights and reserves on one GPU, else how"
        " many of the largest device it takes under TP",
    )  # fmt: skip
    for r in reports:
        if not r.fits:
            st.warning(f"{r.device}: {r.fits_reason}.")
    st.plotly_chart(figures.memory_figure(reports), key=f"{key}_bars")
    st.dataframe(
        pd.DataFrame([row(r) for r in reports]), key=f"{key}_table", hide_index=True,
        column_config={
            c: st.column_config.NumberColumn(format="%.2f")
            for c in ("weights GiB", "KV+state GiB", "KV/seq GiB", "free GiB")
        },
    )  # fmt: skip
    with st.expander(f"Weights per GPU on {reports[0].device}, by module group"):
        st.dataframe(
            pd.DataFrame(
                {
                    "module group": g.group, "precision": g.precision,
                    "params (B)": g.params_per_gpu / 1e9, "GiB": g.bytes_per_gpu / GIB,
                    "placement": g.placement,
                }
                for g in reports[0].weight_groups
            ),
            key=f"{key}_weights", hide_index=True,
        )  # fmt: skip
    st.caption(
        "Counted as vLLM lays memory out (README, 'How the memory planner counts'); the"
        " activation reserve is an estimate and the 1.5 GiB runtime reserve an assumption."
    )


def row(r: MemoryReport) -> dict[str, object]:
    free = figures.memory_segments(r)["free (headroom, pool remainder)"]
    return {
        "device": r.device,
        "fits": "yes" if r.fits else "NO",
        "weights GiB": r.weight_bytes_per_gpu / GIB,
        "KV+state GiB": max(r.kv_cache_bytes_per_gpu, 0.0) / GIB,
        "free GiB": free / GIB,
        "KV B/token": round(r.kv_bytes_per_token_per_gpu),
        "KV/seq GiB": r.kv_bytes_per_seq_per_gpu / GIB,
        "state/seq MiB": round(r.state_bytes_per_seq_per_gpu / 2**20, 1),
        "state pages MiB": round(r.state_pool_bytes_per_seq_per_gpu / 2**20, 1),
        "block tokens": r.block_size_tokens,
        "sessions": r.max_seqs_at_context,
        "sessions/GPU": round(r.max_seqs_at_context_per_gpu, 1),
        f"max context for {r.num_seqs}": r.max_context_for_num_seqs,
        "max_num_seqs": r.max_num_seqs,
    }


previous = kept_result(SHOWN, "The last plan shown", show, f"{PAGE}_previous")

with inline_errors(SOURCE, previous):
    page()
