"""`calibrate fit` / `calibrate report` over a device folder broken in one place (a
measurement CSV or meta.yaml that is no table, a latency out of any kernel's range, a fit
file that is a folder or another device's): one ``error:`` line naming the file and exit 2,
never a traceback or a hang, nothing half-written; and a GEMM table of one shape is refused,
not fitted exactly and marked calibrated.

Each case starts from the committed CPU fixture (``calibration_profiles``), which fits and
reports as it is (tests/calibration/test_calibrate_cli.py)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.calibration.test_calibrate_cli import invoke


def gemm_cell(column: str, value: str) -> Callable[[Path], None]:
    """The first data row's ``column`` of gemm.csv set to ``value``."""

    def edit(device: Path) -> None:
        path = device / "measurements" / "gemm.csv"
        lines = path.read_text().splitlines()
        header = lines[0].split(",")
        row = lines[1].split(",")
        row[header.index(column)] = value
        path.write_text("\n".join([lines[0], ",".join(row), *lines[2:]]) + "\n")

    return edit


def replace(name: str, make: Callable[[Path], Any]) -> Callable[[Path], None]:
    def edit(device: Path) -> None:
        path = device / name
        if path.is_file():
            path.unlink()
        make(path)

    return edit


def meta(text: str) -> Callable[[Path], None]:
    return replace("measurements/meta.yaml", lambda p: p.write_text(text))


def one_gemm_row(device: Path) -> None:
    path = device / "measurements" / "gemm.csv"
    path.write_text("\n".join(path.read_text().splitlines()[:2]) + "\n")


def only_one_gemm_row(device: Path) -> None:
    one_gemm_row(device)
    (device / "measurements" / "elementwise.csv").unlink()


def other_device_fit(device: Path) -> None:
    code, out = invoke("fit", "cpu-2core", "--profiles-dir", str(device.parent))
    assert code == 0, out
    path = device / "latency_models.json"
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "device": "h100"}))


LATENCY = "measurements/gemm.csv: row 1, column latency_us"
CASES: list[tuple[str, str, Callable[[Path], None], str]] = [
    # latencies no kernel has: 1e12 us passed the cell bound and failed a pydantic model
    # (4 lines, exit 1); 1e-9 us was fitted; nan / abc broke the report (exit 1), 0 and -5
    # reported a prior error of inf % and 3,220 %
    ("fit", "latency-1e12", gemm_cell("latency_us", "1e12"), f"{LATENCY}: 1e12 is over 1e+09 us"),
    ("fit", "latency-1e-9", gemm_cell("latency_us", "1e-9"), f"{LATENCY}: 1e-9 is under 0.001 us"),
    ("report", "latency-nan", gemm_cell("latency_us", "nan"), f"{LATENCY}: not a finite number"),
    ("report", "latency-word", gemm_cell("latency_us", "abc"), f"{LATENCY}: not a finite number"),
    ("report", "latency-zero", gemm_cell("latency_us", "0"), f"{LATENCY}: must be > 0"),
    ("report", "latency-negative", gemm_cell("latency_us", "-5"), f"{LATENCY}: must be > 0"),
    ("report", "latency-1e300", gemm_cell("latency_us", "1e300"), f"{LATENCY}: 1e300"),
    # a measurement table that is no file: a FIFO hung both; a dangling link left gemm unfitted
    ("fit", "gemm-fifo", replace("measurements/gemm.csv", os.mkfifo), "(file): is a FIFO"),
    ("report", "gemm-fifo", replace("measurements/gemm.csv", os.mkfifo), "is a FIFO"),
    ("fit", "gemm-dangling", replace("measurements/gemm.csv",
                                     lambda p: p.symlink_to(p.parent / "gone.csv")),
     "gemm.csv: (file):"),
    # meta.yaml (read by the report only): YAML errors, a list, runs of strings were exit 1
    ("report", "meta-not-yaml", meta("runs: [a, {b\n"), "meta.yaml: "),
    ("report", "meta-a-list", meta("- a\n"), "meta.yaml: (yaml): a mapping expected, got list"),
    ("report", "meta-runs-strings", meta("runs: [a, b]\n"), "meta.yaml: runs: a list of mappings"),
    ("report", "meta-a-folder", replace("measurements/meta.yaml", Path.mkdir),
     "meta.yaml: (file): is a directory"),
    # the fit file: a folder of its name was exit 1 (and left the .tmp); another device's
    # fit was reported as this device's
    ("fit", "fit-file-a-folder", replace("latency_models.json", Path.mkdir),
     "latency_models.json: (write): cannot write: Is a directory"),
    ("report", "fit-of-another-device", other_device_fit,
     "latency_models.json: device: 'h100': fitted for another device than 'cpu-2core'"),
    # one GEMM shape was fitted with 4 parameters (training error 0 %) and called calibrated
    ("fit", "gemm-one-row-alone", only_one_gemm_row, "gemm has 1 distinct shape"),
]  # fmt: skip


@pytest.mark.usefixtures("no_hang")
@pytest.mark.parametrize(("command", "name", "edit", "message"), CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CASES])  # fmt: skip
def test_a_broken_device_folder_is_one_line_and_exit_2(
    calibration_profiles: Path,
    tmp_path: Path,
    command: str,
    name: str,
    edit: Callable[[Path], None],
    message: str,
) -> None:
    device = calibration_profiles / "cpu-2core"
    edit(device)
    before = (device / "profile.yaml").read_text()
    extra = ["--out", str(tmp_path / "r.html")] if command == "report" else []
    code, out = invoke(command, "cpu-2core", "--profiles-dir", str(calibration_profiles), *extra)
    assert code == 2, out
    assert "Traceback" not in out
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    assert lines[0].startswith("error: ")
    assert message in lines[0]
    assert not list(device.glob(".*.tmp"))  # nothing half-written left behind
    if command == "fit" and name != "fit-of-another-device":
        assert (device / "profile.yaml").read_text() == before  # not marked calibrated


def test_a_class_with_too_few_shapes_stays_on_its_prior(calibration_profiles: Path) -> None:
    device = calibration_profiles / "cpu-2core"
    one_gemm_row(device)
    code, out = invoke("fit", "cpu-2core", "--profiles-dir", str(calibration_profiles))
    assert code == 0, out
    assert "not fitted: gemm has 1 distinct shape (1 rows)" in out
    assert "it stays on its prior" in out
    doc = json.loads((device / "latency_models.json").read_text())
    assert [m["op_class"] for m in doc["models"]] == ["elementwise"]


def test_measure_into_a_measurements_file_is_one_line(calibration_profiles: Path) -> None:
    pytest.importorskip("torch", reason="the calibration extra (torch) is not installed")
    device = calibration_profiles / "cpu-2core"
    shutil.rmtree(device / "measurements")
    (device / "measurements").write_text("not a folder")
    where = ["--device-name", "cpu-2core", "--profiles-dir", str(calibration_profiles)]
    code, out = invoke("measure", *where, "--allow-cpu", "--smoke", "--budget-s", "1")
    assert code == 2, out
    assert (
        out.strip()
        .splitlines()[-1]
        .startswith(f"error: {device / 'measurements'}: (folder): is a file, not a folder")
    )


def test_the_report_is_not_written_over_what_it_reads(calibration_profiles: Path) -> None:
    gemm = calibration_profiles / "cpu-2core" / "measurements" / "gemm.csv"
    before = gemm.read_bytes()
    code, out = invoke("report", "cpu-2core", "--profiles-dir", str(calibration_profiles),
                       "--out", str(gemm))  # fmt: skip
    assert code == 2, out
    assert f"error: {gemm}: --out: is the input {gemm} too" in out
    assert gemm.read_bytes() == before
