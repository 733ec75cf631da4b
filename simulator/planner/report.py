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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simulator import catalog
from simulator.cache.transfer import NIXL_DESCRIPTOR_S
from simulator.planner.answer import answer, slo_text, sources_caveat
from simulator.planner.compare import mode_comparison, sensitivity
from simulator.planner.report_figures import cost_figure, frontier_figure
from simulator.planner.report_tables import (
    decision_table,
    demand_text,
    modes_table,
    plural,
    pruned_view,
    ranked_by,
    runs_view,
    sensitivity_table,
    units_note,
    unsteady_note,
)
from simulator.planner.space import SearchSpace
from simulator.planner.verdicts import Verdict, verdicts
from simulator.specs.loading import SpecError
from simulator.specs.pools import DEFAULT_LINK_BW_BYTES_PER_S, DEFAULT_LINK_LATENCY_S

if TYPE_CHECKING:
    import pandas as pd


LINK_ASSUMPTION = (
    "KV moves between prefill and decode replicas over the link the scenario gives, else the"
    " device profile's scale-out NIC (per GPU, per direction), else"
    f" {DEFAULT_LINK_BW_BYTES_PER_S / 1e9:g} GB/s and {DEFAULT_LINK_LATENCY_S * 1e6:g} us per"
    " transfer (assumptions: one 400 Gb/s NIC per GPU); a read also pays"
    f" {NIXL_DESCRIPTOR_S * 1e6:g} us per NIXL descriptor (assumption, vllm#50913); each TP"
    " rank moves its own shard, one transfer at a time per NIC direction"
)


def link_text(devices: list[str]) -> str:
    """``LINK_ASSUMPTION`` and the profile NIC of each device that has one."""
    nics = []
    for name in devices:
        try:
            out = catalog.hardware_profile(name).scale_out
        except SpecError:  # a device given by a path the report cannot resolve: no figure
            continue
        if out is not None:
            nics.append(f"{name} {out.bw_bytes_per_s / 1e9:g} GB/s, {out.latency_s * 1e6:g} us")
    return LINK_ASSUMPTION + (f" (profile NICs: {'; '.join(nics)})" if nics else "")


MODES_TITLE = "Aggregated or disaggregated (best SLO-meeting configuration of each)"


def mode_lines(modes: pd.DataFrame) -> list[str]:
    """Markdown: aggregated vs disaggregated per device, and the best split."""
    if modes.empty:
        return []
    devices = sorted(set(modes["device"]))
    return [
        "",
        f"## {MODES_TITLE}",
        "",
        *modes_table(modes).markdown(),
        "",
        link_text(devices) + ".",
    ]


# ------------------------------------------------------------------------------ the pages


def _context(space: SearchSpace, runs: pd.DataFrame, n_pruned: int) -> str:
    demand = (
        f"; demand {demand_text(space)}"
        if space.demand_users or space.demand_requests_per_s
        else ""
    )
    return (
        f"Search {space.name}: model {space.model}; devices {', '.join(space.devices)};"
        f" SLO: {slo_text(space)}; cost model {space.cost_model}{demand}."
        f" {plural(len(runs), 'run')}, {plural(n_pruned, 'configuration')} pruned."
        f" Generated {dt.date.today().isoformat()}."
    )


NOTE = (
    "Values are means over the seeds with [95 % intervals]; the band beside the fleet is the"
    " fleet if the simulator is off by the device's error band. The SLO holds on every seed;"
    " the margin is the worst seed's P90 interactivity over the target."
)


def reading_note(space: SearchSpace, best: pd.DataFrame) -> str:
    """How to read the best table: NOTE, how a max-load search ran its seeds when it skipped
    some, the units bought, the seeds whose cache switched state."""
    seeds = ""
    if space.seeds_can_stop:
        seeds = (
            " A load's seeds ran in turn up to the first that missed (it cannot pass then): its"
            " row in runs.csv holds the seeds that ran (`seeds`)."
        )
    return NOTE + seeds + units_note(best) + unsteady_note(best)


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
    lines += [f"## Best configuration per device, {ranked_by(space, best)}", ""]
    if best.empty:
        lines.append("No configuration meets the SLO.")
    else:
        lines += decision_table(space, best).markdown()
        note = reading_note(space, best)
        lines += ["", note + " Every column: best.csv, runs.csv."]
    lines += _verdict_lines(verdicts(space, runs, best, pruned))
    if sens is None and not best.empty:
        sens = sensitivity(space, runs, best, pruned)
    if sens is not None and not sens.empty:
        lines += ["", f"## {SENSITIVITY_TITLE}", "", *sensitivity_table(sens).markdown()]
    lines += mode_lines(mode_comparison(runs))
    lines += ["", sources_caveat(space.devices)]
    return "\n".join(lines) + "\n"


SENSITIVITY_TITLE = (
    "Sensitivity (one knob one step from each device's best, each at its operating point)"
)


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
        f"<h2>Best configuration per device, {esc(ranked_by(space, best))}</h2>",
        decision_table(space, best).html("decision")
        if not best.empty
        else "<p>No configuration meets the SLO.</p>",
        f"<p><small>{esc(reading_note(space, best))} Every column: best.csv, runs.csv.</small></p>"
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
                f"<p><em>{esc(link_text(sorted(set(modes['device']))))}.</em></p>",
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
