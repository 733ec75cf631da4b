"""Search results: a `plan search --out FOLDER` output, explored: the frontier of the runs kept
by the filters, the best configuration per device, sensitivity, pruned configurations and the
table of every run. The link takes ``?dir=FOLDER&space=SPACE.yaml``."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st
from dashboard import checks, controls, figures, runs
from dashboard.errors import inline_errors, one_line

from simulator.planner.space import SearchSpace
from simulator.specs import SpecError

PAGE = "search"
SOURCE = "search results"
DEFAULT_FOLDER = "out"
DEFAULT_SPACE = "simulator/examples/search-kimi-k3-agentic.yaml"
# swept knobs (runs.csv columns) offered as filters when they take more than one value
KNOBS = {
    "tp": "TP", "dcp": "DCP", "dp": "DP", "ep": "EP", "cpu_offload_bytes": "CPU KV offload",
    "max_num_seqs": "max_num_seqs", "max_num_batched_tokens": "max_num_batched_tokens",
    "speculative": "Speculative decoding",
}  # fmt: skip


def knob_text(knob: str, value: object) -> str:
    """A knob's value as a filter shows it (a missing one is vLLM's default)."""
    if value is None or value != value or value == "":
        return "default" if knob != "speculative" else "off"
    if knob == "cpu_offload_bytes":
        return controls.offload_label(float(value) / 2**30)  # type: ignore[arg-type]
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def default_space(folder: str) -> str:
    """The search space beside the runs when the folder has one, else the example search."""
    for name in ("space.yaml", "search.yaml"):
        if (Path(folder) / name).is_file():
            return str(Path(folder) / name)
    return DEFAULT_SPACE if Path(DEFAULT_SPACE).is_file() else ""


def load_space(path: str, devices: list[str]) -> SearchSpace | None:
    """The search space the folder came from (for the SLO line and titles), or None with an
    inline note: the tables do not need it."""
    if not path:
        st.info("Give the search space YAML in the sidebar to draw the frontier.")
        return None
    try:
        space = runs.search_space(path)
    except SpecError as exc:
        st.warning(f"Frontier not drawn: {one_line(exc, path)}")
        return None
    missing = sorted(set(devices) - set(space.devices))
    if missing:
        st.warning(
            f"Frontier not drawn: {path} does not search {', '.join(missing)}; give the search"
            " space these runs came from."
        )
        return None
    return space


def _start_from_the_folder(folder: str, space_param: str | None, dir_param: str | None) -> None:
    """Filters and the search space belong to one folder: when the folder changes (before
    the search space box is drawn), drop the filters' kept values (devices, swept knobs,
    users, SLO-only) so they start from the new folder's runs instead of filtering them by
    the old folder's, and point the search space box at the new folder's ``space.yaml`` (the
    frontier would otherwise draw the old space's SLO line) unless the box was edited in the
    same rerun or the link names the space of this folder (``?dir=...&space=...``)."""
    state = st.session_state
    linked = space_param if space_param is not None and folder == dir_param else None
    if f"{PAGE}_space" not in state:  # first drawn (or dropped while another page was open)
        state[f"{PAGE}_space"] = linked if linked is not None else default_space(folder)
        state[f"{PAGE}_space_seen"] = state[f"{PAGE}_space"]
    if state.get(f"{PAGE}_filters_of") == folder:
        return
    for name in ("devices", "users", "slo_only", *KNOBS):
        state.pop(f"{PAGE}_{name}", None)
    edited = state.get(f"{PAGE}_space") != state.get(f"{PAGE}_space_seen")
    if linked is not None:
        state[f"{PAGE}_space"] = linked
    elif not edited:
        state[f"{PAGE}_space"] = default_space(folder)
    state[f"{PAGE}_filters_of"] = folder


def nothing_passes(filters: list[tuple[str, str, pd.Series]], total: int) -> str:
    """Which filter leaves no run (``filters``: label, what it keeps, the runs it passes, in
    the sidebar's order): one that passes no run of the folder by itself, else the first after
    which none of the runs the filters above it keep is left."""
    for label, value, passes in filters:
        if not value:
            return f"No run passes the filters: {label} has nothing chosen."
        if not passes.any():
            return f"No run passes the filters: {label} ({value}) keeps none of the {total} runs."
    kept = pd.Series(True, index=filters[0][2].index) if filters else pd.Series(dtype=bool)
    above: list[str] = []
    for label, value, passes in filters:
        now = kept & passes
        if not now.any():
            names = " and ".join([", ".join(above[:-1]), above[-1]] if len(above) > 1 else above)
            verb = "keeps" if len(above) == 1 else "keep"
            return (
                f"No run passes the filters: {label} ({value}) keeps none of the"
                f" {int(kept.sum())} runs that {names} {verb}."
            )
        above.append(label)
        kept = now
    return "No run passes the filters."


def page() -> None:
    st.title("Search results")
    params = st.query_params
    state = st.session_state
    if f"{PAGE}_folder" not in state:
        state[f"{PAGE}_folder"] = params.get("dir", DEFAULT_FOLDER)
    with st.sidebar:
        st.subheader("Output of plan search")
        folder = st.text_input(
            "Folder", key=f"{PAGE}_folder",
            help="The --out folder of plan search (runs.csv, best.csv, ...)",
        )  # fmt: skip
        checks.folder_name("search results", "folder", folder)  # before looking inside
        _start_from_the_folder(folder, params.get("space"), params.get("dir"))
        space_path = st.text_input(
            "Search space YAML", key=f"{PAGE}_space",
            help="For the SLO line and the titles of the frontier (the folder's space.yaml"
            " when it has one)",
        )  # fmt: skip
        state[f"{PAGE}_space_seen"] = space_path
    if not (Path(folder).expanduser() / "runs.csv").is_file():
        st.info(
            f"No search output in `{folder}` yet. Run `make demo`, or"
            f" `plan search {DEFAULT_SPACE} --out {folder}` (about a minute on 2 cores), then"
            " press R to reload; or give another folder in the sidebar."
        )
        return
    output = runs.search_output(folder)
    all_runs = output.runs
    if all_runs.empty:
        st.info(f"`{folder}/runs.csv` has no runs.")
        return
    with st.sidebar:
        st.subheader("Filters")
        devices = st.multiselect(
            "Devices", sorted(all_runs.device.unique()),
            default=sorted(all_runs.device.unique()), key=f"{PAGE}_devices",
        )  # fmt: skip
        # (label, what it keeps, the runs it passes) in the order drawn, to name the one
        # that leaves nothing
        filters = [("Devices", ", ".join(devices), all_runs.device.isin(devices))]
        for knob, label in KNOBS.items():
            if knob not in all_runs or all_runs[knob].nunique(dropna=False) < 2:
                continue  # not swept
            text = all_runs[knob].map(lambda v, k=knob: knob_text(k, v))
            options = list(dict.fromkeys(text[all_runs[knob].sort_values().index]))
            chosen = st.multiselect(label, options, default=options, key=f"{PAGE}_{knob}")
            filters.append((label, ", ".join(chosen), text.isin(chosen)))
        levels = sorted(int(c) for c in all_runs.concurrency.unique())
        low, high = st.select_slider(
            "Users per deployment", levels, value=(levels[0], levels[-1]), key=f"{PAGE}_users"
        )
        filters.append(
            ("Users per deployment", f"{low} to {high}", all_runs.concurrency.between(low, high))
        )
        slo_only = st.checkbox("Only runs meeting the SLO", key=f"{PAGE}_slo_only")
        if slo_only:
            filters.append(("Only runs meeting the SLO", "on", all_runs.slo_met.astype(bool)))
    mask = pd.Series(True, index=all_runs.index)
    for _, _, passes in filters:
        mask &= passes
    shown = all_runs[mask]
    nothing = nothing_passes(filters, len(all_runs)) if shown.empty else ""
    best = output.best
    if not best.empty:
        best = best[best.config_id.isin(shown.config_id)]
    st.markdown(
        f"`{output.folder}`: {len(all_runs)} runs, {len(output.pruned)} pruned configurations;"
        f" {len(shown)} runs shown."
    )
    cols = st.columns(4)
    cols[0].metric("Runs shown", f"{len(shown):,}")
    cols[1].metric("Meeting the SLO", f"{int(shown.slo_met.sum()):,}")
    top = best.sort_values("tokens_per_usd", ascending=False).head(1) if not best.empty else best
    if top.empty:
        cols[2].metric("Best tokens per USD", "-")
    else:
        cols[2].metric(
            "Best tokens per USD", controls.tokens(top.tokens_per_usd.iloc[0]),
            help=f"{top.config_id.iloc[0]} at {top.concurrency.iloc[0]} users",
        )  # fmt: skip
    cols[3].metric("Configurations", f"{shown.config_id.nunique():,}")
    if shown.empty:
        st.info(nothing)
    else:
        space = load_space(space_path, sorted(shown.device.unique()))
        if space is not None:
            kept = [d for d in space.devices if d in set(shown.device)]
            view = space.model_copy(update={"devices": kept})
            for i, fig in enumerate(figures.search_figures(view, shown, best)):
                st.plotly_chart(fig, key=f"{PAGE}_figure_{i}")
    tabs = st.tabs(["Runs", "Best per device", "Sensitivity", "Pruned"])
    frames: list[tuple[pd.DataFrame, str, str]] = [
        (shown, "runs", nothing),
        (best, "best", "No configuration meets the SLO."),
        (output.sensitivity, "sensitivity", "No swept knob to move."),
        (output.pruned, "pruned", "Nothing pruned."),
    ]
    for tab, (df, name, empty) in zip(tabs, frames, strict=True):
        with tab:
            if df.empty:
                st.caption(empty)
            else:
                controls.table(df, f"{PAGE}_{name}")


with inline_errors(SOURCE):
    page()
