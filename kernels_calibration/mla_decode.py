"""MLA decode over a paged latent cache with split-KV, and its float64 numpy reference.

This is the absorbed ("MQA") decode path of MLA (reference doc, section 3): every query head
attends over the shared latent cache with a QK dimension of ``L + R`` (``kv_lora_rank`` +
``qk_rope_head_dim``, 512 + 64 in DeepSeek/Kimi) and a V dimension of ``L``: the first ``L``
dims of each cached token are both the NoPE key and the value. There is one KV head.

Two Triton kernels, in the shape of vLLM's TRITON_MLA ``decode_attention_fwd``:

1. ``_mla_decode_split_kernel``, grid ``(B, cdiv(H, block_h), num_splits)``: the context of
   sequence ``b`` is cut into ``num_splits`` contiguous parts of ``cdiv(seq_len, num_splits)``
   tokens; each program runs an online softmax over its part for a block of heads and writes a
   partial output ``[B, H, S, L]`` (fp32, normalised within the split) and its log-sum-exp
   ``[B, H, S]``. An empty split writes ``out = 0`` and ``lse = -inf``.
2. ``_merge_lse_kernel``, grid ``(B, H)``: the LSE merge
   ``lse = log(sum_s exp(lse_s))``, ``out = sum_s exp(lse_s - lse) * out_s``.

The merge is the same rule DCP uses to combine the partial results of its ranks (section 4),
so ``mla_decode`` returns ``(out, lse)`` and ``merge_attn_partials`` merges any stack of them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import triton
import triton.language as tl


@triton.jit
def _mla_decode_split_kernel(
    q_ptr,
    kv_ptr,
    block_table_ptr,
    seq_lens_ptr,
    part_out_ptr,
    part_lse_ptr,
    sm_scale,
    stride_q_b,
    stride_q_h,
    stride_kv_block,
    stride_kv_tok,
    stride_bt_b,
    stride_po_b,
    stride_po_h,
    stride_po_s,
    stride_pl_b,
    stride_pl_h,
    num_heads,
    num_splits,
    kv_lora_rank: tl.constexpr,
    rope_dim: tl.constexpr,
    page_size: tl.constexpr,
    block_h: tl.constexpr,
    block_n: tl.constexpr,
    block_l: tl.constexpr,
    block_r: tl.constexpr,
    dot_precision: tl.constexpr,
):
    """One (sequence, head block, split): online softmax over the split's tokens."""
    b = tl.program_id(0)
    head_block = tl.program_id(1)
    split = tl.program_id(2)

    offs_h = head_block * block_h + tl.arange(0, block_h)
    offs_l = tl.arange(0, block_l)
    offs_r = tl.arange(0, block_r)
    mask_h = offs_h < num_heads
    mask_l = offs_l < kv_lora_rank
    mask_r = offs_r < rope_dim

    q_rows = q_ptr + b * stride_q_b + offs_h[:, None] * stride_q_h
    q_nope = tl.load(q_rows + offs_l[None, :], mask=mask_h[:, None] & mask_l[None, :], other=0.0)
    q_pe = tl.load(
        q_rows + kv_lora_rank + offs_r[None, :], mask=mask_h[:, None] & mask_r[None, :], other=0.0
    )

    seq_len = tl.load(seq_lens_ptr + b)
    split_len = tl.cdiv(seq_len, num_splits)
    start = split * split_len
    end = tl.minimum(start + split_len, seq_len)

    m_i = tl.full([block_h], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([block_h], dtype=tl.float32)
    acc = tl.zeros([block_h, block_l], dtype=tl.float32)

    for n0 in range(start, end, block_n):
        offs_n = n0 + tl.arange(0, block_n)
        mask_n = offs_n < end
        page = tl.load(
            block_table_ptr + b * stride_bt_b + offs_n // page_size, mask=mask_n, other=0
        )
        tok = page.to(tl.int64) * stride_kv_block + (offs_n % page_size) * stride_kv_tok
        # keys transposed: [L, N] (NoPE part, also the values) and [R, N] (RoPE part)
        k_nope = tl.load(
            kv_ptr + tok[None, :] + offs_l[:, None],
            mask=mask_l[:, None] & mask_n[None, :],
            other=0.0,
        )
        k_pe = tl.load(
            kv_ptr + tok[None, :] + kv_lora_rank + offs_r[:, None],
            mask=mask_r[:, None] & mask_n[None, :],
            other=0.0,
        )
        scores = tl.dot(q_nope, k_nope, input_precision=dot_precision)
        scores += tl.dot(q_pe, k_pe, input_precision=dot_precision)
        scores = tl.where(mask_n[None, :], scores * sm_scale, float("-inf"))

        m_new = tl.maximum(m_i, tl.max(scores, 1))  # finite: the block holds >= 1 valid token
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(scores - m_new[:, None])
        values = tl.trans(k_nope)  # [N, L]
        acc = acc * alpha[:, None] + tl.dot(
            p.to(values.dtype), values, input_precision=dot_precision
        )
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new

    nonempty = l_i > 0.0
    l_safe = tl.where(nonempty, l_i, 1.0)
    lse = tl.where(nonempty, m_i + tl.log(l_safe), float("-inf"))
    out = acc / l_safe[:, None]

    po = part_out_ptr + b * stride_po_b + offs_h[:, None] * stride_po_h + split * stride_po_s
    tl.store(po + offs_l[None, :], out, mask=mask_h[:, None] & mask_l[None, :])
    tl.store(part_lse_ptr + b * stride_pl_b + offs_h * stride_pl_h + split, lse, mask=mask_h)


@triton.jit
def _merge_lse_kernel(
    part_out_ptr,
    part_lse_ptr,
    out_ptr,
    lse_ptr,
    stride_po_b,
    stride_po_h,
    stride_po_s,
    stride_pl_b,
    stride_pl_h,
    stride_o_b,
    stride_o_h,
    stride_lse_b,
    num_parts,
    head_dim: tl.constexpr,
    block_s: tl.constexpr,
    block_d: tl.constexpr,
):
    """One (sequence, head): merge the partial outputs with the LSE rule."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_s = tl.arange(0, block_s)
    offs_d = tl.arange(0, block_d)
    mask_s = offs_s < num_parts
    mask_d = offs_d < head_dim

    lse_parts = tl.load(
        part_lse_ptr + b * stride_pl_b + h * stride_pl_h + offs_s,
        mask=mask_s,
        other=float("-inf"),
    )
    m = tl.max(lse_parts, 0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)  # every part empty: weights 0, lse -inf
    weights = tl.exp(lse_parts - m_safe)
    denom = tl.sum(weights, 0)
    parts = tl.load(
        part_out_ptr
        + b * stride_po_b
        + h * stride_po_h
        + offs_s[:, None] * stride_po_s
        + offs_d[None, :],
        mask=mask_s[:, None] & mask_d[None, :],
        other=0.0,
    )
    denom_safe = tl.where(denom > 0.0, denom, 1.0)
    out = tl.sum(weights[:, None] * parts, 0) / denom_safe
    lse = tl.where(denom > 0.0, m_safe + tl.log(denom_safe), float("-inf"))
    tl.store(out_ptr + b * stride_o_b + h * stride_o_h + offs_d, out, mask=mask_d)
    tl.store(lse_ptr + b * stride_lse_b + h, lse)


def merge_attn_partials(
    part_out: torch.Tensor, part_lse: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge partial attention results with the LSE rule (split-KV combine, or DCP combine).

    ``part_out [B, H, S, D]`` holds outputs each normalised over its own part of the context,
    ``part_lse [B, H, S]`` their natural-log sum-exp (``-inf`` for an empty part). Returns
    ``out [B, H, D]`` fp32 and ``lse [B, H]`` fp32 over the union of the parts.
    """
    num_seqs, num_heads, num_parts, head_dim = part_out.shape
    if part_lse.shape != (num_seqs, num_heads, num_parts):
        raise ValueError(f"part_lse {tuple(part_lse.shape)} does not match {part_out.shape}")
    part_out = part_out.float()
    part_lse = part_lse.float()
    if part_out.stride(3) != 1:
        part_out = part_out.contiguous()
    if part_lse.stride(2) != 1:
        part_lse = part_lse.contiguous()
    out = torch.empty((num_seqs, num_heads, head_dim), dtype=torch.float32, device=part_out.device)
    lse = torch.empty((num_seqs, num_heads), dtype=torch.float32, device=part_out.device)
    _merge_lse_kernel[(num_seqs, num_heads)](
        part_out,
        part_lse,
        out,
        lse,
        part_out.stride(0),
        part_out.stride(1),
        part_out.stride(2),
        part_lse.stride(0),
        part_lse.stride(1),
        out.stride(0),
        out.stride(1),
        lse.stride(0),
        num_parts,
        head_dim=head_dim,
        block_s=triton.next_power_of_2(num_parts),
        block_d=triton.next_power_of_2(head_dim),
    )
    return out, lse


def mla_decode(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    kv_lora_rank: int,
    sm_scale: float,
    num_splits: int,
    block_n: int = 16,
    block_h: int = 16,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Absorbed MLA decode, one query token per sequence, over a paged latent cache.

    Args:
        q: ``[B, H, L + R]``, the absorbed query (``q_nope @ W_UK`` then ``q_pe``).
        kv_cache: ``[num_blocks, page_size, L + R]`` (or vLLM's ``[..., 1, L + R]``); the first
            ``L = kv_lora_rank`` dims of each token are the latent ``c_kv`` (key and value),
            the last ``R`` the RoPE key.
        block_table: ``[B, max_blocks]`` int32, physical block of each logical page.
        seq_lens: ``[B]`` int32 context lengths (>= 0; a zero length gives 0 and -inf).
        kv_lora_rank: ``L``.
        sm_scale: softmax scale, ``1 / sqrt(qk_nope_head_dim + qk_rope_head_dim)`` for MLA
            (the scale of the un-absorbed head dims, not of ``L + R``).
        num_splits: split-KV parts per sequence (the kernel's third grid axis).
        block_n: tokens per inner iteration; block_h: heads per program (>= 16 for tl.dot).

    Returns:
        ``out [B, H, L]`` in ``q.dtype`` and ``lse [B, H]`` fp32 (natural log), so that the
        results of DCP shards can be merged with ``merge_attn_partials``.
    """
    if kv_cache.dim() == 4:
        kv_cache = kv_cache.squeeze(2)
    num_seqs, num_heads, qk_dim = q.shape
    _num_blocks, page_size, cache_dim = kv_cache.shape
    rope_dim = qk_dim - kv_lora_rank
    if cache_dim != qk_dim or rope_dim < 0:
        raise ValueError(f"q dim {qk_dim} and cache dim {cache_dim} must both be L + R")
    if num_splits < 1:
        raise ValueError("num_splits must be >= 1")
    if q.stride(2) != 1:
        q = q.contiguous()
    if kv_cache.stride(2) != 1:
        kv_cache = kv_cache.contiguous()
    if kv_cache.dtype != q.dtype:
        raise ValueError(f"q {q.dtype} and kv_cache {kv_cache.dtype} must share a dtype")

    part_out = torch.empty(
        (num_seqs, num_heads, num_splits, kv_lora_rank), dtype=torch.float32, device=q.device
    )
    part_lse = torch.empty((num_seqs, num_heads, num_splits), dtype=torch.float32, device=q.device)
    grid = (num_seqs, triton.cdiv(num_heads, block_h), num_splits)
    _mla_decode_split_kernel[grid](
        q,
        kv_cache,
        block_table,
        seq_lens,
        part_out,
        part_lse,
        sm_scale,
        q.stride(0),
        q.stride(1),
        kv_cache.stride(0),
        kv_cache.stride(1),
        block_table.stride(0),
        part_out.stride(0),
        part_out.stride(1),
        part_out.stride(2),
        part_lse.stride(0),
        part_lse.stride(1),
        num_heads,
        num_splits,
        kv_lora_rank=kv_lora_rank,
        rope_dim=rope_dim,
        page_size=page_size,
        block_h=block_h,
        block_n=block_n,
        block_l=triton.next_power_of_2(kv_lora_rank),
        block_r=max(16, triton.next_power_of_2(max(rope_dim, 1))),  # tl.dot needs K >= 16
        # fp32 inputs: exact fp32 products (TF32 would miss a 1e-4 gate); bf16/fp16 ignore it
        dot_precision="ieee" if q.dtype == torch.float32 else "tf32",
    )
    out, lse = merge_attn_partials(part_out, part_lse)
    return out.to(q.dtype), lse


def pack_paged_cache(
    contexts: Sequence[torch.Tensor],
    page_size: int,
    generator: torch.Generator,
    spare_blocks: int = 2,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Scatter per-sequence contexts ``[n_b, D]`` into a paged cache at shuffled blocks.

    Returns ``kv_cache [num_blocks, page_size, D]`` (unused slots filled with NaN-free noise),
    ``block_table [B, max_blocks]`` int32 and ``seq_lens [B]`` int32. The physical blocks are
    a random permutation, so a kernel that ignores the block table fails the reference.
    """
    pages = [math.ceil(ctx.shape[0] / page_size) for ctx in contexts]
    max_blocks = max(max(pages), 1)
    num_blocks = sum(pages) + spare_blocks
    dim = contexts[0].shape[1]
    like = contexts[0]
    kv_cache = torch.randn(
        (num_blocks, page_size, dim), generator=generator, dtype=torch.float32
    ).to(like.dtype)
    order = torch.randperm(num_blocks, generator=generator)
    block_table = torch.zeros((len(contexts), max_blocks), dtype=torch.int32)
    used = 0
    for b, ctx in enumerate(contexts):
        for j in range(pages[b]):
            blk = int(order[used])
            used += 1
            block_table[b, j] = blk
            rows = ctx[j * page_size : (j + 1) * page_size]
            kv_cache[blk, : rows.shape[0]] = rows
    seq_lens = torch.tensor([ctx.shape[0] for ctx in contexts], dtype=torch.int32)
    return kv_cache, block_table, seq_lens


def mla_decode_reference(
    q: np.ndarray, contexts: Sequence[np.ndarray], kv_lora_rank: int, sm_scale: float
) -> tuple[np.ndarray, np.ndarray]:
    """Float64 reference of ``mla_decode`` over unpaged contexts.

    ``q [B, H, L + R]``; ``contexts[b]`` is ``[n_b, L + R]`` (``n_b >= 1``). Per sequence:
    ``s = sm_scale * q @ ctx.T`` (QK over all ``L + R`` dims), ``out = softmax(s) @ ctx[:, :L]``
    (V over the ``L`` latent dims), ``lse = log(sum(exp(s)))``.
    """
    q64 = np.asarray(q, dtype=np.float64)
    num_seqs, num_heads, _ = q64.shape
    out = np.zeros((num_seqs, num_heads, kv_lora_rank))
    lse = np.zeros((num_seqs, num_heads))
    for b, ctx in enumerate(contexts):
        c64 = np.asarray(ctx, dtype=np.float64)
        scores = sm_scale * (q64[b] @ c64.T)  # [H, n]
        m = scores.max(axis=1, keepdims=True)
        w = np.exp(scores - m)
        denom = w.sum(axis=1, keepdims=True)
        out[b] = (w / denom) @ c64[:, :kv_lora_rank]
        lse[b] = (m + np.log(denom))[:, 0]
    return out, lse
