"""KV cache, weights and deployment checks of the sparse-attention layer kinds.

``sparse_mla`` (GLM-5, DeepSeek-V3.2; ``MLAConfig.indexer``): every token keeps its MLA latent
(``simulator.specs.precision.mla_kv_bytes_per_token``) plus one indexer key of
``index_head_dim`` fp8 values and one fp32 scale per 128 (132 B at 128 dims: vLLM's
``DeepseekV32IndexerCache`` / ``DeepseekV4IndexerCache``, "128 fp8 + 4 fp32 scale").

``csa`` / ``hca`` / ``swa_mqa`` (DeepSeek-V4; ``CompressedAttentionConfig``), as vLLM 0.24's
``deepseek_v4_attention.py`` and ``deepseek_compressor.py`` lay the cache out, per layer:
- a sliding window of the last 128 tokens, one 584 B entry each (448 fp8 NoPE + 64 bf16 RoPE
  + 7 ue8m0 scales + 1 pad: the "fp8_ds_mla" V4 record; vLLM runs V4 with this fp8 cache
  only, so ``kv_cache_dtype`` does not change it);
- ``csa``: one 584 B entry per 4 tokens plus one 132 B indexer key per 4 tokens;
  ``hca``: one 584 B entry per 128 tokens;
- the compressors' running state, fp32 kv + score of the last ``coff x ratio`` tokens
  (``CompressorStateCache``: C4 main 8 x 2 x 2 x 512, C4 indexer 8 x 2 x 2 x 128,
  C128 128 x 2 x 512 values).
Everything is replicated on every TP rank (one KV head; the indexer is replicated too).

vLLM gives each of those caches its own block size so that all pages are equal; the planner's
block pool has one block size, so ``compressed_kv_layout`` builds an equivalent layout: one
``full`` group whose page holds a block's worth of every compressed layer's entries, and
``swa`` groups (window 128 tokens) whose blocks add up to the per-request window caches and
compressor states. Bytes per request match vLLM's to within a block; vLLM's block-level
rounding of each cache and the window/state caches' role in prefix hits are not reproduced.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from simulator.specs.model import MLAConfig, ModelCard
from simulator.specs.precision import mla_kv_bytes_per_token
from simulator.specs.serving import ServingConfig
from simulator.specs.sparse import CompressedAttentionConfig, DsaIndexerConfig

if TYPE_CHECKING:
    from simulator.kv_layout import KvLayout

# vLLM's DeepSeek-V4 KV block: "The KV block shape [256//4, head_dim] = [64, 584]"
# (deepseek_compressor.py, CompressorStateCache); also the prefix-hash granularity here
V4_BLOCK_TOKENS = 256
FP32_BYTES = 4.0
INDEXER_SCALE_BLOCK = 128  # one fp32 scale per 128 indexer-key values
V4_SCALE_BLOCK = 64  # one ue8m0 scale per 64 fp8 NoPE values
V4_KINDS = frozenset({"csa", "hca", "swa_mqa"})


def indexer_key_bytes(head_dim: int) -> float:
    """One cached indexer key: fp8 values + one fp32 scale per 128 (132 B at 128 dims)."""
    return float(head_dim + math.ceil(head_dim / INDEXER_SCALE_BLOCK) * FP32_BYTES)


def v4_entry_bytes(cfg: CompressedAttentionConfig) -> float:
    """One DeepSeek-V4 cache entry: fp8 NoPE, bf16 RoPE, ue8m0 scales + 1 pad (584 B)."""
    nope = cfg.head_dim - cfg.rope_head_dim
    return float(nope + 2 * cfg.rope_head_dim + math.ceil(nope / V4_SCALE_BLOCK) + 1)


def _dsa(card: ModelCard) -> tuple[MLAConfig, DsaIndexerConfig]:
    m = card.mla
    assert m is not None
    assert m.indexer is not None
    return m, m.indexer


def _v4(card: ModelCard) -> CompressedAttentionConfig:
    cfg = card.compressed_attention
    assert cfg is not None
    return cfg


def kv_bytes_per_token_per_layer(card: ModelCard, serving: ServingConfig, kind: str) -> float:
    """Bytes one layer of ``kind`` adds to the cache per token of context, on one GPU."""
    if kind == "sparse_mla":
        m, ix = _dsa(card)
        latent = mla_kv_bytes_per_token(serving.kv_cache_dtype, m.kv_lora_rank, m.qk_rope_head_dim)
        return latent + indexer_key_bytes(ix.head_dim)
    cfg = _v4(card)
    if kind == "csa":
        return (v4_entry_bytes(cfg) + indexer_key_bytes(cfg.index_head_dim)) / (
            cfg.csa_compress_ratio
        )
    if kind == "hca":
        return v4_entry_bytes(cfg) / cfg.hca_compress_ratio
    if kind == "swa_mqa":
        return 0.0
    raise ValueError(f"not a sparse-attention kind: {kind!r}")


def window_bytes_per_seq(card: ModelCard, context_tokens: float) -> float:
    """DeepSeek-V4's per-request caches that do not grow with the context, on one GPU: the
    sliding window of every layer and the compressors' running states (0 for other cards)."""
    cfg = card.compressed_attention
    if cfg is None:
        return 0.0
    kinds = card.layer_kinds
    n_csa, n_hca = kinds.count("csa"), kinds.count("hca")
    n_v4 = n_csa + n_hca + kinds.count("swa_mqa")
    ctx = float(context_tokens)
    window = n_v4 * min(ctx, cfg.sliding_window_tokens) * v4_entry_bytes(cfg)
    # C4: overlapping windows (coff 2) of 2 x ratio tokens, kv + score, main and indexer
    r4, r128 = cfg.csa_compress_ratio, cfg.hca_compress_ratio
    csa_state = 2 * 2 * (cfg.head_dim + cfg.index_head_dim) * FP32_BYTES
    hca_state = 2 * cfg.head_dim * FP32_BYTES
    states = n_csa * min(ctx, 2 * r4) * csa_state + n_hca * min(ctx, r128) * hca_state
    return window + states


def compressed_kv_layout(card: ModelCard, serving: ServingConfig) -> KvLayout:
    """The block-pool layout of a DeepSeek-V4 card (see the module docstring)."""
    from simulator.kv_layout import KvGroup, KvLayout

    cfg = _v4(card)
    compressed = [k for k in card.layer_kinds if k in ("csa", "hca")]
    if not compressed:
        raise ValueError(f"{card.name}: no csa/hca layers, so no compressed KV cache to lay out")
    block = max(serving.block_size_tokens, V4_BLOCK_TOKENS)
    per_token = sum(kv_bytes_per_token_per_layer(card, serving, k) for k in compressed)
    n = len(compressed)
    bytes_per_block = block * per_token
    window = cfg.sliding_window_tokens
    window_blocks = math.ceil((window - 1) / block) + 1  # vLLM SlidingWindowSpec: +1 block
    fixed = window_bytes_per_seq(card, math.inf)  # the full windows
    n_window_groups = math.ceil(fixed / (window_blocks * bytes_per_block))
    groups = (KvGroup(kind="full", layers=n),) + (KvGroup(kind="swa", layers=n),) * (
        n_window_groups
    )
    return KvLayout(
        block_size_tokens=block,
        page_bytes=bytes_per_block / n,
        group_size=n,
        groups=groups,
        sliding_window_tokens=window,
    )


def attention_spans(card: ModelCard) -> tuple[float, float] | None:
    """(sliding window, sparse span) in tokens that the step's context sums cap at: V4's
    128-token window and top-k x 4 tokens (the compressed entries a CSA query can pick);
    sparse MLA: no window, top-k tokens. None for other cards."""
    cfg = card.compressed_attention
    if cfg is not None:
        return float(cfg.sliding_window_tokens), float(cfg.index_topk * cfg.csa_compress_ratio)
    if card.mla is not None and card.mla.indexer is not None:
        return math.inf, float(card.mla.indexer.topk_tokens)
    return None


def attention_params(card: ModelCard, kind: str, tp: int) -> tuple[float, float]:
    """(TP-sharded params on one GPU, replicated params) of one layer's attention, beyond the
    MLA weights for ``sparse_mla``: the indexer's wq_b, wk and weights_proj (vLLM
    ReplicatedLinear). DeepSeek-V4: wq_a and wkv replicated; wq_b, the grouped wo_a and wo_b
    TP-sharded; the compressors (``disable_tp``) and the CSA indexer replicated. Norms, the
    attention sinks, the compressors' position biases (``ape``) and mHC's mixing weights
    (fp32, 0.01 % of the model) are left out, as in ``simulator.weights``."""
    d = card.hidden_size
    if kind == "sparse_mla":
        m, ix = _dsa(card)
        q_in = m.q_lora_rank or d
        return 0.0, float(q_in * ix.num_heads * ix.head_dim + d * ix.head_dim + d * ix.num_heads)
    cfg = _v4(card)
    h, hd = cfg.num_heads, cfg.head_dim
    replicated = float(d * (cfg.q_lora_rank + hd))  # wq_a, wkv
    sharded = cfg.q_lora_rank * h * hd + h * hd * cfg.o_lora_rank  # wq_b, wo_a
    sharded += cfg.o_groups * cfg.o_lora_rank * d  # wo_b
    if kind == "csa":
        replicated += d * 2 * 2 * hd  # compressor fused_wkv_wgate, overlapping (coff 2)
        replicated += cfg.q_lora_rank * cfg.index_num_heads * cfg.index_head_dim  # indexer wq_b
        replicated += d * cfg.index_num_heads  # indexer weights_proj
        replicated += d * 2 * 2 * cfg.index_head_dim  # indexer compressor
    elif kind == "hca":
        replicated += d * 2 * hd  # compressor, no overlap
    return sharded / tp, replicated


def check_deployment(
    card: ModelCard, serving: ServingConfig, fail: Callable[[str, str], None]
) -> None:
    """What the planner does not model for these kinds, refused by name."""
    kinds = set(card.layer_kinds)
    if serving.dcp > 1 and kinds & {"sparse_mla", *V4_KINDS}:
        fail(
            "dcp",
            f"decode context parallel over the sparse attention of {card.name} is not modelled"
            " (dcp 1 only)",
        )
    cfg = card.compressed_attention
    if cfg is not None and cfg.o_groups % serving.tp:
        fail(
            "tp",
            f"tp {serving.tp} does not divide the {cfg.o_groups} output-projection groups of"
            f" {card.name} (vLLM: o_groups // tp groups per rank)",
        )
