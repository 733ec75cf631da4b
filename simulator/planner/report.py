"""The capacity report: one self-contained HTML file (plotly inlined: opens offline), a
Markdown summary and CSVs of every run, pruned configuration and sensitivity row.

When the search includes prefill/decode splits, the report adds per device the aggregated
and the disaggregated frontier (dashed: xPyD configurations; the envelopes of both sides drawn
thick) and a table of the best of each side with the best split (``modes.csv``).
"""

from __future__ import annotations

import datetime as dt
import html
import math
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simulator import catalog
from simulator.planner.analysis import frontier, mode_comparison
from simulator.planner.space import SearchSpace
from simulator.specs.scenario import DEFAULT_LINK_BW_BYTES_PER_S, DEFAULT_LINK_LATENCY_S

if TYPE_CHECKING:
    import pandas as pd


def sources_caveat(devices: list[str]) -> str:
    """Where each device's op latencies come from and its known end-to-end error band."""
    from simulator.measured.device import tables_for
    from simulator.measured.package import tables_available, unavailable_note
    from simulator.planner.uncertainty import model_error

    parts = []
    for d in devices:
        profile = catalog.hardware_profile(d)
        if profile.calibrated:
            source = "calibrated on the device"
        else:
            tables = tables_for(profile) if tables_available() else None
            source = tables.basis if tables is not None else "roofline priors"
        err = model_error(d)
        parts.append(f"{d}: {source}; error band {err.median_ape_pct:.0f} % ({err.basis})")
    text = "Op latencies and known error per device: " + "; ".join(parts) + "."
    if not tables_available():
        text += " " + unavailable_note() + "."
    return text + " Intervals are 95 % over the seeds (Student t of the mean)."


def _fmt(x: object, spec: str = ",.0f") -> str:
    if x is None or (isinstance(x, float) and x != x):
        return "-"
    if isinstance(x, float | int):
        return format(x, spec)
    return str(x)


BEST_COLUMNS = [
    ("device", None), ("config_id", None), ("concurrency", ",d"),
    ("throughput_tok_per_s_per_gpu", ",.0f"), ("interactivity_p90", ",.1f"),
    ("ttft_p90_s", ",.2f"), ("tokens_per_usd", ",.0f"), ("usd_per_mtok", ",.3f"),
    ("usd_per_m_output_tok", ",.2f"), ("prefix_hit_rate", ".0%"), ("kv_headroom", ".0%"),
    ("gpus", ",d"), ("nodes", ",d"), ("usd_per_hour", ",.0f"), ("usd_per_month", ",.0f"),
    ("usd_per_user_hour", ",.3f"), ("model_error_pct", ".0f"),
]  # fmt: skip
# columns shown with their replicate interval: value [low, high]
WITH_INTERVAL = ("throughput_tok_per_s_per_gpu", "interactivity_p90", "ttft_p90_s",
                 "tokens_per_usd")  # fmt: skip


def _cell(row: Any, column: str, spec: str) -> str:
    text = _fmt(row[column], spec)
    if column in WITH_INTERVAL and f"{column}_ci_low" in row and text != "-":
        lo, hi = row[f"{column}_ci_low"], row[f"{column}_ci_high"]
        if lo is not None and hi is not None and lo == lo and hi != lo:
            text += f" [{_fmt(lo, spec)}, {_fmt(hi, spec)}]"
    if column == "nodes" and "nodes_band_low" in row and text != "-":
        text += f" ({_fmt(row['nodes_band_low'], ',d')}-{_fmt(row['nodes_band_high'], ',d')})"
    return text


# a disaggregated deployment's link, as the report states it
LINK_ASSUMPTION = (
    f"KV moves between prefill and decode replicas over one NIC per GPU, by default"
    f" {DEFAULT_LINK_BW_BYTES_PER_S / 1e9:g} GB/s per direction (assumption: one 400 Gb/s NIC"
    f" per GPU; no hardware profile has a scale-out field) and {DEFAULT_LINK_LATENCY_S * 1e6:g}"
    " us per transfer (assumption); each TP rank moves its own shard, one transfer at a time"
    " per NIC direction"
)


def mode_lines(modes: pd.DataFrame) -> list[str]:
    """Markdown: aggregated vs disaggregated per device, and the best split."""
    if modes.empty:
        return []
    key = str(modes.key.iloc[0])
    unit = "tokens per USD" if key == "tokens_per_usd" else "tok/s/GPU"
    lines = [
        "",
        "## Aggregated or disaggregated (best SLO-meeting configuration of each)",
        "",
        f"| device | aggregated | {unit} | disaggregated | {unit} | best split | winner |",
        "|---|---|---|---|---|---|---|",
    ]
    for _, m in modes.iterrows():
        change = m.disaggregated_vs_aggregated
        winner = str(m.winner)
        if change is not None and change == change:
            winner += f" ({change:+.0%} for disaggregated)"
        lines.append(
            f"| {m.device} | {_fmt(m.aggregated_config)} | {_fmt(m.aggregated_value)}"
            f" | {_fmt(m.disaggregated_config)} | {_fmt(m.disaggregated_value)}"
            f" | {_fmt(m.get('best_split'))} | {winner} |"
        )
    lines += ["", LINK_ASSUMPTION + "."]
    return lines


def markdown(space: SearchSpace, best: pd.DataFrame, runs: pd.DataFrame, n_pruned: int) -> str:
    slo = space.slo
    lines = [
        f"# Capacity report: {space.name}",
        "",
        f"Model {space.model}; devices {', '.join(space.devices)}; SLO: P90 interactivity >= "
        f"{_fmt(slo.interactivity_tok_per_s_p90, 'g')} tok/s/user"
        + (f", P90 TTFT <= {slo.ttft_s_p90:g} s" if slo.ttft_s_p90 else "")
        + f"; cost model {space.cost_model}"
        + (f"; demand {space.demand_users:,} concurrent users" if space.demand_users else "")
        + (
            f"; demand {space.demand_requests_per_s:g} requests/s"
            if space.demand_requests_per_s
            else ""
        )
        + f". {len(runs)} runs, {n_pruned} configurations pruned."
        f" Generated {dt.date.today().isoformat()}.",
        "",
        sources_caveat(space.devices),
        "",
        "## Best configuration per device (meeting the SLO)",
        "",
    ]
    cols = [(c, f) for c, f in BEST_COLUMNS if c in best.columns]
    if best.empty:
        lines.append("No configuration meets the SLO.")
    else:
        lines.append("| " + " | ".join(c for c, _ in cols) + " |")
        lines.append("|" + "---|" * len(cols))
        for _, row in best.iterrows():
            lines.append("| " + " | ".join(_cell(row, c, f or "") for c, f in cols) + " |")
        lines += [
            "",
            "Values are means over the seeds, [95 % interval]; nodes (range if the simulator is"
            " off by the device's error band, model_error_pct). The SLO holds on every seed.",
        ]
    missing = sorted(set(space.devices) - set(best.device if not best.empty else []))
    if missing:
        lines += ["", f"No configuration of {', '.join(missing)} meets the SLO (or fits)."]
    lines += mode_lines(mode_comparison(runs))
    return "\n".join(lines) + "\n"


def html_report(
    space: SearchSpace,
    runs: pd.DataFrame,
    best: pd.DataFrame,
    sens: pd.DataFrame,
    pruned: pd.DataFrame,
) -> tuple[str, list[Any]]:
    """The page, and its figures (for PNG export)."""
    import plotly.graph_objects as go
    import plotly.io as pio
    from plotly.subplots import make_subplots

    caveat = "<br>".join(textwrap.wrap(sources_caveat(space.devices), 150))
    figs = []
    ran = set(runs.device) if "device" in runs.columns else set()  # none: all pruned
    devices = [d for d in space.devices if d in ran]
    cols = min(2, max(len(devices), 1))
    rows = max(1, math.ceil(len(devices) / cols))
    figure = make_subplots(
        rows=rows, cols=cols, subplot_titles=devices, shared_yaxes=True,
        horizontal_spacing=0.06, vertical_spacing=0.12,
    )  # fmt: skip
    for i, device in enumerate(devices):
        row, col = i // cols + 1, i % cols + 1
        mine = runs[runs.device == device]
        # one curve per configuration, its points in concurrency order (as InferenceX plots);
        # disaggregated (xPyD) configurations dashed
        for cid, g in mine.sort_values("concurrency").groupby("config_id", sort=False):
            split = "mode" in g and g["mode"].iloc[0] == "disaggregated"
            figure.add_trace(
                go.Scatter(
                    x=g.interactivity_p90, y=g.throughput_tok_per_s_per_gpu,
                    mode="lines+markers", name=str(cid),
                    line={"dash": "dash" if split else "solid"},
                    text=[f"{c} users" for c in g.concurrency],
                    hovertemplate="%{text}: %{x:.1f} tok/s/user, %{y:,.0f} tok/s/GPU",
                ),
                row=row, col=col,
            )  # fmt: skip
        if "mode" in mine and mine["mode"].nunique() > 1:
            # the envelope of each side: the aggregated vs the disaggregated frontier
            for mode, g in mine.groupby("mode"):
                env = frontier(g)
                figure.add_trace(
                    go.Scatter(
                        x=env.interactivity_p90, y=env.throughput_tok_per_s_per_gpu,
                        mode="lines", name=f"{device} {mode} frontier",
                        line={"width": 5, "dash": "dot" if mode == "disaggregated" else "solid"},
                        opacity=0.35, hoverinfo="skip",
                    ),
                    row=row, col=col,
                )  # fmt: skip
        if space.slo.interactivity_tok_per_s_p90:
            figure.add_vline(
                x=space.slo.interactivity_tok_per_s_p90, line_dash="dash", row=row, col=col
            )
        figure.update_xaxes(title_text="P90 interactivity (tok/s/user)", row=row, col=col)
    figure.update_yaxes(title_text="total tokens/s per GPU", col=1)
    figure.update_layout(
        title=(
            f"Throughput per GPU vs P90 interactivity: {space.model}, {space.workload.kind}"
            f" workload, SLO (dashed) {space.slo.interactivity_tok_per_s_p90 or '-'} tok/s/user"
            f"<br><sup>{caveat}</sup>"
        ),
        height=420 * rows + 120, title_font_size=14, margin={"t": 140},
    )  # fmt: skip
    figs.append(figure)
    if not best.empty and best.tokens_per_usd.notna().any():
        bars = go.Figure(go.Bar(x=best.device, y=best.tokens_per_usd, text=best.config_id))
        bars.update_layout(
            title=(
                f"Tokens per dollar at the best SLO-meeting configuration ({space.cost_model})"
                f"<br><sup>{caveat}</sup>"
            ),
            yaxis_title="tokens per USD", height=480, title_font_size=14, margin={"t": 120},
        )  # fmt: skip
        figs.append(bars)
    parts = [pio.to_html(f, full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figs)]

    def number(x: float) -> str:
        return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.2f}" if abs(x) >= 1 else f"{x:.3g}"

    def table(df: pd.DataFrame) -> str:
        return df.to_html(index=False, float_format=number, na_rep="-")

    modes = mode_comparison(runs)
    mode_part = []
    if not modes.empty:
        mode_part = [
            "<h2>Aggregated or disaggregated (best SLO-meeting configuration of each)</h2>",
            table(modes),
            f"<p><em>{html.escape(LINK_ASSUMPTION)}.</em></p>",
        ]
    body = [
        f"<h1>Capacity report: {html.escape(space.name)}</h1>",
        f"<p>{html.escape(markdown(space, best, runs, len(pruned)).splitlines()[2])}</p>",
        f"<p><em>{html.escape(sources_caveat(space.devices))}</em></p>",
        "<h2>Best configuration per device</h2>",
        table(best) if not best.empty else "<p>No configuration meets the SLO.</p>",
        *mode_part,
        *parts,
        "<h2>Sensitivity (one knob one step from each device's best)</h2>",
        table(sens) if not sens.empty else "<p>No swept knob to move.</p>",
        "<h2>Pruned configurations</h2>",
        table(pruned) if not pruned.empty else "<p>None.</p>",
        "<h2>All runs</h2>",
        table(runs),
    ]
    page = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(space.name)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;"
        "font-size:12px}td,th{border:1px solid #ccc;padding:3px 6px}</style></head><body>"
        + "\n".join(body)
        + "</body></html>"
    )
    return page, figs


def write_report(
    out: Path,
    space: SearchSpace,
    runs: pd.DataFrame,
    best: pd.DataFrame,
    sens: pd.DataFrame,
    pruned: pd.DataFrame,
) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    page, figures = html_report(space, runs, best, sens, pruned)
    files = {
        "report.html": page,
        "report.md": markdown(space, best, runs, len(pruned)),
    }
    paths = []
    for name, text in files.items():
        (out / name).write_text(text)
        paths.append(out / name)
    tables = [("runs.csv", runs), ("best.csv", best), ("sensitivity.csv", sens),
              ("pruned.csv", pruned)]  # fmt: skip
    modes = mode_comparison(runs)
    if not modes.empty:
        tables.append(("modes.csv", modes))
    for name, df in tables:
        df.to_csv(out / name, index=False)
        paths.append(out / name)
    paths += _pngs(out, figures)
    return paths


def _pngs(out: Path, figures: list[Any]) -> list[Path]:
    """Static PNGs of the figures when kaleido (plotly's image exporter) is installed."""
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return []
    paths: list[Path] = []
    for i, fig in enumerate(figures):
        path = out / f"figure_{i + 1}.png"
        try:
            fig.write_image(path, width=1200, height=700)
        except Exception:  # kaleido present but unusable (no browser): HTML still has them
            return paths
        paths.append(path)
    return paths
