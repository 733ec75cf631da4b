"""KDA (Kimi Delta Attention) recurrent decode, one token per sequence, and its numpy reference.

Variant implemented: fla ``fused_recurrent_kda`` = ``fused_recurrent_gated_delta_rule`` with a
per-channel key gate ``gk`` (no scalar ``g``, no value gate), ``use_qk_l2norm_in_kernel=True``,
state in fla's ``[H, K, V]`` layout (vLLM's vendored kernels store ``[H, V, K]``; section 6.3).
Per sequence and head, with ``S`` the fp32 state ``[dk, dv]``:

    q <- q / sqrt(sum(q^2) + 1e-6) * scale        (scale defaults to 1/sqrt(dk))
    k <- k / sqrt(sum(k^2) + 1e-6)
    S <- S * exp(g)[:, None]                      (g <= 0: natural-log decay per key channel)
    v_new <- beta * (v - k^T S)                   (delta rule; beta in (0, 1))
    S <- S + k[:, None] * v_new[None, :]          (rank-1 update)
    o <- q^T S                                    (read-out of the *updated* state)

``g`` and ``beta`` are the already-activated gates: vLLM computes
``g = -exp(A_log) * softplus(raw_g + dt_bias)`` and ``beta = sigmoid(raw_beta)`` (section 6.2)
inside its fused kernels; that gating step is elementwise and left out here. The l2-norm
epsilon (1e-6 inside the square root) follows fla's in-kernel ``l2norm``.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

L2NORM_EPS = 1e-6


@triton.jit
def _kda_decode_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    g_ptr,
    beta_ptr,
    state_ptr,
    o_ptr,
    scale,
    num_heads,
    dk: tl.constexpr,
    dv: tl.constexpr,
    block_k: tl.constexpr,
    block_v: tl.constexpr,
    use_qk_l2norm: tl.constexpr,
    eps: tl.constexpr,
):
    """One (sequence * head, value block): decay, delta-rule update and read-out."""
    bh = tl.program_id(0).to(tl.int64)  # state offsets exceed int32 at serving sizes
    v_block = tl.program_id(1)
    offs_k = tl.arange(0, block_k)
    offs_v = v_block * block_v + tl.arange(0, block_v)
    mask_k = offs_k < dk
    mask_v = offs_v < dv

    q = tl.load(q_ptr + bh * dk + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    k = tl.load(k_ptr + bh * dk + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    v = tl.load(v_ptr + bh * dv + offs_v, mask=mask_v, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + bh * dk + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    beta = tl.load(beta_ptr + bh).to(tl.float32)
    if use_qk_l2norm:
        q = q / tl.sqrt(tl.sum(q * q) + eps)
        k = k / tl.sqrt(tl.sum(k * k) + eps)
    q = q * scale

    s_ptrs = state_ptr + bh * dk * dv + offs_k[:, None] * dv + offs_v[None, :]
    s_mask = mask_k[:, None] & mask_v[None, :]
    state = tl.load(s_ptrs, mask=s_mask, other=0.0)
    state = state * tl.exp(g)[:, None]
    v_new = beta * (v - tl.sum(state * k[:, None], 0))
    state = state + k[:, None] * v_new[None, :]
    o = tl.sum(state * q[:, None], 0)

    tl.store(s_ptrs, state, mask=s_mask)
    tl.store(o_ptr + bh * dv + offs_v, o.to(o_ptr.dtype.element_ty), mask=mask_v)


def kda_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    *,
    scale: float | None = None,
    use_qk_l2norm: bool = True,
    block_v: int = 32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One recurrent KDA decode step; ``state`` is updated in place and also returned.

    Args:
        q, k: ``[B, H, dk]``; v: ``[B, H, dv]``; g: ``[B, H, dk]`` log-decay (<= 0);
        beta: ``[B, H]`` in (0, 1); state: ``[B, H, dk, dv]`` fp32, contiguous.
        scale: query scale, default ``1 / sqrt(dk)``.
        block_v: value columns per program (columns are independent in this rule).

    Returns:
        ``o [B, H, dv]`` in ``v.dtype`` and the updated ``state``.
    """
    num_seqs, num_heads, dk = q.shape
    dv = v.shape[-1]
    if k.shape != q.shape or g.shape != q.shape:
        raise ValueError(f"q {q.shape}, k {k.shape} and g {g.shape} must match")
    if v.shape[:2] != (num_seqs, num_heads) or beta.shape != (num_seqs, num_heads):
        raise ValueError(f"v {v.shape} / beta {beta.shape} do not match q {q.shape}")
    if state.shape != (num_seqs, num_heads, dk, dv) or state.dtype != torch.float32:
        raise ValueError(f"state must be fp32 [B, H, dk, dv], got {state.dtype} {state.shape}")
    if not state.is_contiguous():
        raise ValueError("state must be contiguous (it is updated in place)")
    q, k, v, g, beta = (t.contiguous() for t in (q, k, v, g, beta))
    o = torch.empty((num_seqs, num_heads, dv), dtype=v.dtype, device=v.device)
    block_v = min(block_v, triton.next_power_of_2(dv))
    grid = (num_seqs * num_heads, triton.cdiv(dv, block_v))
    _kda_decode_kernel[grid](
        q,
        k,
        v,
        g,
        beta,
        state,
        o,
        dk**-0.5 if scale is None else scale,
        num_heads,
        dk=dk,
        dv=dv,
        block_k=triton.next_power_of_2(dk),
        block_v=block_v,
        use_qk_l2norm=use_qk_l2norm,
        eps=L2NORM_EPS,
    )
    return o, state


def kda_decode_reference(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    g: np.ndarray,
    beta: np.ndarray,
    state: np.ndarray,
    *,
    scale: float | None = None,
    use_qk_l2norm: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Float64 reference of ``kda_decode``; returns ``(o [B, H, dv], new_state)``, no aliasing."""
    q64, k64, v64, g64 = (np.asarray(x, dtype=np.float64) for x in (q, k, v, g))
    beta64 = np.asarray(beta, dtype=np.float64)
    s = np.array(state, dtype=np.float64)  # copy
    dk = q64.shape[-1]
    if use_qk_l2norm:
        q64 = q64 / np.sqrt((q64 * q64).sum(-1, keepdims=True) + L2NORM_EPS)
        k64 = k64 / np.sqrt((k64 * k64).sum(-1, keepdims=True) + L2NORM_EPS)
    q64 = q64 * (dk**-0.5 if scale is None else scale)
    s *= np.exp(g64)[..., :, None]
    v_new = beta64[..., None] * (v64 - np.einsum("bhk,bhkv->bhv", k64, s))
    s += k64[..., :, None] * v_new[..., None, :]
    o = np.einsum("bhk,bhkv->bhv", q64, s)
    return o, s
