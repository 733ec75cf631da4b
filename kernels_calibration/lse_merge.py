"""Triton merge of two partial attention outputs by their log-sum-exps, and a numpy reference.

Chunked-context prefill attends the new tokens to the cached prefix and to themselves
separately; DCP decode attends each rank's KV shard separately. Either way two partial
results ``(o1, lse1)``, ``(o2, lse2)`` over disjoint key sets are combined exactly::

    lse = log(exp(lse1) + exp(lse2))
    o   = exp(lse1 - lse) * o1 + exp(lse2 - lse) * o2

It stands for vLLM's ``vllm.v1.attention.ops.triton_merge_attn_states.merge_attn_states``
(``vllm_mechanics.md`` section 11). Differences from it: here lse is ``[T, H]`` (vLLM's is
``[H, T]``; pass ``lse.T``, any strides work), and a token whose both parts are empty gets
``o = 0``, ``lse = -inf`` instead of NaN. As in vLLM, an lse of ``+inf`` (what some
FlashAttention builds return for an empty part) is read as ``-inf``. Logs are natural.

Under ``TRITON_INTERPRET=1`` (CPU) the kernel checks shapes, launches and numerics only.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@triton.jit
def _lse_merge_kernel(
    o_ptr,
    lse_out_ptr,
    o1_ptr,
    lse1_ptr,
    o2_ptr,
    lse2_ptr,
    D,
    stride_o_t,
    stride_o_h,
    stride_o1_t,
    stride_o1_h,
    stride_o2_t,
    stride_o2_h,
    stride_lse1_t,
    stride_lse1_h,
    stride_lse2_t,
    stride_lse2_h,
    stride_lse_out_t,
    stride_lse_out_h,
    BLOCK_D: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    lse1 = tl.load(lse1_ptr + t * stride_lse1_t + h * stride_lse1_h).to(tl.float32)
    lse2 = tl.load(lse2_ptr + t * stride_lse2_t + h * stride_lse2_h).to(tl.float32)
    lse1 = tl.where(lse1 == float("inf"), float("-inf"), lse1)
    lse2 = tl.where(lse2 == float("inf"), float("-inf"), lse2)
    lse_max = tl.maximum(lse1, lse2)
    both_empty = lse_max == float("-inf")
    shift = tl.where(both_empty, 0.0, lse_max)  # avoids -inf - -inf = NaN
    se1 = tl.exp(lse1 - shift)
    se2 = tl.exp(lse2 - shift)
    se = se1 + se2
    safe_se = tl.where(both_empty, 1.0, se)
    scale1 = se1 / safe_se
    scale2 = se2 / safe_se
    lse = tl.where(both_empty, float("-inf"), tl.log(safe_se) + shift)
    tl.store(lse_out_ptr + t * stride_lse_out_t + h * stride_lse_out_h, lse)

    o1_row = o1_ptr + t * stride_o1_t + h * stride_o1_h
    o2_row = o2_ptr + t * stride_o2_t + h * stride_o2_h
    o_row = o_ptr + t * stride_o_t + h * stride_o_h
    for d0 in range(0, D, BLOCK_D):
        d = d0 + tl.arange(0, BLOCK_D)
        mask = d < D
        o1 = tl.load(o1_row + d, mask=mask, other=0.0).to(tl.float32)
        o2 = tl.load(o2_row + d, mask=mask, other=0.0).to(tl.float32)
        o = o1 * scale1 + o2 * scale2
        tl.store(o_row + d, o.to(o_ptr.dtype.element_ty), mask=mask)


def lse_merge(
    o1: torch.Tensor,
    lse1: torch.Tensor,
    o2: torch.Tensor,
    lse2: torch.Tensor,
    *,
    max_block_d: int = 256,
    num_warps: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge ``o1, o2 [T, H, D]`` with ``lse1, lse2 [T, H]``; returns ``(o [T, H, D], lse [T, H])``.

    ``o`` has ``o1.dtype``; ``lse`` is fp32. The last dimension of ``o1``/``o2`` must be
    contiguous; every other stride is free.
    """
    if o1.dim() != 3 or o1.shape != o2.shape:
        raise ValueError(f"o1 {tuple(o1.shape)} and o2 {tuple(o2.shape)} must both be [T, H, D]")
    if o1.dtype != o2.dtype or o1.dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"o1/o2 must share one of {SUPPORTED_DTYPES}, got {o1.dtype}, {o2.dtype}")
    t, h, d = o1.shape
    if lse1.shape != (t, h) or lse2.shape != (t, h):
        raise ValueError(f"lse1 {tuple(lse1.shape)}, lse2 {tuple(lse2.shape)} must be [{t}, {h}]")
    if d > 1 and (o1.stride(-1) != 1 or o2.stride(-1) != 1):
        raise ValueError("the head dimension of o1/o2 must be contiguous")
    o = torch.empty((t, h, d), device=o1.device, dtype=o1.dtype)
    lse = torch.empty((t, h), device=o1.device, dtype=torch.float32)
    if t == 0 or h == 0:
        return o, lse
    block_d = min(triton.next_power_of_2(max(d, 1)), max_block_d)
    _lse_merge_kernel[(t, h)](
        o,
        lse,
        o1,
        lse1,
        o2,
        lse2,
        d,
        o.stride(0),
        o.stride(1),
        o1.stride(0),
        o1.stride(1),
        o2.stride(0),
        o2.stride(1),
        lse1.stride(0),
        lse1.stride(1),
        lse2.stride(0),
        lse2.stride(1),
        lse.stride(0),
        lse.stride(1),
        BLOCK_D=block_d,
        num_warps=num_warps,
    )
    return o, lse


def lse_merge_reference(
    o1: np.ndarray, lse1: np.ndarray, o2: np.ndarray, lse2: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The same merge in float64; ``+inf`` lse read as empty, both-empty gives ``(0, -inf)``."""
    o1_64 = np.asarray(o1, dtype=np.float64)
    o2_64 = np.asarray(o2, dtype=np.float64)
    lse1_64 = np.asarray(lse1, dtype=np.float64)
    lse2_64 = np.asarray(lse2, dtype=np.float64)
    lse1_64 = np.where(np.isposinf(lse1_64), -np.inf, lse1_64)
    lse2_64 = np.where(np.isposinf(lse2_64), -np.inf, lse2_64)
    lse = np.logaddexp(lse1_64, lse2_64)  # -inf when both are -inf, without warnings
    both_empty = np.isneginf(lse)
    safe_lse = np.where(both_empty, 0.0, lse)
    scale1 = np.where(both_empty, 0.0, np.exp(lse1_64 - safe_lse))
    scale2 = np.where(both_empty, 0.0, np.exp(lse2_64 - safe_lse))
    o = scale1[..., None] * o1_64 + scale2[..., None] * o2_64
    return o, lse
