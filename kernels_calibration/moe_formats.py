"""The grouped MoE GEMM's weight formats (``moe_gemm.py``), and FP8 / MXFP4 on the host.

``quantize_fp8`` / ``quantize_mxfp4`` make the kernel's quantised weights from float ones (the
layouts are ``moe_gemm.py``'s "Weight formats"); ``dequantize_fp8`` / ``dequantize_mxfp4`` are
their exact float64 inverses, for the reference (``moe_inputs.py``).
"""

from __future__ import annotations

import numpy as np
import torch

ACTIVATION_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
WEIGHT_FORMATS = ("bf16", "fp16", "fp32", "fp8", "mxfp4")
DENSE_FORMAT_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite e4m3fn value
MXFP4_BLOCK = 32  # elements along K sharing one e8m0 scale
E8M0_BIAS = 127
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # codes 0..7; bit 3 is the sign


def _check_weight(w: torch.Tensor, name: str) -> None:
    if w.dim() < 1 or not w.is_floating_point() or w.dtype in (FP8_DTYPE,):
        raise ValueError(f"{name} needs a float tensor [..., K], got {tuple(w.shape)} {w.dtype}")


def quantize_fp8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-output-channel e4m3 quantisation of ``w [..., N, K]``.

    Returns ``(w_q [..., N, K] float8_e4m3fn, scale [..., N] fp32)`` with
    ``scale = amax_k |w| / 448`` (1 for an all-zero row) and ``w_q = rne(w / scale)``, so
    ``w ~ w_q * scale``. Exact when each row is an e4m3 grid with ``|max| = 448`` times a power
    of two.
    """
    _check_weight(w, "quantize_fp8")
    w32 = w.to(torch.float32)
    amax = w32.abs().amax(dim=-1)
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    w_q = (w32 / scale.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return w_q, scale


def dequantize_fp8(w_q: torch.Tensor, scale: torch.Tensor) -> np.ndarray:
    """``w_q [..., N, K] * scale [..., N]`` in float64 (exact), as a numpy array."""
    if w_q.dtype != FP8_DTYPE or tuple(scale.shape) != tuple(w_q.shape[:-1]):
        raise ValueError(
            f"dequantize_fp8 needs {FP8_DTYPE} [..., N, K] and scale [..., N], got "
            f"{w_q.dtype} {tuple(w_q.shape)} and {tuple(scale.shape)}"
        )
    values = w_q.to(device="cpu", dtype=torch.float32).to(torch.float64).numpy()
    return values * scale.to(device="cpu", dtype=torch.float64).numpy()[..., None]


def quantize_mxfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """OCP MXFP4 quantisation of ``w [..., N, K]`` along ``K`` (``K`` a multiple of 32).

    Each block of 32 gets the shared exponent ``X = floor(log2(amax)) - 2`` (2 = e2m1's largest
    exponent), stored as e8m0 ``X + 127`` clamped to [0, 254], and its elements become
    ``rne(v / 2**X)`` on the e2m1 grid, saturated to +-6 (the spec's rule: a block whose
    ``amax / 2**X`` lies in (6, 8) clips). Returns ``(packed [..., N, K/2] uint8,
    scales [..., N, K/32] uint8)``, element ``2i`` in the low nibble of byte ``i``.
    """
    _check_weight(w, "quantize_mxfp4")
    k = w.shape[-1]
    if k % MXFP4_BLOCK:
        raise ValueError(f"quantize_mxfp4 needs K={k} to be a multiple of {MXFP4_BLOCK}")
    blocks = w.to(torch.float64).reshape(*w.shape[:-1], k // MXFP4_BLOCK, MXFP4_BLOCK)
    amax = blocks.abs().amax(dim=-1)
    _, exp = torch.frexp(amax)  # amax = m * 2**exp, m in [0.5, 1): floor(log2) = exp - 1
    biased = (exp - 1 - 2 + E8M0_BIAS).clamp(0, 254)
    scale = torch.ldexp(torch.ones_like(amax), biased - E8M0_BIAS)
    q = blocks.abs() / scale.unsqueeze(-1)
    # Round to nearest e2m1, ties to the even code: the midpoints between codes c and c+1 round
    # down when c is even (0.25, 1.25, 2.5, 5) and up when c is odd (0.75, 1.75, 3.5).
    code = sum((q > m).to(torch.int32) for m in (0.25, 1.25, 2.5, 5.0))
    code = code + sum((q >= m).to(torch.int32) for m in (0.75, 1.75, 3.5))
    code = torch.where((blocks < 0) & (code > 0), code + 8, code).reshape(*w.shape[:-1], k // 2, 2)
    packed = (code[..., 0] | (code[..., 1] << 4)).to(torch.uint8)
    return packed, biased.to(torch.uint8)


def dequantize_mxfp4(packed: torch.Tensor, scales: torch.Tensor) -> np.ndarray:
    """Unpack ``packed [..., N, K/2]`` with e8m0 ``scales [..., N, K/32]`` to float64.

    A scale byte of 255 (NaN in the spec) gives NaN.
    """
    if packed.dtype != torch.uint8 or scales.dtype != torch.uint8 or packed.dim() < 1:
        raise ValueError(
            f"dequantize_mxfp4 needs uint8 tensors, got {packed.dtype}, {scales.dtype}"
        )
    k = packed.shape[-1] * 2
    if k % MXFP4_BLOCK or tuple(scales.shape) != (*packed.shape[:-1], k // MXFP4_BLOCK):
        raise ValueError(
            f"packed {tuple(packed.shape)} needs K = 2*{packed.shape[-1]} a multiple of 32 and "
            f"scales [..., K/32], got {tuple(scales.shape)}"
        )
    p = packed.to("cpu").numpy()
    codes = np.stack([p & 0xF, p >> 4], axis=-1).reshape(*p.shape[:-1], k)
    table = np.array([*E2M1_VALUES, *(-v for v in E2M1_VALUES)], dtype=np.float64)
    s = scales.to("cpu").numpy().astype(np.int64)
    factor = np.where(s == 255, np.nan, np.ldexp(1.0, s - E8M0_BIAS))
    return table[codes] * np.repeat(factor, MXFP4_BLOCK, axis=-1)
