"""The Triton kernels of the grouped MoE GEMM (``moe_gemm.py`` has the rule, the weight
formats and the launchers): the grouped up / down GEMM over expert-sorted rows with its e2m1 /
e8m0 decoders, SiLU-and-mul, and the top-k sum."""

import triton
import triton.language as tl

from kernels_calibration.gemm import grouped_tile


@triton.jit
def _e2m1_to_fp32(nib):
    """e2m1 codes (int32 in [0, 16): sign, 2 exponent bits, 1 mantissa bit) to fp32."""
    e = (nib >> 1) & 3
    m = (nib & 1).to(tl.float32)
    pow2 = tl.where(e == 3, 4.0, tl.where(e == 2, 2.0, 1.0))
    mag = tl.where(e == 0, 0.5 * m, (1.0 + 0.5 * m) * pow2)
    return tl.where((nib & 8) != 0, -mag, mag)


@triton.jit
def _e8m0_to_fp32(s):
    """e8m0 scales (uint8 exponents, bias 127) to ``2**(s - 127)`` built from the fp32 bits."""
    s = s.to(tl.int32)
    bits = tl.where(s == 0, 0x400000, s << 23)  # s == 0: 2**-127 is an fp32 subnormal
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _moe_gemm_kernel(
    a_ptr,
    b_ptr,
    b_scale_ptr,
    c_ptr,
    topk_weights_ptr,
    sorted_ids_ptr,
    block_expert_ptr,
    num_padded_ptr,
    N,
    K,
    num_rows,
    num_pairs,
    stride_am,
    stride_ak,
    stride_be,
    stride_bn,
    stride_bk,
    stride_se,
    stride_sn,
    stride_sk,
    stride_cm,
    stride_cn,
    A_ROW_DIV: tl.constexpr,
    MUL_ROUTED_WEIGHT: tl.constexpr,
    WEIGHT_KIND: tl.constexpr,
    COMPUTE_DTYPE: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    # c[pair, n] = sum_k a[pair // A_ROW_DIV, k] * B[expert(pair), n, k] (* scales, * weight).
    # 1-D grid over (row block, column block) in grouped order, as gemm.py.
    pid_m, pid_n = grouped_tile(tl.program_id(0), num_rows, N, BLOCK_M, BLOCK_N, GROUP_M)

    # The grid covers the worst-case padded length; blocks past the real one do nothing.
    if pid_m * BLOCK_M >= tl.load(num_padded_ptr):
        return
    expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    pair = tl.load(sorted_ids_ptr + offs_m)
    mask_m = pair < num_pairs  # padding rows hold the sentinel num_pairs
    a_rows = (pair // A_ROW_DIV).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < N
    b_base = b_ptr + expert * stride_be + offs_n[None, :] * stride_bn
    s_base = b_scale_ptr + expert * stride_se + offs_n[None, :] * stride_sn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        mask_k = offs_k < K
        a = tl.load(
            a_ptr + a_rows[:, None] * stride_am + offs_k[None, :] * stride_ak,
            mask=mask_m[:, None] & mask_k[None, :],
            other=0.0,
        )
        if WEIGHT_KIND == 2:
            # mxfp4: BLOCK_K/2 packed bytes per column -> low/high nibbles = even/odd k.
            offs_kp = k0 // 2 + tl.arange(0, BLOCK_K // 2)
            packed = tl.load(
                b_base + offs_kp[:, None] * stride_bk,
                mask=(offs_kp < K // 2)[:, None] & mask_n[None, :],
                other=0,
            ).to(tl.int32)
            lo = _e2m1_to_fp32(packed & 0xF)
            hi = _e2m1_to_fp32((packed >> 4) & 0xF)
            w = tl.reshape(tl.permute(tl.join(lo, hi), (0, 2, 1)), (BLOCK_K, BLOCK_N))
            offs_g = k0 // 32 + tl.arange(0, BLOCK_K // 32)
            s = tl.load(
                s_base + offs_g[:, None] * stride_sk,
                mask=(offs_g < K // 32)[:, None] & mask_n[None, :],
                other=127,
            )
            s = _e8m0_to_fp32(s)
            s = tl.reshape(
                tl.broadcast_to(s[:, None, :], (BLOCK_K // 32, 32, BLOCK_N)), (BLOCK_K, BLOCK_N)
            )
            b = (w * s).to(COMPUTE_DTYPE)
        else:
            b = tl.load(
                b_base + offs_k[:, None] * stride_bk,
                mask=mask_k[:, None] & mask_n[None, :],
                other=0.0,
            ).to(COMPUTE_DTYPE)
        acc = tl.dot(a.to(COMPUTE_DTYPE), b, acc, input_precision=INPUT_PRECISION)

    if WEIGHT_KIND == 1:  # fp8: per-output-channel scale
        scale = tl.load(s_base, mask=mask_n[None, :], other=0.0)
        acc = acc * scale
    if MUL_ROUTED_WEIGHT:
        routed = tl.load(topk_weights_ptr + pair, mask=mask_m, other=0.0)
        acc = acc * routed[:, None]
    c_ptrs = c_ptr + pair[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _silu_and_mul_kernel(
    h_ptr,
    out_ptr,
    rows,
    inter,
    stride_hm,
    stride_om,
    BLOCK_R: tl.constexpr,
    BLOCK_I: tl.constexpr,
):
    # out[r, i] = silu(h[r, i]) * h[r, inter + i], in fp32.
    offs_r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    offs_i = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    mask = (offs_r < rows)[:, None] & (offs_i < inter)[None, :]
    h_ptrs = h_ptr + offs_r[:, None].to(tl.int64) * stride_hm + offs_i[None, :]
    gate = tl.load(h_ptrs, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(h_ptrs + inter, mask=mask, other=0.0).to(tl.float32)
    z = tl.exp(-tl.abs(gate))  # overflow-free sigmoid
    sigmoid = tl.where(gate >= 0, 1.0 / (1.0 + z), z / (1.0 + z))
    out = gate * sigmoid * up
    o_ptrs = out_ptr + offs_r[:, None].to(tl.int64) * stride_om + offs_i[None, :]
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _moe_sum_kernel(
    c_ptr,
    y_ptr,
    num_tokens,
    hidden,
    stride_ct,
    stride_cj,
    stride_yt,
    TOPK: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    # y[t, :] = sum_j c[t, j, :], accumulated in fp32.
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask = (offs_t < num_tokens)[:, None] & (offs_h < hidden)[None, :]
    c_ptrs = c_ptr + offs_t[:, None].to(tl.int64) * stride_ct + offs_h[None, :]
    acc = tl.zeros((BLOCK_T, BLOCK_H), dtype=tl.float32)
    for j in tl.static_range(TOPK):
        acc += tl.load(c_ptrs + j * stride_cj, mask=mask, other=0.0).to(tl.float32)
    y_ptrs = y_ptr + offs_t[:, None].to(tl.int64) * stride_yt + offs_h[None, :]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask)
