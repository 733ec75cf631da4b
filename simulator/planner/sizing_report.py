"""What ``plan size --out DIR`` writes: the answer (``size.md``, ``size.json``), the deploy
commands (``deploy.sh``) and the full capacity report of the searches behind it (the same
``report.html``, ``report.md`` and CSVs as ``plan search``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simulator.planner.answer import slo_text, sources_caveat
from simulator.planner.report_tables import Table, decision_table
from simulator.planner.run_count import seeds_text

if TYPE_CHECKING:
    from simulator.planner.sizing import SizeResult

# the decision table's columns the terminal shows (size.md and report.html show them all),
# with shorter headers
TERMINAL_HEADERS = {"#": "#", "device": "device", "configuration": "config",
                    "users per deployment": "users", "$/hour (band)": "$/hour (band)",
                    "$/M output tokens": "$/M out tok",
                    "P90 tok/s per user [95 %]": "P90 tok/s per user [95 %]"}  # fmt: skip


def decision(result: SizeResult) -> Table:
    """The report's ranked decision table of the sizing's best configurations."""
    return decision_table(result.space, result.best)


def terminal_table(result: SizeResult) -> Table:
    """The decision table cut to what a terminal can hold."""
    full = decision(result)
    keep: list[tuple[int, str]] = []
    for i, header in enumerate(full.headers):
        if header in TERMINAL_HEADERS:
            keep.append((i, TERMINAL_HEADERS[header]))
        elif header.endswith(" (band)") and not header.startswith("$"):  # nodes / racks
            keep.append((i, header))
    return Table([short for _, short in keep], [[r[i] for i, _ in keep] for r in full.rows])


def markdown(result: SizeResult) -> str:
    space = result.space
    lines = [
        f"# Sizing: {space.model} for {space.demand_users:,} concurrent users ({slo_text(space)})",
        "",
        f"**{result.answer}**",
        "",
        f"Workload: {space.workload.kind}; cost model {space.cost_model};"
        f" {seeds_text(space)}; {result.simulations:,} simulations. Values are means"
        " over the seeds with [95 % intervals]; the band beside the fleet is the fleet if the"
        " simulator is off by the device's error band; the SLO holds on every seed.",
        "",
    ]
    if not result.best.empty:
        lines += [*decision(result).markdown(), ""]
    if result.not_served:
        lines += ["Not served:", ""] + [f"- {m}" for m in result.not_served] + [""]
    for cid, command in result.commands.items():
        lines += [f"Deploy `{cid}` (one deployment):", "", "```sh", command, "```", ""]
    lines += [sources_caveat(space.devices), ""]
    lines.append("Full report: report.html (frontiers, every run, sensitivity, pruned).")
    return "\n".join(lines) + "\n"


def write_size_report(stage: Path, result: SizeResult) -> list[Path]:
    """Write the answer, the deploy commands and the search report into ``stage``."""
    from simulator.planner.search import write_search_report

    paths, _, _ = write_search_report(stage, result.space, result.runs, result.pruned)
    (stage / "size.md").write_text(markdown(result))
    (stage / "size.json").write_text(json.dumps(as_json(result), indent=2, default=float) + "\n")
    script = ["#!/bin/sh", f"# {result.answer}", ""]
    for cid, command in result.commands.items():
        script += [f"# {cid}", command, ""]
    (stage / "deploy.sh").write_text("\n".join(script))
    return [*paths, stage / "size.md", stage / "size.json", stage / "deploy.sh"]


def repeat_notes(result: SizeResult) -> list[str]:
    """One note per sweep value given twice (``--set 'sweep.tp=[1,1]'``): its configurations
    ran once. Distinct, in order (each device's default sweeps repeat the note)."""
    notes = [p.reason for p in result.pruned if " repeats " in p.reason]
    return list(dict.fromkeys(notes))


def as_json(result: SizeResult) -> dict[str, Any]:
    """The answer as ``plan size --json`` prints it and size.json holds it."""
    from simulator.output_files import finite
    from simulator.planner.answer import refused_note
    from simulator.planner.uncertainty import stated_error

    data: dict[str, Any] = finite(
        {
            "answer": result.answer,
            "ranked": result.table.to_dict(orient="records"),
            "not_served": result.not_served,
            "commands": result.commands,
            "simulations": result.simulations,
            "refused_note": refused_note(result.runs),
            "repeat_notes": repeat_notes(result),
            "stated_error": {d: stated_error(d) for d in result.space.devices},
            "space": result.space.model_dump(mode="json"),
        }
    )
    return data
