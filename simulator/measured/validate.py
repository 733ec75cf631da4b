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

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.cost.latency import LatencyModels
from simulator.measured.device import (
    DeviceTables,
    build_models,
    mla_core_frame,
    mla_projection_seconds,
)
from simulator.measured.kinds import KIND_CLASS, KINDS
from simulator.measured.lookup import COLLECTIVES, KindModel, by_family
from simulator.measured.tables import Frames
from simulator.measured.work import Device, work
from simulator.specs.hardware import HardwareProfile

Array = NDArray[np.float64]


@dataclass(frozen=True)
class Score:
    kind: str
    op_class: str
    rows: int
    median_ape: float
    p90_ape: float
    prior_median_ape: float | None = None  # the profile's roofline prior on the same rows
    ape: Array = field(default_factory=lambda: np.zeros(0), repr=False)
    prior_ape: Array | None = field(default=None, repr=False)

    @classmethod
    def of(cls, kind: str, ape: Array, prior: Array | None = None) -> Score:
        return cls(
            kind,
            KIND_CLASS.get(kind, kind),
            int(ape.size),
            float(np.median(ape)),
            float(np.percentile(ape, 90)),
            None if prior is None else float(np.median(prior)),
            ape,
            prior,
        )

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("ape", "prior_ape")}


def by_class(scores: list[Score]) -> list[Score]:
    """Scores pooled by op class (GEMM = dense GEMMs + MLA's BMMs; KDA decode = decode +
    speculative verify), rows weighted equally."""
    out = []
    for cls in dict.fromkeys(s.op_class for s in scores):
        group = [s for s in scores if s.op_class == cls]
        apes = np.concatenate([s.ape for s in group])
        priors = [s.prior_ape for s in group]
        prior: Array | None = None
        if all(p is not None for p in priors):
            prior = np.concatenate([p for p in priors if p is not None])
        out.append(Score.of(cls, apes, prior))
    return out


def mla_module_prior(kind: str, frame: Any, profile: HardwareProfile) -> Array:
    """The MLA module rows as the step model's own ops price them on the profile's priors:
    one DeepSeek-V3 MLA layer (bf16 projections) at the module's per-rank heads, i.e. the
    sum of its ``mla.*`` lines ("MLA module timings vs our op sum")."""
    from simulator import catalog
    from simulator.cost.step import StepCostModel
    from simulator.specs.serving import ServingConfig

    card = catalog.model_card("deepseek-v3")
    assert card.mla is not None
    decode = kind.startswith("mla_decode")
    out = np.empty(len(frame))
    heads = frame["num_heads"].to_numpy(dtype=np.float64)
    kv = frame["kv_dtype"].to_numpy()
    batch = frame["batch"].to_numpy(dtype=np.int64)
    axis = frame["ctx_len" if decode else "seq_len"].to_numpy(dtype=np.int64)
    models: dict[tuple[float, str], StepCostModel] = {}
    for i in range(len(frame)):
        key = (heads[i], str(kv[i]))
        if key not in models:
            serving = ServingConfig(
                tp=max(1, int(card.mla.num_heads / heads[i])),
                weight_precision={"attention": "bf16"},
                kv_cache_dtype="fp8" if kv[i] == "fp8" else "bf16",
            )
            models[key] = StepCostModel(card, profile, serving, LatencyModels(profile))
        m = models[key]
        b = int(batch[i])
        if decode:
            new, ctx = np.ones(b, dtype=np.int64), np.full(b, max(int(axis[i]) - 1, 1))
        else:
            new, ctx = np.full(b, int(axis[i])), np.zeros(b, dtype=np.int64)
        lines = m.step(new, ctx, detail=True).lines
        out[i] = sum(x.seconds / x.count for x in lines if x.name.startswith("mla."))
    return out


def prior_seconds(kind: str, frame: Any, profile: HardwareProfile) -> Array | None:
    """The roofline prior of the profile on a kind's rows (the MLA modules: the step
    model's sum of the layer's ops)."""
    if kind.endswith("_module"):
        return mla_module_prior(kind, frame, profile)
    spec = KINDS[kind]
    lat = LatencyModels(profile)
    device = Device.of(profile)
    out = np.empty(len(frame))
    for fam, coords, _, pos in by_family(frame, spec.family, spec.axes):
        x = {a: coords[:, j] for j, a in enumerate(spec.axes)}
        if kind in COLLECTIVES:
            out[pos] = lat.collective_seconds(
                KIND_CLASS[kind], x["bytes"], np.full(len(pos), fam[0]), prior=True
            )
            continue
        flops, moved, peak, kernels = work(
            kind, dict(zip(spec.family, fam, strict=True)), x, device
        )
        out[pos] = lat.compute_seconds(
            KIND_CLASS[kind], flops, moved, peak, np.full(len(pos), kernels), prior=True
        )
    return out


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


def kfold(frames: Frames, profile: HardwareProfile, folds: int = 5, seed: int = 0) -> list[Score]:
    """Held-out error of every kind of one device's tables (and the prior's on them)."""
    device = Device.of(profile)
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
        measured = frame["seconds"].to_numpy(dtype=np.float64)
        prior = prior_seconds(kind, frame, profile) if profile is not None else None
        scores.append(
            Score.of(kind, ape(pred, measured), None if prior is None else ape(prior, measured))
        )
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


def leave_device_out(
    frames: Frames, transferred: DeviceTables, profile: HardwareProfile | None = None
) -> list[Score]:
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
        measured = frame["seconds"].to_numpy(dtype=np.float64)
        prior = prior_seconds(kind, frame, profile) if profile is not None else None
        scores.append(
            Score.of(kind, ape(pred, measured), None if prior is None else ape(prior, measured))
        )
    return scores
