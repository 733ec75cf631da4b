"""FLOPs, bytes and kernel launches of a measured row, from its table coordinates.

The same formulas as the step model (``simulator.cost.ops``), evaluated at the coordinates a
kind's table uses, so that one roofline form is fitted to the tables and priced by the step
model alike. Collectives have no FLOPs: their baseline is alpha-beta per world size.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from simulator.cost import ops
from simulator.specs.hardware import HardwareProfile
from simulator.specs.precision import (
    COMPUTE_DTYPE_OF,
    WEIGHT_FORMATS,
    kv_element_bytes,
    mla_kv_bytes_per_token,
)

Array = NDArray[np.float64]
# MLA shapes of the module tables (DeepSeek-V3; Kimi K2 / K3 share them but for the heads)
MLA_Q_LORA = 1536
MLA_HIDDEN = 7168
LINEAR_HEAD_DIM = 128


@dataclass(frozen=True)
class Device:
    """What a baseline needs of a device: peaks per weight format and bandwidths."""

    name: str
    peak_by_precision: Mapping[str, float]
    bf16_peak: float
    memory_bw: float
    link_bw: float
    link_latency_s: float

    @classmethod
    def of(cls, profile: HardwareProfile) -> Device:
        link = profile.scale_up or profile.host_link
        return cls(
            name=profile.name,
            peak_by_precision={
                k: profile.peak_flops_per_s.for_dtype(COMPUTE_DTYPE_OF[k]) for k in WEIGHT_FORMATS
            },
            bf16_peak=profile.peak_flops_per_s.bf16,
            memory_bw=profile.memory_bw_bytes_per_s,
            link_bw=link.bw_bytes_per_s * profile.roofline.link_efficiency,
            link_latency_s=link.latency_s,
        )


def _wbytes(precision: str) -> float:
    return WEIGHT_FORMATS[precision].bits_per_element / 8.0  # type: ignore[index]


def work(
    kind: str, family: Mapping[str, Any], x: Mapping[str, Array], device: Device
) -> tuple[Array, Array, Array, float]:
    """(flops, bytes, peak FLOP/s, kernels) of rows of ``kind`` at axis values ``x``."""
    f = family
    bf16 = device.bf16_peak
    if kind == "gemm":
        w = ops.gemm(x["m"], x["n"], x["k"], _wbytes(f["dtype"]))
        peak = device.peak_by_precision[f["dtype"]]
    elif kind == "bmm":
        n, k = (ops.MLA_KV_LORA, ops.MLA_NOPE) if f["which"] == "w_uk" else (ops.MLA_V, 512)
        w = ops.bmm(x["num_heads"], x["num_tokens"], n, k, 2.0)
        peak = bf16
    elif kind in ("moe", "moe_kernel"):
        w = ops.moe(
            x["num_tokens"], float(f["hidden"]), float(f["inter"]), float(f["num_experts"]),
            float(f["topk"]), float(f["ep"]), float(f["tp"]), _wbytes(f["dtype"]),
        )  # fmt: skip
        # the tables' MXFP4 experts are W4A16 (BF16 activations) on every system
        peak = bf16 if f["dtype"] == "mxfp4" else device.peak_by_precision[f["dtype"]]
    elif kind in ("attn_decode", "attn_prefill"):
        kvb = kv_element_bytes(f["kv_dtype"])
        heads, kvh, hd = float(f["num_heads"]), float(f["num_kv_heads"]), float(f["head_dim"])
        if kind == "attn_decode":
            w = ops.attn_decode(x["batch"], x["ctx_len"], heads, kvh, hd, kvb)
        else:
            window = float(f["window"]) or np.inf
            w = ops.attn_prefill(x["batch"], x["seq_len"], 0.0, heads, kvh, hd, kvb, window)
        peak = bf16
    elif kind in ("mla_decode", "mla_prefill", "mla_decode_module", "mla_prefill_module"):
        kv_tok = mla_kv_bytes_per_token(f["kv_dtype"], ops.MLA_KV_LORA, ops.MLA_ROPE)
        if kind.startswith("mla_decode"):
            w = ops.mla_decode(x["batch"], x["ctx_len"], x["num_heads"], kv_tok)
        else:
            w = ops.mla_prefill(x["batch"], x["seq_len"], 0.0, x["num_heads"], kv_tok)
        peak = bf16
    elif kind == "kda_prefill":
        w = ops.kda_prefill(x["batch"], x["seq_len"], float(f["num_v_heads"]), LINEAR_HEAD_DIM)
        peak = bf16
    elif kind in ("kda_decode", "kda_verify"):
        q = x.get("queries", 1.0)
        hv = float(f["num_v_heads"])
        w = ops.kda_decode(x["batch"], hv, LINEAR_HEAD_DIM, LINEAR_HEAD_DIM, queries=q)
        peak = bf16
    else:
        raise KeyError(f"no work formula for kind {kind!r}")
    shape = np.broadcast(*x.values()).shape
    return (
        np.broadcast_to(np.asarray(w.flops, dtype=np.float64), shape),
        np.broadcast_to(np.asarray(w.bytes, dtype=np.float64), shape),
        np.full(shape, peak),
        float(w.kernels),
    )
