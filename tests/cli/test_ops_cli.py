"""`plan ops predict`, `plan fit` and `plan validate ops` end to end."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from simulator import catalog
from simulator.cli import app
from simulator.measured.package import tables_available as tables_installed

runner = CliRunner()

# one row of every op class, then the same op with a bigger shape
SHAPES: list[dict[str, object]] = [
    {"op": "gemm", "dtype": "bf16", "m": 16, "n": 4096, "k": 4096},
    {"op": "moe", "dtype": "fp8", "num_tokens": 64, "hidden": 7168, "inter": 2048,
     "num_experts": 256, "topk": 8, "ep": 8},
    {"op": "mla_decode", "dtype": "bf16", "batch": 8, "ctx_len": 4096, "num_heads": 16,
     "kv_dtype": "fp8_ds_mla"},
    {"op": "mla_prefill", "dtype": "bf16", "batch": 1, "seq_len": 2048, "prefix_len": 0,
     "num_heads": 16, "kv_dtype": "bf16"},
    {"op": "attn_decode", "dtype": "bf16", "batch": 8, "ctx_len": 4096, "num_heads": 32,
     "num_kv_heads": 8, "head_dim": 128, "kv_dtype": "fp8"},
    {"op": "attn_prefill", "dtype": "bf16", "batch": 1, "seq_len": 2048, "prefix_len": 0,
     "num_heads": 32, "num_kv_heads": 8, "head_dim": 128},
    {"op": "kda_prefill", "dtype": "bf16", "batch": 1, "seq_len": 2048, "num_heads": 32,
     "head_dim": 128},
    {"op": "kda_decode", "dtype": "bf16", "batch": 8, "num_heads": 32, "head_dim": 128},
    {"op": "allreduce", "bytes": 1 << 20, "world_size": 8},
    {"op": "allgather", "bytes": 1 << 20, "world_size": 8},
    {"op": "reducescatter", "bytes": 1 << 20, "world_size": 8},
    {"op": "alltoall", "bytes": 1 << 20, "world_size": 8},
]  # fmt: skip
GROW = {
    "gemm": "m", "moe": "num_tokens", "mla_decode": "ctx_len", "mla_prefill": "seq_len",
    "attn_decode": "batch", "attn_prefill": "seq_len", "kda_prefill": "seq_len",
    "kda_decode": "batch", "allreduce": "bytes", "allgather": "bytes",
    "reducescatter": "bytes", "alltoall": "bytes",
}  # fmt: skip


def plan(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def write_csv(path: Path, rows: list[dict[str, object]]) -> Path:
    columns: list[str] = []
    for r in rows:
        columns += [c for c in r if c not in columns]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, restval="")
        w.writeheader()
        w.writerows(rows)
    return path


def shapes_with_bigger(factor: int = 4) -> list[dict[str, object]]:
    rows = []
    for r in SHAPES:
        big = dict(r)
        col = GROW[str(r["op"])]
        big[col] = int(r[col]) * factor  # type: ignore[call-overload]
        rows += [r, big]
    return rows


@pytest.mark.parametrize("device", catalog.device_names())
def test_predict_every_op_class_on_every_device(tmp_path: Path, device: str) -> None:
    src = write_csv(tmp_path / "ops.csv", shapes_with_bigger())
    out = tmp_path / "out.csv"
    code, _, err = plan("ops", "predict", "--device", device, "--input", str(src),
                        "--output", str(out))  # fmt: skip
    assert code == 0, err
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * len(SHAPES)
    lat = np.array([float(r["latency_us"]) for r in rows])
    assert np.all(np.isfinite(lat))
    assert np.all(lat > 0)
    # measured GEMMs are not monotone in m (Blackwell's BF16 4096 x 4096 GEMM takes 12.2 us
    # at m = 16 and 9.1 us at m = 64 in the public tables: another kernel); the rest are,
    # up to timing noise
    ops_ = [r["op"] for r in rows[0::2]]
    grows = np.array([op != "gemm" for op in ops_])
    assert np.all(lat[1::2][grows] >= 0.9 * lat[0::2][grows]), "a bigger shape was much faster"
    assert {r["source"] for r in rows} <= {"measured", "fitted", "prior"}
    assert {r["extrapolated"] for r in rows} <= {"True", "False"}


def test_predict_json_and_csv_to_stdout(tmp_path: Path) -> None:
    src = write_csv(tmp_path / "ops.csv", SHAPES)
    code, stdout, _ = plan("ops", "predict", "--device", "mi355x", "--input", str(src), "--json")
    assert code == 0
    data = json.loads(stdout)
    assert [d["op"] for d in data] == [r["op"] for r in SHAPES]
    assert data[0]["m"] == 16
    assert "num_tokens" not in data[0]
    # MI355X has no public tables: transferred from a measured device when they are installed
    assert data[0]["source"] == ("fitted" if tables_installed() else "prior")
    assert data[0]["extrapolated"] is tables_installed()
    code, stdout, _ = plan("ops", "predict", "--device", "mi355x", "--input", str(src))
    assert code == 0
    assert stdout.splitlines()[0].endswith("latency_us,source,extrapolated")


def test_predict_uses_a_fitted_model_and_flags_extrapolation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_tables: None
) -> None:
    import hardware_profiles

    rng = np.random.default_rng(0)
    m = rng.integers(1, 512, 60)
    meas = [
        {"op": "gemm", "dtype": "bf16", "m": int(x), "n": 4096, "k": 4096,
         "latency_us": 5.0 + 2 * 4096 * 4096 * 2 / 3e12 * 1e6 + x * 0.01}
        for x in m
    ]  # fmt: skip
    profiles = tmp_path / "profiles"
    (profiles / "h100").mkdir(parents=True)
    code, _, err = plan("fit", "--device", "h100", "--measurements",
                        str(write_csv(tmp_path / "m.csv", meas)),
                        "--out", str(profiles / "h100" / "latency_models.json"))  # fmt: skip
    assert code == 0, err
    monkeypatch.setattr(hardware_profiles, "PROFILES_DIR", profiles)
    rows = [
        {"op": "gemm", "dtype": "bf16", "m": 64, "n": 4096, "k": 4096},
        {"op": "gemm", "dtype": "bf16", "m": 100_000, "n": 4096, "k": 4096},
        {"op": "allreduce", "bytes": 4096, "world_size": 8},
    ]
    src = write_csv(tmp_path / "ops.csv", rows)
    code, stdout, err = plan("ops", "predict", "--device", "h100", "--input", str(src), "--json")
    assert code == 0, err
    data = json.loads(stdout)
    assert [d["source"] for d in data] == ["fitted", "fitted", "prior"]
    assert [d["extrapolated"] for d in data] == [False, True, False]


@pytest.mark.parametrize(
    ("rows", "where"),
    [
        ([{"op": "gemm", "dtype": "bf16", "m": 1, "n": 2, "k": 3},
          {"op": "conv2d", "dtype": "bf16", "m": 1, "n": 2, "k": 3}], "row 2, column op"),
        ([{"op": "gemm", "dtype": "bf16", "m": 1, "n": 2, "k": 3},
          {"op": "gemm", "dtype": "bf16", "m": 1, "n": 2, "k": 3},
          {"op": "gemm", "dtype": "bf16", "m": 1, "n": 2, "k": ""}], "row 3, column k"),
        ([{"op": "gemm", "dtype": "bf16", "m": 1, "n": 2}], "row 1, column k"),
        ([{"op": "gemm", "dtype": "bf16", "m": "abc", "n": 2, "k": 3}], "row 1, column m"),
        ([{"op": "gemm", "dtype": "bf16", "m": -1, "n": 2, "k": 3}], "row 1, column m"),
        ([{"op": "gemm", "dtype": "int3", "m": 1, "n": 2, "k": 3}], "row 1, column dtype"),
        ([{"op": "allreduce", "bytes": 1, "world_size": 0}], "row 1, column world_size"),
        ([{"op": "attn_decode", "batch": 1, "ctx_len": 2, "num_heads": 1,
           "num_kv_heads": 1, "head_dim": 64}], "row 1, column kv_dtype"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_naming_row_and_column(
    tmp_path: Path, rows: list[dict[str, object]], where: str
) -> None:
    src = write_csv(tmp_path / "ops.csv", rows)
    code, stdout, stderr = plan("ops", "predict", "--device", "h100", "--input", str(src))
    assert code == 2
    assert stdout == ""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: {src}: {where}: ")


def synthetic_measurements(tmp_path: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(1)
    rows: list[dict[str, object]] = []
    for m in np.unique(np.geomspace(1, 8192, 40).round()):
        flops, nbytes = 2 * m * 8192 * 8192, (2 * m * 8192) * 2 + 8192 * 8192 * 2
        t = max(flops / 7e14, nbytes / 3e12) + 6e-6
        rows.append({"op": "gemm", "dtype": "bf16", "m": int(m), "n": 8192, "k": 8192,
                     "latency_us": t * 1e6 * np.exp(rng.normal(0, 0.01))})  # fmt: skip
    coll: list[dict[str, object]] = []
    for world in (2, 8):
        for s in np.geomspace(4096, 1 << 26, 15):
            t = 10e-6 * world / 2 + s / 2e11
            coll.append({"op": "allreduce", "bytes": int(s), "world_size": world,
                         "latency_us": t * 1e6})  # fmt: skip
    return write_csv(tmp_path / "gemm.csv", rows), write_csv(tmp_path / "ar.csv", coll)


def test_fit_and_validate_on_synthetic_measurements(tmp_path: Path) -> None:
    from simulator.cost.latency_file import load_latency_models

    gemm, ar = synthetic_measurements(tmp_path)
    out = tmp_path / "latency_models.json"
    code, stdout, err = plan("fit", "--device", "h100", "--measurements", str(gemm),
                             "--measurements", str(ar), "--out", str(out))  # fmt: skip
    assert code == 0, err
    assert "gemm" in stdout
    assert "allreduce" in stdout
    doc = load_latency_models(out)
    assert [m.op_class for m in doc.models] == ["gemm", "allreduce"]
    n_gemm = len(gemm.read_text().splitlines()) - 1
    assert doc.models[0].measurements.rows == n_gemm
    assert doc.models[0].fit_error.median_ape < 3
    code, stdout, err = plan("validate", "ops", "--device", "h100", "--measurements", str(gemm),
                             "--measurements", str(ar), "--folds", "4", "--json")  # fmt: skip
    assert code == 0, err
    res = {r["op_class"]: r for r in json.loads(stdout)["op_classes"]}
    assert res["gemm"]["rows"] == n_gemm
    assert res["gemm"]["fitted_heldout_median_ape"] < 3
    assert res["allreduce"]["fitted_heldout_max_ape"] < 1e-3
    code, stdout, _ = plan("validate", "ops", "--device", "h100", "--measurements", str(gemm))
    assert code == 0
    assert "prior median" in stdout


def test_fit_and_validate_bad_input(tmp_path: Path) -> None:
    code, _, err = plan("fit", "--device", "h100", "--out", str(tmp_path / "x.json"))
    assert code == 2
    assert "--measurements" in err
    empty = tmp_path / "empty.csv"
    empty.write_text("op,dtype,m,n,k,latency_us\n")
    code, _, err = plan("fit", "--device", "h100", "--measurements", str(empty),
                        "--out", str(tmp_path / "x.json"))  # fmt: skip
    assert code == 2
    assert "no measurement rows" in err
    bad = write_csv(tmp_path / "bad.csv", [{"op": "gemm", "dtype": "bf16", "m": 1, "n": 1,
                                            "k": 1, "latency_us": 0}])  # fmt: skip
    code, _, err = plan("validate", "ops", "--device", "h100", "--measurements", str(bad))
    assert code == 2
    assert "row 1, column latency_us" in err
    nolat = write_csv(tmp_path / "nolat.csv", [{"op": "gemm", "dtype": "bf16", "m": 1, "n": 1,
                                                "k": 1}])  # fmt: skip
    code, _, err = plan("fit", "--device", "h100", "--measurements", str(nolat),
                        "--out", str(tmp_path / "x.json"))  # fmt: skip
    assert code == 2
    assert "latency_us" in err


def test_fit_and_validate_on_vidur(shared_data: Path, tmp_path: Path) -> None:
    vidur = str(shared_data / "vidur_profiling")
    out = tmp_path / "latency_models.json"
    code, stdout, err = plan("fit", "--device", "h100", "--vidur", vidur, "--out", str(out))
    assert code == 0, err
    assert "gemm" in stdout
    assert "allreduce" in stdout
    code, stdout, err = plan("validate", "ops", "--device", "h100", "--vidur", vidur, "--json")
    assert code == 0, err
    res = {r["op_class"]: r for r in json.loads(stdout)["op_classes"]}
    assert res["gemm"]["rows"] == 4176
    assert res["allreduce"]["rows"] == 2982
    assert res["gemm"]["fitted_heldout_median_ape"] < res["gemm"]["prior_median_ape"]
