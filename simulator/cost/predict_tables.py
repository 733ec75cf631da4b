"""``plan ops predict`` rows answered by the measured tables (the step model's mapping of
``simulator.cost.lookups``, vectorised over the rows of a shape CSV)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from simulator.cost import ops
from simulator.cost.lookups import GEMM_TABLE_PRECISION, KV_TABLE_DTYPE, causal_length
from simulator.measured.lookup import MEASURED

if TYPE_CHECKING:
    import pandas as pd

    from simulator.measured.device import DeviceTables

Array = NDArray[np.float64]
# distribution of a MoE row without a `distribution` column: the SDK's generic-MoE choice
DEFAULT_MOE_DISTRIBUTION = "power_law_1.2"


def _text(df: pd.DataFrame, col: str, rows: NDArray[np.intp], default: str) -> NDArray[np.str_]:
    if col not in df.columns:
        return np.full(rows.size, default)
    raw = df[col].to_numpy(dtype=object)[rows].astype(str)
    return np.where(raw == "", default, raw)


def _num(df: pd.DataFrame, col: str, rows: NDArray[np.intp], default: float) -> Array:
    if col not in df.columns:
        return np.full(rows.size, default)
    raw = df[col].to_numpy(dtype=object)[rows]
    out = np.array([float(v) if v not in ("", None) else default for v in raw])
    return out


def _query(
    tables: DeviceTables, kind: str, families: list[dict[str, Any]], points: Array
) -> tuple[Array, NDArray[np.int8]]:
    """log-free seconds and status of each row (one family per row, grouped)."""
    model = tables.models[kind]
    seconds = np.empty(len(families))
    status = np.empty(len(families), dtype=np.int8)
    keys = [model.family(**f) for f in families]
    for key in set(keys):
        sel = np.array([k == key for k in keys])
        log_t, st = model.log_seconds(key, points[sel])
        seconds[sel], status[sel] = np.exp(log_t), st
    return seconds, status


def table_seconds(
    df: pd.DataFrame, op: NDArray[np.str_], c_by_class: dict[str, dict[str, Array]],
    tables: DeviceTables, skip: frozenset[str],
) -> tuple[Array, NDArray[np.int8]]:  # fmt: skip
    """Seconds of every row the tables answer (NaN elsewhere) and its status (-1: none)."""
    n = len(op)
    seconds = np.full(n, np.nan)
    status = np.full(n, -1, dtype=np.int8)
    for cls, c in c_by_class.items():
        if cls in skip:
            continue
        rows = np.flatnonzero(op == cls)
        answer = _answer(cls, c, df, rows, tables)
        if answer is not None:
            seconds[rows], status[rows] = answer
    return seconds, status


def _answer(
    cls: str, c: dict[str, Array], df: pd.DataFrame, rows: NDArray[np.intp], t: DeviceTables
) -> tuple[Array, NDArray[np.int8]] | None:
    k = rows.size
    if cls == "gemm" and "gemm" in t.models:
        dt = _text(df, "dtype", rows, "bf16")
        fams = [{"dtype": GEMM_TABLE_PRECISION.get(d, d)} for d in dt]
        return _query(t, "gemm", fams, np.column_stack([c["m"], c["n"], c["k"]]))
    if cls == "moe" and "moe" in t.models:
        dt = _text(df, "dtype", rows, "bf16")
        dist = _text(df, "distribution", rows, DEFAULT_MOE_DISTRIBUTION)
        fams = [
            {
                "dtype": dt[i],
                "hidden": c["hidden"][i],
                "inter": c["inter"][i],
                "topk": c["topk"][i],
                "num_experts": c["num_experts"][i],
                "tp": 1.0 if c["ep"][i] > 1 else c["tp"][i],
                "ep": c["ep"][i],
                "distribution": dist[i],
            }
            for i in range(k)
        ]
        return _query(t, "moe", fams, c["num_tokens"].reshape(-1, 1))
    kv = _text(df, "kv_dtype", rows, "bf16")
    kv_t = np.array([KV_TABLE_DTYPE.get(x, "") for x in kv])
    if cls in ("attn_decode", "attn_prefill") and cls in t.models and (kv_t != "").all():
        fams = [
            {
                "kv_dtype": kv_t[i],
                "head_dim": c["head_dim"][i],
                "window": 0.0,
                "num_heads": c["num_heads"][i],
                "num_kv_heads": c["num_kv_heads"][i],
            }
            for i in range(k)
        ]
        if cls == "attn_decode":
            pts = np.column_stack([c["batch"], c["ctx_len"]])
        else:
            pairs = c["batch"] * ops.causal_pairs(c["seq_len"], c["prefix_len"])
            isl = np.array([causal_length(p, b) for p, b in zip(pairs, c["batch"], strict=True)])
            pts = np.column_stack([c["batch"], isl])
        return _query(t, cls, fams, pts)
    if cls in ("mla_decode", "mla_prefill") and cls in t.models and (kv_t != "").all():
        fams = [{"kv_dtype": x} for x in kv_t]
        if cls == "mla_decode":
            return _query(t, cls, fams, np.column_stack([c["num_heads"], c["batch"], c["ctx_len"]]))
        pairs = c["batch"] * ops.causal_pairs(c["seq_len"], c["prefix_len"])
        isl = np.array([causal_length(p, b) for p, b in zip(pairs, c["batch"], strict=True)])
        secs, st = _query(t, cls, fams, np.column_stack([c["num_heads"], c["batch"], isl]))
        prefix = c["batch"] * (c["prefix_len"] + c["seq_len"] - isl)
        if "gemm" in t.models and (prefix > 0).any():  # kv_b of the re-projected context
            kv_out = c["num_heads"] * (ops.MLA_NOPE + ops.MLA_V)
            pts = np.column_stack([np.maximum(prefix, 1.0), kv_out, np.full(k, ops.MLA_KV_LORA)])
            g, _ = _query(t, "gemm", [{"dtype": "bf16"}] * k, pts)
            secs = secs + np.where(prefix > 0, g, 0.0)
        return secs, st
    if cls in ("kda_prefill", "kda_decode") and cls in t.models and (c["head_dim"] == 128).all():
        kind = _text(df, "kind", rows, "kda")
        fams = [
            {"kind": kind[i], "num_k_heads": c["num_heads"][i], "num_v_heads": c["num_heads"][i]}
            for i in range(k)
        ]
        if cls == "kda_prefill":
            return _query(t, cls, fams, np.column_stack([c["batch"], c["seq_len"]]))
        return _query(t, cls, fams, c["batch"].reshape(-1, 1))
    if cls in ops.COLLECTIVE_CLASSES and cls in t.models:
        fams = [{"world": w} for w in c["world_size"]]
        secs, st = _query(t, cls, fams, c["bytes"].reshape(-1, 1))
        return np.where(c["world_size"] > 1, secs, 0.0), st
    return None


def source_of(status: int, measured_device: bool) -> str:
    return "measured" if measured_device and status == MEASURED else "fitted"
