"""`plan validate silicon` end to end: a hand-made CSV, bad input, and two real points."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.specs import SpecError
from simulator.validation import silicon

runner = CliRunner()

HEADER = ["id", "silicon_data_source", "backend", "backend_version", "model_path", "system",
          "precision", "mode", "isl", "osl", "gemm_quant_mode", "moe_quant_mode", "batch_size",
          "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size",
          "silicon_ttft_ms", "silicon_tpot_ms"]  # fmt: skip
LLAMA_8B = ["a", "silicon_concurrency=4", "vllm", "0.12.0", "nvidia/Llama-3.1-8B-Instruct-FP8",
            "h200_sxm", "fp8", "agg", "256", "32", "fp8", "fp8", "4.0", "1.0", "1.0", "", "1.0",
            "1.0", "40.0", "5.0"]  # fmt: skip
TRT = ["b", "", "trtllm", *LLAMA_8B[3:]]


def write(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_hand_made_csv_json_points_and_markdown(tmp_path: Path) -> None:
    data = write(tmp_path / "s.csv", HEADER, [LLAMA_8B, TRT])
    doc = tmp_path / "docs" / "validation-silicon.md"
    result = runner.invoke(
        app,
        ["validate", "silicon", "--data", str(data), "--out", str(tmp_path / "out"),
         "--markdown", str(doc), "--requests-per-conc", "2", "--workers", "1", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["rows"], report["simulated"]) == (2, 1)
    assert report["skipped"] == {"backend 'trtllm': not vLLM": 1}
    with (tmp_path / "out" / "points.csv").open() as fh:
        (point,) = list(csv.DictReader(fh))
    assert (point["card"], point["device"], point["conc"], point["num_requests"]) == (
        "llama-3.1-8b", "h200", "4", "8",
    )  # fmt: skip
    assert point["finished"] == "8"
    ttft, tpot = float(point["sim_ttft_ms"]), float(point["sim_tpot_ms"])
    assert float(point["err_ttft_pct"]) == pytest.approx((ttft - 40.0) / 40.0 * 100)
    assert float(point["err_tpot_pct"]) == pytest.approx((tpot - 5.0) / 5.0 * 100)
    (group,) = report["groups"]
    assert (group["model"], group["system"], group["points"]) == ("llama-3.1-8b", "h200", 1)
    assert group["median_ape_ttft_pct"] == pytest.approx(abs(float(point["err_ttft_pct"])))
    assert report["overall"]["bias_tpot_pct"] == pytest.approx(float(point["err_tpot_pct"]))
    text = doc.read_text()
    assert "plan validate silicon --data" in text
    assert "--requests-per-conc 2" in text
    assert "This is a validation set" in text


def test_table_output(tmp_path: Path) -> None:
    data = write(tmp_path / "s.csv", HEADER, [LLAMA_8B])
    result = runner.invoke(
        app, ["validate", "silicon", "--data", str(data), "--requests-per-conc", "1",
              "--workers", "1"],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "llama-3.1-8b" in result.stdout
    assert "skipped rows: none" in result.stderr


def _one_line_error(args: list[str]) -> str:
    result = runner.invoke(app, ["validate", "silicon", *args])
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.csv", HEADER, [[*LLAMA_8B[:12], "many", *LLAMA_8B[13:]]])
    assert _one_line_error(["--data", str(bad)]) == (
        f"error: {bad}: row 1, column batch_size: 'many' is not a number"
    )
    cols = [c for c in HEADER if c != "silicon_tpot_ms"]
    no_col = write(tmp_path / "nocol.csv", cols, [LLAMA_8B[:-1]])
    assert _one_line_error(["--data", str(no_col)]) == (
        f"error: {no_col}: column silicon_tpot_ms: missing from the header"
    )
    assert _one_line_error(["--data", str(tmp_path)]) == (
        f"error: {tmp_path}: (file): is a directory, not a CSV file (give silicon_sample.csv)"
    )
    good = write(tmp_path / "good.csv", HEADER, [LLAMA_8B])
    assert "limit: must be >= 1" in _one_line_error(["--data", str(good), "--limit", "0"])
    assert "models: unknown ['nope']" in _one_line_error(["--data", str(good), "--models", "nope"])
    assert "replicates: must be >= 1, got 0" in _one_line_error(
        ["--data", str(good), "--replicates", "0"]
    )


def test_replicates_simulate_every_point_under_each_seed(tmp_path: Path) -> None:
    data = write(tmp_path / "s.csv", HEADER, [LLAMA_8B])
    doc = tmp_path / "doc.md"

    def run(*extra: str) -> dict[str, Any]:
        result = runner.invoke(
            app,
            ["validate", "silicon", "--data", str(data), "--requests-per-conc", "3",
             "--workers", "1", "--no-cache", "--json", *extra],
        )  # fmt: skip
        assert result.exit_code == 0, result.stderr
        out: dict[str, Any] = json.loads(result.stdout)
        return out

    three = run("--seed", "4", "--replicates", "3", "--markdown", str(doc))
    assert [r["seed"] for r in three["replicates"]] == [4, 5, 6]
    for r in three["replicates"]:  # each replicate is that seed's own validation
        alone = run("--seed", str(r["seed"]))["overall"]
        assert r["median_ape_ttft_pct"] == pytest.approx(alone["median_ape_ttft_pct"])
        assert r["bias_tpot_pct"] == pytest.approx(alone["bias_tpot_pct"])
    assert three["overall"] == run("--seed", "4")["overall"]  # the tables: the first seed's
    ttft = {r["median_ape_ttft_pct"] for r in three["replicates"]}
    assert len(ttft) > 1  # the seeds draw other loads
    text = doc.read_text()
    assert "--replicates 3" in text
    assert "--seed 4" in text
    assert "**Seeds**: every point simulated under seeds 4, 5, 6" in text


def test_two_real_points_with_limit(tmp_path: Path) -> None:
    try:
        silicon.default_data()
    except SpecError as exc:
        pytest.skip(f"aiconfigurator-core's silicon_sample.csv is not available: {exc}")
    result = runner.invoke(
        app,
        ["validate", "silicon", "--limit", "2", "--models", "llama-3.1-8b",
         "--requests-per-conc", "2", "--workers", "1", "--out", str(tmp_path), "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["simulated"] == 2
    assert report["not_selected"] > 1000  # every other trusted mappable point of the file
    assert report["skipped"]["backend 'trtllm': not vLLM"] > 0
    with (tmp_path / "points.csv").open() as fh:
        points = list(csv.DictReader(fh))
    assert [p["card"] for p in points] == ["llama-3.1-8b"] * 2
    assert all(float(p["sim_ttft_ms"]) > 0 and float(p["sim_tpot_ms"]) > 0 for p in points)
