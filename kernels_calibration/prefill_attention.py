"""Causal prefill attention over a cached prefix (flash-attention style), and its numpy reference.

Each of ``B`` sequences has ``prefix_len`` tokens already in the KV cache and ``seq_len`` new
tokens. The queries are the new tokens only; the keys and values cover prefix + new tokens, and
new token ``i`` (0-based among the new ones) attends to keys ``0 .. prefix_len + i``. This is
the attention of a prefill chunk with context: vLLM's Triton counterparts are
``vllm.v1.attention.ops.triton_prefill_attention.context_attention_fwd`` (contiguous) and
``triton_unified_attention.unified_attention`` (paged); production GPUs run FlashAttention /
FlashInfer CUDA kernels (``vllm_mechanics.md`` sections 3 and 11). Two shapes matter:

- GQA models: ``num_heads`` query heads share ``num_kv_heads`` KV heads (query head ``h``
  reads KV head ``h // (num_heads // num_kv_heads)``), QK and V head dims equal (64 or 128);
- MLA prefill, run as MHA over up-projected keys/values (``forward_mha``): QK head dim 192
  (128 NoPE + 64 RoPE), V head dim 128, ``num_kv_heads == num_heads``.

One kernel (``prefill_attention_kernels.py``), grid ``(cdiv(seq_len, block_m), B *
num_heads)``: a program owns ``block_m`` query rows of one head and runs an online softmax
(base-2 exponentials, fp32 running max, sum and accumulator) over ``block_n``-key tiles. Keys
below ``prefix_len + first_row`` (rounded down to a tile) are visible to every row of the block
and take an unmasked loop; the remaining tiles up to the block's last row take the causal mask.
A QK head dim that is not a power of two is split into a power-of-two main part and a tail (192
= 128 + 64) instead of padding to the next power of two (256). The output is in the input
dtype; the log-sum-exp (natural log, fp32) is returned too, so partial results over disjoint
key sets can be merged (``lse_merge.py``).

With ``causal=False`` every query attends to every key: that is the context part of vLLM's
chunked-context MLA prefill, merged with the causal part by LSE (tested that way).

Under ``TRITON_INTERPRET=1`` (CPU) the kernel checks shapes, launches and numerics only.
"""

from __future__ import annotations

import numpy as np
import torch
import triton

from kernels_calibration.gemm import _interpreter_needs_upcast
from kernels_calibration.prefill_attention_kernels import _prefill_attention_kernel

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
LOG2E = 1.4426950408889634  # exp(x) = exp2(x * log2(e)); the kernel works in base 2


def _qk_blocks(head_dim_qk: int) -> tuple[int, int]:
    """``(main, tail)`` power-of-two tiles covering the QK head dim; tail 0 when one tile does.

    192 -> (128, 64), 96 -> (64, 32), 24 -> (16, 16), 128 -> (128, 0), 12 -> (16, 0).
    ``tl.dot`` needs every tile >= 16.
    """
    main = 1 << (head_dim_qk.bit_length() - 1)
    if main == head_dim_qk or main < 16:
        return max(16, triton.next_power_of_2(head_dim_qk)), 0
    return main, max(16, triton.next_power_of_2(head_dim_qk - main))


def prefill_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    sm_scale: float | None = None,
    causal: bool = True,
    block_m: int = 64,
    block_n: int = 32,
    num_warps: int = 8,
    num_stages: int = 2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Prefill attention of ``seq_len`` new tokens over ``prefix_len`` cached + the new tokens.

    Args:
        q: ``[B, seq_len, num_heads, head_dim_qk]``, the new tokens' queries.
        k: ``[B, prefix_len + seq_len, num_kv_heads, head_dim_qk]``, cached prefix then new.
        v: ``[B, prefix_len + seq_len, num_kv_heads, head_dim_v]``.
            ``num_heads`` must be a multiple of ``num_kv_heads`` (GQA; 1 KV head is MQA). All
            three share a dtype (fp32, bf16 or fp16); any strides with a contiguous last dim.
        sm_scale: softmax scale, default ``1 / sqrt(head_dim_qk)`` (MLA: ``1 / sqrt(192)``).
        causal: new token ``i`` sees keys ``0 .. prefix_len + i`` (``prefix_len`` is
            ``k.shape[1] - seq_len``). ``False``: every query sees all ``k.shape[1]`` keys
            (any number, 0 included), the context part of a chunked-context prefill.
        block_m: query rows per program; block_n: keys per inner tile (powers of two >= 16).
            The defaults (64, 32, 8 warps) compile for sm_90 at head dims 64, 128 and 192/128
            without register spills (``ptxas -v``); tune them on the GPU that is timed.

    Returns:
        ``out [B, seq_len, num_heads, head_dim_v]`` in ``q.dtype`` and
        ``lse [B, seq_len, num_heads]`` fp32 (natural log; ``-inf`` for an empty key set, whose
        output is 0). Flattened to ``[B * seq_len, num_heads]`` it is ``lse_merge``'s layout.
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(
            f"q, k, v must be 4-D [B, S, H, D], got {tuple(q.shape)}, {tuple(k.shape)}, "
            f"{tuple(v.shape)}"
        )
    batch, seq_len, num_heads, head_dim_qk = q.shape
    kv_len, num_kv_heads = k.shape[1], k.shape[2]
    head_dim_v = v.shape[3]
    if k.shape[0] != batch or v.shape[:3] != k.shape[:3]:
        raise ValueError(
            f"k {tuple(k.shape)} and v {tuple(v.shape)} must share [B, kv_len, num_kv_heads] "
            f"with B = {batch} from q"
        )
    if k.shape[3] != head_dim_qk:
        raise ValueError(f"q and k head dims differ: {head_dim_qk} vs {k.shape[3]}")
    if head_dim_qk < 1 or head_dim_v < 1:
        raise ValueError(f"head dims must be >= 1, got qk {head_dim_qk}, v {head_dim_v}")
    if num_kv_heads < 1 or num_heads % num_kv_heads:
        raise ValueError(f"num_heads {num_heads} must be a multiple of num_kv_heads {num_kv_heads}")
    if causal and kv_len < seq_len:
        raise ValueError(
            f"causal prefill needs kv_len >= seq_len (prefix + new tokens), "
            f"got kv_len {kv_len} < seq_len {seq_len}"
        )
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in SUPPORTED_DTYPES:
        raise ValueError(
            f"q, k, v must share one of {SUPPORTED_DTYPES}, got {q.dtype}, {k.dtype}, {v.dtype}"
        )
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    for name, block in (("block_m", block_m), ("block_n", block_n)):
        if block < 16 or block & (block - 1):
            raise ValueError(f"{name}={block} must be a power of two >= 16")
    q, k, v = (t if t.stride(3) == 1 else t.contiguous() for t in (q, k, v))

    out = torch.empty((batch, seq_len, num_heads, head_dim_v), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, seq_len, num_heads), dtype=torch.float32, device=q.device)
    if batch == 0 or seq_len == 0 or num_heads == 0:
        return out, lse
    scale = head_dim_qk**-0.5 if sm_scale is None else sm_scale
    block_d, block_dt = _qk_blocks(head_dim_qk)
    grid = (triton.cdiv(seq_len, block_m), batch * num_heads)
    _prefill_attention_kernel[grid](
        q,
        k,
        v,
        out,
        lse,
        scale * LOG2E,
        seq_len,
        kv_len,
        kv_len - seq_len,
        num_heads,
        num_heads // num_kv_heads,
        q.stride(0),
        q.stride(1),
        q.stride(2),
        k.stride(0),
        k.stride(1),
        k.stride(2),
        v.stride(0),
        v.stride(1),
        v.stride(2),
        out.stride(0),
        out.stride(1),
        out.stride(2),
        lse.stride(0),
        lse.stride(1),
        head_dim_qk=head_dim_qk,
        head_dim_v=head_dim_v,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_D=block_d,
        BLOCK_DT=max(block_dt, 16),
        BLOCK_DV=max(16, triton.next_power_of_2(head_dim_v)),
        HAS_TAIL=block_dt > 0,
        CAUSAL=causal,
        UPCAST_TO_FP32=_interpreter_needs_upcast(q.dtype),
        # fp32 inputs: exact fp32 products (TF32 would miss the fp32 gate); bf16/fp16 ignore it
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return out, lse


def prefill_attention_reference(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    sm_scale: float | None = None,
    causal: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Float64 reference of ``prefill_attention``: ``(out [B, S, H, Dv], lse [B, S, H])``.

    Query head ``h`` uses KV head ``h // (H // Hkv)``; with ``causal`` new token ``i`` sees keys
    ``0 .. kv_len - S + i``. An empty key set gives ``out = 0`` and ``lse = -inf``.
    """
    q64, k64, v64 = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    batch, seq_len, num_heads, head_dim_qk = q64.shape
    kv_len, num_kv_heads = k64.shape[1], k64.shape[2]
    group = num_heads // num_kv_heads
    scale = head_dim_qk**-0.5 if sm_scale is None else sm_scale
    if kv_len == 0:
        return (
            np.zeros((batch, seq_len, num_heads, v64.shape[3])),
            np.full((batch, seq_len, num_heads), -np.inf),
        )
    k_rep = np.repeat(k64, group, axis=2)  # [B, N, H, D]: KV head j serves heads j*group ...
    v_rep = np.repeat(v64, group, axis=2)
    scores = scale * np.einsum("bshd,bnhd->bhsn", q64, k_rep)
    if causal:
        visible = np.arange(kv_len)[None, :] <= (kv_len - seq_len) + np.arange(seq_len)[:, None]
        scores = np.where(visible, scores, -np.inf)
    m = scores.max(axis=-1, keepdims=True)
    w = np.exp(scores - m)
    denom = w.sum(axis=-1, keepdims=True)
    out = np.einsum("bhsn,bnhd->bshd", w / denom, v_rep)
    lse = (m + np.log(denom))[..., 0].transpose(0, 2, 1)  # [B, H, S] -> [B, S, H]
    return out, lse


def make_inputs(
    batch: int,
    seq_len: int,
    prefix_len: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim_qk: int,
    head_dim_v: int,
    dtype: torch.dtype,
    device: str | torch.device,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random ``(q, k, v)`` for one ``prefill_attention`` shape (contiguous, standard normal).

    ``q [B, seq_len, H, Dqk]``, ``k [B, prefix_len + seq_len, Hkv, Dqk]``,
    ``v [B, prefix_len + seq_len, Hkv, Dv]``, in ``dtype`` on ``device``. Values are drawn in
    fp32 on the generator's device (a CUDA generator keeps large shapes fast), then cast and
    moved. With the default scale the logits are O(1), as in a trained model.
    """
    if dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"dtype must be one of {SUPPORTED_DTYPES}, got {dtype}")
    if min(batch, seq_len, num_heads, num_kv_heads, head_dim_qk, head_dim_v) < 1 or prefix_len < 0:
        raise ValueError("sizes must be >= 1 (prefix_len >= 0)")
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads {num_heads} must be a multiple of num_kv_heads {num_kv_heads}")
    kv_len = prefix_len + seq_len
    shapes = (
        (batch, seq_len, num_heads, head_dim_qk),
        (batch, kv_len, num_kv_heads, head_dim_qk),
        (batch, kv_len, num_kv_heads, head_dim_v),
    )
    q, k, v = (
        torch.randn(shape, generator=generator, dtype=torch.float32, device=generator.device).to(
            device=device, dtype=dtype
        )
        for shape in shapes
    )
    return q, k, v


def attention_flops(
    batch: int, seq_len: int, prefix_len: int, num_heads: int, dqk: int, dv: int
) -> int:
    """Useful FLOPs of one causal call (``2 * visible pairs * (Dqk + Dv)`` per head)."""
    pairs = seq_len * prefix_len + seq_len * (seq_len + 1) // 2
    return 2 * batch * num_heads * pairs * (dqk + dv)
