"""The report's tables as text cells, written as Markdown or HTML: the ranked decision table
(readable columns with units, intervals and bands; the raw columns stay in best.csv), the
sensitivity, the runs, the pruned configurations and the aggregated-vs-split comparison; and
the formatting of dollars, token counts and intervals they share with the answer line."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simulator.planner.analysis import HOURS_PER_MONTH, NODE_GPUS, rank_basis
from simulator.planner.space import SearchSpace
from simulator.planner.verdicts import KNOB_NAMES, config_label, knob_text

if TYPE_CHECKING:
    import pandas as pd


def missing(x: object) -> bool:
    return x is None or (isinstance(x, float) and x != x)


def fmt(x: object, spec: str = ",.0f") -> str:
    if missing(x):
        return "-"
    if isinstance(x, float | int):
        return format(x, spec)
    return str(x)


def usd(x: object) -> str:
    """Dollars as a buyer reads them: ``$132,101``, ``$176``, ``$1.81``, ``$0.154``."""
    if missing(x):
        return "-"
    v = float(x)  # type: ignore[arg-type]
    return f"${v:,.0f}" if abs(v) >= 100 else f"${v:,.2f}" if abs(v) >= 1 else f"${v:.3g}"


def tokens(x: object) -> str:
    """A token count: ``6.74 M``, ``812 k``, ``950``."""
    if missing(x):
        return "-"
    v = float(x)  # type: ignore[arg-type]
    return f"{v / 1e6:,.3g} M" if v >= 1e6 else f"{v / 1e3:,.3g} k" if v >= 1e4 else f"{v:,.0f}"


def _with_interval(row: Any, column: str, spec: str) -> str:
    """``value [low, high]`` from ``<column>_ci_low`` / ``_ci_high`` where they differ."""
    text = fmt(row.get(column), spec)
    lo, hi = row.get(f"{column}_ci_low"), row.get(f"{column}_ci_high")
    if text != "-" and not missing(lo) and not missing(hi):
        low, high = format(lo, spec), format(hi, spec)
        if low != high:  # an interval narrower than the digits shown is left out
            text += f" [{low}, {high}]"
    return text


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _two_lines(cell: str) -> str:
    """An HTML cell: the figure, its interval or band below it in small print."""
    m = _SPREAD.match(cell)
    if m is None:
        return html.escape(cell)
    return f"{html.escape(m.group(1))}<br><span class='iv'>{html.escape(m.group(2))}</span>"


# a figure and its interval or band: "1,838 [1,783, 1,893]", "16 nodes (14-20)"
_SPREAD = re.compile(r"^([-+$]?[\d$][^\[(]*?) ([\[(][^\])]*[\])])$")


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


def demand_text(space: SearchSpace) -> str:
    if space.demand_users:
        return f"{space.demand_users:,} concurrent users"
    return f"{space.demand_requests_per_s:g} requests/s"


def unit_text(row: Any, count: str = "units") -> str:
    """``13 nodes of 8x H100`` / ``7 racks of 72x GB300``."""
    n = int(row[count])
    return f"{plural(n, str(row.unit))} of {int(row.unit_gpus)}x {str(row.device).upper()}"


def has_fleet(best: pd.DataFrame) -> bool:
    return not best.empty and "units" in best.columns and "unit" in best.columns


def model_error_pct(device: str) -> float:
    from simulator.planner.uncertainty import model_error

    return model_error(device).median_ape_pct


def decision_table(space: SearchSpace, best: pd.DataFrame) -> Table:
    """The ranked devices in readable columns with units (the raw ones are in best.csv)."""
    fleet = has_fleet(best)
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
            per_user = b.get("usd_per_user_hour")  # the fleet bought / demand_users
            row += [
                f"{bought:,}" + (f" ({used:,} in use)" if used != bought else ""),
                f"{unit_text(b).split(' of ')[0]} ({int(b.units_band_low):,}"
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
        margin = f"{(worst / target - 1) * 100:+,.0f} %" if target and not missing(worst) else "-"
        error = b.get("model_error_pct", model_error_pct(b.device))
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


def ranked_by(space: SearchSpace, best: pd.DataFrame) -> str:
    if best.empty:
        return "meeting the SLO"
    basis = rank_basis(space, best)
    if basis == "fleet_usd_per_hour":
        return f"ranked by the fleet's USD per hour for {demand_text(space)} (lowest first)"
    if basis == "tokens_per_usd":
        return "ranked by tokens per USD (highest first)"
    return "ranked by throughput per GPU (no price for these devices)"


def unsteady_note(best: pd.DataFrame) -> str:
    """The best points at which the prefix cache switched state inside some seed's window."""
    if "unsteady_seeds" not in best.columns:
        return ""
    rows = [b for _, b in best.iterrows() if not missing(b.unsteady_seeds) and b.unsteady_seeds]
    if not rows:
        return ""
    where = "; ".join(
        f"{b.device} on {int(b.unsteady_seeds)} of {int(b.seeds)} seeds" for b in rows
    )
    return (
        f" The prefix-hit rate changed state inside the window at the best point of {where}: the"
        " cache is near its edge there, and a longer run may land elsewhere (docs/kv-pressure.md)."
    )


def units_note(best: pd.DataFrame) -> str:
    """Which unit each device is bought by."""
    if not has_fleet(best):
        return ""
    by: dict[str, list[str]] = {}
    for _, b in best.iterrows():
        what = f"the {b.unit} of {int(b.unit_gpus)} GPUs"
        if b.unit == "rack":
            what += " (its scale-up domain)"
        elif b.unit == "machine":
            what = "the machine (one SoC with unified memory)"
        by.setdefault(what, []).append(str(b.device))
    parts = [f"{', '.join(d)} by {what}" for what, d in by.items()]
    racks = f"; best.csv's nodes stay GPUs / {NODE_GPUS}" if (best.unit != "node").any() else ""
    return (
        f" Fleets are bought whole: {'; '.join(parts)}{racks}."
        f" $/month = $/hour x {HOURS_PER_MONTH:g} h."
    )


def sensitivity_table(sens: pd.DataFrame) -> Table:
    """Each knob one step from a device's best: users per deployment at the SLO, and the
    throughput change in percent, at the two operating points."""
    rows = []
    for _, s in sens.iterrows():
        pct = s.get("throughput_change_pct")
        if missing(pct) and not missing(s.get("throughput_change")):
            pct = 100 * s.throughput_change
        users = s.get("users_to")  # (sensitivity.csv of older versions lacks it)
        rows.append([
            str(s.device), KNOB_NAMES.get(str(s.knob), str(s.knob)),
            knob_text(str(s.knob), s["from"]), knob_text(str(s.knob), s["to"]),
            "-" if users is None or missing(users) else f"{int(s.users_from)} -> {int(users)}",
            "-" if missing(pct) else f"{pct:+.1f} %", str(s.note),
        ])  # fmt: skip
    return Table(["device", "knob", "from", "to", "users at the SLO", "throughput per GPU",
                  "at that setting"], rows)  # fmt: skip


def runs_view(runs: pd.DataFrame) -> Table:
    """Every run in readable columns (runs.csv holds all of them)."""
    rows = []
    order = [c for c in ("device", "config_id", "concurrency") if c in runs.columns]
    for _, r in (runs.sort_values(order) if order else runs).iterrows():
        verdict = "meets" if r.get("slo_met") else "misses"
        if r.get("saturated"):
            verdict += " (saturated)"
        if not missing(r.get("unsteady_seeds")) and r.unsteady_seeds:
            verdict += f" (hit rate not steady on {int(r.unsteady_seeds)} of {int(r.seeds)} seeds)"
        if not missing(r.get("operating_point")) and bool(r.get("operating_point")):
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


def modes_table(modes: pd.DataFrame) -> Table:
    key = str(modes.key.iloc[0])
    unit = "tokens per USD" if key == "tokens_per_usd" else "tok/s/GPU"
    rows = []
    for _, m in modes.iterrows():
        change = m.disaggregated_vs_aggregated
        winner = str(m.winner)
        if not missing(change):
            winner += f" ({100 * change:+.1f} % for disaggregated)"
        rows.append([
            str(m.device), fmt(m.aggregated_config), fmt(m.aggregated_value),
            fmt(m.disaggregated_config), fmt(m.disaggregated_value), fmt(m.get("best_split")),
            winner,
        ])  # fmt: skip
    return Table(
        ["device", "aggregated", unit, "disaggregated", unit, "best split", "winner"], rows
    )
