"""Triton RMSNorm ``y = x / sqrt(mean(x**2) + eps) * weight`` (one program per row, fp32 math).

It stands for the per-layer RMSNorm of a step. vLLM's Triton counterpart is
``vllm.model_executor.determinism.batch_invariant.rms_norm_batch_invariant``; production
RMSNorm is the CUDA ``_C.rms_norm`` / ``fused_add_rms_norm`` (``vllm_mechanics.md`` section 11).
It is memory-bound: one read of x, one write of y, per token.

Under ``TRITON_INTERPRET=1`` (CPU) the kernel checks shapes, launches and numerics only.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@triton.jit
def _rmsnorm_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    N,
    stride_x_row,
    stride_y_row,
    eps,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x_row
    y_row = y_ptr + row * stride_y_row
    # Pass 1: sum of squares in fp32, BLOCK_N columns at a time.
    sum_sq = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for n0 in range(0, N, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
        sum_sq += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(sum_sq, axis=0) / N + eps)
    # Pass 2: normalise and scale (the row is re-read; it is L1/L2-resident on a GPU).
    for n0 in range(0, N, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def rmsnorm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    max_block_n: int = 4096,
    num_warps: int = 4,
) -> torch.Tensor:
    """RMSNorm over the last dimension of ``x [..., N]`` with ``weight [N]``, in ``x.dtype``."""
    if x.dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"x must be one of {SUPPORTED_DTYPES}, got {x.dtype}")
    if x.dim() == 0 or weight.shape != (x.shape[-1],):
        raise ValueError(f"weight {tuple(weight.shape)} does not match x {tuple(x.shape)}")
    n = x.shape[-1]
    x2d = x.reshape(-1, n)
    if n > 0 and x2d.stride(-1) != 1:
        x2d = x2d.contiguous()
    weight = weight.contiguous()
    y = torch.empty_like(x2d, memory_format=torch.contiguous_format)
    rows = x2d.shape[0]
    if rows == 0 or n == 0:
        return y.reshape(x.shape)
    block_n = min(triton.next_power_of_2(n), max_block_n)
    _rmsnorm_kernel[(rows,)](
        x2d,
        weight,
        y,
        n,
        x2d.stride(0),
        y.stride(0),
        eps,
        BLOCK_N=block_n,
        num_warps=num_warps,
    )
    return y.reshape(x.shape)


def rmsnorm_reference(x: np.ndarray, weight: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """RMSNorm over the last axis in float64."""
    x64 = np.asarray(x, dtype=np.float64)
    w64 = np.asarray(weight, dtype=np.float64)
    rstd = 1.0 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)
    y: np.ndarray = x64 * rstd * w64
    return y
