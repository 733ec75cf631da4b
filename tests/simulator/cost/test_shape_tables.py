"""Measured GEMM shape tables: they correct the smooth fit where it was measured, only there."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simulator import catalog
from simulator.cost.fit import fit_measured, kfold_errors, measured_ops
from simulator.cost.latency import LatencyModels, roofline_seconds
from simulator.cost.latency_file import LatencyModelFile, RooflineParams
from simulator.cost.step import StepCostModel
from simulator.specs import ServingConfig

H100 = catalog.hardware_profile("h100")
TRUE = RooflineParams(compute_efficiency=0.7, memory_efficiency=0.9, launch_s=5e-6, sharpness=4)
SHAPES = [(1280.0, 8192.0), (8192.0, 1024.0), (7168.0, 3584.0)]


def staircase_table() -> pd.DataFrame:
    """A roofline with a kernel-selection step: 128 < m <= 512 runs 30 % slower."""
    m = np.tile(np.arange(8.0, 2049.0, 8.0), len(SHAPES))
    n = np.repeat([s[0] for s in SHAPES], m.size // len(SHAPES))
    k = np.repeat([s[1] for s in SHAPES], m.size // len(SHAPES))
    flops, moved = 2 * m * n * k, (m * k + m * n) * 2 + n * k * 2
    t = roofline_seconds(TRUE, flops, moved, np.full(m.size, 989e12), 3.35e12, np.ones(m.size))
    t = t * np.where((m > 128) & (m <= 512), 1.3, 1.0)
    return pd.DataFrame({"op": "gemm", "dtype": "bf16", "m": m, "n": n, "k": k,
                         "latency_us": t * 1e6})  # fmt: skip


def test_tables_capture_what_the_smooth_fit_cannot() -> None:
    rows = measured_ops("gemm", staircase_table(), H100, "synthetic")
    kf = kfold_errors("gemm", rows, H100, folds=5, seed=0)
    # interpolating measured neighbours: only the two m points beside each step miss
    assert np.median(kf.heldout_ape) < 0.5
    # a shape never measured is answered by the roofline fit alone: the step is missed
    assert np.median(kf.unseen_shape_ape) > 3 * np.median(kf.heldout_ape)


def test_ratio_applies_inside_the_measured_span_only() -> None:
    table = staircase_table()
    model, _ = fit_measured(measured_ops("gemm", table, H100, "synthetic"), H100)
    lat = LatencyModels(H100, LatencyModelFile(device="h100", description="t", models=[model]))
    n, k = SHAPES[0]
    shapes = np.array([[256.0, n, k, 2.0], [4096.0, n, k, 2.0], [256.0, 999.0, k, 2.0],
                       [256.0, n, k, 1.0]])  # fmt: skip
    ratio = lat.table_ratio("gemm", shapes)
    assert ratio[0] == pytest.approx(1.3 * _smooth_over_fit(model, 256.0, n, k), rel=0.02)
    assert list(ratio[1:]) == [1.0, 1.0, 1.0]  # beyond the span, other n, other format


def _smooth_over_fit(model, m: float, n: float, k: float) -> float:  # type: ignore[no-untyped-def]
    flops, moved = 2 * m * n * k, (m * k + m * n) * 2 + n * k * 2
    args = (np.array([flops]), np.array([moved]), np.array([989e12]), 3.35e12, np.ones(1))
    return float(roofline_seconds(TRUE, *args)[0] / roofline_seconds(model.roofline, *args)[0])


def test_step_model_feeds_gemm_shapes_to_the_tables() -> None:
    card = catalog.model_card("llama-3.3-70b")  # o_proj at TP8: n 8192, k 1024
    m = np.arange(8.0, 2049.0, 8.0)
    t = np.full(m.size, 1e-3)
    table = pd.DataFrame({"op": "gemm", "dtype": "bf16", "m": m, "n": 8192.0, "k": 1024.0,
                          "latency_us": t * 1e6})  # fmt: skip
    model, _ = fit_measured(measured_ops("gemm", table, H100, "synthetic"), H100)
    fitted = LatencyModels(H100, LatencyModelFile(device="h100", description="t", models=[model]))
    cost = StepCostModel(card, H100, ServingConfig(tp=8), fitted)
    lines = {x.name: x for x in cost.step(np.ones(64, dtype=np.int64), np.full(64, 10),
                                          detail=True).lines}  # fmt: skip
    assert lines["gqa.o_proj"].seconds / lines["gqa.o_proj"].count == pytest.approx(1e-3)
    down = lines["mlp.down"]  # a shape never measured: the roofline fit alone
    smooth = roofline_seconds(model.roofline, np.array([down.flops]), np.array([down.bytes]),
                              np.array([989e12]), 3.35e12, np.ones(1))  # fmt: skip
    assert down.seconds / down.count == pytest.approx(smooth[0])
