"""Step ops of the sparse-attention kinds: ``sparse_mla`` (DSA) and DeepSeek-V4's ``csa`` /
``hca`` / ``swa_mqa``, recorded into a ``StepOps`` (roofline priors: no measured table is
wired for them; see docs/sparse-attention-models.md).

``sparse_mla`` per layer, as vLLM's FlashMLA-sparse path runs it: the MLA projections; the
indexer's q (from the q latent), key and head-weight projections (replicated); the indexer
scores every cached token with fp8 MQA logits (``2 x index heads x index dim`` FLOPs per
(query, cached token), the 132 B keys read, fp32 logits written and read by the top-k);
attention in the absorbed (MQA) form for every token, prefill included, over at most
``topk_tokens`` latents per query; W_UK / W_UV around it; o_proj.

DeepSeek-V4 per layer: wq_a + wkv (replicated, fused), wq_b, q/kv norms + RoPE + fp8 cache
insert, MQA over the query's window (<= 128 raw entries) plus its compressed entries (csa: the
top ``index_topk`` of ``ctx / 4``; hca: all ``ctx / 128``), the grouped wo_a and wo_b; csa/hca:
the compressor (``2 x coff x head_dim`` outputs, fp32 state); csa: the indexer (q, weights,
its own compressor, fp8 logits over ``ctx / 4`` keys); mHC: the ``residual_streams``-wide
residual read and written around each sublayer.

FlashMLA's sparse kernels take 64 or 128 query heads, so a TP rank with fewer heads computes
the padded count (vLLM pads q; ``padded_heads``). Prefill queries gather their own selected
entries (no reuse between queries is assumed, an upper bound on bytes); the dense parts of
V4's prefill (window, HCA entries) are read once per chunk.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.cost import ops
from simulator.cost.ops import Work
from simulator.sparse_attention import (
    indexer_key_bytes,
    kv_bytes_per_token_per_layer,
    v4_entry_bytes,
)

if TYPE_CHECKING:
    from simulator.cost.layers import StepOps


# recorded in this order (a fixed order keeps a step's sums bit-for-bit repeatable)
KINDS: tuple[str, ...] = ("sparse_mla", "csa", "hca", "swa_mqa")


def padded_heads(heads: float) -> float:
    """Query heads FlashMLA's sparse kernels compute: 64 or 128 (vLLM pads q up)."""
    return 64.0 if heads <= 64 else 128.0 if heads <= 128 else heads


def _sparse_pairs(b: StepOps, span: float) -> float:
    """Prefill (query, key) pairs with each query capped at ``span`` keys."""
    s = b.s
    if s.prefill_pairs_sparse:
        return s.prefill_pairs_sparse
    return min(s.prefill_pairs, s.prefill_tokens * span)  # shapes built without the field


def record(b: StepOps, kind: str, n: float) -> None:
    """Record the ops of ``n`` layers of sparse ``kind`` into ``b``."""
    if kind == "sparse_mla":
        _sparse_mla(b, n)
    else:
        _v4(b, kind, n)


def _indexer(
    b: StepOps, name: str, n: float, heads: float, dim: float, keys_dec: float, pairs: float,
    keys_pre: float,
) -> None:  # fmt: skip
    """fp8 MQA logits of the indexer queries against ``keys_*`` cached keys, then top-k."""
    s, m = b.s, b.m
    fp8 = m.device.peak_flops_per_s.for_dtype("fp8")
    key_b = indexer_key_bytes(int(dim))
    if s.num_decodes:
        q = s.decode_tokens / s.num_decodes
        work = Work(2.0 * heads * dim * q * keys_dec, keys_dec * (key_b + 2 * ops.FP32 * q), 2.0)
        b.add(name + "decode_logits_topk", "attn_decode", "attention", n, work, fp8, dynamic=True)
    if s.num_prefills:
        work = Work(2.0 * heads * dim * pairs, keys_pre * key_b + 2 * ops.FP32 * pairs, 2.0)
        b.add(name + "prefill_logits_topk", "attn_prefill", "attention", n, work, fp8, dynamic=True)


def _sparse_mla(b: StepOps, n: float) -> None:
    m, s, t = b.m, b.s, b.t
    card, serving = m.card, m.serving
    mla = card.mla
    assert mla is not None
    ix = mla.indexer
    assert ix is not None
    d = float(card.hidden_size)
    h = mla.num_heads / serving.tp
    hp = padded_heads(h)
    lat = mla.kv_lora_rank + mla.qk_rope_head_dim
    per_pair = float(lat + mla.kv_lora_rank)  # QK over the latent + rope, PV over the latent
    w, bf16 = b.wbytes("attention"), m.device.peak_flops_per_s.bf16
    name = "sparse_mla."
    q_in = float(mla.q_lora_rank or d)
    if not b.static_off:
        if mla.q_lora_rank:
            b.gemm(name + "q_a_proj", "attention", n, t, mla.q_lora_rank, d, "attention")
        qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        b.gemm(name + "q_b_proj", "attention", n, t, h * qk, q_in, "attention")
        b.gemm(name + "kv_a_proj", "attention", n, t, lat, d, "attention")
        b.gemm(name + "indexer.wq_b", "attention", n, t, ix.num_heads * ix.head_dim, q_in,
               "attention")  # fmt: skip
        b.gemm(name + "indexer.wk", "attention", n, t, ix.head_dim, d, "attention")
        b.gemm(name + "indexer.weights_proj", "attention", n, t, ix.num_heads, d, "attention")
        extra = lat + h * mla.qk_rope_head_dim + ix.num_heads * ix.head_dim + ix.head_dim
        b.add(name + "norm_rope_quant", "elementwise", "attention", n,
              ops.elementwise(t * extra, 6.0), bf16)  # fmt: skip
        # the absorbed form for every token (prefill too): W_UK before, W_UV after
        b.add(name + "w_uk_absorb", "gemm", "attention", n,
              ops.bmm(h, t, mla.kv_lora_rank, mla.qk_nope_head_dim, w),
              b.peak("attention"))  # fmt: skip
        b.add(name + "w_uv", "gemm", "attention", n,
              ops.bmm(h, t, mla.v_head_dim, mla.kv_lora_rank, w),
              b.peak("attention"))  # fmt: skip
        b.gemm(name + "o_proj", "attention", n, t, d, h * mla.v_head_dim, "attention")
    latent_b = kv_bytes_per_token_per_layer(card, serving, "sparse_mla") - indexer_key_bytes(
        ix.head_dim
    )
    pairs_s = _sparse_pairs(b, float(ix.topk_tokens))
    _indexer(b, name + "indexer.", n, ix.num_heads, ix.head_dim, s.decode_kv, s.prefill_pairs,
             s.prefill_kv)  # fmt: skip
    if s.num_decodes:
        q = s.decode_tokens / s.num_decodes
        work = ops.mla_decode(s.num_decodes, s.decode_kv_sparse / s.num_decodes, hp, latent_b, q)
        b.add(name + "decode_attention", "mla_decode", "attention", n, work, bf16, dynamic=True)
    if s.num_prefills:
        io = s.prefill_tokens * hp * per_pair * ops.ACT_BYTES  # q in, o out
        work = Work(2.0 * hp * pairs_s * per_pair, pairs_s * latent_b + io)
        b.add(name + "prefill_attention", "mla_prefill", "attention", n, work, bf16, dynamic=True)


def _v4(b: StepOps, kind: str, n: float) -> None:
    m, s, t = b.m, b.s, b.t
    card, serving = m.card, m.serving
    cfg = card.compressed_attention
    assert cfg is not None
    tp = serving.tp
    d = float(card.hidden_size)
    h, hd = cfg.num_heads / tp, float(cfg.head_dim)
    hp = padded_heads(h)
    groups = cfg.o_groups / tp
    bf16 = m.device.peak_flops_per_s.bf16
    name = f"v4.{kind}."
    r4, r128 = float(cfg.csa_compress_ratio), float(cfg.hca_compress_ratio)
    if not b.static_off:
        b.gemm(name + "wqa_wkv", "attention", n, t, cfg.q_lora_rank + hd, d, "attention")
        b.gemm(name + "wq_b", "attention", n, t, h * hd, cfg.q_lora_rank, "attention")
        b.add(name + "norm_rope_insert", "elementwise", "attention", n,
              ops.elementwise(t * (cfg.q_lora_rank + hd + h * hd), 6.0), bf16)  # fmt: skip
        # grouped output: each of the rank's groups maps its heads to o_lora_rank
        per_group_in = cfg.num_heads / cfg.o_groups * hd
        b.gemm(name + "wo_a", "attention", n, t, groups * cfg.o_lora_rank, per_group_in,
               "attention")  # fmt: skip
        b.gemm(name + "wo_b", "attention", n, t, d, groups * cfg.o_lora_rank, "attention")
        if kind in ("csa", "hca"):
            coff = 2.0 if kind == "csa" else 1.0
            b.gemm(name + "compressor", "attention", n, t, 2 * coff * hd, d, "attention")
            b.add(name + "compress_state", "elementwise", "attention", n,
                  ops.elementwise(t * 2 * coff * hd, 2 * ops.FP32), bf16)  # fmt: skip
        if kind == "csa":
            ih, idim = cfg.index_num_heads, cfg.index_head_dim
            b.gemm(name + "indexer.wq_b", "attention", n, t, ih * idim, cfg.q_lora_rank,
                   "attention")  # fmt: skip
            b.gemm(name + "indexer.weights_proj", "attention", n, t, ih, d, "attention")
            b.gemm(name + "indexer.compressor", "attention", n, t, 4 * idim, d, "attention")
        if cfg.residual_streams > 1:  # mHC: the wide residual around attention and MLP
            wide = t * d * (2 * cfg.residual_streams + 1) * 2  # two sublayers
            b.add(name + "hyper_connections", "elementwise", "dense", n,
                  ops.elementwise(wide, ops.ACT_BYTES), bf16)  # fmt: skip
    entry = v4_entry_bytes(cfg)
    per_pair = 2 * hd  # QK and PV over the shared 512-dim vector
    span = float(cfg.index_topk) * r4
    if s.num_decodes:
        q = s.decode_tokens / s.num_decodes
        entries = s.decode_kv_window  # the window: at most 128 raw entries per request
        if kind == "csa":
            entries += s.decode_kv_sparse / r4
        elif kind == "hca":
            entries += s.decode_kv / r128
        io = s.num_decodes * q * hp * per_pair * ops.ACT_BYTES
        work = Work(2.0 * hp * q * entries * per_pair, entries * entry + io)
        b.add(name + "decode_attention", "mla_decode", "attention", n, work, bf16, dynamic=True)
    pairs = s.prefill_pairs_window
    dense_entries = s.prefill_kv_window  # gathered once per chunk (bf16 workspace)
    sparse_pairs = 0.0
    if kind == "csa":
        sparse_pairs = _sparse_pairs(b, span) / r4
        dense_entries += s.prefill_kv / r4  # the request's compressed pool is gathered too
    elif kind == "hca":
        pairs += s.prefill_pairs / r128
        dense_entries += s.prefill_kv / r128
    if s.num_prefills:
        gather = dense_entries * (entry + hd * ops.ACT_BYTES)
        reads = dense_entries * hd * ops.ACT_BYTES + sparse_pairs * hd * ops.ACT_BYTES
        io = s.prefill_tokens * hp * per_pair * ops.ACT_BYTES
        work = Work(2.0 * hp * (pairs + sparse_pairs) * per_pair, gather + reads + io, 2.0)
        b.add(name + "prefill_attention", "mla_prefill", "attention", n, work, bf16, dynamic=True)
    if kind == "csa":
        _indexer(b, name + "indexer.", n, cfg.index_num_heads, cfg.index_head_dim,
                 s.decode_kv / r4, s.prefill_pairs / r4, s.prefill_kv / r4)  # fmt: skip
