"""Calibration: per device and op class, measured vs prior vs fitted latency.

Reads what `calibrate measure` / `calibrate fit` wrote under a profiles folder (the built-in
``hardware_profiles/`` by default): ``<device>/measurements/<op>.csv`` and
``<device>/latency_models.json``. The numbers come from ``simulator.calibration``, the same
code as `calibrate report`.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st
from dashboard import checks
from dashboard.errors import inline_errors

from hardware_profiles import PROFILES_DIR
from simulator import calibration
from simulator.cost.latency_file import load_latency_models
from simulator.specs.hardware import HardwareProfile
from simulator.specs.loading import SpecError, load

PAGE = "calibration"


def measured_devices(folder: Path) -> list[str]:
    return sorted(
        p.parent.name
        for p in folder.glob("*/measurements")
        if (p.parent / "profile.yaml").exists() and calibration.measurement_files(p.parent)
    )


@st.cache_data(show_spinner=False)
def _comparison(device_dir: str, mtime: float) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """(rows with prior / fitted predictions, the per-op error table, the status line);
    ``mtime`` keys the cache on the folder's files."""
    folder = Path(device_dir)
    profile = load(HardwareProfile, folder / "profile.yaml")
    fit_path = folder / "latency_models.json"
    fitted = load_latency_models(fit_path) if fit_path.exists() else None
    cmp = calibration.comparison(folder, profile)
    status = (
        f"{profile.display_name}: fitted models from these measurements"
        if fitted is not None
        else f"{profile.display_name}: measured, not fitted yet (run `calibrate fit"
        f" {profile.name}`); fitted columns are empty"
    )
    return cmp, calibration.error_table(cmp, fitted), status


def _mtime(folder: Path) -> float:
    files = [*calibration.measurement_files(folder), folder / "latency_models.json"]
    return max((f.stat().st_mtime for f in files if f.exists()), default=0.0)


def page() -> None:
    st.title("Calibration")
    with st.sidebar:
        st.subheader("Measurements")
        root = st.text_input(
            "Profiles folder", value=str(PROFILES_DIR), key=f"{PAGE}_profiles",
            help="A folder of <device>/profile.yaml with measurements/ from `calibrate measure`.",
        )  # fmt: skip
    folder = checks.folder_name(PAGE, "profiles folder", root)
    if not folder.is_dir():
        raise SpecError(PAGE, "profiles folder", f"{folder} is not a folder")
    devices = measured_devices(folder)
    if not devices:
        st.info(
            f"No device under {folder} has measurements yet. On a machine with the GPU: "
            "`calibrate run --device-name NAME` (README, Calibration). The project's tests use "
            "`tests/fixtures/calibration`, measured on a CPU."
        )
        return
    with st.sidebar:
        device = st.selectbox("Device", devices, key=f"{PAGE}_device")
    device_dir = folder / device
    cmp, errors, status = _comparison(str(device_dir), _mtime(device_dir))
    st.caption(status)
    cols = st.columns(3)
    cols[0].metric("Measured rows", f"{len(cmp):,}")
    cols[1].metric("Op classes", str(cmp.op.nunique()))
    held = errors["held-out median APE %"].dropna()
    cols[2].metric(
        "Worst held-out median APE", f"{held.max():.1f} %" if len(held) else "not fitted"
    )
    st.subheader("Error per op class (APE = |predicted / measured - 1|)")
    st.dataframe(errors, hide_index=True, key=f"{PAGE}_errors")
    ops = list(dict.fromkeys(cmp.op))
    op = st.selectbox("Op class", ops, key=f"{PAGE}_op")
    mine = cmp[cmp.op == op]
    st.plotly_chart(calibration.parity_figure(op, mine), key=f"{PAGE}_parity")
    st.caption(
        f"{len(mine)} rows of {op}; {int(mine.fitted_on.astype(bool).sum())} from the kernel"
        " the fit uses (the others are shown, not fitted on)."
    )
    shown = mine[["kernel", "dtype", "shape", "measured_us", "prior_us", "fitted_us"]]
    st.dataframe(shown, hide_index=True, key=f"{PAGE}_rows")


with inline_errors(PAGE):
    page()
