"""How well the table lookup predicts measurements it did not see.

* ``kfold``: the rows of each kind are split into k folds by shape (every row is one shape:
  one point of one family); each fold is predicted by a model built, baseline fit included,
  from the other folds only. The MLA kinds are scored on the module rows (the projections
  from the full GEMM tables plus the core interpolated from the training folds).
* ``leave_device_out``: every row of a measured device predicted by the transfer rule from
  the other measured devices only (``device.tables_for(..., exclude=(device,))``).

Scores are absolute percentage errors, median and P90, per kind and per the step model's
op class (``KIND_CLASS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.measured.device import (
    DeviceTables,
    build_models,
    mla_core_frame,
    mla_projection_seconds,
)
from simulator.measured.lookup import KindModel, by_family
from simulator.measured.tables import KIND_CLASS, KINDS, Frames
from simulator.measured.work import Device

Array = NDArray[np.float64]


@dataclass(frozen=True)
class Score:
    kind: str
    op_class: str
    rows: int
    median_ape: float
    p90_ape: float

    @classmethod
    def of(cls, kind: str, ape: Array) -> Score:
        return cls(
            kind,
            KIND_CLASS[kind],
            int(ape.size),
            float(np.median(ape)),
            float(np.percentile(ape, 90)),
        )


def ape(predicted: Array, measured: Array) -> Array:
    out: Array = np.abs(predicted / measured - 1.0) * 100.0
    return out


def _predict(model: Any, kind: str, frame: Any) -> Array:
    """Seconds ``model`` predicts for every row of ``frame`` (rows keep their order)."""
    spec = KINDS[kind]
    out = np.empty(len(frame))
    for fam, coords, _, pos in by_family(frame, spec.family, spec.axes):
        log_t, _ = model.log_seconds(fam, coords)
        out[pos] = np.exp(log_t)
    return out


def _folds(n: int, k: int, seed: int) -> NDArray[np.intp]:
    rng = np.random.default_rng(seed)
    return rng.permutation(n) % k


def kfold(frames: Frames, device: Device, folds: int = 5, seed: int = 0) -> list[Score]:
    """Held-out error of every kind of one device's tables."""
    full = build_models(frames, device)
    scores = []
    for kind, frame in frames.frames.items():
        frame = frame.reset_index(drop=True)
        fold = _folds(len(frame), folds, seed)
        pred = np.empty(len(frame))
        for f in range(folds):
            test = fold == f
            if kind.startswith("mla_"):
                phase = kind.split("_")[1]
                core = mla_core_frame(frame[~test], phase, full)
                model = KindModel(f"mla_{phase}", core, device)
                pred[test] = _module_seconds(model, phase, frame[test], full)
            else:
                model = KindModel(kind, frame[~test], device)
                pred[test] = _predict(model, kind, frame[test])
        scores.append(Score.of(kind, ape(pred, frame["seconds"].to_numpy(dtype=np.float64))))
    return scores


def _module_seconds(core_model: Any, phase: str, module: Any, models: dict[str, Any]) -> Array:
    """Module time as the step model prices it: projections + attention core."""
    core = _predict(core_model, f"mla_{phase}", module)
    heads = module["num_heads"].to_numpy(dtype=np.float64)
    batch = module["batch"].to_numpy(dtype=np.float64)
    decode = phase == "decode"
    tokens = batch if decode else batch * module["seq_len"].to_numpy(dtype=np.float64)
    proj: Array = mla_projection_seconds(heads, tokens, decode, models)
    return proj + core


def leave_device_out(frames: Frames, transferred: DeviceTables) -> list[Score]:
    """Error of the transfer rule on a measured device's rows (``transferred`` built
    without that device)."""
    scores = []
    for kind, frame in frames.frames.items():
        frame = frame.reset_index(drop=True)
        if kind.startswith("mla_"):
            phase = kind.split("_")[1]
            model = transferred.models.get(f"mla_{phase}")
            if model is None or "gemm" not in transferred.models:
                continue
            pred = _module_seconds(model, phase, frame, transferred.models)
        else:
            model = transferred.models.get(kind)
            if model is None:
                continue
            pred = _predict(model, kind, frame)
        scores.append(Score.of(kind, ape(pred, frame["seconds"].to_numpy(dtype=np.float64))))
    return scores
