"""The Triton kernel of causal prefill attention over a cached prefix and its tile helpers
(``prefill_attention.py`` has the rule, the launcher and the numpy reference)."""

import triton
import triton.language as tl


@triton.jit
def _load_2d(ptrs, mask_rows, mask_cols, MASK_ROWS: tl.constexpr, MASK_COLS: tl.constexpr):
    """``tl.load`` with only the masks a tile needs (no mask at all for a full, even tile)."""
    if MASK_ROWS:
        if MASK_COLS:
            x = tl.load(ptrs, mask=mask_rows[:, None] & mask_cols[None, :], other=0.0)
        else:
            x = tl.load(ptrs, mask=mask_rows[:, None], other=0.0)
    elif MASK_COLS:
        x = tl.load(ptrs, mask=mask_cols[None, :], other=0.0)
    else:
        x = tl.load(ptrs)
    return x


@triton.jit
def _attend_tile(
    acc,
    l_i,
    m_i,
    q,
    q_tail,
    k_base,
    v_base,
    n0,
    offs_m,
    offs_d,
    offs_dt,
    offs_dv,
    stride_ks,
    stride_vs,
    qk_scale,
    kv_len,
    prefix_len,
    head_dim_qk: tl.constexpr,
    head_dim_v: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DT: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    HAS_TAIL: tl.constexpr,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    UPCAST_TO_FP32: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """One key tile ``[n0, n0 + BLOCK_N)`` of the online softmax; returns ``(acc, l_i, m_i)``.

    ``MASKED=False`` only for tiles wholly inside the sequence and visible to every row.
    """
    offs_t = tl.arange(0, BLOCK_N)
    offs_n = n0 + offs_t  # absolute key index
    mask_n = offs_n < kv_len
    k_tile = k_base + n0 * stride_ks  # 64-bit tile base, 32-bit offsets inside the tile
    v_tile = v_base + n0 * stride_vs
    # keys transposed, [D, N]
    k = _load_2d(
        k_tile + offs_t[None, :] * stride_ks + offs_d[:, None],
        offs_d < head_dim_qk,
        mask_n,
        head_dim_qk < BLOCK_D,
        MASKED,
    )
    if UPCAST_TO_FP32:  # interpreter shim, see gemm._interpreter_needs_upcast
        k = k.to(tl.float32)
    scores = tl.dot(q, k, input_precision=DOT_PRECISION)
    if HAS_TAIL:
        k_tail = _load_2d(
            k_tile + offs_t[None, :] * stride_ks + offs_dt[:, None],
            offs_dt < head_dim_qk,
            mask_n,
            head_dim_qk < BLOCK_D + BLOCK_DT,
            MASKED,
        )
        if UPCAST_TO_FP32:
            k_tail = k_tail.to(tl.float32)
        scores += tl.dot(q_tail, k_tail, input_precision=DOT_PRECISION)
    scores = scores * qk_scale  # log2 domain
    if MASKED:
        visible = mask_n[None, :]
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= prefix_len + offs_m[:, None])
        scores = tl.where(visible, scores, float("-inf"))

    # finite: a masked tile is only reached with >= 1 visible key per row, or a finite m_i
    m_new = tl.maximum(m_i, tl.max(scores, 1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(scores - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    v = _load_2d(
        v_tile + offs_t[:, None] * stride_vs + offs_dv[None, :],
        mask_n,
        offs_dv < head_dim_v,
        MASKED,
        head_dim_v < BLOCK_DV,
    )
    p = p.to(v.dtype)  # bf16/fp16 P @ V on tensor cores, as FlashAttention does
    if UPCAST_TO_FP32:
        p = p.to(tl.float32)
        v = v.to(tl.float32)
    acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=DOT_PRECISION)
    return acc, l_i, m_new


@triton.jit(do_not_specialize=["seq_len", "kv_len", "prefix_len"])  # always int tensors
def _prefill_attention_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,
    lse_ptr,
    qk_scale,
    seq_len,
    kv_len,
    prefix_len,
    num_heads,
    group_size,
    stride_qb,
    stride_qs,
    stride_qh,
    stride_kb,
    stride_ks,
    stride_kh,
    stride_vb,
    stride_vs,
    stride_vh,
    stride_ob,
    stride_os,
    stride_oh,
    stride_lb,
    stride_ls,
    head_dim_qk: tl.constexpr,
    head_dim_v: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DT: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    HAS_TAIL: tl.constexpr,
    CAUSAL: tl.constexpr,
    UPCAST_TO_FP32: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """One (query block, sequence * head): online softmax over the visible keys."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // num_heads).to(tl.int64)  # offsets exceed int32 at serving sizes
    h = bh % num_heads
    kv_h = h // group_size
    start_m = pid_m.to(tl.int64) * BLOCK_M  # int64 token indices: kv_len * stride > 2^31
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dt = BLOCK_D + tl.arange(0, BLOCK_DT)  # QK tail dims (used only if HAS_TAIL)
    offs_dv = tl.arange(0, BLOCK_DV)
    mask_m = offs_m < seq_len

    q_rows = q_ptr + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qs
    q = tl.load(
        q_rows + offs_d[None, :], mask=mask_m[:, None] & (offs_d < head_dim_qk)[None, :], other=0.0
    )
    q_tail = q  # placeholder when there is no tail
    if HAS_TAIL:
        q_tail = tl.load(
            q_rows + offs_dt[None, :],
            mask=mask_m[:, None] & (offs_dt < head_dim_qk)[None, :],
            other=0.0,
        )
        if UPCAST_TO_FP32:
            q_tail = q_tail.to(tl.float32)
    if UPCAST_TO_FP32:
        q = q.to(tl.float32)
    k_base = k_ptr + b * stride_kb + kv_h * stride_kh
    v_base = v_ptr + b * stride_vb + kv_h * stride_vh

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)

    if CAUSAL:
        # keys below prefix_len + start_m are visible to every row of the block
        full_end = (prefix_len + start_m) // BLOCK_N * BLOCK_N
        end = tl.minimum(prefix_len + start_m + BLOCK_M, kv_len)
    else:
        full_end = kv_len.to(tl.int64) // BLOCK_N * BLOCK_N
        end = kv_len.to(tl.int64)
    for n0 in range(0, full_end, BLOCK_N):
        acc, l_i, m_i = _attend_tile(
            acc,
            l_i,
            m_i,
            q,
            q_tail,
            k_base,
            v_base,
            n0,
            offs_m,
            offs_d,
            offs_dt,
            offs_dv,
            stride_ks,
            stride_vs,
            qk_scale,
            kv_len,
            prefix_len,
            head_dim_qk,
            head_dim_v,
            BLOCK_N,
            BLOCK_D,
            BLOCK_DT,
            BLOCK_DV,
            HAS_TAIL,
            False,
            CAUSAL,
            UPCAST_TO_FP32,
            DOT_PRECISION,
        )
    for n0 in range(full_end, end, BLOCK_N):
        acc, l_i, m_i = _attend_tile(
            acc,
            l_i,
            m_i,
            q,
            q_tail,
            k_base,
            v_base,
            n0,
            offs_m,
            offs_d,
            offs_dt,
            offs_dv,
            stride_ks,
            stride_vs,
            qk_scale,
            kv_len,
            prefix_len,
            head_dim_qk,
            head_dim_v,
            BLOCK_N,
            BLOCK_D,
            BLOCK_DT,
            BLOCK_DV,
            HAS_TAIL,
            True,
            CAUSAL,
            UPCAST_TO_FP32,
            DOT_PRECISION,
        )

    nonempty = l_i > 0.0  # only an empty key set (causal=False, kv_len 0) gives 0
    l_safe = tl.where(nonempty, l_i, 1.0)
    out = acc / l_safe[:, None]
    ln2 = 0.6931471805599453  # base-2 lse to natural log
    lse = tl.where(nonempty, (m_i + tl.log2(l_safe)) * ln2, float("-inf"))
    o_rows = o_ptr + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_os
    tl.store(
        o_rows + offs_dv[None, :],
        out.to(o_ptr.dtype.element_ty),
        mask=mask_m[:, None] & (offs_dv < head_dim_v)[None, :],
    )
    tl.store(lse_ptr + b * stride_lb + offs_m * stride_ls + h, lse, mask=mask_m)
