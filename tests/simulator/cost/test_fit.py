"""Fitting: known coefficients are recovered from synthetic rows; the Vidur conversion."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulator import catalog
from simulator.cost.fit import (
    fit_alpha_beta,
    fit_op_class,
    fit_roofline,
    kfold_errors,
    measured_ops,
)
from simulator.cost.latency import roofline_seconds
from simulator.cost.latency_file import RooflineParams
from simulator.cost.predict import op_rows

H100 = catalog.hardware_profile("h100")
PEAK = H100.peak_flops_per_s.bf16
BW = H100.memory_bw_bytes_per_s
TRUE = RooflineParams(compute_efficiency=0.68, memory_efficiency=0.9, launch_s=5e-6, sharpness=3.0)


def gemm_table(rng: np.random.Generator, noise: float, rows: int = 300) -> pd.DataFrame:
    m = np.exp(rng.uniform(0.0, np.log(8192.0), rows)).round()
    n = rng.choice([1024.0, 4096.0, 8192.0, 28672.0], rows)
    k = rng.choice([1024.0, 7168.0, 8192.0], rows)
    flops = 2 * m * n * k
    nbytes = (m * k + m * n) * 2 + n * k * 2
    t = roofline_seconds(TRUE, flops, nbytes, np.full(rows, PEAK), BW, np.ones(rows))
    t = t * np.exp(rng.normal(0.0, noise, rows))
    return pd.DataFrame(
        {"op": "gemm", "dtype": "bf16", "m": m, "n": n, "k": k, "latency_us": t * 1e6}
    )


def test_fit_roofline_recovers_known_parameters() -> None:
    rng = np.random.default_rng(7)
    table = gemm_table(rng, noise=0.01)
    r = op_rows(table, H100, "synthetic")
    fitted = fit_roofline(
        r.flops, r.bytes, r.peak_flops_per_s, BW, r.kernels, table["latency_us"] * 1e-6
    )
    assert fitted.compute_efficiency == pytest.approx(TRUE.compute_efficiency, rel=0.02)
    assert fitted.memory_efficiency == pytest.approx(TRUE.memory_efficiency, rel=0.02)
    assert fitted.launch_s == pytest.approx(TRUE.launch_s, rel=0.1)
    assert fitted.sharpness == pytest.approx(TRUE.sharpness, rel=0.2)


def test_fit_is_deterministic(tmp_path: Path) -> None:
    table = gemm_table(np.random.default_rng(3), noise=0.02)
    f = tmp_path / "a.csv"
    table.to_csv(f, index=False)
    a = fit_op_class("gemm", table, H100, f)
    b = fit_op_class("gemm", table, H100, f)
    assert a.roofline == b.roofline


def test_fit_alpha_beta_recovers_known_line_with_relative_error() -> None:
    rng = np.random.default_rng(11)
    s = np.exp(rng.uniform(np.log(2e3), np.log(6e7), 200))
    t = (20e-6 + 4e-12 * s) * np.exp(rng.normal(0.0, 0.01, s.size))
    ab = fit_alpha_beta(s, t)
    assert ab.alpha_s == pytest.approx(20e-6, rel=0.02)
    assert ab.beta_s_per_byte == pytest.approx(4e-12, rel=0.02)


def test_fit_alpha_beta_clamps_to_non_negative() -> None:
    s = np.array([1e3, 1e6, 1e7])
    ab = fit_alpha_beta(s, np.array([0.5e-9, 1e-6, 1e-5]))  # best line: negative intercept
    assert ab.alpha_s >= 0.0
    assert ab.beta_s_per_byte > 0.0


def test_kfold_errors_are_about_zero_on_noiseless_data() -> None:
    table = gemm_table(np.random.default_rng(5), noise=0.0, rows=100)
    m = measured_ops("gemm", table, H100, "synthetic")
    kf = kfold_errors("gemm", m, H100, folds=5, seed=0)
    assert kf.heldout_ape.shape == (100,)
    assert np.median(kf.heldout_ape) < 0.1
    assert np.max(kf.heldout_ape) < 1.0
    assert np.median(kf.prior_ape) > 1.0  # the prior is a different roofline


def test_fit_op_class_records_ranges_errors_and_provenance(tmp_path: Path) -> None:
    table = gemm_table(np.random.default_rng(9), noise=0.01, rows=50)
    f = tmp_path / "gemm.csv"
    table.to_csv(f, index=False)
    model = fit_op_class("gemm", table, H100, f)
    r = op_rows(table, H100, f)
    assert model.flops_range == (r.flops.min(), r.flops.max())
    assert model.bytes_range == (r.bytes.min(), r.bytes.max())
    assert model.measurements.rows == 50
    assert len(model.measurements.sha256) == 64
    assert model.fit_error.n == 50
    assert model.fit_error.median_ape < 2.0


def test_collective_fit_by_world_size(tmp_path: Path) -> None:
    s = np.tile(np.geomspace(1e4, 1e8, 20), 2)
    world = np.repeat([2.0, 8.0], 20)
    t = np.where(world == 2, 10e-6 + 3e-12 * s, 25e-6 + 5e-12 * s)
    table = pd.DataFrame(
        {"op": "allreduce", "bytes": s, "world_size": world, "latency_us": t * 1e6}
    )
    f = tmp_path / "ar.csv"
    table.to_csv(f, index=False)
    model = fit_op_class("allreduce", table, H100, f)
    assert model.alpha_beta is not None
    assert model.alpha_beta[2].alpha_s == pytest.approx(10e-6, rel=1e-6)
    assert model.alpha_beta[8].beta_s_per_byte == pytest.approx(5e-12, rel=1e-6)
    assert model.fit_error.max_ape < 1e-6


# ----------------------------------------------------------------------------- vidur


def test_vidur_conversion_by_hand(shared_data: Path) -> None:
    from simulator.cost.vidur import vidur_tables

    tables = vidur_tables(shared_data / "vidur_profiling")
    gemm = tables[0].table
    assert set(gemm["vidur_op"]) == {
        "attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj",
    }  # fmt: skip
    up1 = gemm[(gemm.vidur_op == "mlp_up_proj") & (gemm.vidur_tp == 1) & (gemm.m == 1)].iloc[0]
    assert (up1.n, up1.k) == (57344.0, 8192.0)
    assert up1.latency_us == pytest.approx(311.0)
    # a one-token up-projection reads the weights once: ~0.28 ms at 3.35 TB/s
    assert pytest.approx(280.0, rel=0.01) == 8192 * 57344 * 2 / BW * 1e6
    pre8 = gemm[(gemm.vidur_op == "attn_pre_proj") & (gemm.vidur_tp == 8)].iloc[0]
    assert (pre8.n, pre8.k) == (1280.0, 8192.0)
    down4 = gemm[(gemm.vidur_op == "mlp_down_proj") & (gemm.vidur_tp == 4)].iloc[0]
    assert (down4.n, down4.k) == (8192.0, 7168.0)
    post2 = gemm[(gemm.vidur_op == "attn_post_proj") & (gemm.vidur_tp == 2)].iloc[0]
    assert (post2.n, post2.k) == (8192.0, 4096.0)
    # large GEMMs land at ~0.7 of the dense bf16 peak: the shapes are right
    big = gemm[gemm.m == 4096]
    eff = 2 * big.m * big.n * big.k / (big.latency_us * 1e-6) / PEAK
    assert eff.between(0.5, 0.9).all()

    ar = tables[-1].table
    assert set(ar["op"]) == {"allreduce"}
    assert set(ar["world_size"]) == {2.0, 4.0, 8.0}
    first = ar.iloc[0]
    assert (first.bytes, first.world_size, first.latency_us) == (2048.0, 8.0, pytest.approx(37.0))


def test_vidur_fit_beats_the_prior_on_gemm(shared_data: Path) -> None:
    from simulator.cost.measurements import measured_by_class
    from simulator.cost.vidur import vidur_tables

    by_class = measured_by_class(vidur_tables(shared_data / "vidur_profiling"), H100)
    m, files = by_class["gemm"]
    kf = kfold_errors("gemm", m, H100, folds=5, seed=0)
    assert np.median(kf.heldout_ape) < np.median(kf.prior_ape)
    assert files[0].name.startswith("compute__h100")
