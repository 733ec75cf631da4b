"""Grouped MoE GEMM with top-k routing (vLLM ``fused_moe`` style) and its float64 reference.

It stands for the routed-expert FFN of an MoE layer, vLLM's Triton path
``vllm.model_executor.layers.fused_moe.fused_moe.fused_experts`` (``fused_experts_impl``,
``vllm_mechanics.md`` section 7). For ``x [T, hidden]`` routed to ``topk`` experts per token,

    y[t] = sum_j w[t, j] * W2[e_tj] @ (silu(W1g[e_tj] x[t]) * W1u[e_tj] x[t])

with ``w1 [E, 2*inter, hidden]`` holding the gate rows then the up rows (vLLM's ``w13``) and
``w2 [E, hidden, inter]``. ``fused_moe`` runs the same four steps as vLLM:

1. Align (``moe_align_block_size``, torch ops here, a CUDA op in vLLM): the ``T * topk``
   (token, slot) pairs, numbered ``pair = t * topk + j``, are sorted stably by expert and each
   expert's run is padded to a multiple of ``BLOCK_M`` with the sentinel ``T * topk``. This gives
   ``sorted_ids``, ``block_expert`` (the expert of each ``BLOCK_M`` block, ``-1`` past the end)
   and ``num_padded`` (a 1-element device tensor). It never syncs with the host: the grid is
   sized for the worst case ``T*topk + min(E, T*topk) * (BLOCK_M - 1)`` rows and the programs
   past ``num_padded`` return at once, as in vLLM.
2. Up GEMM (``_moe_gemm_kernel``): each program takes one ``BLOCK_M x BLOCK_N`` tile of the
   sorted rows, reads its expert id, gathers the token rows ``x[pair // topk]`` and multiplies
   them by ``W1[e]^T``, writing ``h [T*topk, 2*inter]`` at row ``pair``.
3. ``silu(h[:, :inter]) * h[:, inter:]`` (a small Triton kernel) -> ``a [T*topk, inter]``.
4. Down GEMM (the same kernel, ``a`` rows gathered by ``pair``), multiplied by the routing
   weight of the pair (vLLM's ``MUL_ROUTED_WEIGHT``), then the top-k sum (``moe_sum``, a small
   Triton kernel) over the ``[T, topk, hidden]`` view. Intermediates are kept in the activation
   dtype, as in vLLM; every GEMM and sum accumulates in fp32.

Weight formats (``WEIGHT_FORMATS``), all with ``[E, N, K]`` weights (``N`` output rows, ``K``
contiguous, as vLLM stores them):

- ``bf16`` / ``fp16`` / ``fp32``: dense weights in the activation dtype (no scales).
- ``fp8``: ``torch.float8_e4m3fn`` weights with one fp32 scale per output channel and expert,
  ``scale [E, N]``; activations stay bf16 (w8a16). The kernel converts each weight tile to the
  activation dtype (exact: e4m3 values fit bf16/fp16) and multiplies the fp32 accumulator by the
  channel scale. The interpreter reads float8 torch tensors as uint8 bit patterns and converts
  them correctly, so no shim is needed for fp8.
- ``mxfp4`` (OCP Microscaling v1.0): e2m1 values packed two per uint8 along ``K`` (element
  ``2i`` in the low nibble, ``2i + 1`` in the high nibble; ``w [E, N, K/2]``) and one e8m0 scale
  ``2**(s - 127)`` per 32 elements along ``K`` (``scale [E, N, K/32]`` uint8; ``s = 255``, NaN in
  the spec, is not supported). This is vLLM's mxfp4 MoE layout (``w13_weight [E, 2I, H/2]``,
  ``w13_weight_scale [E, 2I, H/32]``). The kernel unpacks and dequantises each tile to fp32,
  then casts it to the activation dtype (exact in bf16 for any scale, in fp16 while
  ``e2m1 * scale`` stays in fp16's range) before ``tl.dot``. Needs ``hidden`` and ``inter``
  multiples of 32 and ``block_k >= 32``.

Expert parallelism: a rank holding ``L < E`` experts gets weights for its local experts only,
``w [L, ...]``, global ``topk_ids`` and an ``expert_map [E]`` (global -> local index, ``-1`` for
experts on other ranks), as vLLM's ``expert_map``. ``make_inputs(..., local_experts=L,
ep_rank=r)`` gives rank ``r`` the contiguous experts ``[r*L, (r+1)*L)`` (vLLM's linear
placement). Every rank sees all ``T`` tokens (allgather-style dispatch, or TP + EP without
all2all); pairs routed to non-local experts are dropped at the align step, so no tile is spent
on them and they add zero, and the ranks' partial outputs sum (all-reduce or reduce-scatter) to
the full MoE output.

Interpreter shim: the one from ``gemm.py`` (``_interpreter_needs_upcast``): under
``TRITON_INTERPRET=1`` bf16 tiles (and dequantised fp8/mxfp4 tiles) go to ``tl.dot`` as fp32,
because triton 3.5's interpreter computes bf16 ``tl.dot`` wrongly. On a GPU they stay bf16.
Under ``TRITON_INTERPRET=1`` (CPU) the kernels check shapes, launches and numerics only.

The Triton kernels are in ``moe_gemm_kernels.py``, routing and alignment in ``moe_routing.py``,
the weight formats' host-side quantisation in ``moe_formats.py``; the float64 reference and the
random problems the tests and the calibration job run are in ``moe_inputs.py``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels_calibration.gemm import _interpreter_needs_upcast
from kernels_calibration.moe_formats import (
    ACTIVATION_DTYPES,
    FP8_DTYPE,
    MXFP4_BLOCK,
)
from kernels_calibration.moe_gemm_kernels import (
    _moe_gemm_kernel,
    _moe_sum_kernel,
    _silu_and_mul_kernel,
)
from kernels_calibration.moe_routing import default_config, moe_align_block_size

_DENSE, _FP8, _MXFP4 = 0, 1, 2  # the kernel's WEIGHT_KIND
_TL_DTYPES = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}


def _weight_format(w1: torch.Tensor, w2: torch.Tensor, x_dtype: torch.dtype) -> str:
    if w1.dtype != w2.dtype:
        raise ValueError(f"w1 and w2 must share a dtype, got {w1.dtype} and {w2.dtype}")
    if w1.dtype == FP8_DTYPE:
        return "fp8"
    if w1.dtype == torch.uint8:
        return "mxfp4"
    if w1.dtype != x_dtype:
        raise ValueError(
            f"dense weights must have the activation dtype {x_dtype}, got {w1.dtype} "
            f"(fp8 weights are {FP8_DTYPE}, mxfp4 weights packed uint8)"
        )
    return {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[w1.dtype]


def _check_scale(
    name: str, scale: torch.Tensor | None, shape: tuple[int, ...], dtype: torch.dtype
) -> torch.Tensor:
    if scale is None:
        raise ValueError(f"{name} is required for quantised weights (shape {shape}, {dtype})")
    if tuple(scale.shape) != shape or scale.dtype != dtype:
        raise ValueError(f"{name} must be {shape} {dtype}, got {tuple(scale.shape)} {scale.dtype}")
    return scale


def _check_block(name: str, block: int, minimum: int = 16) -> None:
    if block < minimum or block & (block - 1):
        raise ValueError(f"{name}={block} must be a power of two >= {minimum}")


def _grouped_gemm(
    a: torch.Tensor,
    w: torch.Tensor,
    w_scale: torch.Tensor | None,
    out: torch.Tensor,
    n: int,
    k: int,
    kind: int,
    topk_weights: torch.Tensor,
    align: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    *,
    a_row_div: int,
    mul_routed_weight: bool,
    config: dict[str, int],
    allow_tf32: bool,
    num_warps: int,
    num_stages: int,
) -> None:
    sorted_ids, block_expert, num_padded = align
    rows = sorted_ids.numel()
    block_m, block_n = config["block_m"], config["block_n"]
    scale = w if w_scale is None else w_scale  # a dummy pointer for dense weights
    if kind == _FP8:
        s_strides = (scale.stride(0), scale.stride(1), 0)
    elif kind == _MXFP4:
        s_strides = (scale.stride(0), scale.stride(1), scale.stride(2))
    else:
        s_strides = (0, 0, 0)
    upcast = a.dtype == torch.float32 or _interpreter_needs_upcast(a.dtype)
    grid = ((rows // block_m) * triton.cdiv(n, block_n),)
    _moe_gemm_kernel[grid](
        a,
        w,
        scale,
        out,
        topk_weights,
        sorted_ids,
        block_expert,
        num_padded,
        n,
        k,
        rows,
        topk_weights.numel(),
        a.stride(0),
        a.stride(1),
        w.stride(0),
        w.stride(1),
        w.stride(2),
        *s_strides,
        out.stride(0),
        out.stride(1),
        A_ROW_DIV=a_row_div,
        MUL_ROUTED_WEIGHT=mul_routed_weight,
        WEIGHT_KIND=kind,
        COMPUTE_DTYPE=tl.float32 if upcast else _TL_DTYPES[a.dtype],
        INPUT_PRECISION="tf32" if allow_tf32 else "ieee",
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_K=config["block_k"],
        GROUP_M=config["group_m"],
        num_warps=num_warps,
        num_stages=num_stages,
    )


def fused_moe(
    x: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    w1_scale: torch.Tensor | None = None,
    w2_scale: torch.Tensor | None = None,
    expert_map: torch.Tensor | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    group_m: int | None = None,
    allow_tf32: bool = False,
    validate_ids: bool = True,
    num_warps: int = 4,
    num_stages: int = 3,
) -> torch.Tensor:
    """Routed-expert MoE FFN ``y [T, hidden]`` in ``x.dtype`` (see the module docstring).

    ``x [T, hidden]`` (fp32/bf16/fp16), ``topk_weights [T, topk]`` (float, used as fp32),
    ``topk_ids [T, topk]`` (int, global expert ids). Weights by format (inferred from dtype):

    - dense (``x.dtype``): ``w1 [L, 2I, H]``, ``w2 [L, H, I]``, no scales;
    - fp8 (``float8_e4m3fn``): same shapes, ``w1_scale [L, 2I]``, ``w2_scale [L, H]`` fp32;
    - mxfp4 (uint8): ``w1 [L, 2I, H/2]``, ``w2 [L, H, I/2]``, ``w1_scale [L, 2I, H/32]``,
      ``w2_scale [L, H, I/32]`` uint8 e8m0.

    ``expert_map [E]`` (int) maps global ids to the ``L`` local experts, ``-1`` for other
    ranks' experts (expert parallelism); without it ``L = E``. Unset tile sizes come from
    ``default_config``. ``validate_ids`` checks the id ranges, which syncs with the device:
    pass ``False`` when timing. ``allow_tf32`` only matters for fp32 activations on a GPU.
    """
    if x.dim() != 2 or x.dtype not in ACTIVATION_DTYPES:
        raise ValueError(f"x must be [T, hidden] in {ACTIVATION_DTYPES}, got {x.shape} {x.dtype}")
    if w1.dim() != 3 or w2.dim() != 3:
        raise ValueError(
            f"w1 and w2 must be 3-D [E, N, K], got {tuple(w1.shape)}, {tuple(w2.shape)}"
        )
    fmt = _weight_format(w1, w2, x.dtype)
    num_tokens, hidden = x.shape
    num_local, two_inter = w1.shape[0], w1.shape[1]
    pack = 2 if fmt == "mxfp4" else 1
    inter = w2.shape[2] * pack
    w1_ok = two_inter == 2 * inter and w1.shape[2] * pack == hidden
    if not w1_ok or tuple(w2.shape[:2]) != (num_local, hidden):
        raise ValueError(
            f"{fmt} weights for hidden={hidden}: need w1 [E, 2I, {hidden // pack}] and "
            f"w2 [E, {hidden}, I/{pack}], got {tuple(w1.shape)} and {tuple(w2.shape)}"
        )
    if inter == 0:
        raise ValueError("the expert intermediate size must be positive")
    if fmt == "fp8":
        kind = _FP8
        w1_scale = _check_scale("w1_scale", w1_scale, (num_local, two_inter), torch.float32)
        w2_scale = _check_scale("w2_scale", w2_scale, (num_local, hidden), torch.float32)
    elif fmt == "mxfp4":
        kind = _MXFP4
        if hidden % MXFP4_BLOCK or inter % MXFP4_BLOCK:
            raise ValueError(f"mxfp4 needs hidden={hidden} and inter={inter} multiples of 32")
        w1_scale = _check_scale(
            "w1_scale", w1_scale, (num_local, two_inter, hidden // MXFP4_BLOCK), torch.uint8
        )
        w2_scale = _check_scale(
            "w2_scale", w2_scale, (num_local, hidden, inter // MXFP4_BLOCK), torch.uint8
        )
    else:
        kind = _DENSE
        if w1_scale is not None or w2_scale is not None:
            raise ValueError(f"dense {fmt} weights take no scales")
    if topk_ids.dim() != 2 or topk_ids.shape[0] != num_tokens:
        raise ValueError(f"topk_ids must be [T={num_tokens}, topk], got {tuple(topk_ids.shape)}")
    if topk_ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"topk_ids must be int32 or int64, got {topk_ids.dtype}")
    if topk_weights.shape != topk_ids.shape or not topk_weights.is_floating_point():
        raise ValueError(
            f"topk_weights must be float {tuple(topk_ids.shape)}, got "
            f"{tuple(topk_weights.shape)} {topk_weights.dtype}"
        )
    num_experts = num_local
    if expert_map is not None:
        if expert_map.dim() != 1 or expert_map.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"expert_map must be a 1-D int tensor [E], got {expert_map.shape}")
        num_experts = expert_map.numel()
    if validate_ids and topk_ids.numel():
        lo, hi = int(topk_ids.min()), int(topk_ids.max())
        if lo < 0 or hi >= num_experts:
            raise ValueError(f"topk_ids must lie in [0, {num_experts}), got [{lo}, {hi}]")
        if expert_map is not None:
            m_lo, m_hi = int(expert_map.min()), int(expert_map.max())
            if m_lo < -1 or m_hi >= num_local:
                raise ValueError(
                    f"expert_map values must lie in [-1, {num_local}), got [{m_lo}, {m_hi}]"
                )
    config = default_config(num_tokens, topk_ids.shape[1], num_local, fmt)
    for name, value in (("block_m", block_m), ("block_n", block_n), ("block_k", block_k)):
        if value is not None:
            config[name] = value
        _check_block(
            name, config[name], MXFP4_BLOCK if name == "block_k" and kind == _MXFP4 else 16
        )
    if group_m is not None:
        if group_m < 1:
            raise ValueError(f"group_m={group_m} must be >= 1")
        config["group_m"] = group_m

    topk = topk_ids.shape[1]
    num_pairs = num_tokens * topk
    y = torch.empty((num_tokens, hidden), device=x.device, dtype=x.dtype)
    if num_pairs == 0:
        return y.zero_()
    weights = topk_weights.to(torch.float32).contiguous()
    align = moe_align_block_size(topk_ids, config["block_m"], num_local, expert_map)
    # Rows of dropped (non-local) pairs are never written: zero them so they add nothing.
    alloc = torch.empty if expert_map is None else torch.zeros
    h = alloc((num_pairs, two_inter), device=x.device, dtype=x.dtype)
    act = torch.empty((num_pairs, inter), device=x.device, dtype=x.dtype)
    c = alloc((num_pairs, hidden), device=x.device, dtype=x.dtype)
    common = {
        "config": config,
        "allow_tf32": allow_tf32,
        "num_warps": num_warps,
        "num_stages": num_stages,
    }
    _grouped_gemm(
        x,
        w1,
        w1_scale,
        h,
        two_inter,
        hidden,
        kind,
        weights,
        align,
        a_row_div=topk,
        mul_routed_weight=False,
        **common,
    )
    block_r, block_i = 16, min(triton.next_power_of_2(inter), 256)
    _silu_and_mul_kernel[(triton.cdiv(num_pairs, block_r), triton.cdiv(inter, block_i))](
        h, act, num_pairs, inter, h.stride(0), act.stride(0), BLOCK_R=block_r, BLOCK_I=block_i
    )
    _grouped_gemm(
        act,
        w2,
        w2_scale,
        c,
        hidden,
        inter,
        kind,
        weights,
        align,
        a_row_div=1,
        mul_routed_weight=True,
        **common,
    )
    block_t, block_h = 16, min(triton.next_power_of_2(hidden), 256)
    _moe_sum_kernel[(triton.cdiv(num_tokens, block_t), triton.cdiv(hidden, block_h))](
        c,
        y,
        num_tokens,
        hidden,
        topk * c.stride(0),
        c.stride(0),
        y.stride(0),
        TOPK=topk,
        BLOCK_T=block_t,
        BLOCK_H=block_h,
    )
    return y
