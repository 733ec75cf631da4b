"""The capacity report: one self-contained HTML file (plotly inlined: opens offline), a
Markdown summary and CSVs of every run, pruned configuration and sensitivity row.

Both pages open with the answer: what to buy (units of a device, GPUs, USD per hour with the
range from the model's error band) and the runner-up, or why no device qualifies (does not
fit vs misses the SLO). Then the devices ranked (``analysis.best_per_device``) in a table of
readable columns with units; the raw columns stay in best.csv and runs.csv. The figures are
in ``report_figures``.

When the search includes prefill/decode splits, the report adds per device the aggregated
and the disaggregated frontier and a table of the best of each side with the best split
(``modes.csv``).
"""

from __future__ import annotations

import datetime as dt
import html
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simulator import catalog
from simulator.planner.analysis import (
    HOURS_PER_MONTH,
    KNOB_NAMES,
    NODE_GPUS,
    Verdict,
    config_label,
    knob_text,
    mode_comparison,
    rank_basis,
    sensitivity,
    verdicts,
)
from simulator.planner.report_figures import cost_figure, frontier_figure
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


def _missing(x: object) -> bool:
    return x is None or (isinstance(x, float) and x != x)


def _fmt(x: object, spec: str = ",.0f") -> str:
    if _missing(x):
        return "-"
    if isinstance(x, float | int):
        return format(x, spec)
    return str(x)


def usd(x: object) -> str:
    """Dollars as a buyer reads them: ``$132,101``, ``$176``, ``$1.81``, ``$0.154``."""
    if _missing(x):
        return "-"
    v = float(x)  # type: ignore[arg-type]
    return f"${v:,.0f}" if abs(v) >= 100 else f"${v:,.2f}" if abs(v) >= 1 else f"${v:.3g}"


def tokens(x: object) -> str:
    """A token count: ``6.74 M``, ``812 k``, ``950``."""
    if _missing(x):
        return "-"
    v = float(x)  # type: ignore[arg-type]
    return f"{v / 1e6:,.3g} M" if v >= 1e6 else f"{v / 1e3:,.3g} k" if v >= 1e4 else f"{v:,.0f}"


def _with_interval(row: Any, column: str, spec: str) -> str:
    """``value [low, high]`` from ``<column>_ci_low`` / ``_ci_high`` where they differ."""
    text = _fmt(row.get(column), spec)
    lo, hi = row.get(f"{column}_ci_low"), row.get(f"{column}_ci_high")
    if text != "-" and not _missing(lo) and not _missing(hi):
        low, high = format(lo, spec), format(hi, spec)
        if low != high:  # an interval narrower than the digits shown is left out
            text += f" [{low}, {high}]"
    return text


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


# a figure and its interval or band: "1,838 [1,783, 1,893]", "16 nodes (14-20)"
_SPREAD = re.compile(r"^([-+$]?[\d$][^\[(]*?) ([\[(][^\])]*[\])])$")


def _two_lines(cell: str) -> str:
    """An HTML cell: the figure, its interval or band below it in small print."""
    m = _SPREAD.match(cell)
    if m is None:
        return html.escape(cell)
    return f"{html.escape(m.group(1))}<br><span class='iv'>{html.escape(m.group(2))}</span>"


@dataclass(frozen=True)
class Table:
    """A table of text cells, written as Markdown or as HTML (in its own scrolling box)."""

    headers: list[str]
    rows: list[list[str]]

    def markdown(self) -> list[str]:
        def clean(cell: str) -> str:
            return cell.replace("|", "/")

        return [
            "| " + " | ".join(self.headers) + " |",
            "|" + "---|" * len(self.headers),
            *("| " + " | ".join(clean(c) for c in row) + " |" for row in self.rows),
        ]

    def html(self, css_class: str = "") -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self.headers)
        body = "".join(
            "<tr>" + "".join(f"<td>{_two_lines(c)}</td>" for c in row) + "</tr>"
            for row in self.rows
        )
        cls = f" class='{css_class}'" if css_class else ""
        return (
            f"<div class='box'><table{cls}><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table></div>"
        )


# ------------------------------------------------------------------------------ the answer


def _demand_text(space: SearchSpace) -> str:
    if space.demand_users:
        return f"{space.demand_users:,} concurrent users"
    return f"{space.demand_requests_per_s:g} requests/s"


def _unit_text(row: Any, count: str = "units") -> str:
    """``13 nodes of 8x H100`` / ``7 racks of 72x GB300``."""
    n = int(row[count])
    return f"{_plural(n, str(row.unit))} of {int(row.unit_gpus)}x {str(row.device).upper()}"


def _has_fleet(best: pd.DataFrame) -> bool:
    return not best.empty and "units" in best.columns and "unit" in best.columns


def slo_text(space: SearchSpace) -> str:
    slo = space.slo
    parts = []
    if slo.interactivity_tok_per_s_p90:
        parts.append(f"P90 interactivity >= {slo.interactivity_tok_per_s_p90:g} tok/s/user")
    if slo.ttft_s_p90:
        parts.append(f"P90 TTFT <= {slo.ttft_s_p90:g} s")
    return ", ".join(parts) or "no target"


# a verdict in the headline
SHORT = {"meets": "meets the SLO", "does_not_fit": "does not fit", "misses_slo": "misses the SLO",
         "no_valid_configuration": "has no valid configuration"}  # fmt: skip


def answer(
    space: SearchSpace,
    best: pd.DataFrame,
    runs: pd.DataFrame,
    pruned: pd.DataFrame | None = None,
) -> tuple[str, str]:
    """The headline and the answer sentence: what to buy and the runner-up (by the fleet's
    USD per hour for the demand, else tokens per USD), or that no device qualifies and why."""
    why = [v for v in verdicts(space, runs, best, pruned) if v.kind != "meets"]
    if best.empty:
        short = ", ".join(f"{v.device} {SHORT[v.kind]}" for v in why)
        reasons = "; ".join(f"{v.device} {v.text}" for v in why)
        return (
            f"{space.name}: no device meets the SLO ({short})",
            f"No device meets the SLO ({slo_text(space)}): {reasons}.",
        )
    basis = rank_basis(space, best)
    ranked = best[best[basis].notna()]
    top = ranked.iloc[0]
    second = ranked.iloc[1] if len(ranked) > 1 else None
    if basis == "fleet_usd_per_hour":
        headline, text = _buy(space, top, second)
    else:
        headline, text = _best_value(space, basis, top, second)
    if why:
        text += ". Not a candidate: " + "; ".join(f"{v.device} {v.text}" for v in why)
    return headline, text + "."


def _band_text(row: Any) -> str:
    return f"the model's {row.get('model_error_pct', _error(row.device)):.0f} % error band"


def _buy(space: SearchSpace, top: Any, second: Any | None) -> tuple[str, str]:
    """``Buy 13 nodes of 8x H100 (104 GPUs) at $176/hour (range ...); runner-up: ...``"""
    bought, used = int(top.gpus_bought), int(top.gpus)
    in_use = f", {used:,} in use" if used != bought else ""
    cost = usd(top.fleet_usd_per_hour)
    text = (
        f"Buy {_unit_text(top)} ({bought:,} GPUs{in_use}) at {cost}/hour (range"
        f" {usd(top.fleet_usd_per_hour_band_low)}-{usd(top.fleet_usd_per_hour_band_high)}"
        f" from {_band_text(top)}) for {_demand_text(space)}: {config_label(top)} at"
        f" {int(top.concurrency)} users per deployment ({_plural(int(top.replicas), 'deployment')}"
        f" of {int(top.gpus_per_deployment)} GPUs), P90 interactivity"
        f" {top.interactivity_p90:,.1f} tok/s/user"
    )
    if second is not None:
        more = second.fleet_usd_per_hour / top.fleet_usd_per_hour - 1
        text += (
            f"; runner-up: {_unit_text(second)} ({config_label(second)}) at"
            f" {usd(second.fleet_usd_per_hour)}/hour ({100 * more:+.1f} %)"
        )
    return f"{space.name}: buy {_unit_text(top)} at {cost}/hour", text


def _best_value(space: SearchSpace, basis: str, top: Any, second: Any | None) -> tuple[str, str]:
    """Without a fleet to price: the most tokens per USD (or per GPU) and the runner-up."""
    per_usd = basis == "tokens_per_usd"

    def shown(x: float) -> str:
        return tokens(x) if per_usd else f"{x:,.0f}"

    unit = "tokens per USD" if per_usd else "tok/s per GPU"
    e = float(top.get("model_error_pct", _error(top.device))) / 100
    name = str(top.device).upper()
    text = (
        f"Best value: {name} {config_label(top)} at {int(top.concurrency)} users per deployment:"
        f" {shown(top[basis])} {unit} (range {shown(top[basis] * (1 - e))}"
        f"-{shown(top[basis] * (1 + e))} from {_band_text(top)})"
    )
    if second is not None:
        less = second[basis] / top[basis] - 1
        text += (
            f"; runner-up: {str(second.device).upper()} {config_label(second)}"
            f" ({100 * less:+.1f} %)"
        )
    if not (space.demand_users or space.demand_requests_per_s):
        text += (
            ". No demand given (demand_users or demand_requests_per_s): set one to size the"
            " fleet and rank by its USD per hour"
        )
    elif not per_usd:
        text += f". No price for these devices in {space.cost_model}: ranked by tok/s per GPU"
    return f"{space.name}: best value {name}, {shown(top[basis])} {unit}", text


def _error(device: str) -> float:
    from simulator.planner.uncertainty import model_error

    return model_error(device).median_ape_pct


# ------------------------------------------------------------------------- the tables


def decision_table(space: SearchSpace, best: pd.DataFrame) -> Table:
    """The ranked devices in readable columns with units (the raw ones are in best.csv)."""
    fleet = _has_fleet(best)
    target = space.slo.interactivity_tok_per_s_p90
    headers = ["#", "device", "configuration", "users per deployment"]
    if fleet:
        kinds = sorted({f"{u}s" for u in best.unit})
        headers += ["GPUs bought", f"{' / '.join(kinds)} (band)", "$/hour (band)", "$/month",
                    "$/user-hour"]  # fmt: skip
    else:
        headers += ["tokens per USD [95 %]"]
    headers += ["$/M output tokens", "P90 tok/s per user [95 %]", "SLO margin (worst seed)",
                "P90 TTFT s [95 %]", "tok/s per GPU [95 %]", "model error"]  # fmt: skip
    rows = []
    for i, (_, b) in enumerate(best.iterrows()):
        row = [str(b.get("rank", i + 1)), str(b.device), config_label(b), f"{int(b.concurrency)}"]
        if fleet:
            used, bought = int(b.gpus), int(b.gpus_bought)
            per_user = (
                b.fleet_usd_per_hour / space.demand_users
                if space.demand_users and not _missing(b.fleet_usd_per_hour)
                else b.get("usd_per_user_hour")
            )
            row += [
                f"{bought:,}" + (f" ({used:,} in use)" if used != bought else ""),
                f"{_unit_text(b).split(' of ')[0]} ({int(b.units_band_low):,}"
                f"-{int(b.units_band_high):,})",
                f"{usd(b.fleet_usd_per_hour)} ({usd(b.fleet_usd_per_hour_band_low)}"
                f"-{usd(b.fleet_usd_per_hour_band_high)})",
                usd(b.fleet_usd_per_month),
                usd(per_user),
            ]
        else:
            row.append(
                f"{tokens(b.tokens_per_usd)} [{tokens(b.get('tokens_per_usd_ci_low'))},"
                f" {tokens(b.get('tokens_per_usd_ci_high'))}]"
            )
        worst = b.get("interactivity_p90_worst", b.interactivity_p90)
        margin = f"{(worst / target - 1) * 100:+,.0f} %" if target and not _missing(worst) else "-"
        error = b.get("model_error_pct", _error(b.device))
        row += [
            usd(b.get("usd_per_m_output_tok")),
            _with_interval(b, "interactivity_p90", ",.1f"),
            margin,
            _with_interval(b, "ttft_p90_s", ",.2f"),
            _with_interval(b, "throughput_tok_per_s_per_gpu", ",.0f"),
            f"±{error:.0f} %",
        ]
        rows.append(row)
    return Table(headers, rows)


def _ranked_by(space: SearchSpace, best: pd.DataFrame) -> str:
    if best.empty:
        return "meeting the SLO"
    basis = rank_basis(space, best)
    if basis == "fleet_usd_per_hour":
        return f"ranked by the fleet's USD per hour for {_demand_text(space)} (lowest first)"
    if basis == "tokens_per_usd":
        return "ranked by tokens per USD (highest first)"
    return "ranked by throughput per GPU (no price for these devices)"


def _units_note(best: pd.DataFrame) -> str:
    """Which unit each device is bought by."""
    if not _has_fleet(best):
        return ""
    by: dict[str, list[str]] = {}
    for _, b in best.iterrows():
        what = f"the {b.unit} of {int(b.unit_gpus)} GPUs"
        if b.unit == "rack":
            what += " (its scale-up domain)"
        by.setdefault(what, []).append(str(b.device))
    parts = [f"{', '.join(d)} by {what}" for what, d in by.items()]
    racks = f"; best.csv's nodes stay GPUs / {NODE_GPUS}" if (best.unit == "rack").any() else ""
    return (
        f" Fleets are bought whole: {'; '.join(parts)}{racks}."
        f" $/month = $/hour x {HOURS_PER_MONTH:g} h."
    )


def sensitivity_table(sens: pd.DataFrame) -> Table:
    """Each knob one step from a device's best, its throughput change in percent."""
    rows = []
    for _, s in sens.iterrows():
        pct = s.get("throughput_change_pct")
        if _missing(pct) and not _missing(s.get("throughput_change")):
            pct = 100 * s.throughput_change
        rows.append([
            str(s.device), KNOB_NAMES.get(str(s.knob), str(s.knob)),
            knob_text(str(s.knob), s["from"]), knob_text(str(s.knob), s["to"]),
            "-" if _missing(pct) else f"{pct:+.1f} %", str(s.note),
        ])  # fmt: skip
    return Table(["device", "knob", "from", "to", "throughput per GPU", "at that setting"], rows)


def runs_view(runs: pd.DataFrame) -> Table:
    """Every run in readable columns (runs.csv holds all of them)."""
    rows = []
    order = [c for c in ("device", "config_id", "concurrency") if c in runs.columns]
    for _, r in (runs.sort_values(order) if order else runs).iterrows():
        verdict = "meets" if r.get("slo_met") else "misses"
        if r.get("saturated"):
            verdict += " (saturated)"
        if not _missing(r.get("operating_point")) and bool(r.get("operating_point")):
            verdict += ", operating point"
        rows.append([
            str(r.device), config_label(r), f"{int(r.concurrency)}",
            _with_interval(r, "interactivity_p90", ",.1f"), _with_interval(r, "ttft_p90_s", ",.2f"),
            _with_interval(r, "throughput_tok_per_s_per_gpu", ",.0f"),
            tokens(r.get("tokens_per_usd")), verdict,
        ])  # fmt: skip
    return Table(["device", "configuration", "users", "P90 interactivity, tok/s/user [95 %]",
                  "P90 TTFT, s [95 %]", "throughput, tok/s/GPU [95 %]", "tokens per USD",
                  "SLO"], rows)  # fmt: skip


def pruned_view(pruned: pd.DataFrame) -> Table:
    rows = []
    for _, p in pruned.iterrows():
        try:
            label = config_label(p)
        except (KeyError, TypeError, ValueError):  # knobs that did not validate
            label = "-"
        rows.append([str(p.device), label, str(p.reason)])
    return Table(["device", "configuration", "why it was not run"], rows)


# a disaggregated deployment's link, as the report states it
LINK_ASSUMPTION = (
    f"KV moves between prefill and decode replicas over one NIC per GPU, by default"
    f" {DEFAULT_LINK_BW_BYTES_PER_S / 1e9:g} GB/s per direction (assumption: one 400 Gb/s NIC"
    f" per GPU; no hardware profile has a scale-out field) and {DEFAULT_LINK_LATENCY_S * 1e6:g}"
    " us per transfer (assumption); each TP rank moves its own shard, one transfer at a time"
    " per NIC direction"
)
MODES_TITLE = "Aggregated or disaggregated (best SLO-meeting configuration of each)"


def modes_table(modes: pd.DataFrame) -> Table:
    key = str(modes.key.iloc[0])
    unit = "tokens per USD" if key == "tokens_per_usd" else "tok/s/GPU"
    rows = []
    for _, m in modes.iterrows():
        change = m.disaggregated_vs_aggregated
        winner = str(m.winner)
        if not _missing(change):
            winner += f" ({100 * change:+.1f} % for disaggregated)"
        rows.append([
            str(m.device), _fmt(m.aggregated_config), _fmt(m.aggregated_value),
            _fmt(m.disaggregated_config), _fmt(m.disaggregated_value), _fmt(m.get("best_split")),
            winner,
        ])  # fmt: skip
    return Table(
        ["device", "aggregated", unit, "disaggregated", unit, "best split", "winner"], rows
    )


def mode_lines(modes: pd.DataFrame) -> list[str]:
    """Markdown: aggregated vs disaggregated per device, and the best split."""
    if modes.empty:
        return []
    return ["", f"## {MODES_TITLE}", "", *modes_table(modes).markdown(), "", LINK_ASSUMPTION + "."]


# ------------------------------------------------------------------------------ the pages


def _context(space: SearchSpace, runs: pd.DataFrame, n_pruned: int) -> str:
    demand = (
        f"; demand {_demand_text(space)}"
        if space.demand_users or space.demand_requests_per_s
        else ""
    )
    return (
        f"Search {space.name}: model {space.model}; devices {', '.join(space.devices)};"
        f" SLO: {slo_text(space)}; cost model {space.cost_model}{demand}."
        f" {_plural(len(runs), 'run')}, {_plural(n_pruned, 'configuration')} pruned."
        f" Generated {dt.date.today().isoformat()}."
    )


NOTE = (
    "Values are means over the seeds with [95 % intervals]; the band beside the fleet is the"
    " fleet if the simulator is off by the device's error band. The SLO holds on every seed;"
    " the margin is the worst seed's P90 interactivity over the target."
)


def markdown(
    space: SearchSpace,
    best: pd.DataFrame,
    runs: pd.DataFrame,
    n_pruned: int,
    *,
    pruned: pd.DataFrame | None = None,
    sens: pd.DataFrame | None = None,
) -> str:
    """report.md: the answer first, then the ranked devices, the devices without an answer,
    the sensitivity and the aggregated-vs-disaggregated comparison."""
    headline, text = answer(space, best, runs, pruned)
    lines = [f"# {headline}", "", f"**Answer.** {text}", "", _context(space, runs, n_pruned), ""]
    lines += [f"## Best configuration per device, {_ranked_by(space, best)}", ""]
    if best.empty:
        lines.append("No configuration meets the SLO.")
    else:
        lines += decision_table(space, best).markdown()
        lines += ["", NOTE + _units_note(best) + " Every column: best.csv, runs.csv."]
    lines += _verdict_lines(verdicts(space, runs, best, pruned))
    if sens is None and not best.empty:
        sens = sensitivity(space, runs, best)
    if sens is not None and not sens.empty:
        lines += ["", f"## {SENSITIVITY_TITLE}", "", *sensitivity_table(sens).markdown()]
    lines += mode_lines(mode_comparison(runs))
    lines += ["", sources_caveat(space.devices)]
    return "\n".join(lines) + "\n"


SENSITIVITY_TITLE = "Sensitivity (one knob one step from each device's best, at the same users)"


def _verdict_lines(found: list[Verdict]) -> list[str]:
    missing = [v for v in found if v.kind != "meets"]
    if not missing:
        return []
    return ["", "## Devices without an answer", "", *(f"- {v.device}: {v.text}." for v in missing)]


STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1150px;margin:2em auto;padding:0 1em;"
    "line-height:1.45;color:#222}"
    ".box{max-width:100%;overflow-x:auto;margin:.5em 0 1em}"
    "table{border-collapse:collapse;font-size:12.5px}"
    "td,th{border:1px solid #ccc;padding:3px 5px;vertical-align:top;text-align:left}"
    "td{white-space:nowrap}th{background:#f4f4f4;font-weight:600}"
    "table.decision td:nth-child(3),td:last-child{white-space:normal;min-width:9em}"
    ".iv{color:#666;font-size:11px}"
    ".answer{font-size:1.1em;border-left:4px solid #2a7;background:#f2faf5;padding:.6em 1em}"
    ".none{border-left-color:#c33;background:#fcf2f2}"
    "details{margin:1em 0}summary{cursor:pointer;font-weight:600}"
)


def html_report(
    space: SearchSpace,
    runs: pd.DataFrame,
    best: pd.DataFrame,
    sens: pd.DataFrame,
    pruned: pd.DataFrame,
) -> tuple[str, list[Any]]:
    """The page, and its figures (for PNG export): the frontier, and the cost of each
    device's best configuration where a price exists."""
    import plotly.io as pio

    figs = [frontier_figure(space, runs, best)]
    cost = cost_figure(space, best)
    if cost is not None:
        figs.append(cost)
    parts = [pio.to_html(f, full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figs)]
    headline, text = answer(space, best, runs, pruned)
    esc = html.escape
    verdict_items = [
        f"<li><b>{esc(v.device)}</b>: {esc(v.text)}.</li>"
        for v in verdicts(space, runs, best, pruned)
        if v.kind != "meets"
    ]
    modes = mode_comparison(runs)
    body = [
        f"<h1>{esc(headline)}</h1>",
        f"<p class='answer{' none' if best.empty else ''}'><b>Answer.</b> {esc(text)}</p>",
        f"<p>{esc(_context(space, runs, len(pruned)))}</p>",
        f"<h2>Best configuration per device, {esc(_ranked_by(space, best))}</h2>",
        decision_table(space, best).html("decision")
        if not best.empty
        else "<p>No configuration meets the SLO.</p>",
        f"<p><small>{esc(NOTE + _units_note(best))} Every column: best.csv, runs.csv.</small></p>"
        if not best.empty
        else "",
        *(
            ["<h2>Devices without an answer</h2>", "<ul>", *verdict_items, "</ul>"]
            if verdict_items
            else []
        ),
        f"<p><em>{esc(sources_caveat(space.devices))}</em></p>",
        *parts,
        f"<h2>{esc(SENSITIVITY_TITLE)}</h2>",
        sensitivity_table(sens).html() if not sens.empty else "<p>No swept knob to move.</p>",
        *(
            [
                f"<h2>{esc(MODES_TITLE)}</h2>",
                modes_table(modes).html(),
                f"<p><em>{esc(LINK_ASSUMPTION)}.</em></p>",
            ]
            if not modes.empty
            else []
        ),
        f"<details><summary>Pruned configurations ({len(pruned)})</summary>",
        pruned_view(pruned).html() if not pruned.empty else "<p>None.</p>",
        "</details>",
        f"<details><summary>All runs ({len(runs)}; every column in runs.csv)</summary>",
        runs_view(runs).html() if not runs.empty else "<p>None.</p>",
        "</details>",
    ]
    page = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{esc(headline)}</title><style>{STYLE}</style></head><body>"
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
        "report.md": markdown(space, best, runs, len(pruned), pruned=pruned, sens=sens),
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
