"""`make demo` then `make test` (the README's order) in one clone: the demo leaves `out/`
(its search report) in the working folder, and the Search results page opens that folder
first. Pinned here with a stand-in `out/` of other devices in the page's working folder: the
page's filters and space box must follow a switch to another folder, as they do without it
(the failure this order once caused: after the switch, Devices was empty and 0 runs showed)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from streamlit.testing.v1 import AppTest

from tests.app.conftest import APP

PAGE = "app_pages/search_results.py"


@pytest.mark.parametrize("demo_ran", [False, True])
def test_search_results_page_with_and_without_the_demos_out_folder(
    demo_ran: bool, tiny_search: tuple[Path, Path], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    folder, _ = tiny_search
    work = tmp_path / "clone"
    work.mkdir()
    if demo_ran:  # what make demo leaves: a report folder of other devices at ./out
        demo = work / "out"
        shutil.copytree(folder, demo)
        runs = pd.read_csv(demo / "runs.csv")
        runs["device"] = runs.device.map({"h100": "mi355x", "h200": "b300"})
        runs.to_csv(demo / "runs.csv", index=False)
        space = yaml.safe_load((demo / "space.yaml").read_text())
        space["devices"] = ["mi355x", "b300"]
        (demo / "space.yaml").write_text(yaml.safe_dump(space))
    monkeypatch.chdir(work)
    monkeypatch.setenv("PLAN_DASHBOARD_CACHE", str(tmp_path / "runs"))
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page(PAGE).run()
    assert not at.exception, [e.value for e in at.exception]
    if demo_ran:
        assert set(at.multiselect(key="search_devices").value) == {"mi355x", "b300"}
    at.text_input(key="search_folder").set_value(str(folder)).run()
    assert not at.exception, [e.value for e in at.exception]
    assert set(at.multiselect(key="search_devices").value) == {"h100", "h200"}
    assert at.metric[0].value == "8"  # every run of the folder switched to
    assert at.text_input(key="search_space").value == str(folder / "space.yaml")
