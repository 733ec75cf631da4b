"""`plan run --out DIR --format csv|parquet|both`: the tables in either format, the same
content in both, and a rerun in another format never leaving the old files beside the new."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.cli.run import RUN_FILES
from simulator.outputs import MANIFEST

runner = CliRunner()

SCENARIO = """
name: formats
model: llama-3.1-8b
device: h100
serving: {tp: 1}
workload: {kind: agentic, sessions: 3, concurrency: 2}
duration_s: 120.0
"""
DISAGG = """
name: formats-pd
model: llama-3.3-70b
device: h100
serving: {tp: 8}
workload: {kind: agentic, sessions: 3, concurrency: 2}
duration_s: 300.0
disaggregation: {prefill_replicas: 1, decode_replicas: 1, send_back: true}
"""


def run(tmp: Path, text: str, *args: str) -> tuple[Path, dict[str, object]]:
    f = tmp / "s.yaml"
    f.write_text(text)
    out = tmp / "out"
    result = runner.invoke(app, ["run", str(f), "--out", str(out), "--json", *args])
    assert result.exit_code == 0, result.stderr
    return out, json.loads(result.stdout)


def files(out: Path) -> set[str]:
    return {p.name for p in out.iterdir()} - {MANIFEST}


def test_both_formats_hold_the_same_tables(tmp_path: Path) -> None:
    out, _ = run(tmp_path, SCENARIO, "--format", "both")
    assert files(out) == {"requests.csv", "requests.parquet", "steps.csv", "steps.parquet",
                          "summary.json"}  # fmt: skip
    for name in ("requests", "steps"):
        csv = pd.read_csv(out / f"{name}.csv")
        parquet = pd.read_parquet(out / f"{name}.parquet")
        assert len(parquet) == len(csv) > 0, name
        assert list(parquet.columns) == list(csv.columns), name
        numbers = csv.select_dtypes("number").columns
        pd.testing.assert_frame_equal(
            parquet[numbers].reset_index(drop=True), csv[numbers], check_dtype=False
        )
    manifest = json.loads((out / MANIFEST).read_text())
    assert sorted(manifest["files"]) == sorted(files(out))


def test_a_rerun_in_another_format_drops_the_old_files(tmp_path: Path) -> None:
    out, _ = run(tmp_path, SCENARIO)  # csv, the default
    assert files(out) == {"requests.csv", "steps.csv", "summary.json"}
    out, data = run(tmp_path, SCENARIO, "--format", "parquet")
    assert files(out) == {"requests.parquet", "steps.parquet", "summary.json"}
    finished = pd.read_parquet(out / "requests.parquet").status.eq("finished").sum()
    assert finished == data["requests_finished"]
    out, _ = run(tmp_path, SCENARIO, "--format", "csv")
    assert files(out) == {"requests.csv", "steps.csv", "summary.json"}


def test_a_disaggregated_run_writes_transfers_and_pins_in_parquet(tmp_path: Path) -> None:
    out, data = run(tmp_path, DISAGG, "--format", "parquet")
    assert files(out) == {"requests.parquet", "steps.parquet", "transfers.parquet",
                          "pins.parquet", "summary.json"}  # fmt: skip
    transfers = pd.read_parquet(out / "transfers.parquet")
    assert len(transfers) > 0
    assert data["disaggregation"] == "1P1D send-back"


def test_every_file_a_run_writes_is_in_the_manifest_of_known_names() -> None:
    for table in ("requests", "steps", "transfers", "pins"):
        for ext in ("csv", "parquet"):
            assert f"{table}.{ext}" in RUN_FILES
    assert "summary.json" in RUN_FILES


@pytest.mark.parametrize("fmt", ["xml", "CSV", ""])
def test_an_unknown_format_is_refused_before_simulating(tmp_path: Path, fmt: str) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(SCENARIO)
    result = runner.invoke(app, ["run", str(f), "--out", str(tmp_path / "o"), "--format", fmt])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: (arguments): format: unknown format {fmt!r}; use csv, parquet or both"
    )
    assert not (tmp_path / "o").exists()
