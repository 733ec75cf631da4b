"""The five Triton kernels of KDA chunked prefill (``kda_prefill.py`` has the rule, the
launcher that runs them in order, and the float64 reference they are checked against)."""

import triton
import triton.language as tl


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
