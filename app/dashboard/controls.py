"""Widgets and formats the pages share."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import streamlit as st
from streamlit.elements.lib.column_types import ColumnConfig

from simulator import catalog
from simulator.planner.answer import sources_caveat

DEFAULT_MODEL = "kimi-k3"


def offload_label(gib: float) -> str:
    if not gib:
        return "off"
    return f"{gib / 1024:g} TiB" if gib >= 1024 else f"{gib:g} GiB"


def model_select(key: str) -> str:
    names = catalog.model_names()
    index = names.index(DEFAULT_MODEL) if DEFAULT_MODEL in names else 0
    return str(st.selectbox("Model", names, index=index, key=key))


def fmt(value: float | None, spec: str, unit: str = "") -> str:
    """A number for a metric tile; None (no data in the window) as a dash."""
    if value is None or value != value:
        return "-"
    return format(value, spec) + (f" {unit}" if unit else "")


def tokens(value: float | None) -> str:
    """A token count for a tile: 8.61 M, 437 k."""
    if value is None or value != value:
        return "-"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            v = value / scale
            return (
                f"{v:.2f} {suffix}"
                if v < 10
                else f"{v:.1f} {suffix}"
                if v < 100
                else f"{v:.0f} {suffix}"
            )
    return f"{value:,.0f}"


def caveat(devices: Sequence[str]) -> str:
    """Where each device's op latencies come from, and its known error band (the report's
    own sentence)."""
    return sources_caveat(list(devices))


# st.dataframe column formats by column name (what plan search writes, and the pages' tables)
_PERCENT = ("prefix_hit_rate", "gpu_hit_rate", "cpu_hit_rate", "kv_headroom", "throughput_change")
_DECIMALS = {
    "interactivity_p50": "%.1f", "interactivity_p90": "%.1f", "ttft_p50_s": "%.2f",
    "ttft_p90_s": "%.2f", "usd_per_mtok": "%.3f", "usd_per_gpu_hour": "%.2f",
    "kv_cache_gib_per_gpu": "%.1f", "requests_per_s": "%.2f", "wall_s": "%.1f",
}  # fmt: skip


def column_config(df: pd.DataFrame) -> dict[str, ColumnConfig]:
    config: dict[str, ColumnConfig] = {}
    for col in map(str, df.columns):
        if col in _PERCENT:
            config[col] = st.column_config.NumberColumn(format="percent")
        elif col in _DECIMALS:
            config[col] = st.column_config.NumberColumn(format=_DECIMALS[col])
        elif col == "cpu_offload_bytes":
            config[col] = st.column_config.NumberColumn("cpu_offload_GiB", format="%.0f")
        elif pd.api.types.is_float_dtype(df[col]):
            config[col] = st.column_config.NumberColumn(format="localized")
    return config


# what a reader looks for first in a table of runs (the rest follows in its own order)
LEADING = [
    "device", "config_id", "concurrency", "throughput_tok_per_s_per_gpu", "interactivity_p90",
    "ttft_p90_s", "slo_met", "tokens_per_usd", "usd_per_mtok", "prefix_hit_rate", "kv_headroom",
    "gpus", "nodes",
]  # fmt: skip


def table(df: pd.DataFrame, key: str) -> None:
    shown = df.copy()
    if "cpu_offload_bytes" in shown:
        shown["cpu_offload_bytes"] = shown["cpu_offload_bytes"] / 2**30
    for col in shown.columns:  # large numbers (tok/s, tokens per USD) without decimals
        large = pd.api.types.is_float_dtype(shown[col]) and shown[col].abs().max() >= 100
        if large and col not in _DECIMALS:
            shown[col] = shown[col].round(0)
    columns = [str(c) for c in shown.columns]
    order = [c for c in LEADING if c in columns] + [c for c in columns if c not in LEADING]
    st.dataframe(
        shown, key=key, hide_index=True, column_order=order, column_config=column_config(shown)
    )
