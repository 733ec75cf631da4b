"""The token mixers' lines of one step: MLA, the GQA family (full, sliding window, block
sparse) and linear attention (KDA, GDN), recorded into a ``StepOps`` (``StepOps.build`` and
the drafter's pass call these once per layer kind, with its layer count).

A line that depends on the step's context sums (the attention cores, MLA's ``kv_b``
re-projection of cached context, DCP's prefill all-gather) is recorded ``dynamic``: the
compiled pricer (``simulator.cost.compiled``) prices only those for a known token-count key.
With ``so.static_off`` only the dynamic lines are recorded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.cost import ops
from simulator.cost.lookups import causal_length
from simulator.specs.precision import STATE_BYTES, kv_element_bytes

if TYPE_CHECKING:
    from simulator.cost.layers import StepOps


def record_mla(so: StepOps, n: float) -> None:
    """The MLA lines of ``n`` layers (``StepOps.build``; the drafter's pass too)."""
    m, s, t = so.m, so.s, so.t
    card, serving = m.card, m.serving
    mla = card.mla
    assert mla is not None
    tp, dcp = serving.tp, serving.dcp
    d = float(card.hidden_size)
    h = mla.num_heads / tp
    qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    lat = mla.kv_lora_rank + mla.qk_rope_head_dim
    w = so.wbytes("attention")
    bf16 = m.device.peak_flops_per_s.bf16
    static = not so.static_off
    if static:
        if mla.q_lora_rank:
            so.gemm("mla.q_a_proj", "attention", n, t, mla.q_lora_rank, d, "attention")
            so.gemm("mla.q_b_proj", "attention", n, t, h * qk, mla.q_lora_rank, "attention")
        else:
            so.gemm("mla.q_proj", "attention", n, t, h * qk, d, "attention")
        so.gemm("mla.kv_a_proj", "attention", n, t, lat, d, "attention")
    kv_tok = m.mla_kv_bytes_per_token
    core_dec = so.look.mla(so.prefix + "mla.decode_attention", "decode", h * dcp)
    core_pre = so.look.mla(so.prefix + "mla.prefill_attention", "prefill", h)
    if static and not ((s.num_decodes and core_dec) or (s.num_prefills and core_pre)):
        # the measured attention cores include the layer norms and RoPE
        so.add(
            "mla.norm_rope", "elementwise", "attention", n,
            ops.elementwise(t * (lat + h * mla.qk_rope_head_dim), 6.0), bf16,
        )  # fmt: skip
    if s.num_decodes:
        td = float(s.decode_tokens)
        if static:
            so.add(
                "mla.w_uk_absorb", "gemm", "attention", n,
                ops.bmm(h, td, mla.kv_lora_rank, mla.qk_nope_head_dim, w),
                so.peak("attention"),
                so.look.bmm(so.prefix + "mla.w_uk_absorb", "w_uk", h), (td,),
            )  # fmt: skip
        # after the query all-gather each DCP rank attends dcp x h heads over its 1/dcp shard
        per_req_kv = s.decode_kv / s.num_decodes / dcp
        work = ops.mla_decode(s.num_decodes, per_req_kv, h * dcp, kv_tok, td / s.num_decodes)
        so.add(
            "mla.decode_attention", "mla_decode", "attention", n, work, bf16,
            core_dec, (td, per_req_kv), True,
        )  # fmt: skip
        if static:
            so.add(
                "mla.w_uv", "gemm", "attention", n,
                ops.bmm(h, td, mla.v_head_dim, mla.kv_lora_rank, w), so.peak("attention"),
                so.look.bmm(so.prefix + "mla.w_uv", "w_uv", h), (td,),
            )  # fmt: skip
        if dcp > 1 and static:
            so.collective("dcp.q_allgather", "allgather", n, td * h * lat * 2, dcp)
            so.collective("dcp.lse_allgather", "allgather", n, td * h * dcp * 4, dcp)
            out = td * h * mla.kv_lora_rank * 2
            so.collective("dcp.out_reducescatter", "reducescatter", n, out, dcp)
    if s.num_prefills:
        work = ops.mla_prefill_work(s.prefill_kv, s.prefill_tokens, s.prefill_pairs, h, kv_tok)
        isl = causal_length(s.prefill_pairs, s.num_prefills)
        so.add(
            "mla.prefill_attention", "mla_prefill", "attention", n, work, bf16,
            core_pre, (float(s.num_prefills), isl), True,
        )  # fmt: skip
        prefix_tokens = s.prefill_kv - s.num_prefills * isl
        if core_pre is not None and prefix_tokens > 0:
            # the cached context is re-projected (kv_b) on every chunk: a GEMM of its own
            kv_out = h * (mla.qk_nope_head_dim + mla.v_head_dim)
            so.gemm(
                "mla.kv_b_context", "attention", n, prefix_tokens, kv_out, mla.kv_lora_rank,
                "attention", True,
            )  # fmt: skip
        if dcp > 1:
            ctx_shard = (s.prefill_kv - s.prefill_tokens) / dcp * kv_tok
            so.collective("dcp.prefill_kv_allgather", "allgather", n, ctx_shard, dcp, True)
    if static and mla.output_gate:
        so.gemm("mla.output_gate", "attention", n, t, h * mla.v_head_dim, d, "attention")
    if static:
        so.gemm("mla.o_proj", "attention", n, t, d, h * mla.v_head_dim, "attention")


def record_gqa(so: StepOps, kind: str, n: float) -> None:
    """The lines of ``n`` GQA-family layers of ``kind`` (gqa, swa, sparse_gqa)."""
    m, s, t = so.m, so.s, so.t
    card, serving = m.card, m.serving
    g = card.gqa
    assert g is not None
    tp, dcp = serving.tp, serving.dcp
    d = float(card.hidden_size)
    h = g.num_heads / tp
    kvh = max(g.num_kv_heads / tp, 1.0)
    hd = float(g.head_dim)
    bf16 = m.device.peak_flops_per_s.bf16
    kvb = kv_element_bytes(serving.kv_cache_dtype)
    q_out = h * hd * (2 if g.output_gate else 1)
    name = f"{kind}."
    window = m.window if kind == "swa" else np.inf
    tabled = kind != "sparse_gqa"  # the tables have no block-sparse attention
    static = not so.static_off
    if static:
        so.gemm(name + "qkv_proj", "attention", n, t, q_out + 2 * kvh * hd, d, "attention")
        so.add(
            name + "rope", "elementwise", "attention", n,
            ops.elementwise(t * (h + kvh) * hd, 4.0), bf16,
        )  # fmt: skip
        if g.qk_norm != "none":
            _qk_norm(so, name, n, t * (h + kvh) * hd, g.qk_norm == "across_heads")
    if s.num_decodes:
        kv = {"swa": s.decode_kv_window, "sparse_gqa": s.decode_kv_sparse}.get(kind, s.decode_kv)
        q = s.decode_tokens / s.num_decodes
        per_req = kv / s.num_decodes / dcp
        work = ops.attn_decode(s.num_decodes, per_req, h * dcp, kvh, hd, kvb, q)
        curve = (
            so.look.attention(
                so.prefix + name + "decode_attention", "decode", hd, window, h * dcp, kvh
            )
            if tabled
            else None
        )
        so.add(
            name + "decode_attention", "attn_decode", "attention", n, work, bf16,
            curve, (float(s.decode_tokens), min(per_req, window)), True,
        )  # fmt: skip
        if kind == "sparse_gqa" and g.index_num_heads and g.index_head_dim:
            # the indexer scores every cached token with its own small keys
            idx = ops.attn_decode(
                s.num_decodes, s.decode_kv / s.num_decodes / dcp,
                max(g.index_num_heads / tp, 1.0), max(g.index_num_heads / tp, 1.0),
                g.index_head_dim / 2, kvb, q,
            )  # fmt: skip
            so.add(name + "indexer", "attn_decode", "attention", n, idx, bf16, dynamic=True)
        if dcp > 1 and static:
            td = float(s.decode_tokens)
            so.collective(name + "dcp_q_allgather", "allgather", n, td * h * hd * 2, dcp)
            so.collective(name + "dcp_out_reducescatter", "reducescatter", n, td * h * hd * 2, dcp)
    if s.num_prefills:
        windowed = kind == "swa"
        pairs = s.prefill_pairs_window if windowed else s.prefill_pairs
        work = ops.attn_prefill_work(
            s.prefill_kv_window if windowed else s.prefill_kv,
            s.prefill_tokens, pairs, h, kvh, hd, kvb,
        )  # fmt: skip
        curve = (
            so.look.attention(so.prefix + name + "prefill_attention", "prefill", hd, window, h, kvh)
            if tabled
            else None
        )
        at = (float(s.num_prefills), causal_length(pairs, s.num_prefills))
        so.add(
            name + "prefill_attention", "attn_prefill", "attention", n, work, bf16, curve, at,
            True,
        )  # fmt: skip
    if static:
        so.gemm(name + "o_proj", "attention", n, t, d, h * hd, "attention")


# kernels of one layer's q/k RMSNorm: q_norm and k_norm are two modules (vLLM qwen3.py); the
# across-heads form computes the variances, all-reduces them, then scales (two kernels around
# the collective: MiniMaxText01RMSNormTP.forward_qk). An assumption read from that code: an
# inductor fusion with RoPE would make it fewer.
QK_NORM_KERNELS = 2.0


def _qk_norm(so: StepOps, name: str, n: float, elements: float, across_heads: bool) -> None:
    """RMSNorm of this step's queries and keys (bf16 in and out); across heads, TP ranks
    all-reduce the fp32 variances of q and k, concatenated (2 x 4 bytes a token), each layer."""
    work = ops.elementwise(elements, 4.0)._replace(kernels=QK_NORM_KERNELS)
    so.add(name + "qk_norm", "elementwise", "attention", n, work, so.m.device.peak_flops_per_s.bf16)
    if across_heads:
        so.collective(name + "qk_norm_allreduce", "allreduce", n, so.t * 8.0, so.m.serving.tp)


def record_linear(so: StepOps, n: float) -> None:
    """The lines of ``n`` linear-attention layers (KDA, GDN)."""
    m, s, t = so.m, so.s, so.t
    card, serving = m.card, m.serving
    la = card.linear_attention
    assert la is not None
    tp = serving.tp
    d = float(card.hidden_size)
    hv, hk = la.num_v_heads / tp, la.num_k_heads / tp
    dk, dv = float(la.head_k_dim), float(la.head_v_dim)
    bf16 = m.device.peak_flops_per_s.bf16
    conv = la.conv_dim / tp
    state_b = STATE_BYTES[serving.state_dtype or la.state_dtype]
    proj = conv + hv  # q, k, v (+ beta)
    if la.kind == "gdn":
        proj += hv * dv + hv  # z (output gate) and a
    elif la.full_rank_gate:
        proj += hv * dk + hv * dv  # decay and output gates at full rank
    else:
        so.gemm("kda.gate_a_proj", "recurrent", n, t, dk + dv, d, "linear_attention")
        so.gemm("kda.gate_b_proj", "recurrent", n, t, hv * (dk + dv), dk, "linear_attention")
    so.gemm(f"{la.kind}.in_proj", "recurrent", n, t, proj, d, "linear_attention")
    fused = False  # KDA's measured decode kernel includes the short conv and gated norm
    if s.num_prefills:
        # decodes batched with prefills take the chunked kernel as length-1 sequences; with
        # decodes in it, the longer of the prefills alone and all sequences at their mean
        # length (``lookups.LongerOf``)
        seqs = s.num_prefills + s.num_decodes
        work = ops.kda_prefill(seqs, s.num_tokens / seqs, hv, dk, state_b, dv)
        name = f"{so.prefix}{la.kind}.chunked_prefill"
        at: tuple[float, ...] = (float(seqs), s.num_tokens / seqs)
        if s.num_decodes:
            curve: Any = so.look.linear_mixed(name, hk, hv)
            at = (float(s.num_prefills), s.prefill_tokens / s.num_prefills, *at)
        else:
            curve = so.look.linear(name, "prefill", hk, hv)
        so.add(f"{la.kind}.chunked_prefill", "kda_prefill", "recurrent", n, work, bf16, curve, at)
    else:
        q = s.decode_tokens / s.num_decodes
        work = ops.kda_decode(s.num_decodes, hv, dk, dv, state_b, q)
        phase = "decode" if q == 1 else "verify"
        curve = so.look.linear(f"{so.prefix}{la.kind}.recurrent_{phase}", phase, hk, hv)
        at = (float(s.num_decodes),) if q == 1 else (float(s.num_decodes), q)
        so.add(f"{la.kind}.recurrent_decode", "kda_decode", "recurrent", n, work, bf16, curve, at)
        fused = curve is not None and la.kind == "kda" and q == 1
    if not fused:
        so.add(
            f"{la.kind}.short_conv", "elementwise", "recurrent", n,
            ops.elementwise(t * conv, 4.0, 8.0), bf16,
        )  # fmt: skip
        so.add(
            f"{la.kind}.out_norm_gate", "elementwise", "recurrent", n,
            ops.elementwise(t * hv * dv, 6.0), bf16,
        )  # fmt: skip
    so.gemm(f"{la.kind}.o_proj", "recurrent", n, t, d, hv * dv, "linear_attention")
