"""The capacity report's figures (plotly): the frontier of every device on one plane, and
what each device's best configuration costs.

Frontier: P90 interactivity (x) against throughput per GPU (y), one colour per device (one
legend entry each): its Pareto envelope (``compare.frontier``) as a line with the seeds' 95 %
interval on every point, the model's error band shaded around it, every run as a faint
marker (diamonds: disaggregated), the chosen operating point as a star with its label, the
SLO as a vertical line. With both aggregated and disaggregated configurations, each side's
envelope is drawn thin (dotted: disaggregated). Cost: the fleet's USD per hour for the demand
(lowest first), else tokens per USD, with the model's error band and the seeds' interval.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

from simulator.planner.analysis import rank_basis
from simulator.planner.compare import frontier
from simulator.planner.space import SearchSpace
from simulator.planner.uncertainty import model_error
from simulator.planner.verdicts import config_label

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

# D3's ten categorical colours, then Dark24's: one per device, in the space's order
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#2e91e5", "#e15f99", "#1ca71c", "#fb0d0d", "#da16ff", "#222a2a",
    "#b68100", "#750d86", "#eb663b", "#511cfb", "#00a08b", "#fb00d1", "#fc0080", "#b2828d",
)  # fmt: skip


def device_colours(devices: list[str]) -> dict[str, str]:
    """A colour per device, the same in every figure of a report."""
    return {d: PALETTE[i % len(PALETTE)] for i, d in enumerate(dict.fromkeys(devices))}


def _rgba(colour: str, alpha: float) -> str:
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _whiskers(df: pd.DataFrame, column: str) -> dict[str, Any] | None:
    """Plotly error bars from ``<column>_ci_low`` / ``_ci_high`` (None without them)."""
    lo, hi = f"{column}_ci_low", f"{column}_ci_high"
    if lo not in df.columns or hi not in df.columns:
        return None
    return {
        "type": "data", "symmetric": False, "thickness": 1, "width": 3,
        "array": (df[hi] - df[column]).clip(lower=0).fillna(0).tolist(),
        "arrayminus": (df[column] - df[lo]).clip(lower=0).fillna(0).tolist(),
    }  # fmt: skip


def _hover_data(df: pd.DataFrame) -> list[list[Any]]:
    met = df.slo_met if "slo_met" in df.columns else [None] * len(df)
    return [
        [config_label(r), int(r.concurrency), "meets the SLO" if ok else "misses the SLO"]
        for (_, r), ok in zip(df.iterrows(), met, strict=True)
    ]


# where each device's operating-point label goes (cycled: labels of close points apart)
LABEL_POSITIONS = ("top left", "bottom right", "top right", "bottom left", "top center")
HOVER = (
    "%{customdata[0]}<br>%{customdata[1]} users per deployment (%{customdata[2]})<br>"
    "%{x:,.1f} tok/s/user, %{y:,.0f} tok/s/GPU"
)


def frontier_figure(space: SearchSpace, runs: pd.DataFrame, best: pd.DataFrame) -> go.Figure:
    """Every device's frontier on one plane (see the module's docstring)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    ran = set(runs.device) if "device" in runs.columns else set()  # none: all pruned
    colours = device_colours(space.devices)
    x_col, y_col = "interactivity_p90", "throughput_tok_per_s_per_gpu"
    ranked = list(best.device) if not best.empty else []
    order = [d for d in ranked if d in ran] + [
        d for d in space.devices if d in ran and d not in ranked
    ]
    for i, device in enumerate(order):
        mine = runs[runs.device == device]
        colour = colours[device]
        error = model_error(device).median_ape_pct
        split = mine["mode"] == "disaggregated" if "mode" in mine else mine[x_col].isna()
        fig.add_trace(
            go.Scatter(
                x=mine[x_col], y=mine[y_col], mode="markers", name=f"{device} runs",
                legendgroup=device, showlegend=False, customdata=_hover_data(mine),
                hovertemplate=HOVER + f"<extra>{device} run</extra>",
                marker={"color": colour, "opacity": 0.3, "size": 7,
                        "symbol": ["diamond" if s else "circle" for s in split]},
            )
        )  # fmt: skip
        env = frontier(mine)
        if env.empty:
            continue
        # the model's error band around the envelope: the throughput it may really be
        for side, factor in (("low", 1 - error / 100), ("high", 1 + error / 100)):
            fig.add_trace(
                go.Scatter(
                    x=env[x_col], y=env[y_col] * factor, mode="lines", line={"width": 0},
                    name=f"{device} model error band ({error:.0f} %)", legendgroup=device,
                    showlegend=False, hoverinfo="skip",
                    fill="tonexty" if side == "high" else None,
                    fillcolor=_rgba(colour, 0.12),
                )
            )  # fmt: skip
        fig.add_trace(
            go.Scatter(
                x=env[x_col], y=env[y_col], mode="lines+markers", name=device,
                legendgroup=device, showlegend=True, legendrank=i + 1,
                customdata=_hover_data(env),
                hovertemplate=HOVER + f"<extra>{device} frontier</extra>",
                line={"color": colour, "width": 2.5}, marker={"color": colour, "size": 6},
                error_x=_whiskers(env, x_col), error_y=_whiskers(env, y_col),
            )
        )  # fmt: skip
        if "mode" in mine and mine["mode"].nunique() > 1:
            # the envelope of each side: the aggregated vs the disaggregated frontier
            for mode, g in mine.groupby("mode"):
                side_env = frontier(g)
                fig.add_trace(
                    go.Scatter(
                        x=side_env[x_col], y=side_env[y_col], mode="lines",
                        name=f"{device} {mode} frontier", legendgroup=device, showlegend=False,
                        line={"color": colour, "width": 1.2,
                              "dash": "dot" if mode == "disaggregated" else "solid"},
                        hoverinfo="skip",
                    )
                )  # fmt: skip
        chosen = best[best.device == device] if not best.empty else best
        if not chosen.empty:
            b = chosen.iloc[0]
            rank = f"#{int(b['rank'])} " if "rank" in chosen.columns else ""
            fig.add_trace(
                go.Scatter(
                    x=[b[x_col]], y=[b[y_col]], mode="markers+text",
                    name=f"{device} operating point", legendgroup=device, showlegend=False,
                    text=[f"{rank}{device}: {config_label(b)}, {int(b.concurrency)} users"],
                    textposition=LABEL_POSITIONS[i % len(LABEL_POSITIONS)],
                    textfont={"color": colour, "size": 12},
                    marker={"symbol": "star", "size": 18, "color": colour,
                            "line": {"color": "black", "width": 1}},
                    customdata=_hover_data(chosen.iloc[:1]),
                    hovertemplate=HOVER + f"<extra>{device} operating point</extra>",
                )
            )  # fmt: skip
    target = space.slo.interactivity_tok_per_s_p90
    if target:
        fig.add_vline(
            x=target, line_dash="dash", line_color="#444",
            annotation_text=f"SLO {target:g} tok/s/user", annotation_position="bottom right",
        )  # fmt: skip
    ttft = (
        f"; the P90 TTFT SLO ({space.slo.ttft_s_p90:g} s) is not drawn"
        if space.slo.ttft_s_p90
        else ""
    )
    fig.update_layout(
        title=(
            f"Throughput per GPU vs P90 interactivity: {space.model}, {space.workload.kind}"
            " workload<br><sup>lines: each device's Pareto envelope with the seeds' 95 %"
            " interval; shaded: the model's error band; faint: every run (diamonds:"
            f" disaggregated); star: the chosen operating point{ttft}<br>{_bands(space)}</sup>"
        ),
        xaxis_title="P90 interactivity (tok/s/user)", yaxis_title="total tokens/s per GPU",
        legend_title_text="device", height=600, title_font_size=14, margin={"t": 110},
        hovermode="closest",
    )  # fmt: skip
    return fig


def cost_figure(space: SearchSpace, best: pd.DataFrame) -> go.Figure | None:
    """The best configuration of each device, in rank order: the fleet's USD per hour for the
    demand, else tokens per USD; whiskers: the model's error band, ticks: the seeds' 95 %
    interval. None where no device has a price (or none meets the SLO)."""
    import plotly.graph_objects as go

    if best.empty or "tokens_per_usd" not in best or not best.tokens_per_usd.notna().any():
        return None
    basis = rank_basis(space, best)
    shown = best[best[basis].notna()]
    colours = device_colours(space.devices)
    names = [
        f"#{int(r['rank'])} {r.device}" if "rank" in shown.columns else str(r.device)
        for _, r in shown.iterrows()
    ]
    value = shown[basis]
    errors = [model_error(d).median_ape_pct / 100 for d in shown.device]
    if basis == "fleet_usd_per_hour":
        band = {
            "array": (shown.fleet_usd_per_hour_band_high - value).clip(lower=0).tolist(),
            "arrayminus": (value - shown.fleet_usd_per_hour_band_low).clip(lower=0).tolist(),
        }
        text = [f"{int(u):,} {unit}s" for u, unit in zip(shown.units, shown.unit, strict=True)]
        interval = _whiskers(shown, "fleet_usd_per_hour")
        demand = (
            f"{space.demand_users:,} users"
            if space.demand_users
            else f"{space.demand_requests_per_s:g} requests/s"
        )
        title = f"Fleet USD per hour for {demand} at each device's best configuration"
        axis = "USD per hour (the GPUs bought)"
    else:
        band = {
            "array": [v * e for v, e in zip(value, errors, strict=True)],
            "arrayminus": [v * e for v, e in zip(value, errors, strict=True)],
        }
        text = [config_label(r) for _, r in shown.iterrows()]
        interval = _whiskers(shown, "tokens_per_usd")
        title = "Tokens per USD at each device's best SLO-meeting configuration"
        axis = "tokens per USD"
    fig = go.Figure(
        go.Bar(
            x=names, y=value, text=text, marker_color=[colours[d] for d in shown.device],
            textposition="inside", insidetextanchor="middle",
            error_y={"type": "data", "symmetric": False, "color": "#888", "width": 10, **band},
            name="model error band", showlegend=False,
            hovertemplate="%{x}: %{y:,.4g} (%{text})<extra></extra>",
        )
    )  # fmt: skip
    if interval is not None:
        fig.add_trace(
            go.Scatter(
                x=names, y=value, mode="markers", marker={"color": "black", "size": 4},
                error_y={**interval, "color": "black", "thickness": 2, "width": 4},
                name="95 % interval over the seeds", showlegend=False, hoverinfo="skip",
            )
        )  # fmt: skip
    fig.update_layout(
        title=(
            f"{title} ({space.cost_model})<br><sup>grey whiskers: the model's error band;"
            f" black: the seeds' 95 % interval<br>{_bands(space)}</sup>"
        ),
        yaxis_title=axis, height=460, title_font_size=14, margin={"t": 100},
    )  # fmt: skip
    return fig


def _bands(space: SearchSpace) -> str:
    """The model's error band of each device, for a figure's subtitle."""
    bands = ", ".join(f"{d} ±{model_error(d).median_ape_pct:.0f} %" for d in space.devices)
    return "<br>".join(textwrap.wrap(f"model error band (throughput): {bands}", 160))
