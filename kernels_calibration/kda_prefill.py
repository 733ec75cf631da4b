"""KDA (Kimi Delta Attention) chunked prefill, chunk 64, and its float64 numpy reference.

Same rule and conventions as ``kda_decode.py`` (fla ``chunk_kda`` with a per-channel log-space
gate ``g``, ``use_qk_l2norm_in_kernel=True``, state ``[H, K, V]``): running ``kda_prefill``
over ``T`` tokens gives the outputs and final state of ``T`` calls of ``kda_decode``. It stands
for the prefill path of a KDA layer, vLLM's ``chunk_kda_with_fused_gate`` / fla's
``chunk_kda`` (``vllm_mechanics.md`` sections 6.2, 6.4 and 11), less the elementwise gate
activation (``g`` and ``beta`` come in already activated, as for ``kda_decode``).

Per sequence and head, a chunk of ``C`` tokens starting from state ``S0`` is computed in
parallel. With ``k``, ``q`` l2-normalised (``q`` also scaled) and ``G_t = g_1 + ... + g_t``
the in-chunk cumulative gate (per key channel, ``<= 0``, non-increasing)::

    A[t, s]   = beta_t * sum_c k[t,c] k[s,c] exp(G[t,c] - G[s,c])   for s < t  (else 0)
    Aqk[t, s] =          sum_c q[t,c] k[s,c] exp(G[t,c] - G[s,c])   for s <= t (else 0)
    T = (I + A)^-1                                  (unit lower triangular: UT / WY form)
    w = T (beta * k * exp(G)),   u = T (beta * v)
    v_new = u - w S0                                (the delta-rule update of every token)
    o = (q * exp(G)) S0 + Aqk v_new
    S_C = exp(G_C) * S0 + (k * exp(G_C - G))^T v_new

Five Triton kernels, in the shape of fla's ``chunk_kda_fwd``:

1. ``_kda_prep_kernel`` (grid ``(NT, B*H)``): l2-norm of q and k, q scale, in-chunk cumsum
   of g (fla: ``l2norm_fwd`` and ``kda_gate_chunk_cumsum``);
2. ``_kda_intra_kernel`` (``(NT, B*H)``): ``A`` and ``Aqk`` in 16-row sub-blocks. Left of
   the diagonal sub-blocks the pairwise decay factors through the sub-block's first row ``r``,
   ``exp(G_t - G_r) * exp(G_r - G_s)``, both exponents ``<= 0``, so one dot product per
   sub-block never overflows however strong the gate; the 16 x 16 diagonal sub-blocks take the
   exact pairwise decay (a ``[16, 16, 32]`` tile per 32 key channels), and their inverses
   ``(I + A_ii)^-1`` by forward substitution (fla: ``chunk_kda_fwd_intra``);
3. ``_kda_solve_kernel`` (``(NT, B*H)``): ``T`` by block forward substitution over those
   inverses, then ``w`` and ``u`` (fla: ``solve_tril`` and ``recompute_w_u``);
4. ``_kda_state_kernel`` (``(B*H, cdiv(dv, block_v))``): sequential over chunks, stores the
   chunk-start states ``h [B, NT, H, dk, dv]`` and ``v_new``
   (fla: ``chunk_gated_delta_rule_fwd_h``);
5. ``_kda_output_kernel`` (``(NT, B*H, cdiv(dv, block_v))``): ``o`` (fla: ``chunk_gla_fwd_o_gk``).

All intermediates are fp32 (fla keeps some in bf16), so the memory traffic is an upper bound
of fla's. Under ``TRITON_INTERPRET=1`` (CPU) the kernels check shapes, launches and numerics
only.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from kernels_calibration.kda_decode import L2NORM_EPS, kda_decode_reference

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
CHUNK_SIZE = 64
SUB_CHUNK = 16  # rows of an intra-chunk sub-block (tl.dot needs >= 16)
MAX_HEAD_DIM_K = 256  # a whole key row lives in registers


@triton.jit
def _kda_prep_kernel(
    q_ptr,
    k_ptr,
    g_ptr,
    qn_ptr,
    kn_ptr,
    gc_ptr,
    scale,
    seq_len,
    num_heads,
    dk: tl.constexpr,
    C: tl.constexpr,
    BLOCK_K: tl.constexpr,
    USE_QK_L2NORM: tl.constexpr,
    EPS: tl.constexpr,
):
    """One (chunk, sequence * head): normalised q (scaled), k and the in-chunk cumsum of g."""
    i_n = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // num_heads).to(tl.int64)  # offsets exceed int32 at serving sizes
    h = bh % num_heads
    rows = i_n * C + tl.arange(0, C)
    offs_k = tl.arange(0, BLOCK_K)
    mask = (rows < seq_len)[:, None] & (offs_k < dk)[None, :]
    ptrs = ((b * seq_len + rows) * num_heads + h)[:, None] * dk + offs_k[None, :]

    q = tl.load(q_ptr + ptrs, mask=mask, other=0.0).to(tl.float32)
    k = tl.load(k_ptr + ptrs, mask=mask, other=0.0).to(tl.float32)
    if USE_QK_L2NORM:
        q = q / tl.sqrt(tl.sum(q * q, 1) + EPS)[:, None]
        k = k / tl.sqrt(tl.sum(k * k, 1) + EPS)[:, None]
    g = tl.load(g_ptr + ptrs, mask=mask, other=0.0).to(tl.float32)
    tl.store(qn_ptr + ptrs, q * scale, mask=mask)
    tl.store(kn_ptr + ptrs, k, mask=mask)
    tl.store(gc_ptr + ptrs, tl.cumsum(g, axis=0), mask=mask)


@triton.jit
def _kda_intra_kernel(
    qn_ptr,
    kn_ptr,
    gc_ptr,
    beta_ptr,
    akk_ptr,
    aqk_ptr,
    ainv_ptr,
    seq_len,
    num_heads,
    dk: tl.constexpr,
    C: tl.constexpr,
    BC: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_KD: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """One (chunk, sequence * head): ``A`` and ``Aqk`` by 16-row sub-blocks, and the inverses
    ``(I + A_ii)^-1`` of the 16 x 16 diagonal blocks of ``A``.

    Stored: ``A`` left of the diagonal blocks (beta-scaled), ``Aqk`` up to and including them;
    the other entries of the ``[.., C]`` rows are never written and never read.
    """
    i_n = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // num_heads).to(tl.int64)
    h = bh % num_heads
    offs_c = tl.arange(0, C)  # chunk-local token (column) index
    offs_k = tl.arange(0, BLOCK_K)
    offs_kd = tl.arange(0, BLOCK_KD)
    offs_j = tl.arange(0, BC)
    mask_k = offs_k < dk
    chunk_start = i_n * C
    row_id_all = (b * seq_len + chunk_start + offs_c) * num_heads + h
    mask_all = ((chunk_start + offs_c) < seq_len)[:, None] & mask_k[None, :]
    k_all = tl.load(kn_ptr + row_id_all[:, None] * dk + offs_k[None, :], mask=mask_all, other=0.0)
    g_all = tl.load(gc_ptr + row_id_all[:, None] * dk + offs_k[None, :], mask=mask_all, other=0.0)
    eye = (offs_j[:, None] == offs_j[None, :]).to(tl.float32)

    for i in tl.static_range(C // BC):
        if chunk_start + i * BC < seq_len:  # else the whole sub-block is padding
            offs_r = i * BC + offs_j  # chunk-local rows of the sub-block
            valid_r = (chunk_start + offs_r) < seq_len
            row_id = (b * seq_len + chunk_start + offs_r) * num_heads + h
            beta_i = tl.load(beta_ptr + row_id, mask=valid_r, other=0.0).to(tl.float32)
            a_ptrs = row_id[:, None] * C + offs_c[None, :]

            if i > 0:
                # columns left of the sub-block: the decay factors through its first row r,
                # exp(G_t - G_r) * exp(G_r - G_s), both factors <= 1
                mask_r = valid_r[:, None] & mask_k[None, :]
                ptrs_r = row_id[:, None] * dk + offs_k[None, :]
                k_i = tl.load(kn_ptr + ptrs_r, mask=mask_r, other=0.0)
                q_i = tl.load(qn_ptr + ptrs_r, mask=mask_r, other=0.0)
                g_i = tl.load(gc_ptr + ptrs_r, mask=mask_r, other=0.0)
                ref_id = (b * seq_len + chunk_start + i * BC) * num_heads + h
                g_ref = tl.load(gc_ptr + ref_id * dk + offs_k, mask=mask_k, other=0.0)
                left = (offs_c < i * BC)[:, None]
                k_left = k_all * tl.exp(tl.where(left, g_ref[None, :] - g_all, float("-inf")))
                decay_i = tl.exp(tl.where(valid_r[:, None], g_i - g_ref[None, :], float("-inf")))
                k_left_t = tl.trans(k_left)
                a_kk = tl.dot(k_i * decay_i, k_left_t, input_precision=DOT_PRECISION)
                a_qk = tl.dot(q_i * decay_i, k_left_t, input_precision=DOT_PRECISION)
                left_cols = valid_r[:, None] & (offs_c < i * BC)[None, :]
                tl.store(akk_ptr + a_ptrs, a_kk * beta_i[:, None], mask=left_cols)
                tl.store(aqk_ptr + a_ptrs, a_qk, mask=left_cols)

            # diagonal sub-block: exact pairwise decays, [BC, BC, BLOCK_KD] at a time
            on_or_below = (offs_j[:, None] >= offs_j[None, :]) & valid_r[:, None] & valid_r[None, :]
            d_kk = tl.zeros([BC, BC], dtype=tl.float32)
            d_qk = tl.zeros([BC, BC], dtype=tl.float32)
            for k0 in range(0, dk, BLOCK_KD):
                kd = k0 + offs_kd
                mask_d = valid_r[:, None] & (kd < dk)[None, :]
                ptrs_d = row_id[:, None] * dk + kd[None, :]
                k_d = tl.load(kn_ptr + ptrs_d, mask=mask_d, other=0.0)
                q_d = tl.load(qn_ptr + ptrs_d, mask=mask_d, other=0.0)
                g_d = tl.load(gc_ptr + ptrs_d, mask=mask_d, other=0.0)
                diff = g_d[:, None, :] - g_d[None, :, :]  # [t, s, c]: G_t - G_s <= 0 for s <= t
                decay = tl.exp(tl.where(on_or_below[:, :, None], diff, float("-inf")))
                k_s = k_d[None, :, :] * decay
                d_kk += tl.sum(k_d[:, None, :] * k_s, 2)
                d_qk += tl.sum(q_d[:, None, :] * k_s, 2)
            d_kk = tl.where(offs_j[:, None] > offs_j[None, :], d_kk, 0.0) * beta_i[:, None]
            diag_ptrs = row_id[:, None] * C + (i * BC + offs_j)[None, :]
            tl.store(akk_ptr + diag_ptrs, d_kk, mask=valid_r[:, None])
            tl.store(aqk_ptr + diag_ptrs, d_qk, mask=valid_r[:, None])

            # (I + A_ii)^-1 by forward substitution: row j is e_j - A_ii[j, :] @ (rows < j)
            d_inv = eye
            for j in range(1, BC):
                cand = eye - tl.dot(d_kk, d_inv, input_precision=DOT_PRECISION)
                d_inv = tl.where((offs_j == j)[:, None], cand, d_inv)
            tl.store(
                ainv_ptr + row_id[:, None] * BC + offs_j[None, :], d_inv, mask=valid_r[:, None]
            )


@triton.jit
def _kda_solve_kernel(
    akk_ptr,
    ainv_ptr,
    kn_ptr,
    gc_ptr,
    v_ptr,
    beta_ptr,
    w_ptr,
    u_ptr,
    seq_len,
    num_heads,
    dk: tl.constexpr,
    dv: tl.constexpr,
    C: tl.constexpr,
    BC: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """One (chunk, sequence * head): ``T = (I + A)^-1`` by block forward substitution over the
    16 x 16 diagonal-block inverses, then ``w = T (beta k e^G)`` and ``u = T (beta v)``."""
    i_n = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // num_heads).to(tl.int64)
    h = bh % num_heads
    offs_c = tl.arange(0, C)
    offs_k = tl.arange(0, BLOCK_K)
    chunk_start = i_n * C
    valid = (chunk_start + offs_c) < seq_len
    row_id = (b * seq_len + chunk_start + offs_c) * num_heads + h
    blk = offs_c // BC
    below = valid[:, None] & (blk[None, :] < blk[:, None])  # left of the diagonal blocks
    same = valid[:, None] & (blk[None, :] == blk[:, None])
    a_low = tl.load(akk_ptr + row_id[:, None] * C + offs_c[None, :], mask=below, other=0.0)
    d_inv = tl.load(ainv_ptr + row_id[:, None] * BC + (offs_c % BC)[None, :], mask=same, other=0.0)
    eye = (offs_c[:, None] == offs_c[None, :]).to(tl.float32)
    # block row i of T: D_i^-1 (E_i - A[i, blocks < i] T[blocks < i, :])
    t_inv = d_inv
    for i in tl.static_range(1, C // BC):
        rhs = eye - tl.dot(a_low, t_inv, input_precision=DOT_PRECISION)
        cand = tl.dot(d_inv, rhs, input_precision=DOT_PRECISION)
        t_inv = tl.where((blk == i)[:, None], cand, t_inv)

    beta = tl.load(beta_ptr + row_id, mask=valid, other=0.0).to(tl.float32)
    mask_ck = valid[:, None] & (offs_k < dk)[None, :]
    ptrs_k = row_id[:, None] * dk + offs_k[None, :]
    k = tl.load(kn_ptr + ptrs_k, mask=mask_ck, other=0.0)
    g = tl.load(gc_ptr + ptrs_k, mask=mask_ck, other=0.0)
    w = tl.dot(t_inv, k * tl.exp(g) * beta[:, None], input_precision=DOT_PRECISION)
    tl.store(w_ptr + ptrs_k, w, mask=mask_ck)
    for v0 in range(0, dv, BLOCK_V):
        offs_v = v0 + tl.arange(0, BLOCK_V)
        mask_cv = valid[:, None] & (offs_v < dv)[None, :]
        ptrs_v = row_id[:, None] * dv + offs_v[None, :]
        v = tl.load(v_ptr + ptrs_v, mask=mask_cv, other=0.0).to(tl.float32)
        u = tl.dot(t_inv, v * beta[:, None], input_precision=DOT_PRECISION)
        tl.store(u_ptr + ptrs_v, u, mask=mask_cv)


@triton.jit
def _kda_state_kernel(
    kn_ptr,
    gc_ptr,
    w_ptr,
    u_ptr,
    h_ptr,
    v_new_ptr,
    state0_ptr,
    state_out_ptr,
    seq_len,
    num_heads,
    num_chunks,
    dk: tl.constexpr,
    dv: tl.constexpr,
    C: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr,
    HAS_INITIAL_STATE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """One (sequence * head, value block): the inter-chunk state recurrence, chunk by chunk."""
    bh = tl.program_id(0).to(tl.int64)
    b = bh // num_heads
    h = bh % num_heads
    offs_c = tl.arange(0, C)
    offs_k = tl.arange(0, BLOCK_K)
    offs_v = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    mask_k = offs_k < dk
    mask_v = offs_v < dv
    mask_kv = mask_k[:, None] & mask_v[None, :]
    state_offs = offs_k[:, None] * dv + offs_v[None, :]
    if HAS_INITIAL_STATE:
        state = tl.load(state0_ptr + bh * dk * dv + state_offs, mask=mask_kv, other=0.0)
    else:
        state = tl.zeros([BLOCK_K, BLOCK_V], dtype=tl.float32)

    for i_n in range(num_chunks):
        chunk_start = i_n * C
        h_base = ((b * num_chunks + i_n) * num_heads + h) * dk * dv
        tl.store(h_ptr + h_base + state_offs, state, mask=mask_kv)  # state at chunk start

        valid = (chunk_start + offs_c) < seq_len
        row_id = (b * seq_len + chunk_start + offs_c) * num_heads + h
        mask_ck = valid[:, None] & mask_k[None, :]
        mask_cv = valid[:, None] & mask_v[None, :]
        ptrs_k = row_id[:, None] * dk + offs_k[None, :]
        ptrs_v = row_id[:, None] * dv + offs_v[None, :]
        w = tl.load(w_ptr + ptrs_k, mask=mask_ck, other=0.0)
        u = tl.load(u_ptr + ptrs_v, mask=mask_cv, other=0.0)
        v_new = u - tl.dot(w, state, input_precision=DOT_PRECISION)
        tl.store(v_new_ptr + ptrs_v, v_new, mask=mask_cv)

        last = tl.minimum(C, seq_len - chunk_start) - 1
        last_id = (b * seq_len + chunk_start + last) * num_heads + h
        g_last = tl.load(gc_ptr + last_id * dk + offs_k, mask=mask_k, other=0.0)
        k = tl.load(kn_ptr + ptrs_k, mask=mask_ck, other=0.0)
        g = tl.load(gc_ptr + ptrs_k, mask=mask_ck, other=0.0)
        k_decayed = k * tl.exp(tl.where(valid[:, None], g_last[None, :] - g, float("-inf")))
        state = state * tl.exp(g_last)[:, None] + tl.dot(
            tl.trans(k_decayed), v_new, input_precision=DOT_PRECISION
        )

    tl.store(state_out_ptr + bh * dk * dv + state_offs, state, mask=mask_kv)


@triton.jit
def _kda_output_kernel(
    qn_ptr,
    gc_ptr,
    aqk_ptr,
    h_ptr,
    v_new_ptr,
    o_ptr,
    seq_len,
    num_heads,
    num_chunks,
    dk: tl.constexpr,
    dv: tl.constexpr,
    C: tl.constexpr,
    BC: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """One (chunk, sequence * head, value block): ``o = (q e^G) h + Aqk v_new``."""
    i_n = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // num_heads).to(tl.int64)
    h = bh % num_heads
    offs_c = tl.arange(0, C)
    offs_k = tl.arange(0, BLOCK_K)
    offs_v = tl.program_id(2) * BLOCK_V + tl.arange(0, BLOCK_V)
    mask_k = offs_k < dk
    mask_v = offs_v < dv
    chunk_start = i_n * C
    valid = (chunk_start + offs_c) < seq_len
    row_id = (b * seq_len + chunk_start + offs_c) * num_heads + h
    mask_ck = valid[:, None] & mask_k[None, :]
    mask_cv = valid[:, None] & mask_v[None, :]
    ptrs_k = row_id[:, None] * dk + offs_k[None, :]
    ptrs_v = row_id[:, None] * dv + offs_v[None, :]

    q = tl.load(qn_ptr + ptrs_k, mask=mask_ck, other=0.0)
    g = tl.load(gc_ptr + ptrs_k, mask=mask_ck, other=0.0)
    h_base = ((b * num_chunks + i_n) * num_heads + h) * dk * dv
    state = tl.load(
        h_ptr + h_base + offs_k[:, None] * dv + offs_v[None, :],
        mask=mask_k[:, None] & mask_v[None, :],
        other=0.0,
    )
    blk = offs_c // BC
    lower = valid[:, None] & (blk[None, :] <= blk[:, None])  # what the intra kernel wrote
    a_qk = tl.load(aqk_ptr + row_id[:, None] * C + offs_c[None, :], mask=lower, other=0.0)
    v_new = tl.load(v_new_ptr + ptrs_v, mask=mask_cv, other=0.0)
    o = tl.dot(q * tl.exp(g), state, input_precision=DOT_PRECISION)
    o += tl.dot(a_qk, v_new, input_precision=DOT_PRECISION)
    tl.store(o_ptr + ptrs_v, o.to(o_ptr.dtype.element_ty), mask=mask_cv)


def kda_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    use_qk_l2norm: bool = True,
    chunk_size: int = CHUNK_SIZE,
    block_v: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunked KDA over ``T`` tokens per sequence; equals ``T`` steps of ``kda_decode``.

    Args:
        q, k: ``[B, T, H, dk]``; v: ``[B, T, H, dv]``; g: ``[B, T, H, dk]`` log-decay (<= 0);
            beta: ``[B, T, H]`` in (0, 1). q, k, v share fp32, bf16 or fp16; g and beta may
            be any float dtype (read as fp32). Non-contiguous inputs are copied.
        initial_state: ``[B, H, dk, dv]`` fp32, the state after the cached prefix (fla's
            ``[N, H, K, V]``); ``None`` starts from zeros. It is read, not modified.
        scale: query scale, default ``1 / sqrt(dk)``.
        chunk_size: tokens per chunk, 64 (fla and vLLM) or 16 / 32; ``dk <= 256``.
        block_v: value columns per program of the state and output kernels.

    Returns:
        ``o [B, T, H, dv]`` in ``v.dtype`` and the final state ``[B, H, dk, dv]`` fp32 (a new
        tensor, what fla returns for ``output_final_state=True``).
    """
    if q.dim() != 4:
        raise ValueError(f"q must be [B, T, H, dk], got {tuple(q.shape)}")
    batch, seq_len, num_heads, dk = q.shape
    if k.shape != q.shape or g.shape != q.shape:
        raise ValueError(
            f"q {tuple(q.shape)}, k {tuple(k.shape)} and g {tuple(g.shape)} must match"
        )
    if v.dim() != 4 or v.shape[:3] != q.shape[:3] or v.shape[3] < 1:
        raise ValueError(f"v {tuple(v.shape)} must be [B, T, H, dv] with q {tuple(q.shape)}")
    if beta.shape != q.shape[:3]:
        raise ValueError(f"beta {tuple(beta.shape)} must be [B, T, H] = {tuple(q.shape[:3])}")
    dv = v.shape[3]
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in SUPPORTED_DTYPES:
        raise ValueError(
            f"q, k, v must share one of {SUPPORTED_DTYPES}, got {q.dtype}, {k.dtype}, {v.dtype}"
        )
    if not (g.is_floating_point() and beta.is_floating_point()):
        raise ValueError(f"g and beta must be floating point, got {g.dtype}, {beta.dtype}")
    if not 1 <= dk <= MAX_HEAD_DIM_K:
        raise ValueError(f"dk={dk} must be in [1, {MAX_HEAD_DIM_K}] (a key row sits in registers)")
    if chunk_size not in (16, 32, 64):
        raise ValueError(f"chunk_size={chunk_size} must be 16, 32 or 64")
    if block_v < 16 or block_v & (block_v - 1):
        raise ValueError(f"block_v={block_v} must be a power of two >= 16")
    if initial_state is not None and (
        initial_state.shape != (batch, num_heads, dk, dv) or initial_state.dtype != torch.float32
    ):
        raise ValueError(
            f"initial_state must be fp32 [B, H, dk, dv] = {(batch, num_heads, dk, dv)}, "
            f"got {initial_state.dtype} {tuple(initial_state.shape)}"
        )
    tensors = (q, k, v, g, beta) + (() if initial_state is None else (initial_state,))
    if len({t.device for t in tensors}) != 1:
        raise ValueError(
            f"all inputs must be on one device, got {[str(t.device) for t in tensors]}"
        )

    device = q.device
    o = torch.empty((batch, seq_len, num_heads, dv), dtype=v.dtype, device=device)
    if initial_state is None:
        final_state = torch.zeros((batch, num_heads, dk, dv), dtype=torch.float32, device=device)
    else:
        final_state = initial_state.contiguous().clone()
    if batch == 0 or num_heads == 0 or seq_len == 0:
        return o, final_state

    q, k, v, g, beta = (t.contiguous() for t in (q, k, v, g, beta))
    chunk = chunk_size
    num_chunks = triton.cdiv(seq_len, chunk)
    block_k = max(16, triton.next_power_of_2(dk))
    block_v = min(block_v, max(16, triton.next_power_of_2(dv)))
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    # 8 warps keep the 64 x 128 fp32 tiles of dk = dv = 128 (nearly) free of register spills
    num_warps = 8 if block_k * block_v >= 128 * 64 else 4

    def f32(*shape: int) -> torch.Tensor:
        return torch.empty(shape, dtype=torch.float32, device=device)

    qn, kn, gc, w = (f32(batch, seq_len, num_heads, dk) for _ in range(4))
    a_kk, a_qk = f32(batch, seq_len, num_heads, chunk), f32(batch, seq_len, num_heads, chunk)
    a_inv = f32(batch, seq_len, num_heads, SUB_CHUNK)
    u, v_new = f32(batch, seq_len, num_heads, dv), f32(batch, seq_len, num_heads, dv)
    h = f32(batch, num_chunks, num_heads, dk, dv)

    grid_chunks = (num_chunks, batch * num_heads)
    _kda_prep_kernel[grid_chunks](
        q,
        k,
        g,
        qn,
        kn,
        gc,
        dk**-0.5 if scale is None else scale,
        seq_len,
        num_heads,
        dk=dk,
        C=chunk,
        BLOCK_K=block_k,
        USE_QK_L2NORM=use_qk_l2norm,
        EPS=L2NORM_EPS,
        num_warps=num_warps,
    )
    _kda_intra_kernel[grid_chunks](
        qn,
        kn,
        gc,
        beta,
        a_kk,
        a_qk,
        a_inv,
        seq_len,
        num_heads,
        dk=dk,
        C=chunk,
        BC=SUB_CHUNK,
        BLOCK_K=block_k,
        BLOCK_KD=min(block_k, 32),
        DOT_PRECISION=precision,
        num_warps=num_warps,
    )
    _kda_solve_kernel[grid_chunks](
        a_kk,
        a_inv,
        kn,
        gc,
        v,
        beta,
        w,
        u,
        seq_len,
        num_heads,
        dk=dk,
        dv=dv,
        C=chunk,
        BC=SUB_CHUNK,
        BLOCK_K=block_k,
        BLOCK_V=block_v,
        DOT_PRECISION=precision,
        num_warps=num_warps,
    )
    num_v_blocks = triton.cdiv(dv, block_v)
    _kda_state_kernel[(batch * num_heads, num_v_blocks)](
        kn,
        gc,
        w,
        u,
        h,
        v_new,
        final_state,  # read before it is written, by the same program
        final_state,
        seq_len,
        num_heads,
        num_chunks,
        dk=dk,
        dv=dv,
        C=chunk,
        BLOCK_K=block_k,
        BLOCK_V=block_v,
        HAS_INITIAL_STATE=initial_state is not None,
        DOT_PRECISION=precision,
        num_warps=num_warps,
        num_stages=1,  # the pipelined chunk loop would need > 200 KiB of shared memory
    )
    _kda_output_kernel[(num_chunks, batch * num_heads, num_v_blocks)](
        qn,
        gc,
        a_qk,
        h,
        v_new,
        o,
        seq_len,
        num_heads,
        num_chunks,
        dk=dk,
        dv=dv,
        C=chunk,
        BC=SUB_CHUNK,
        BLOCK_K=block_k,
        BLOCK_V=block_v,
        DOT_PRECISION=precision,
        num_warps=num_warps,
    )
    return o, final_state


def kda_prefill_reference(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    g: np.ndarray,
    beta: np.ndarray,
    initial_state: np.ndarray | None = None,
    *,
    scale: float | None = None,
    use_qk_l2norm: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Float64 token-by-token recurrence (``kda_decode_reference`` per token).

    Takes ``kda_prefill``'s layouts; returns ``(o [B, T, H, dv], final_state [B, H, dk, dv])``.
    """
    q64, k64, v64, g64, beta64 = (np.asarray(x, dtype=np.float64) for x in (q, k, v, g, beta))
    batch, seq_len, num_heads, dk = q64.shape
    dv = v64.shape[3]
    if initial_state is None:
        state = np.zeros((batch, num_heads, dk, dv))
    else:
        state = np.array(initial_state, dtype=np.float64)
    o = np.zeros((batch, seq_len, num_heads, dv))
    for t in range(seq_len):
        o[:, t], state = kda_decode_reference(
            q64[:, t],
            k64[:, t],
            v64[:, t],
            g64[:, t],
            beta64[:, t],
            state,
            scale=scale,
            use_qk_l2norm=use_qk_l2norm,
        )
    return o, state


def make_inputs(
    batch: int,
    seq_len: int,
    num_heads: int,
    head_dim: int,
    dtype: torch.dtype,
    device: str | torch.device,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random inputs for one ``kda_prefill`` shape (``dk = dv = head_dim``, contiguous).

    Returns ``(q, k, v, g, beta, initial_state)``: q, k, v ``[B, T, H, d]`` standard normal
    and beta ``[B, T, H]`` = sigmoid(normal) in ``dtype``; g ``[B, T, H, d]`` =
    log(sigmoid(normal)) in fp32 (the gate is computed in fp32 in vLLM/fla); initial_state
    ``[B, H, d, d]`` fp32 standard normal, the state after a cached prefix (pass ``None``
    instead for a prompt without one). Drawn in fp32 on the generator's device, then cast
    and moved.
    """
    if dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"dtype must be one of {SUPPORTED_DTYPES}, got {dtype}")
    if min(batch, seq_len, num_heads, head_dim) < 1:
        raise ValueError("sizes must be >= 1")

    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=generator, dtype=torch.float32, device=generator.device)

    tokens = (batch, seq_len, num_heads, head_dim)
    q, k, v = (draw(*tokens).to(device=device, dtype=dtype) for _ in range(3))
    g = torch.nn.functional.logsigmoid(draw(*tokens)).to(device=device)
    beta = torch.sigmoid(draw(batch, seq_len, num_heads)).to(device=device, dtype=dtype)
    initial_state = draw(batch, num_heads, head_dim, head_dim).to(device=device)
    return q, k, v, g, beta, initial_state
