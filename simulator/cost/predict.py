"""Price a table of op shapes (``plan ops predict``) and turn measurement tables into Work.

A shape table is a CSV with an ``op`` column, a ``dtype`` column and the shape columns of
each op (``OP_COLUMNS``); rows of different ops may share one file, cells a row does not use
are left empty. Rows are numbered from 1 after the header line in error messages; the
cells are read and checked by ``shape_csv.py``.

Each op class is priced in one vectorised call of its ``simulator.cost.ops`` function; the
latency comes from ``LatencyModels`` (fitted where the device has a fitted model, else the
roofline / alpha-beta prior).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from simulator.cost import ops
from simulator.cost.latency import LatencyModels
from simulator.cost.latency_file import FittedModel
from simulator.cost.shape_csv import (
    cell,
    check_shapes,
    check_world_sizes,
    numeric_column,
    string_column,
)
from simulator.specs.hardware import HardwareProfile
from simulator.specs.loading import SpecError
from simulator.specs.precision import (
    COMPUTE_DTYPE_OF,
    WEIGHT_FORMATS,
    KvCacheDtype,
    kv_element_bytes,
    mla_kv_bytes_per_token,
)

if TYPE_CHECKING:
    import pandas as pd

Array = NDArray[np.float64]

# Shape columns of each op class, in the order they are documented.
OP_COLUMNS: dict[str, tuple[str, ...]] = {
    "gemm": ("m", "n", "k"),
    "moe": ("num_tokens", "hidden", "inter", "num_experts", "topk", "ep", "tp"),
    "mla_decode": ("batch", "ctx_len", "num_heads"),
    "mla_prefill": ("batch", "seq_len", "prefix_len", "num_heads"),
    "attn_decode": ("batch", "ctx_len", "num_heads", "num_kv_heads", "head_dim"),
    "attn_prefill": ("batch", "seq_len", "prefix_len", "num_heads", "num_kv_heads", "head_dim"),
    "kda_prefill": ("batch", "seq_len", "num_heads", "head_dim"),
    "kda_decode": ("batch", "num_heads", "head_dim"),
    # not in the list: a bandwidth-bound kernel of `elements` elements moving
    # `bytes_per_elem` bytes each (used for the vidur norm/activation/add rows)
    "elementwise": ("elements", "bytes_per_elem"),
    "allreduce": ("bytes", "world_size"),
    "allgather": ("bytes", "world_size"),
    "reducescatter": ("bytes", "world_size"),
    "alltoall": ("bytes", "world_size"),
}
DEFAULTS: dict[str, dict[str, float]] = {"moe": {"ep": 1.0, "tp": 1.0}}
# Columns that must be > 0, not just >= 0 (a shape of zero heads or a zero GEMM dimension is
# no op; the counts divide; a decode attends at least its own token, so ctx_len >= 1: 0 was
# looked up as log 0); a prefill's cached prefix (prefix_len) may be 0.
POSITIVE_COLUMNS = frozenset(
    {"m", "n", "k", "num_tokens", "hidden", "inter", "num_experts", "topk", "ep", "tp",
     "batch", "ctx_len", "seq_len", "num_heads", "num_kv_heads", "head_dim", "world_size",
     "elements", "bytes_per_elem", "bytes"}
)  # fmt: skip
KV_DTYPE_OPS = frozenset({"mla_decode", "mla_prefill", "attn_decode"})  # kv_dtype required
WEIGHT_DTYPE_OPS = frozenset({"gemm", "moe"})  # dtype = weight format, required
ACTIVATION_DTYPES = ("bf16", "fp16")
KV_DTYPES: tuple[KvCacheDtype, ...] = ("bf16", "fp16", "fp8")
MLA_KV_DTYPES: tuple[KvCacheDtype, ...] = ("bf16", "fp16", "fp8", "fp8_ds_mla", "nvfp4_ds_mla")
NUMERIC_COLUMNS = frozenset(c for cols in OP_COLUMNS.values() for c in cols) | {
    "latency_us",
    "latency_us_p20",
    "latency_us_p80",
    "n_reps",
}


@dataclass(frozen=True)
class OpRows:
    """Work of every row of a shape table (NaN where a field does not apply to the row)."""

    op: NDArray[np.str_]
    flops: Array
    bytes: Array  # bytes moved (compute ops) or bytes per rank (collectives)
    kernels: Array
    peak_flops_per_s: Array
    world_size: Array
    gemm_shape: Array  # (rows, 4): m, n, k, weight bytes per element of gemm rows; NaN elsewhere
    # op class -> its shape columns at that class's rows (what the measured tables look up)
    columns: dict[str, dict[str, Array]] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.op.size)

    def select(self, mask: NDArray[np.bool_]) -> OpRows:
        return OpRows(
            self.op[mask],
            self.flops[mask],
            self.bytes[mask],
            self.kernels[mask],
            self.peak_flops_per_s[mask],
            self.world_size[mask],
            self.gemm_shape[mask],
        )


def _lookup(values: NDArray[np.str_], table: Mapping[Any, float]) -> Array:
    return np.array([table[v] for v in values], dtype=np.float64)


def op_rows(df: pd.DataFrame, profile: HardwareProfile, file: str | Path) -> OpRows:
    """Check every row of a shape table and compute its Work with ``simulator.cost.ops``."""
    n = len(df)
    if "op" not in df.columns:
        raise SpecError(file, "column op", "missing (every row names its op class)")
    op = df["op"].to_numpy(dtype=object).astype(str)
    unknown = ~np.isin(op, list(OP_COLUMNS))
    if unknown.any():
        i = int(np.argmax(unknown))
        raise SpecError(
            file, cell(i, "op"), f"unknown op {str(op[i])!r}; known: {', '.join(OP_COLUMNS)}"
        )
    flops = np.full(n, np.nan)
    nbytes = np.full(n, np.nan)
    kernels = np.full(n, np.nan)
    peak = np.full(n, np.nan)
    world = np.full(n, np.nan)
    gemm_shape = np.full((n, 4), np.nan)
    bf16_peak = profile.peak_flops_per_s.for_dtype("bf16")
    columns: dict[str, dict[str, Array]] = {}
    for cls in OP_COLUMNS:
        rows = np.flatnonzero(op == cls)
        if rows.size == 0:
            continue
        what = f"op {cls}"
        defaults = DEFAULTS.get(cls, {})
        c = {
            col: numeric_column(
                df, col, rows, file, what, defaults.get(col), col in POSITIVE_COLUMNS
            )
            for col in OP_COLUMNS[cls]
        }
        columns[cls] = c
        check_shapes(cls, c, rows, file)
        if cls in ops.COLLECTIVE_CLASSES:
            # the bytes are given, so the dtype prices nothing; a word there is still a typo
            string_column(df, "dtype", rows, file, what, ACTIVATION_DTYPES, default="bf16")
            nbytes[rows], world[rows] = c["bytes"], c["world_size"]
            continue
        wbytes: Array | None = None
        if cls in WEIGHT_DTYPE_OPS:
            formats: tuple[str, ...] = tuple(k for k in WEIGHT_FORMATS if k != "fp32")
            dtype = string_column(df, "dtype", rows, file, what, formats)
            wbytes = _lookup(
                dtype, {k: v.bits_per_element / 8.0 for k, v in WEIGHT_FORMATS.items()}
            )
            pk = {
                k: profile.peak_flops_per_s.for_dtype(COMPUTE_DTYPE_OF[k]) for k in WEIGHT_FORMATS
            }
            peak[rows] = _lookup(dtype, pk)
        else:
            string_column(df, "dtype", rows, file, what, ACTIVATION_DTYPES, default="bf16")
            peak[rows] = bf16_peak
        if cls == "gemm" and wbytes is not None:
            gemm_shape[rows] = np.column_stack([c["m"], c["n"], c["k"], wbytes])
        work = _work(cls, c, df, rows, file, what, wbytes)
        flops[rows] = np.broadcast_to(work.flops, rows.shape)
        nbytes[rows] = np.broadcast_to(work.bytes, rows.shape)
        kernels[rows] = work.kernels
    return OpRows(op, flops, nbytes, kernels, peak, world, gemm_shape, columns)


def _work(
    cls: str,
    c: dict[str, Array],
    df: pd.DataFrame,
    rows: NDArray[np.intp],
    file: str | Path,
    what: str,
    weight_bytes: Array | None,
) -> ops.Work:
    if cls == "gemm":
        assert weight_bytes is not None
        # ops.gemm takes one weight width; broadcasting an array through it is exact arithmetic
        return ops.gemm(c["m"], c["n"], c["k"], weight_bytes)  # type: ignore[arg-type]
    if cls == "moe":
        assert weight_bytes is not None
        return ops.moe(
            c["num_tokens"], c["hidden"], c["inter"], c["num_experts"], c["topk"],
            c["ep"], c["tp"], weight_bytes,  # type: ignore[arg-type]
        )  # fmt: skip
    if cls in ("mla_decode", "mla_prefill"):
        kv = string_column(df, "kv_dtype", rows, file, what, tuple(MLA_KV_DTYPES))
        per_token = _lookup(
            kv,
            {d: mla_kv_bytes_per_token(d, ops.MLA_KV_LORA, ops.MLA_ROPE) for d in MLA_KV_DTYPES},
        )
        if cls == "mla_decode":
            return ops.mla_decode(c["batch"], c["ctx_len"], c["num_heads"], per_token)
        return ops.mla_prefill(c["batch"], c["seq_len"], c["prefix_len"], c["num_heads"], per_token)
    if cls == "attn_decode":
        kv = string_column(df, "kv_dtype", rows, file, what, tuple(KV_DTYPES))
        elem = _lookup(kv, {d: kv_element_bytes(d) for d in KV_DTYPES})
        return ops.attn_decode(
            c["batch"], c["ctx_len"], c["num_heads"], c["num_kv_heads"], c["head_dim"], elem
        )
    if cls == "attn_prefill":
        kv = string_column(df, "kv_dtype", rows, file, what, tuple(KV_DTYPES), default="bf16")
        elem = _lookup(kv, {d: kv_element_bytes(d) for d in KV_DTYPES})
        return ops.attn_prefill(
            c["batch"], c["seq_len"], c["prefix_len"], c["num_heads"], c["num_kv_heads"],
            c["head_dim"], elem,
        )  # fmt: skip
    if cls == "kda_prefill":
        return ops.kda_prefill(c["batch"], c["seq_len"], c["num_heads"], c["head_dim"])
    if cls == "kda_decode":
        return ops.kda_decode(c["batch"], c["num_heads"], c["head_dim"], c["head_dim"])
    if cls == "elementwise":
        return ops.elementwise(c["elements"], c["bytes_per_elem"])  # type: ignore[arg-type]
    raise AssertionError(cls)


def outside_range(model: FittedModel, rows: OpRows) -> NDArray[np.bool_]:
    """Rows a fitted model answers by extrapolation (the rule of ``LatencyModels._count``,
    plus, for alpha-beta models, world sizes it was not fitted on)."""
    lo, hi = model.bytes_range
    out = (rows.bytes < lo * 0.999) | (rows.bytes > hi * 1.001)
    if model.flops_range is not None:
        flo, fhi = model.flops_range
        out |= (rows.flops < flo * 0.999) | (rows.flops > fhi * 1.001)
    if model.alpha_beta is not None:
        out |= (rows.world_size > 1) & ~np.isin(rows.world_size, list(model.alpha_beta))
    return out


def predict_seconds(
    rows: OpRows, models: LatencyModels, prior: bool = False
) -> tuple[Array, NDArray[np.str_], NDArray[np.bool_]]:
    """Latency of every row (s), its source (fitted / prior), and whether it extrapolated."""
    seconds = np.full(len(rows), np.nan)
    source = np.full(len(rows), "prior", dtype=object)
    extrapolated = np.zeros(len(rows), dtype=bool)
    for cls in OP_COLUMNS:
        mask = rows.op == cls
        if not mask.any():
            continue
        r = rows.select(mask)
        if cls in ops.COLLECTIVE_CLASSES:
            seconds[mask] = models.collective_seconds(cls, r.bytes, r.world_size, prior=prior)
        else:
            seconds[mask] = models.compute_seconds(
                cls, r.flops, r.bytes, r.peak_flops_per_s, r.kernels, prior=prior,
                shapes=r.gemm_shape if cls == "gemm" else None,
            )  # fmt: skip
        model = None if prior else models.fitted.get(cls)
        if model is not None:
            source[mask] = "fitted"
            extrapolated[mask] = outside_range(model, r)
    return seconds, source.astype(str), extrapolated


def predict_table(
    df: pd.DataFrame, profile: HardwareProfile, file: str | Path, models: LatencyModels
) -> pd.DataFrame:
    """``df`` with ``latency_us``, ``source`` and ``extrapolated`` columns added: the
    measured tables where they answer (source measured, or fitted when transferred or
    outside their grid), else the fitted models or the roofline priors."""
    from simulator.cost.predict_tables import source_of, table_seconds
    from simulator.measured.lookup import MEASURED

    rows = op_rows(df, profile, file)
    check_world_sizes(rows.op, rows.world_size, profile, file)
    seconds, source, extrapolated = predict_seconds(rows, models)
    if models.tables is not None:
        t_sec, status = table_seconds(df, rows.op, rows.columns, models.tables, models.calibrated)
        hit = status >= 0
        seconds = np.where(hit, t_sec, seconds)
        labels = np.array([source_of(int(x), models.tables.measured) for x in status])
        source = np.where(hit, labels, source)
        extrapolated = np.where(hit, status != MEASURED, extrapolated)
    if models.calibrated:
        source = np.where(np.isin(rows.op, list(models.calibrated)), "calibrated", source)
    out = df.copy()
    out["latency_us"] = seconds * 1e6
    out["source"] = source
    out["extrapolated"] = extrapolated
    return out


def records(table: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as JSON-ready dicts: numbers as numbers, empty cells left out."""
    result: list[dict[str, Any]] = []
    for rec in table.to_dict(orient="records"):
        row: dict[str, Any] = {}
        for key, value in rec.items():
            k = str(key)
            if isinstance(value, str):
                if value == "":
                    continue
                if k in NUMERIC_COLUMNS:
                    num = float(value)
                    row[k] = int(num) if num.is_integer() else num
                    continue
            elif isinstance(value, np.bool_ | bool):
                value = bool(value)
            elif isinstance(value, np.floating | float):
                value = float(value)
            row[k] = value
        result.append(row)
    return result
