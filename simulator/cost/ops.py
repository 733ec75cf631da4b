"""FLOPs and bytes moved of each op class, per GPU, from the op's shape.

One function per op class. Arguments may be Python floats or numpy arrays (so that a CSV of
shapes is priced in one call); the functions use arithmetic only, no branches on values.
Bytes count each operand read once and each result written once; activations are BF16.

Sources of the formulas: ``../shared/reference/vllm_mechanics.md`` (MLA section 3, DCP
section 4, KDA section 6.4, MoE section 7) and vLLM ``v1/metrics/perf.py``.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, TypeAlias, get_args

import numpy as np
from numpy.typing import NDArray

Num: TypeAlias = float | NDArray[np.float64]

OpClass = Literal[
    "gemm",
    "moe",
    "mla_decode",
    "mla_prefill",
    "attn_decode",
    "attn_prefill",
    "kda_prefill",
    "kda_decode",
    "mamba2_prefill",
    "mamba2_decode",
    "elementwise",
    "allreduce",
    "allgather",
    "reducescatter",
    "alltoall",
]
COLLECTIVE_CLASSES: tuple[OpClass, ...] = ("allreduce", "allgather", "reducescatter", "alltoall")
COMPUTE_CLASSES: tuple[OpClass, ...] = tuple(
    c for c in get_args(OpClass) if c not in COLLECTIVE_CLASSES
)

ACT_BYTES = 2.0  # bf16 activations
FP32 = 4.0
# MLA layout of every MLA model here (DeepSeek-V3/R1, Kimi K2/K3/Linear): used when a shape
# row (plan ops predict) gives heads and context but not the latent dims
MLA_KV_LORA = 512
MLA_ROPE = 64
MLA_NOPE = 128
MLA_V = 128
KDA_CHUNK = 64  # fla chunk_kda chunk size


class Work(NamedTuple):
    """FLOPs and bytes of one op instance, and how many kernels it launches."""

    flops: Num
    bytes: Num
    kernels: float = 1.0


def gemm(m: Num, n: Num, k: Num, weight_bytes_per_elem: float) -> Work:
    """Y[m, n] = X[m, k] @ W[k, n]: activations bf16, weights at their storage format."""
    return Work(2.0 * m * n * k, (m * k + m * n) * ACT_BYTES + n * k * weight_bytes_per_elem)


def bmm(heads: Num, m: Num, n: Num, k: Num, weight_bytes_per_elem: float) -> Work:
    """A per-head batched matmul with per-head weights (MLA's absorbed W_UK and W_UV)."""
    return Work(
        2.0 * heads * m * n * k,
        heads * (m * k + m * n) * ACT_BYTES + heads * n * k * weight_bytes_per_elem,
    )


def experts_touched(num_tokens: Num, num_experts: Num, topk: Num, local_experts: Num) -> Num:
    """Expected experts with at least one token among the ``local_experts`` of one rank."""
    return local_experts * (1.0 - (1.0 - 1.0 / num_experts) ** (num_tokens * topk))


def moe(
    num_tokens: Num,
    hidden: Num,
    inter: Num,
    num_experts: Num,
    topk: Num,
    ep: Num,
    tp: Num,
    weight_bytes_per_elem: float,
    matrices: float = 3.0,
) -> Work:
    """Fused MoE on one rank: W13 (hidden -> 2 inter/tp), activation, W2, weighted sum.

    With EP each rank owns num_experts/ep whole experts and receives num_tokens*topk/ep
    (token, expert) pairs on average; otherwise all experts are sharded by tp.
    ``matrices`` = 2 for non-gated experts (Nemotron-H relu2: W1 is hidden -> inter/tp).
    """
    local = num_experts / ep
    inter_rank = inter / tp
    pairs = num_tokens * topk / ep
    touched = experts_touched(num_tokens, num_experts, topk, local)
    flops = 2.0 * pairs * matrices * hidden * inter_rank
    weights = touched * matrices * hidden * inter_rank * weight_bytes_per_elem
    acts = pairs * (2.0 * hidden + matrices * inter_rank) * ACT_BYTES
    return Work(flops, weights + acts, kernels=5.0)  # align, w13, act, w2, sum


def mla_decode(
    batch: Num, ctx_tokens: Num, heads: Num, kv_bytes_per_token: Num, queries: Num = 1.0
) -> Work:
    """Absorbed MLA decode over the 576-dim latent (``ctx_tokens``: per request, local shard).

    QK over L+R dims and PV over L dims for every (query, cached token, head).
    """
    lat = MLA_KV_LORA + MLA_ROPE
    flops = 2.0 * batch * queries * heads * ctx_tokens * (lat + MLA_KV_LORA)
    q_out = batch * queries * heads * (lat + MLA_KV_LORA) * ACT_BYTES
    return Work(flops, batch * ctx_tokens * kv_bytes_per_token + q_out)


def causal_pairs(seq_len: Num, prefix_len: Num, window: Num = np.inf) -> Num:
    """(query, key) pairs of causal attention of seq_len new tokens after prefix_len cached ones,
    each query seeing at most ``window`` keys."""
    pairs = seq_len * prefix_len + seq_len * (seq_len + 1) / 2.0
    return np.minimum(pairs, seq_len * window)


def mla_prefill_work(
    kv_tokens: Num, new_tokens: Num, pairs: Num, heads: Num, kv_bytes_per_token: Num
) -> Work:
    """MLA prefill summed over requests: up-project all ``kv_tokens`` (prefix + new) latents
    with kv_b, then flash attention over ``pairs`` (query, key) pairs."""
    kv_out = heads * (MLA_NOPE + MLA_V)
    qk_v = MLA_NOPE + MLA_ROPE + MLA_V
    up_flops = 2.0 * kv_tokens * MLA_KV_LORA * kv_out
    up_bytes = kv_tokens * (kv_bytes_per_token + kv_out * ACT_BYTES) + (
        MLA_KV_LORA * kv_out * ACT_BYTES
    )
    attn_flops = 2.0 * heads * pairs * qk_v
    attn_bytes = (kv_tokens * kv_out + new_tokens * heads * qk_v) * ACT_BYTES
    return Work(up_flops + attn_flops, up_bytes + attn_bytes, kernels=2.0)


def mla_prefill(
    batch: Num, seq_len: Num, prefix_len: Num, heads: Num, kv_bytes_per_token: Num
) -> Work:
    """MLA prefill: up-project prefix + new latents (kv_b), then causal flash attention.

    The context is re-projected on every chunk (vLLM ``forward_mha``), so cost grows with
    the prefix even when the prefix is cached.
    """
    return mla_prefill_work(
        batch * (prefix_len + seq_len),
        batch * seq_len,
        batch * causal_pairs(seq_len, prefix_len),
        heads,
        kv_bytes_per_token,
    )


def attn_decode(
    batch: Num,
    ctx_tokens: Num,
    heads: Num,
    kv_heads: Num,
    head_dim: Num,
    kv_bytes_per_elem: Num,
    queries: Num = 1.0,
) -> Work:
    """Paged GQA decode: every query reads the request's KV once per KV head."""
    flops = 4.0 * batch * queries * heads * head_dim * ctx_tokens
    kv = batch * ctx_tokens * 2.0 * kv_heads * head_dim * kv_bytes_per_elem
    return Work(flops, kv + 2.0 * batch * queries * heads * head_dim * ACT_BYTES)


def attn_prefill_work(
    kv_tokens: Num,
    new_tokens: Num,
    pairs: Num,
    heads: Num,
    kv_heads: Num,
    head_dim: Num,
    kv_bytes_per_elem: Num = ACT_BYTES,
) -> Work:
    """GQA flash attention summed over requests: ``pairs`` (query, key) pairs, ``kv_tokens``
    keys/values read, ``new_tokens`` queries."""
    flops = 4.0 * heads * head_dim * pairs
    kv = kv_tokens * 2.0 * kv_heads * head_dim * kv_bytes_per_elem
    return Work(flops, kv + 2.0 * new_tokens * heads * head_dim * ACT_BYTES)


def attn_prefill(
    batch: Num,
    seq_len: Num,
    prefix_len: Num,
    heads: Num,
    kv_heads: Num,
    head_dim: Num,
    kv_bytes_per_elem: Num = ACT_BYTES,
    window: Num = np.inf,
) -> Work:
    """Causal flash attention of ``seq_len`` new tokens over a cached prefix (GQA).

    With a sliding window each query sees at most ``window`` keys.
    """
    kv_tokens = np.minimum(prefix_len + seq_len, seq_len + window)
    return attn_prefill_work(
        batch * kv_tokens,
        batch * seq_len,
        batch * causal_pairs(seq_len, prefix_len, window),
        heads,
        kv_heads,
        head_dim,
        kv_bytes_per_elem,
    )


def kda_prefill_flops_per_token_head(dk: Num, dv: Num, chunk: float = KDA_CHUNK) -> Num:
    """Chunked KDA / gated-delta-rule forward (fla ``chunk_kda_fwd``), per token per head.

    3 dk dv (v_new, state update, q.h) + chunk (2 dk + dv + dv/2) (intra-chunk A, w, u, A.v)
    + chunk^2/3 (triangular solve) multiply-adds: 158 kFLOP at dk = dv = 128, chunk 64.
    """
    macs = 3.0 * dk * dv + chunk * dk + chunk * dk + chunk * dv + chunk * dv / 2.0
    return 2.0 * (macs + chunk * chunk / 3.0)


def kda_prefill(
    batch: Num,
    seq_len: Num,
    heads: Num,
    head_k_dim: Num,
    state_bytes_per_elem: float = FP32,
    head_v_dim: Num | None = None,
) -> Work:
    """Chunked prefill of a KDA/GDN layer for ``batch`` sequences of ``seq_len`` new tokens
    (``heads`` value heads, states of head_k_dim x head_v_dim; dv defaults to dk)."""
    dk = head_k_dim
    dv = head_k_dim if head_v_dim is None else head_v_dim
    tokens = batch * seq_len
    flops = tokens * heads * kda_prefill_flops_per_token_head(dk, dv)
    acts = tokens * heads * (3.0 * dk + 2.0 * dv) * ACT_BYTES  # q, k, gate in; v in, o out
    chunk_states = tokens * heads * 2.0 * dk * dv * FP32 / KDA_CHUNK
    boundary = batch * heads * 2.0 * dk * dv * state_bytes_per_elem  # load + store
    return Work(flops, acts + chunk_states + boundary, kernels=4.0)


def kda_decode(
    batch: Num,
    heads: Num,
    head_k_dim: Num,
    head_v_dim: Num,
    state_bytes_per_elem: float = FP32,
    queries: Num = 1.0,
) -> Work:
    """Recurrent decode: decay, S^T k, rank-1 update, S^T q over a head_k_dim x head_v_dim
    state per head, which is read and written.

    With ``queries`` = 1 + K (speculative verify) one state read and 1 + K state writes.
    """
    state = heads * head_k_dim * head_v_dim * state_bytes_per_elem
    flops = 7.0 * batch * queries * heads * head_k_dim * head_v_dim
    acts = batch * queries * heads * (3.0 * head_k_dim + 2.0 * head_v_dim) * ACT_BYTES
    return Work(flops, batch * state * (1.0 + queries) + acts)


def elementwise(elements: Num, bytes_per_elem_moved: float, flops_per_elem: float = 4.0) -> Work:
    """Norms, activations, rotary, short conv, residual adds: bandwidth-bound."""
    return Work(elements * flops_per_elem, elements * bytes_per_elem_moved)
