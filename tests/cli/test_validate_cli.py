"""`plan validate inferencemax` end to end on a two-point CSV in the dashboard's format."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from typer.testing import CliRunner

from simulator.cli import app

runner = CliRunner()

HEADER = ["model", "sequence", "hwKey", "precision", "tp", "conc", "interactivity_tok_s_user",
          "e2e_latency_s", "tput_per_gpu", "tpPerMw"]  # fmt: skip
ROWS = [
    ["Llama 3.3 70B Instruct", "1K/1K", "h100", "fp8", 8, 4, 113.366, 8.216, 109.521, 1.0],
    ["Llama 3.3 70B Instruct", "1K/1K", "h100", "fp8", 8, 8, 106.631, 8.822, 206.569, 1.0],
    ["Llama 3.3 70B Instruct", "1K/1K", "h200_trt", "fp8", 8, 4, 120.0, 8.0, 120.0, 1.0],
]


def write(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_two_points_json_csv_and_markdown(tmp_path: Path) -> None:
    data = write(tmp_path / "im.csv", HEADER, ROWS)
    doc = tmp_path / "docs" / "validation.md"
    result = runner.invoke(
        app,
        ["validate", "inferencemax", "--data", str(data), "--out", str(tmp_path / "out"),
         "--markdown", str(doc), "--requests-per-conc", "2", "--workers", "1", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["rows"] == 3
    assert report["simulated"] == 2
    assert report["skipped"] == {"TensorRT-LLM (hwKey *_trt): not vLLM": 1}
    (group,) = report["groups"]
    assert (group["model"], group["device"], group["sequence"], group["points"]) == (
        "llama-3.3-70b", "h100", "1K/1K", 2,
    )  # fmt: skip
    assert group["median_ape_tput_pct"] >= 0
    with (tmp_path / "out" / "points.csv").open() as fh:
        points = list(csv.DictReader(fh))
    assert [p["conc"] for p in points] == ["4", "8"]
    text = doc.read_text()
    assert "plan validate inferencemax --data" in text
    assert "--requests-per-conc 2" in text


def test_table_output(tmp_path: Path) -> None:
    data = write(tmp_path / "im.csv", HEADER, ROWS[:1])
    result = runner.invoke(
        app, ["validate", "inferencemax", "--data", str(data), "--requests-per-conc", "1",
              "--workers", "1"],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "llama-3.3-70b" in result.stdout
    assert "skipped rows: none" in result.stderr


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    data = write(tmp_path / "im.csv", HEADER, [[*ROWS[0][:5], "many", *ROWS[0][6:]]])
    result = runner.invoke(app, ["validate", "inferencemax", "--data", str(data)])
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert lines == [f"error: {data}: row 1, column conc: 'many' is not an integer"]

    no_col = write(tmp_path / "nocol.csv", HEADER[:-2], [r[:-2] for r in ROWS])
    result = runner.invoke(app, ["validate", "inferencemax", "--data", str(no_col)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {no_col}: column tput_per_gpu: missing from the header"

    result = runner.invoke(app, ["validate", "inferencemax", "--data", str(data), "--models", "x"])
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
