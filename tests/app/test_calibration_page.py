"""Calibration page: the committed CPU fixture's measurements, before and after `calibrate
fit`, shown with the same numbers `simulator.calibration` computes; bad folders inline."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest

from simulator import calibration
from simulator.cost.latency_file import load_latency_models
from simulator.specs.hardware import HardwareProfile
from simulator.specs.loading import load

OpenPage = Callable[..., AppTest]
PAGE = "app_pages/calibration.py"


def _metrics(at: AppTest) -> dict[str, str]:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return {m.label: m.value for m in at.metric}


def test_measured_then_fitted(app: OpenPage, calibration_profiles: Path) -> None:
    profiles = calibration_profiles
    at = app(PAGE)
    at.text_input(key="calibration_profiles").set_value(str(profiles)).run()
    device = profiles / "cpu-2core"
    profile = load(HardwareProfile, device / "profile.yaml")
    rows = calibration.comparison(device, profile)
    values = _metrics(at)
    assert values["Measured rows"] == f"{len(rows):,}"
    assert values["Op classes"] == "2"
    assert values["Worst held-out median APE"] == "not fitted"
    assert "not fitted yet" in at.caption[0].value
    # fit, then the page shows the held-out errors the fit stored
    doc, _, _ = calibration.fit_device(device, profile)
    calibration.write_fit(device, doc)
    at.run()
    values = _metrics(at)
    worst = max(m.heldout_error.median_ape for m in load_latency_models(
        device / "latency_models.json").models if m.heldout_error)  # fmt: skip
    assert values["Worst held-out median APE"] == f"{worst:.1f} %"
    errors = at.dataframe[0].value
    assert list(errors["op class"]) == ["gemm", "elementwise"]
    at.selectbox(key="calibration_op").set_value("elementwise").run()
    table = at.dataframe[1].value
    expected = rows[rows.op == "elementwise"]
    assert len(table) == len(expected)
    assert np.allclose(table.measured_us, expected.measured_us)
    assert table.fitted_us.notna().all()
    assert len(at.get("plotly_chart")) == 1


def test_folder_without_measurements_and_a_missing_folder(app: OpenPage, tmp_path: Path) -> None:
    at = app(PAGE)
    at.text_input(key="calibration_profiles").set_value(str(tmp_path)).run()
    assert not at.error
    assert "No device under" in at.info[0].value
    at.text_input(key="calibration_profiles").set_value(str(tmp_path / "nope")).run()
    assert [e.value for e in at.error] == [
        f"calibration: profiles folder: {tmp_path / 'nope'} is not a folder"
    ]
