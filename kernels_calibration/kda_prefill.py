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

Five Triton kernels (``kda_prefill_kernels.py``), in the shape of fla's ``chunk_kda_fwd``:

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

from kernels_calibration.kda_decode import L2NORM_EPS, kda_decode_reference
from kernels_calibration.kda_prefill_kernels import (
    _kda_intra_kernel,
    _kda_output_kernel,
    _kda_prep_kernel,
    _kda_solve_kernel,
    _kda_state_kernel,
)

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
CHUNK_SIZE = 64
SUB_CHUNK = 16  # rows of an intra-chunk sub-block (tl.dot needs >= 16)
MAX_HEAD_DIM_K = 256  # a whole key row lives in registers


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
