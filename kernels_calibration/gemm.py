"""Tiled Triton matmul ``c = a @ b`` (fp32 accumulation) and its float64 numpy reference.

It stands for the dense GEMMs of a step (QKV/O projections, dense MLP, LM head). vLLM's
Triton counterpart is ``vllm.model_executor.determinism.batch_invariant.matmul_persistent``;
production dense GEMMs are cuBLAS through ``torch.mm``, so on a GPU time both and fit
``t = max(flops / F, bytes / BW) + launch`` (see ``vllm_mechanics.md`` section 11).

Under ``TRITON_INTERPRET=1`` (CPU) the kernel checks shapes, launches and numerics only.
"""

from __future__ import annotations

import os

import numpy as np
import torch
import triton
import triton.language as tl

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# FP8 inputs (per-tensor scales, bf16 out): e4m3fn on NVIDIA and MI355X, e4m3fnuz on MI300X/325X
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)


@triton.jit
def grouped_tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(row tile, column tile) of program ``pid`` of a 1-D grid in grouped order: GROUP_M row
    tiles share each column tile, for L2 reuse."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def _matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    scale,
    GROUP_M: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    UPCAST_TO_FP32: tl.constexpr,
    SCALED: tl.constexpr,
):
    pid_m, pid_n = grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        mask_k = (k0 + offs_k) < K
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        if UPCAST_TO_FP32:  # interpreter shim, see _interpreter_needs_upcast
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    if SCALED:  # FP8: the product of the per-tensor scales, applied once to the fp32 sum
        acc = acc * scale
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def _interpreter_needs_upcast(dtype: torch.dtype) -> bool:
    """Whether to feed ``tl.dot`` fp32 instead of bf16 tiles.

    Triton 3.5's interpreter keeps bf16 as raw uint16 bits and its ``create_dot`` runs
    ``np.matmul`` on those bits, so a bf16 ``tl.dot`` returns garbage on the CPU. The
    products of two bf16 values are exact in fp32, so upcasting first gives what a bf16
    MMA with fp32 accumulation gives. On a GPU this is False and bf16 goes to tensor cores.
    """
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    return interpreted and (dtype == torch.bfloat16 or dtype in FP8_DTYPES)


def matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    block_m: int = 64,
    block_n: int = 64,
    block_k: int = 32,
    group_m: int = 8,
    allow_tf32: bool = False,
    num_warps: int = 4,
    num_stages: int = 3,
    scale_a: float = 1.0,
    scale_b: float = 1.0,
) -> torch.Tensor:
    """``a [M, K] @ b [K, N] -> c [M, N]`` in ``a.dtype``, accumulated in fp32.

    FP8 inputs (``FP8_DTYPES``, both the same) give ``scale_a * scale_b * (a @ b)`` in bf16:
    the per-tensor-scaled W8A8 GEMM; on a GPU ``tl.dot`` takes the FP8 tiles directly.

    Any strides are accepted (e.g. ``w.T`` of an ``[N, K]`` weight). Block sizes must be
    powers of two and at least 16 (``tl.dot``). ``allow_tf32`` only matters for fp32 inputs
    on a GPU; the default (IEEE fp32) keeps fp32 results within 1e-5 of the reference.
    """
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"matmul needs 2-D inputs, got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: {tuple(a.shape)} @ {tuple(b.shape)}")
    if a.dtype != b.dtype or a.dtype not in SUPPORTED_DTYPES + FP8_DTYPES:
        raise ValueError(
            f"inputs must share one of {SUPPORTED_DTYPES + FP8_DTYPES}, got {a.dtype}, {b.dtype}"
        )
    fp8 = a.dtype in FP8_DTYPES
    if not fp8 and (scale_a != 1.0 or scale_b != 1.0):
        raise ValueError("scale_a / scale_b apply to FP8 inputs only")
    for name, block in (("block_m", block_m), ("block_n", block_n), ("block_k", block_k)):
        if block < 16 or block & (block - 1):
            raise ValueError(f"{name}={block} must be a power of two >= 16")
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), device=a.device, dtype=torch.bfloat16 if fp8 else a.dtype)
    if m == 0 or n == 0:
        return c
    if k == 0:
        return c.zero_()
    grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n),)
    _matmul_kernel[grid](
        a,
        b,
        c,
        m,
        n,
        k,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        scale=float(scale_a * scale_b),
        GROUP_M=group_m,
        INPUT_PRECISION="tf32" if allow_tf32 or fp8 else "ieee",
        UPCAST_TO_FP32=_interpreter_needs_upcast(a.dtype),
        SCALED=fp8,
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return c


def matmul_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` in float64 (the exact product of the given, already-rounded inputs)."""
    return np.asarray(a, dtype=np.float64) @ np.asarray(b, dtype=np.float64)
