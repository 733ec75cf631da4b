"""Search results page: a `plan search` output folder read back, its filters, the frontier,
and inline notes for a missing folder or a search space that does not match."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import yaml
from streamlit.testing.v1 import AppTest

OpenPage = Callable[..., AppTest]
PAGE = "app_pages/search_results.py"


def opened(app: OpenPage, folder: Path, space: Path) -> AppTest:
    at = app(PAGE)
    at.text_input(key="search_folder").set_value(str(folder))
    at.text_input(key="search_space").set_value(str(space)).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def test_runs_filters_and_frontier(app: OpenPage, tiny_search: tuple[Path, Path]) -> None:
    folder, space = tiny_search
    runs = pd.read_csv(folder / "runs.csv")
    at = opened(app, folder, space)
    values = {m.label: m.value for m in at.metric}
    assert values["Runs shown"] == str(len(runs)) == "8"  # 2 devices x DCP 1/2 x 2 loads
    assert values["Meeting the SLO"] == str(int(runs.slo_met.sum()))
    assert values["Configurations"] == "4"
    assert len(at.get("plotly_chart")) >= 1  # the frontier (and tokens per dollar)
    assert len(at.dataframe[0].value) == len(runs)

    at.checkbox(key="search_slo_only").check().run()
    assert at.metric[0].value == str(int(runs.slo_met.sum()))
    at.checkbox(key="search_slo_only").uncheck()
    at.multiselect(key="search_devices").set_value(["h200"]).run()
    assert at.metric[0].value == str(int((runs.device == "h200").sum()))
    at.multiselect(key="search_dcp").set_value(["1"]).run()  # swept, so offered as a filter
    assert at.metric[0].value == str(int(((runs.device == "h200") & (runs.dcp == 1)).sum()))
    at.select_slider(key="search_users").set_value((8, 8)).run()
    assert at.metric[0].value == "1"
    assert set(at.dataframe[0].value.concurrency) == {8}


def test_missing_folder_and_mismatched_space_are_notes(
    app: OpenPage, tiny_search: tuple[Path, Path], tmp_path: Path
) -> None:
    folder, space = tiny_search
    at = opened(app, tmp_path / "nothing", space)
    assert "No search output in" in at.info[0].value
    assert not at.metric
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({**yaml.safe_load(space.read_text()), "devices": ["b200"]}))
    at = opened(app, folder, other)
    assert at.warning[0].value.startswith("Frontier not drawn:")
    assert "does not search h100, h200" in at.warning[0].value
    assert not at.get("plotly_chart")
    assert at.dataframe
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\nmodel: llama-3.3-70b\n")
    at.text_input(key="search_space").set_value(str(broken)).run()
    assert at.warning[0].value.startswith(f"Frontier not drawn: {broken}: devices:")


def test_another_folder_brings_its_own_space_and_filters(
    app: OpenPage, tiny_search: tuple[Path, Path], tmp_path: Path
) -> None:
    folder, given = tiny_search
    assert (folder / "space.yaml").is_file()  # plan search writes its space beside the runs
    other = tmp_path / "other"
    shutil.copytree(folder, other)
    space = yaml.safe_load((other / "space.yaml").read_text())
    space["slo"] = {"interactivity_tok_per_s_p90": 300.0}
    (other / "space.yaml").write_text(yaml.safe_dump(space))
    runs = pd.read_csv(other / "runs.csv")
    runs["slo_met"] = runs.device != "h100"  # as that SLO judges them
    runs.to_csv(other / "runs.csv", index=False)

    at = app(PAGE)
    at.text_input(key="search_folder").set_value(str(folder)).run()
    assert at.text_input(key="search_space").value == str(folder / "space.yaml")
    at.multiselect(key="search_devices").set_value(["h100"]).run()
    assert at.metric[0].value == "4"
    at.text_input(key="search_folder").set_value(str(other)).run()
    assert not at.exception
    # the box follows the folder: the frontier is drawn with the new folder's SLO line
    assert at.text_input(key="search_space").value == str(other / "space.yaml")
    assert not at.warning
    assert at.metric[0].value == "8"  # the devices filter starts again from the new runs
    assert at.metric[1].value == "4"
    at.multiselect(key="search_devices").set_value(["h100"])
    at.checkbox(key="search_slo_only").check().run()
    assert at.metric[0].value == "0"
    expected = (
        "No run passes the filters: Only runs meeting the SLO (on) keeps none of the 4 runs"
        " that Devices, DCP and Users per deployment keep."
    )
    assert at.info[0].value == expected
    assert expected in [c.value for c in at.caption]  # the Runs tab says the same
    at.multiselect(key="search_devices").set_value([]).run()
    assert at.info[0].value == "No run passes the filters: Devices has nothing chosen."
    # a space given with the folder in the same edit is kept
    at.text_input(key="search_folder").set_value(str(folder))
    at.text_input(key="search_space").set_value(str(given)).run()
    assert at.text_input(key="search_space").value == str(given)
