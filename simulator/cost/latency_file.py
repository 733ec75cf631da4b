"""The file format of fitted latency models (``hardware_profiles/<dev>/latency_models.json``,
written by ``calibrate fit`` and ``plan fit``): the fitted parameters per op class, the
measured GEMM shape tables, the fit's error and the measurements it came from; reading one
back (a bad file is a ``SpecError``: file, field, reason)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from simulator.cost.ops import OpClass
from simulator.specs.frozen import Frozen
from simulator.specs.loading import first_error, parse_json, read_text

SCHEMA_VERSION = 1


class RooflineParams(Frozen):
    compute_efficiency: float = Field(gt=0)
    memory_efficiency: float = Field(gt=0)
    launch_s: float = Field(ge=0)
    sharpness: float = Field(default=float("inf"), ge=1)  # p of the smooth max; inf = max


class AlphaBeta(Frozen):
    alpha_s: float = Field(ge=0)
    beta_s_per_byte: float = Field(ge=0)


class FitError(Frozen):
    n: int = Field(ge=1)
    median_ape: float = Field(ge=0)  # absolute percentage error, in percent
    max_ape: float = Field(ge=0)


class Measurements(Frozen):
    file: str
    sha256: str
    rows: int


class ShapeTable(Frozen):
    """Measured latency of one GEMM shape (n, k, weight format) at several m.

    A query at m inside the measured span gets the roofline fit times the measured/fitted
    ratio interpolated in log m (the kernel-selection staircase the smooth fit misses);
    outside the span, or for shapes never measured, the roofline fit alone answers."""

    n: float = Field(gt=0)
    k: float = Field(gt=0)
    weight_bytes_per_elem: float = Field(gt=0)
    peak_flops_per_s: float = Field(gt=0)
    m: list[float] = Field(min_length=2)
    seconds: list[float] = Field(min_length=2)


class FittedModel(Frozen):
    op_class: OpClass
    form: Literal["roofline", "alpha_beta"]
    roofline: RooflineParams | None = None
    shape_tables: list[ShapeTable] = Field(default_factory=list)
    alpha_beta: dict[int, AlphaBeta] | None = None  # by world size
    flops_range: tuple[float, float] | None = None
    bytes_range: tuple[float, float]
    fit_error: FitError  # on the training rows
    # k-fold held-out error (`calibrate fit` fills it; `plan validate ops` computes it anew)
    heldout_error: FitError | None = None
    measurements: Measurements


class LatencyModelFile(Frozen):
    schema_version: Literal[1] = 1
    device: str
    description: str
    models: list[FittedModel]


def load_latency_models(path: str | Path) -> LatencyModelFile:
    p = Path(path)
    data = parse_json(read_text(p), p)  # a key given twice is refused, not the last kept
    try:
        return LatencyModelFile.model_validate(data)
    except ValidationError as exc:
        raise first_error(exc, p) from None


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
