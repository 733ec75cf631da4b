"""KV cache layout as vLLM's hybrid allocator builds it (``../shared/reference/vllm_mechanics.md``
2.2-2.4): bytes per token and state bytes per layer, the cache groups sharing one block
pool, the block size raised until one attention page holds a recurrent state, and the
blocks one sequence holds."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from simulator import sparse_attention
from simulator.specs.model import FULL_ATTENTION_KINDS, LINEAR_KINDS, SPARSE_KINDS, ModelCard
from simulator.specs.precision import (
    STATE_BYTES,
    kv_element_bytes,
    mla_kv_bytes_per_token,
)
from simulator.specs.serving import ServingConfig

# Smallest KV block the attention kernels accept (FlashAttention / FlashInfer / Triton: 16 tokens).
KERNEL_BLOCK_TOKENS = 16
# vLLM aligns MLA hybrids to at least 128 tokens (platforms/interface.py:_align_hybrid_block_size).
MLA_HYBRID_ALIGN_TOKENS = 128


# --------------------------------------------------------------------------- per-token / per-seq


def attention_bytes_per_token_per_layer(
    card: ModelCard, serving: ServingConfig, kind: str
) -> float:
    """KV bytes one attention layer stores per token on one GPU (before DCP)."""
    if kind in SPARSE_KINDS:  # sparse MLA (+ indexer keys), DeepSeek-V4 compressed entries
        return sparse_attention.kv_bytes_per_token_per_layer(card, serving, kind)
    if kind == "mla":
        m = card.mla
        assert m is not None
        # the latent is shared by all heads: replicated on every TP rank
        return mla_kv_bytes_per_token(serving.kv_cache_dtype, m.kv_lora_rank, m.qk_rope_head_dim)
    g = card.gqa
    assert g is not None
    elem = kv_element_bytes(serving.kv_cache_dtype)
    heads = max(g.num_kv_heads / serving.tp, 1.0)  # split by TP, replicated below one per rank
    per_token = 2 * heads * g.head_dim * elem
    if kind == "sparse_gqa" and g.index_num_heads and g.index_head_dim:
        # Assumption: the indexer caches index_num_heads keys of index_head_dim per token,
        # split across TP like the KV heads (MiniMax-M3 does not document its cache layout).
        per_token += max(g.index_num_heads / serving.tp, 1.0) * g.index_head_dim * elem
    return per_token


def state_bytes_per_layer(card: ModelCard, serving: ServingConfig) -> float:
    """Recurrent + conv state of one linear-attention layer for one sequence on one GPU."""
    la = card.linear_attention
    assert la is not None
    dtype = serving.state_dtype or la.state_dtype
    recurrent = la.num_v_heads * la.head_k_dim * la.head_v_dim * STATE_BYTES[dtype]
    conv = la.conv_dim * (la.conv_kernel_size - 1 + serving.num_speculative_tokens) * 2  # bf16
    return (recurrent + conv) / serving.tp  # split by TP heads, never by DCP


@dataclass(frozen=True)
class KvGroup:
    kind: Literal["full", "swa", "mamba"]
    layers: int  # real layers in the group (the rest of group_size is padding)


@dataclass(frozen=True)
class KvLayout:
    """vLLM's KV cache groups for one model and serving config (per GPU)."""

    block_size_tokens: int  # tokens per block per rank (the scheduler's block covers x dcp)
    page_bytes: float  # one layer's page of one block
    group_size: int  # layers per group, padding included
    groups: tuple[KvGroup, ...]
    sliding_window_tokens: int | None

    @property
    def bytes_per_block(self) -> float:
        return self.group_size * self.page_bytes

    def count(self, kind: str) -> int:
        return sum(1 for g in self.groups if g.kind == kind)


def kv_layout(card: ModelCard, serving: ServingConfig) -> KvLayout:
    if card.compressed_attention is not None:  # DeepSeek-V4: an equivalent layout
        return sparse_attention.compressed_kv_layout(card, serving)
    kinds = card.layer_kinds
    full_tok = max(
        (
            attention_bytes_per_token_per_layer(card, serving, k)
            for k in set(kinds) & FULL_ATTENTION_KINDS
        ),
        default=0.0,
    )
    swa_tok = attention_bytes_per_token_per_layer(card, serving, "swa") if "swa" in kinds else 0.0
    # Pages must be equal across groups; a model mixing full and sliding layers of different
    # widths would be padded to the wider one.
    attn_tok = max(full_tok, swa_tok)
    counts = {
        "full": sum(1 for k in kinds if k in FULL_ATTENTION_KINDS),
        "swa": sum(1 for k in kinds if k == "swa"),
        "mamba": sum(1 for k in kinds if k in LINEAR_KINDS),
    }
    block = serving.block_size_tokens
    if counts["mamba"]:
        state_page = state_bytes_per_layer(card, serving)
        if attn_tok > 0:
            align = max(KERNEL_BLOCK_TOKENS, serving.block_size_tokens)
            if "mla" in kinds:
                align = max(align, MLA_HYBRID_ALIGN_TOKENS)
            block = max(block, align * math.ceil(state_page / (align * attn_tok)))
            page = block * attn_tok  # the state page is padded up to this
        else:
            page = state_page
    else:
        page = block * attn_tok
    present = {k: n for k, n in counts.items() if n}
    lo, hi = min(present.values()), max(present.values())
    group_size = hi if hi < 1.5 * lo else lo
    groups: list[KvGroup] = []
    for kind, n in present.items():
        n_groups = math.ceil(n / group_size)
        for i in range(n_groups):
            real = min(group_size, n - i * group_size)
            groups.append(KvGroup(kind=kind, layers=real))  # type: ignore[arg-type]
    window = card.gqa.sliding_window_tokens if card.gqa is not None and counts["swa"] else None
    return KvLayout(
        block_size_tokens=block,
        page_bytes=page,
        group_size=group_size,
        groups=tuple(groups),
        sliding_window_tokens=window,
    )


def blocks_per_seq(layout: KvLayout, serving: ServingConfig, context_tokens: int) -> int:
    """Blocks of the shared pool one running sequence of ``context_tokens`` holds."""
    b = layout.block_size_tokens
    full = layout.count("full") * math.ceil(context_tokens / (b * serving.dcp))
    swa = 0
    if layout.sliding_window_tokens is not None:
        window_blocks = math.ceil((layout.sliding_window_tokens - 1) / b) + 1
        swa = layout.count("swa") * min(math.ceil(context_tokens / b), window_blocks)
    k = serving.num_speculative_tokens
    # align mode (prefix caching on): running state + previous boundary state (+1 per draft)
    state_pages = (2 if serving.enable_prefix_caching else 1) + k
    return full + swa + layout.count("mamba") * state_pages
