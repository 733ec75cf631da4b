"""The non-mixer lines of a step, recorded into a ``StepOps``: the dense MLP, the embedding,
LM head, logits gather and sampling, and the speculative drafter's passes (``StepOps.build``
calls these; the token mixers are in ``mixers``, the MoE in ``moe_ep``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.cost import mixers, moe_ep, ops, sparse_ops
from simulator.cost.shapes import StepShape

if TYPE_CHECKING:
    from simulator.cost.layers import StepOps


def record_draft(so: StepOps, k: int) -> None:
    """K sequential draft passes over the decoding requests (EAGLE/MTP): each one decoder
    layer of the target's full-attention kind (the MTP module, or an EAGLE head of that
    shape) over the request's context, its MLP, and the lm_head (vllm_mechanics.md 8)."""
    m, s = so.m, so.s
    card, tp = m.card, m.serving.tp
    d = float(card.hidden_size)
    saved_t, saved_s = so.t, so.s
    b = s.num_decodes
    so.t = float(b)
    so.s = StepShape(
        num_decodes=b, decode_tokens=b, decode_kv=s.decode_kv,
        decode_kv_window=s.decode_kv_window, decode_kv_sparse=s.decode_kv_sparse,
    )  # fmt: skip
    so.prefix, so.drafting = "draft.", "drafting"
    kind = next(
        (
            x
            for x in reversed(card.layer_kinds)
            if x in ("mla", "gqa", "swa", "sparse_gqa", *sparse_ops.KINDS)
        ),
        None,
    )
    if kind == "mla":
        mixers.record_mla(so, k)
    elif kind in sparse_ops.KINDS:
        sparse_ops.record(so, kind, k)
    elif kind is not None:
        mixers.record_gqa(so, kind, k)
    if not so.static_off:
        so.collective("attn_allreduce", "allreduce", k, b * d * ops.ACT_BYTES, tp)
        if card.moe_layer_mask[-1]:
            moe_ep.record_moe(so, k)
        else:
            record_dense_mlp(so, k)
        so.gemm("lm_head", "dense", k, b, card.vocab_size / tp, d, "lm_head")
    so.t, so.s = saved_t, saved_s
    so.prefix, so.drafting = "", None


def record_dense_mlp(so: StepOps, n: float) -> None:
    m, t = so.m, so.t
    inter = (m.card.dense_intermediate_size or 0) / m.serving.tp
    d = float(m.card.hidden_size)
    if m.card.gated_mlp:
        so.gemm("mlp.gate_up", "dense", n, t, 2 * inter, d, "dense_mlp")
    else:  # up_proj, relu2, down_proj
        so.gemm("mlp.up", "dense", n, t, inter, d, "dense_mlp")
    so.add(
        "mlp.act", "elementwise", "dense", n, ops.elementwise(t * inter, 6.0),
        so.peak("dense_mlp"),
    )  # fmt: skip
    so.gemm("mlp.down", "dense", n, t, d, inter, "dense_mlp")
    so.collective("mlp_allreduce", "allreduce", n, t * d * ops.ACT_BYTES, m.serving.tp)


def record_head(so: StepOps) -> None:
    m, s, t = so.m, so.s, so.t
    card, tp = m.card, m.serving.tp
    d = float(card.hidden_size)
    bf16 = m.device.peak_flops_per_s.bf16
    vocab = card.vocab_size / tp
    so.add("embedding", "elementwise", "dense", 1, ops.elementwise(t * d, 4.0, 0.0), bf16)
    so.collective("embedding_allreduce", "allreduce", 1, t * d * ops.ACT_BYTES, tp)
    # logits for the last token of every request (all 1 + K positions of a verify)
    rows = float(s.decode_tokens + s.num_prefills)
    so.gemm("lm_head", "dense", 1, rows, vocab, d, "lm_head")
    so.collective("logits_allgather", "allgather", 1, rows * vocab * 4.0, tp)
    so.add(
        "sampling", "elementwise", "dense", 1,
        ops.elementwise(rows * card.vocab_size, 8.0), bf16,
    )  # fmt: skip
