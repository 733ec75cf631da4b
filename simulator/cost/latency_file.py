"""The file format of fitted latency models (``hardware_profiles/<dev>/latency_models.json``,
written by ``calibrate fit`` and ``plan fit``): the fitted parameters per op class, the
measured GEMM shape tables, the fit's error and the measurements it came from; reading one
back (a bad file is a ``SpecError``: file, field, reason)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationError, field_validator

from simulator.cost.ops import OpClass
from simulator.specs import limits
from simulator.specs.frozen import Frozen
from simulator.specs.loading import SpecError, first_error, parse_json, read_text

SCHEMA_VERSION = 1


# Upper bounds of a fitted parameter: the fit's own search box (cost/fit.py BOUNDS_HI) for
# the roofline, the profiles' link bounds for a collective. A file past them is not what a
# fit writes (an edited launch_s of 1e300 printed a TTFT of 300 digits, exit 0).
MAX_COMPUTE_EFFICIENCY = 1.5
MAX_MEMORY_EFFICIENCY = 2.0
MAX_LAUNCH_S = 1e-3
MAX_ALPHA_S = limits.MAX_LATENCY_S
MAX_BETA_S_PER_BYTE = 1 / limits.MIN_LINK_BW_BYTES_PER_S
MAX_SECONDS = 1e3  # a measured shape-table latency (a GEMM of 1,000 s is no kernel)


class RooflineParams(Frozen):
    compute_efficiency: float = Field(gt=0, le=MAX_COMPUTE_EFFICIENCY)
    memory_efficiency: float = Field(gt=0, le=MAX_MEMORY_EFFICIENCY)
    launch_s: float = Field(ge=0, le=MAX_LAUNCH_S)
    sharpness: float = Field(default=float("inf"), ge=1)  # p of the smooth max; inf = max


class AlphaBeta(Frozen):
    alpha_s: float = Field(ge=0, le=MAX_ALPHA_S)
    beta_s_per_byte: float = Field(ge=0, le=MAX_BETA_S_PER_BYTE)


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
    m: list[Annotated[float, Field(gt=0)]] = Field(min_length=2)
    seconds: list[Annotated[float, Field(gt=0, le=MAX_SECONDS)]] = Field(min_length=2)


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

    @field_validator("models")
    @classmethod
    def _one_model_a_class(cls, models: list[FittedModel]) -> list[FittedModel]:
        seen: set[str] = set()
        for m in models:
            if m.op_class in seen:
                raise ValueError(f"op_class {m.op_class!r} is fitted twice: keep one")
            seen.add(m.op_class)
        return models


def load_latency_models(path: str | Path, device: str | None = None) -> LatencyModelFile:
    """The file at ``path``; with ``device``, it must have been fitted for that device (an
    h100 fit under profiles/gb300/ priced GB300 with H100's kernels, unsaid)."""
    p = Path(path)
    data = parse_json(read_text(p), p)  # a key given twice is refused, not the last kept
    try:
        found = LatencyModelFile.model_validate(data)
    except ValidationError as exc:
        raise first_error(exc, p) from None
    if device is not None and found.device != device:
        raise SpecError(
            p, "device",
            f"{found.device!r}: fitted for another device than {device!r}, the profile its"
            " folder holds (fit this device's own measurements: plan fit --device)",
        )  # fmt: skip
    return found


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
