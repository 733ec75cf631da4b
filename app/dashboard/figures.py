"""Plotly figures of the pages. Frontier and tokens-per-dollar figures come from the search
report (``simulator.planner.report``); the ones below draw what only the dashboard shows."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

from simulator.memory import MemoryReport
from simulator.planner.report import html_report
from simulator.planner.space import SearchSpace

GIB = float(1 << 30)

# memory bar segments, bottom to top, and their colours
SEGMENTS = {
    "weights": "#4c78a8",
    "activations + runtime reserve": "#9ecae9",
    "KV cache of the sessions": "#f58518",
    "recurrent state pages": "#e45756",
    "free (headroom, pool remainder)": "#d9d9d9",
}


def memory_segments(r: MemoryReport) -> dict[str, float]:
    """Bytes per GPU of each segment with the block pool holding ``max_seqs_at_context``
    sessions; the segments add up to the GPU's usable memory."""
    sessions = r.max_seqs_at_context
    state = sessions * r.state_pool_bytes_per_seq_per_gpu
    kv = sessions * r.blocks_per_seq * r.bytes_per_block - state
    reserves = r.activation_reserve_bytes_per_gpu + r.runtime_reserve_bytes_per_gpu
    free = r.usable_memory_bytes - r.weight_bytes_per_gpu - reserves - kv - state
    values = (r.weight_bytes_per_gpu, reserves, kv, state, max(free, 0.0))
    return dict(zip(SEGMENTS, values, strict=True))


def memory_figure(reports: list[MemoryReport]) -> go.Figure:
    """Stacked GiB per GPU for each device, with the gpu_memory_utilization budget marked."""
    labels = [f"{r.device} dcp{r.dcp}" if r.dcp > 1 else r.device for r in reports]
    fig = go.Figure()
    segments = [memory_segments(r) for r in reports]
    for name, colour in SEGMENTS.items():
        fig.add_trace(
            go.Bar(
                x=labels, y=[s[name] / GIB for s in segments], name=name, marker_color=colour,
                hovertemplate="%{x}: %{y:,.1f} GiB<extra>" + name + "</extra>",
            )
        )  # fmt: skip
    fig.add_trace(
        go.Scatter(
            x=labels, y=[r.budget_bytes_per_gpu / GIB for r in reports], mode="markers",
            marker={"symbol": "line-ew-open", "size": 40, "color": "black"},
            name="budget (gpu_memory_utilization)",
            hovertemplate="%{x}: budget %{y:,.1f} GiB<extra></extra>",
        )
    )  # fmt: skip
    for label, r, seg in zip(labels, reports, segments, strict=True):
        fits = r.fits and r.max_seqs_at_context > 0
        fig.add_annotation(
            x=label, y=max(r.usable_memory_bytes, sum(seg.values())) / GIB, yshift=12,
            showarrow=False, font={"color": "black" if fits else "#c0392b"},
            text=f"{r.max_seqs_at_context:,} sessions" if fits else "does not fit",
        )  # fmt: skip
    fig.update_layout(
        barmode="stack", yaxis_title="GiB per GPU", height=460,
        legend={"orientation": "h", "y": -0.15}, margin={"t": 30},
    )  # fmt: skip
    return fig


def kv_usage_figure(kv: pd.DataFrame, warmup_min: float) -> go.Figure:
    fig = go.Figure()
    for replica, g in kv.groupby("replica"):
        fig.add_trace(
            go.Scatter(
                x=g.minute, y=g.kv_used, mode="lines", name=f"replica {replica}",
                hovertemplate="%{x:.1f} min: %{y:.0%} of the pool<extra></extra>",
            )
        )  # fmt: skip
    if warmup_min > 0:
        fig.add_vrect(
            x0=0, x1=warmup_min, fillcolor="grey", opacity=0.15, line_width=0,
            annotation_text="warm-up (not measured)", annotation_position="top left",
        )  # fmt: skip
    fig.update_layout(
        xaxis_title="simulated minutes", yaxis_title="KV block pool used",
        yaxis_tickformat=".0%", yaxis_range=[0, 1.05], height=340, margin={"t": 30},
        showlegend=kv.replica.nunique() > 1,
    )  # fmt: skip
    return fig


def step_figure(step_ms: pd.DataFrame) -> go.Figure:
    shown = step_ms[step_ms.ms > 0]
    fig = go.Figure(
        go.Bar(
            x=shown.ms, y=shown.component, orientation="h",
            text=[f"{v:,.1f} ms" for v in shown.ms], textposition="auto",
            hovertemplate="%{y}: %{x:,.2f} ms per step<extra></extra>",
        )
    )  # fmt: skip
    fig.update_layout(
        xaxis_title="mean ms per engine step (measured window)", height=340,
        yaxis={"categoryorder": "total ascending"}, margin={"t": 30},
    )  # fmt: skip
    return fig


def search_figures(space: SearchSpace, runs: pd.DataFrame, best: pd.DataFrame) -> list[Any]:
    """The search report's figures: the frontier per device, and tokens per dollar at each
    device's best SLO-meeting configuration when one exists."""
    empty = pd.DataFrame()
    _, figures = html_report(space, runs, best, empty, empty)
    return figures
