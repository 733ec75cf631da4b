"""`calibrate fit` / `report` on the committed CPU measurements, and `calibrate run` end to end
on this machine's CPU (torch ops, real timings), plus the bad-input paths.

The fixture ``tests/fixtures/calibration/cpu-2core`` holds measurements of torch GEMMs and
RMSNorms taken on the development CPU with ``calibrate measure --allow-cpu`` (SOURCE.md).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import hardware_profiles
from kernels_calibration.cli import app
from simulator import calibration, catalog
from simulator.cost.latency import LatencyModels
from simulator.cost.latency_file import load_latency_models
from simulator.cost.step import StepCostModel
from simulator.specs.hardware import HardwareProfile
from simulator.specs.loading import load
from simulator.specs.serving import ServingConfig

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "calibration" / "cpu-2core"


@pytest.fixture
def profiles(calibration_profiles: Path) -> Path:
    return calibration_profiles


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_fit_on_committed_measurements(profiles: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = invoke("fit", "cpu-2core", "--profiles-dir", str(profiles))
    assert code == 0, out
    device = profiles / "cpu-2core"
    assert "calibrated: true" in (device / "profile.yaml").read_text()
    profile = load(HardwareProfile, device / "profile.yaml")
    assert profile.calibrated
    doc = load_latency_models(device / "latency_models.json")
    assert {m.op_class for m in doc.models} == {"gemm", "elementwise"}
    for m in doc.models:
        assert m.heldout_error is not None
        assert m.heldout_error.n == m.measurements.rows
        assert m.measurements.rows > 0
    # on GEMM rows it never saw (k-fold), the fit beats the profile's prior
    cmp = calibration.comparison(device, profile)
    gemm = cmp[(cmp.op == "gemm") & cmp.fitted_on.astype(bool)]
    prior_ape = 100 * np.median(np.abs(gemm.prior_us / gemm.measured_us - 1))
    held = next(m.heldout_error for m in doc.models if m.op_class == "gemm")
    assert held is not None
    assert held.median_ape < prior_ape
    # ... and the step cost model picks the fit up by itself
    monkeypatch.setattr(hardware_profiles, "PROFILES_DIR", profiles)
    card = catalog.model_card("gpt-oss-120b")
    serving = ServingConfig(tp=8)
    fitted = StepCostModel(card, profile, serving)
    prior = StepCostModel(card, profile, serving, latency=LatencyModels(profile))
    assert fitted.latency.fitted
    new, ctx = np.array([1] * 8), np.array([4096] * 8)
    assert fitted.step_seconds(new, ctx) != prior.step_seconds(new, ctx)


def test_report_shows_measured_prior_and_fitted(
    profiles: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(profiles)
    code, out = invoke("report", "cpu-2core", "--profiles-dir", str(profiles))
    assert code == 0, out
    page = (profiles / "out" / "calibration-cpu-2core.html").read_text()
    assert "not fitted yet" in page  # before the fit: prior only, said so
    assert invoke("fit", "cpu-2core", "--profiles-dir", str(profiles))[0] == 0
    out_file = profiles / "r.html"
    code, out = invoke(
        "report", "cpu-2core", "--profiles-dir", str(profiles), "--out", str(out_file)
    )
    assert code == 0, out
    page = out_file.read_text()
    assert "calibrated: fitted models" in page
    for text in ("<h2>gemm</h2>", "<h2>elementwise</h2>", "held-out median APE %",
                 '"name":"prior"', '"name":"fitted"', "torch.matmul"):  # fmt: skip
        assert text in page


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["fit", "nope"], "nope/profile.yaml: (file): no such profile"),
        (["fit", "../x"], "device-name: '../x' is not a folder name"),
        # past the file system's name limit: ENAMETOOLONG from a stat was exit 1
        (["fit", "x" * 300], "device-name: '" + "x" * 40 + "... (300 bytes)' is not a folder"),
        (["report", "nope"], "no such profile"),
        (["fit", "cpu-2core", "--folds", "1"], "folds: must be at least 2"),
        # more folds than rows was accepted, and labelled the table "99999999999-fold"
        (["fit", "cpu-2core", "--folds", "99999999999"], "folds: 99,999,999,999 exceeds 100"),
        (["fit", "cpu-2core", "--folds", "100"], "folds must not exceed the rows"),
        # a folder or a path under a file as --out: IsADirectoryError / FileExistsError
        (["report", "cpu-2core", "--out", "/tmp"], "--out: is a folder: give a file path"),
        (["report", "cpu-2core", "--out", "/tmp/new/"], "ends in '/', a folder: give a file"),
        (["report", "cpu-2core", "--out", "/etc/hostname/r.html"], "is a file, not a folder"),
        (["measure", "--device-name", "cpu-2core", "--budget-s", "0", "--allow-cpu"],
         "budget-s: must be a finite number > 0"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(profiles: Path, args: list[str], message: str) -> None:
    code, out = invoke(*args, "--profiles-dir", str(profiles))
    assert code == 2
    assert message in out
    assert "Traceback" not in out
    assert len(out.strip().splitlines()) == 1


def test_fit_without_measurements_or_with_a_broken_table(profiles: Path) -> None:
    device = profiles / "cpu-2core"
    (device / "measurements" / "gemm.csv").write_text("op,m,n,k\ngemm,1,2,3\n")
    code, out = invoke("fit", "cpu-2core", "--profiles-dir", str(profiles))
    assert code == 2
    assert "gemm.csv: column latency_us: missing" in out
    shutil.rmtree(device / "measurements")
    code, out = invoke("fit", "cpu-2core", "--profiles-dir", str(profiles))
    assert code == 2
    assert "no measurements" in out


def test_measure_without_a_gpu_exits_2(profiles: Path) -> None:
    pytest.importorskip("torch", reason="the calibration extra (torch) is not installed")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    code, out = invoke("measure", "--device-name", "cpu-2core", "--profiles-dir", str(profiles))
    assert code == 2
    assert "no GPU: torch" in out


def test_run_end_to_end_on_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """measure (real torch timings on this CPU) -> fit -> report, into a fresh profiles dir."""
    pytest.importorskip("torch", reason="the calibration extra (torch) is not installed")
    monkeypatch.chdir(tmp_path)
    dest = tmp_path / "cpu-2core"
    dest.mkdir()
    shutil.copy(FIXTURE / "profile.yaml", dest / "profile.yaml")
    code, out = invoke(
        "run", "--device-name", "cpu-2core", "--profiles-dir", str(tmp_path), "--allow-cpu",
        "--smoke", "--model", "kimi-linear-48b-a3b", "--tp", "8", "--budget-s", "120",
    )  # fmt: skip
    assert code == 0, out
    meas = dest / "measurements"
    assert {p.name for p in meas.iterdir()} == {"gemm.csv", "elementwise.csv", "meta.yaml"}
    assert (tmp_path / "out" / "calibration-cpu-2core.html").exists()
    models = json.loads((dest / "latency_models.json").read_text())["models"]
    # the smoke set times 2 elementwise shapes: too few for its 4 parameters, so it is not
    # fitted (and says so) rather than fitted exactly and called calibrated
    assert {m["op_class"] for m in models} == {"gemm"}
    assert "not fitted: elementwise has 2 distinct shapes" in out
    assert "stopped: complete" in (meas / "meta.yaml").read_text()
    # a second run measures nothing new
    code, out = invoke(
        "measure", "--device-name", "cpu-2core", "--profiles-dir", str(tmp_path), "--allow-cpu",
        "--smoke", "--model", "kimi-linear-48b-a3b", "--tp", "8",
    )  # fmt: skip
    assert code == 0, out
    assert "measured 0 (already there" in out
