"""Step time of one engine step: every layer's ops, priced by the latency models, summed.

A step is a batch of requests, each with ``new_tokens`` scheduled this step and
``context_tokens`` already in its KV cache. A request is a *decode* when it schedules at
most 1 + K tokens (K draft tokens) on top of an existing context, else a *prefill* chunk.

All layers of one kind have the same shapes, so each distinct op is priced once per step and
multiplied by its layer count: a step costs a few dozen vectorised evaluations whatever the
model depth or batch size. The engine can keep the sums of ``StepShape`` up to date itself
and call ``StepCostModel.price`` directly.

Step time = max(GPU time, CPU time) (async scheduling overlaps the CPU work of step n+1 with
the GPU work of step n). Pure-decode batches are padded to the CUDA-graph capture sizes.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import numpy as np
from numpy.typing import NDArray

from simulator.cost import ops
from simulator.cost.latency import LatencyModels
from simulator.cost.ops import OpClass, Work
from simulator.memory import attention_bytes_per_token_per_layer
from simulator.specs.hardware import HardwareProfile
from simulator.specs.model import MODULE_GROUPS, ModelCard, ModuleGroup
from simulator.specs.precision import (
    COMPUTE_DTYPE_OF,
    STATE_BYTES,
    WEIGHT_FORMATS,
    kv_element_bytes,
)
from simulator.specs.serving import ServingConfig
from simulator.weights import precision_of

Category = Literal[
    "attention", "recurrent", "moe", "dense", "drafting", "communication", "overhead"
]
CATEGORIES: tuple[Category, ...] = (
    "attention",
    "recurrent",
    "moe",
    "dense",
    "drafting",
    "communication",
    "overhead",
)
_CAT_INDEX = {c: i for i, c in enumerate(CATEGORIES)}
# Kernels per layer that survive when decode kernels are fused (attention, MoE, communication)
FUSED_KERNELS_PER_LAYER = 3.0


class GemmShape(NamedTuple):
    """One plain GEMM of a step: its first op name, output width n, depth k, weight width."""

    name: str
    n: int
    k: int
    weight_bytes_per_elem: float


@dataclass(frozen=True)
class StepShape:
    """Sums over the requests of one step that the cost depends on (tokens unless named)."""

    num_decodes: int = 0
    decode_tokens: int = 0  # sum of new tokens of decodes (1 + K each)
    decode_kv: float = 0.0  # sum over decodes of keys attended (context + new)
    decode_kv_window: float = 0.0  # the same, capped at the sliding window
    decode_kv_sparse: float = 0.0  # the same, capped at the sparse-attention span
    num_prefills: int = 0
    prefill_tokens: int = 0
    prefill_kv: float = (
        0.0  # sum over prefill chunks of context + new (keys read, latents re-projected)
    )
    prefill_kv_window: float = 0.0
    prefill_pairs: float = 0.0  # causal (query, key) pairs
    prefill_pairs_window: float = 0.0

    @property
    def num_tokens(self) -> int:
        return self.decode_tokens + self.prefill_tokens

    @property
    def num_requests(self) -> int:
        return self.num_decodes + self.num_prefills


@dataclass(frozen=True)
class OpLine:
    """One priced op of a step (all layers of its kind together)."""

    name: str
    op_class: OpClass
    category: Category
    count: float  # layers (instances) per step
    flops: float  # per instance
    bytes: float  # per instance
    seconds: float  # all instances


@dataclass(frozen=True)
class StepCost:
    seconds: float  # max(gpu, cpu)
    gpu_s: float
    cpu_s: float
    breakdown_s: dict[str, float]  # by category; sums to `seconds`
    padded_tokens: int  # tokens the GEMMs ran on (CUDA-graph padding included)
    lines: tuple[OpLine, ...] = field(default=())


def cuda_graph_sizes(max_num_seqs: int, decode_query_len: int) -> list[int]:
    """vLLM capture sizes: [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16),
    max = min(2 x max_num_seqs x decode query length, 512) (``config/vllm.py``)."""
    top = min(2 * max_num_seqs * decode_query_len, 512)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, top + 1, 16)]
    return [s for s in sizes if s <= top]


def shape_of(
    new_tokens: NDArray[np.int64],
    context_tokens: NDArray[np.int64],
    decode_query_len: int = 1,
    window: float = np.inf,
    sparse_span: float = np.inf,
) -> StepShape:
    """The sums of a step from per-request (new, context) arrays."""
    new = np.asarray(new_tokens, dtype=np.float64)
    ctx = np.asarray(context_tokens, dtype=np.float64)
    dec = ((new <= decode_query_len) & (ctx > 0)).astype(np.float64)
    pre = 1.0 - dec
    kv = ctx + new
    num_decodes = int(dec.sum())
    decode_kv = float(dec @ kv)
    prefill_kv = float(pre @ kv)
    pairs = float(pre @ (new * ctx + new * (new + 1) / 2.0))
    windowed = bool(np.isfinite(window))
    return StepShape(
        num_decodes=num_decodes,
        decode_tokens=int(dec @ new),
        decode_kv=decode_kv,
        decode_kv_window=float(dec @ np.minimum(kv, window)) if windowed else decode_kv,
        decode_kv_sparse=(
            float(dec @ np.minimum(kv, sparse_span)) if np.isfinite(sparse_span) else decode_kv
        ),
        num_prefills=new.size - num_decodes,
        prefill_tokens=int(pre @ new),
        prefill_kv=prefill_kv,
        prefill_kv_window=float(pre @ np.minimum(kv, new + window)) if windowed else prefill_kv,
        prefill_pairs=pairs,
        prefill_pairs_window=(
            float(pre @ ops.causal_pairs(new, ctx, window)) if windowed else pairs
        ),
    )


class StepCostModel:
    """Prices engine steps of one model on one device under one serving config."""

    def __init__(
        self,
        card: ModelCard,
        device: HardwareProfile,
        serving: ServingConfig,
        latency: LatencyModels | None = None,
        max_num_seqs: int = 1024,
    ) -> None:
        self.card, self.device, self.serving = card, device, serving
        self.latency = latency or LatencyModels.for_device(device)
        self.decode_query_len = 1 + serving.num_speculative_tokens
        self.graph_sizes = cuda_graph_sizes(max_num_seqs, self.decode_query_len)
        kinds = card.layer_kinds
        self.counts = {k: float(sum(1 for x in kinds if x == k)) for k in set(kinds)}
        self.n_moe = float(sum(card.moe_layer_mask))
        self.n_dense_mlp = float(card.layers.count) - self.n_moe
        self.window = (
            float(card.gqa.sliding_window_tokens)
            if card.gqa is not None and card.gqa.sliding_window_tokens
            else np.inf
        )
        groups: tuple[ModuleGroup, ...] = MODULE_GROUPS
        self.group_peak = {
            grp: device.peak_flops_per_s.for_dtype(
                COMPUTE_DTYPE_OF[precision_of(card, serving, grp)]
            )
            for grp in groups
        }
        self.group_weight_bytes = {
            grp: WEIGHT_FORMATS[precision_of(card, serving, grp)].bits_per_element / 8
            for grp in groups
        }
        self.mla_kv_bytes_per_token = (
            attention_bytes_per_token_per_layer(card, serving, "mla") if card.mla else 0.0
        )
        g = card.gqa
        self.sparse_span = (
            float((g.sparse_topk_blocks or 0) + 1) * (g.sparse_block_tokens or 0)
            if g is not None and g.sparse_block_tokens
            else np.inf
        )

    # ---------------------------------------------------------------- public API

    def step(
        self,
        new_tokens: NDArray[np.int64],
        context_tokens: NDArray[np.int64],
        detail: bool = False,
    ) -> StepCost:
        shape = shape_of(
            new_tokens, context_tokens, self.decode_query_len, self.window, self.sparse_span
        )
        return self.price(shape, detail)

    def step_seconds(
        self, new_tokens: NDArray[np.int64], context_tokens: NDArray[np.int64]
    ) -> float:
        return self.step(new_tokens, context_tokens).seconds

    def price(self, shape: StepShape, detail: bool = False) -> StepCost:
        builder = _Ops(self, shape)
        builder.build()
        return builder.finish(detail)

    def gemm_shapes(self) -> list[GemmShape]:
        """The plain GEMMs a step of this model asks about, as (name, n, k, weight bytes per
        element), one per distinct (n, k, width): what the calibration job measures.

        Read off a step with one decode and one prefill chunk, so every layer kind's
        projections (decode-only and prefill-only ones too, e.g. MLA's absorbed BMMs vs the
        kv_b up-projection) appear."""
        shape = shape_of(np.array([1, 64]), np.array([64, 0]), self.decode_query_len)
        builder = _Ops(self, shape)
        builder.want_shapes = True
        builder.build()
        seen: dict[tuple[float, float, float], GemmShape] = {}
        for i, (_, n, k, w) in builder.shapes.items():
            seen.setdefault((n, k, w), GemmShape(builder.rows[i][0], int(n), int(k), w))
        return list(seen.values())

    def padded(self, shape: StepShape) -> int:
        """Tokens the GEMMs run on: pure-decode batches pad up to a CUDA-graph size."""
        t = shape.num_tokens
        if shape.num_prefills or t == 0 or t > self.graph_sizes[-1]:
            return t
        return self.graph_sizes[bisect.bisect_left(self.graph_sizes, t)]


class _Ops:
    """Collects the ops of one step as parallel lists, then prices them in one pass."""

    def __init__(self, model: StepCostModel, shape: StepShape) -> None:
        self.m, self.s = model, shape
        # (name, op class, category index, count, flops, bytes, kernels, peak FLOP/s)
        self.rows: list[tuple[str, OpClass, int, float, float, float, float, float]] = []
        # row index -> (m, n, k, weight bytes per element) of plain GEMM rows, kept only
        # when the device has measured GEMM shape tables
        self.want_shapes = model.latency.has_tables("gemm")
        self.shapes: dict[int, tuple[float, float, float, float]] = {}
        # (name, op class, count, bytes per rank, world size)
        self.colls: list[tuple[str, OpClass, float, float, float]] = []
        self.fused = (
            model.serving.fused_decode_kernels and shape.num_prefills == 0 and shape.num_decodes > 0
        )
        self.t = float(model.padded(shape))
        self.prefix = ""  # "draft." while the drafter's passes are recorded
        self.drafting: Category | None = None

    # ---------------------------------------------------------------- recording

    def add(
        self, name: str, cls: OpClass, cat: Category, count: float, work: Work, peak: float
    ) -> None:
        if count > 0:
            b = float(work.bytes)
            k = work.kernels if b > 0 else 0.0
            cat_i = _CAT_INDEX[self.drafting or cat]
            self.rows.append((self.prefix + name, cls, cat_i, count, float(work.flops), b, k, peak))

    def collective(
        self, name: str, cls: OpClass, count: float, bytes_per_rank: float, world: int
    ) -> None:
        if count > 0 and world > 1 and bytes_per_rank > 0:
            self.colls.append((self.prefix + name, cls, count, bytes_per_rank, float(world)))

    def gemm(
        self,
        name: str,
        cat: Category,
        count: float,
        m: float,
        n: float,
        k: float,
        w: float,
        peak: float,
    ) -> None:
        """A plain GEMM; its shape lets measured shape tables correct the fit."""
        if count > 0 and m > 0:
            work = ops.gemm(m, n, k, w)
            flops, moved = float(work.flops), float(work.bytes)
            cat_i = _CAT_INDEX[self.drafting or cat]
            self.rows.append((self.prefix + name, "gemm", cat_i, count, flops, moved, 1.0, peak))
            if self.want_shapes:
                self.shapes[len(self.rows) - 1] = (m, n, k, w)

    def peak(self, group: ModuleGroup) -> float:
        return self.m.group_peak[group]

    def wbytes(self, group: ModuleGroup) -> float:
        return self.m.group_weight_bytes[group]

    # ---------------------------------------------------------------- the model

    def build(self) -> None:
        m, s = self.m, self.s
        card, serving = m.card, m.serving
        tp = serving.tp
        d = float(card.hidden_size)
        t = self.t
        bf16_peak = m.device.peak_flops_per_s.bf16
        layers = float(card.layers.count)
        if s.num_tokens == 0:
            return
        # every layer: two RMSNorms (+ residual add) over the hidden state
        self.add(
            "rmsnorm", "elementwise", "dense", 2 * layers, ops.elementwise(t * d, 8.0), bf16_peak
        )
        if "mla" in m.counts:
            self._mla(m.counts["mla"])
        for kind in ("gqa", "swa", "sparse_gqa"):
            if kind in m.counts:
                self._gqa(kind, m.counts[kind])
        for kind in ("kda", "gdn"):
            if kind in m.counts:
                self._linear(m.counts[kind])
        n_attn = sum(m.counts.values())
        self.collective("attn_allreduce", "allreduce", n_attn, t * d * ops.ACT_BYTES, tp)
        if m.n_dense_mlp:
            self._dense_mlp(m.n_dense_mlp)
        if m.n_moe:
            self._moe(m.n_moe)
        self._head()
        if serving.num_speculative_tokens and s.num_decodes:
            self._draft(serving.num_speculative_tokens)

    def _draft(self, k: int) -> None:
        """K sequential draft passes over the decoding requests (EAGLE/MTP): each one decoder
        layer of the target's full-attention kind (the MTP module, or an EAGLE head of that
        shape) over the request's context, its MLP, and the lm_head (vllm_mechanics.md 8)."""
        m, s = self.m, self.s
        card, tp = m.card, m.serving.tp
        d = float(card.hidden_size)
        saved_t, saved_s = self.t, self.s
        b = s.num_decodes
        self.t = float(b)
        self.s = StepShape(
            num_decodes=b, decode_tokens=b, decode_kv=s.decode_kv,
            decode_kv_window=s.decode_kv_window, decode_kv_sparse=s.decode_kv_sparse,
        )  # fmt: skip
        self.prefix, self.drafting = "draft.", "drafting"
        kind = next(
            (x for x in reversed(card.layer_kinds) if x in ("mla", "gqa", "swa", "sparse_gqa")),
            None,
        )
        if kind == "mla":
            self._mla(k)
        elif kind is not None:
            self._gqa(kind, k)
        self.collective("attn_allreduce", "allreduce", k, b * d * ops.ACT_BYTES, tp)
        if card.moe_layer_mask[-1]:
            self._moe(k)
        else:
            self._dense_mlp(k)
        vocab = card.vocab_size / tp
        self.gemm("lm_head", "dense", k, b, vocab, d, self.wbytes("lm_head"), self.peak("lm_head"))
        self.t, self.s = saved_t, saved_s
        self.prefix, self.drafting = "", None

    def _mla(self, n: float) -> None:
        m, s, t = self.m, self.s, self.t
        card, serving = m.card, m.serving
        mla = card.mla
        assert mla is not None
        tp, dcp = serving.tp, serving.dcp
        d = float(card.hidden_size)
        h = mla.num_heads / tp
        qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        lat = mla.kv_lora_rank + mla.qk_rope_head_dim
        w, pk = self.wbytes("attention"), self.peak("attention")
        bf16 = m.device.peak_flops_per_s.bf16
        if mla.q_lora_rank:
            self.gemm("mla.q_a_proj", "attention", n, t, mla.q_lora_rank, d, w, pk)
            self.gemm("mla.q_b_proj", "attention", n, t, h * qk, mla.q_lora_rank, w, pk)
        else:
            self.gemm("mla.q_proj", "attention", n, t, h * qk, d, w, pk)
        self.gemm("mla.kv_a_proj", "attention", n, t, lat, d, w, pk)
        self.add(
            "mla.norm_rope", "elementwise", "attention", n,
            ops.elementwise(t * (lat + h * mla.qk_rope_head_dim), 6.0), bf16,
        )  # fmt: skip
        kv_tok = m.mla_kv_bytes_per_token
        if s.num_decodes:
            td = float(s.decode_tokens)
            self.add(
                "mla.w_uk_absorb", "gemm", "attention", n,
                ops.bmm(h, td, mla.kv_lora_rank, mla.qk_nope_head_dim, w), pk,
            )  # fmt: skip
            # after the query all-gather each DCP rank attends dcp x h heads over its 1/dcp shard
            per_req_kv = s.decode_kv / s.num_decodes / dcp
            work = ops.mla_decode(s.num_decodes, per_req_kv, h * dcp, kv_tok, td / s.num_decodes)
            self.add("mla.decode_attention", "mla_decode", "attention", n, work, bf16)
            self.add(
                "mla.w_uv", "gemm", "attention", n,
                ops.bmm(h, td, mla.v_head_dim, mla.kv_lora_rank, w), pk,
            )  # fmt: skip
            if dcp > 1:
                self.collective("dcp.q_allgather", "allgather", n, td * h * lat * 2, dcp)
                self.collective("dcp.lse_allgather", "allgather", n, td * h * dcp * 4, dcp)
                out = td * h * mla.kv_lora_rank * 2
                self.collective("dcp.out_reducescatter", "reducescatter", n, out, dcp)
        if s.num_prefills:
            work = ops.mla_prefill_work(s.prefill_kv, s.prefill_tokens, s.prefill_pairs, h, kv_tok)
            self.add("mla.prefill_attention", "mla_prefill", "attention", n, work, bf16)
            if dcp > 1:
                ctx_shard = (s.prefill_kv - s.prefill_tokens) / dcp * kv_tok
                self.collective("dcp.prefill_kv_allgather", "allgather", n, ctx_shard, dcp)
        if mla.output_gate:
            self.gemm("mla.output_gate", "attention", n, t, h * mla.v_head_dim, d, w, pk)
        self.gemm("mla.o_proj", "attention", n, t, d, h * mla.v_head_dim, w, pk)

    def _gqa(self, kind: str, n: float) -> None:
        m, s, t = self.m, self.s, self.t
        card, serving = m.card, m.serving
        g = card.gqa
        assert g is not None
        tp, dcp = serving.tp, serving.dcp
        d = float(card.hidden_size)
        h = g.num_heads / tp
        kvh = max(g.num_kv_heads / tp, 1.0)
        hd = float(g.head_dim)
        w, pk = self.wbytes("attention"), self.peak("attention")
        bf16 = m.device.peak_flops_per_s.bf16
        kvb = kv_element_bytes(serving.kv_cache_dtype)
        q_out = h * hd * (2 if g.output_gate else 1)
        name = f"{kind}."
        self.gemm(name + "qkv_proj", "attention", n, t, q_out + 2 * kvh * hd, d, w, pk)
        self.add(
            name + "rope",
            "elementwise",
            "attention",
            n,
            ops.elementwise(t * (h + kvh) * hd, 4.0),
            bf16,
        )
        if s.num_decodes:
            kv = {"swa": s.decode_kv_window, "sparse_gqa": s.decode_kv_sparse}.get(
                kind, s.decode_kv
            )
            q = s.decode_tokens / s.num_decodes
            work = ops.attn_decode(
                s.num_decodes, kv / s.num_decodes / dcp, h * dcp, kvh, hd, kvb, q
            )
            self.add(name + "decode_attention", "attn_decode", "attention", n, work, bf16)
            if kind == "sparse_gqa" and g.index_num_heads and g.index_head_dim:
                # the indexer scores every cached token with its own small keys
                idx = ops.attn_decode(
                    s.num_decodes, s.decode_kv / s.num_decodes / dcp,
                    max(g.index_num_heads / tp, 1.0), max(g.index_num_heads / tp, 1.0),
                    g.index_head_dim / 2, kvb, q,
                )  # fmt: skip
                self.add(name + "indexer", "attn_decode", "attention", n, idx, bf16)
            if dcp > 1:
                td = float(s.decode_tokens)
                self.collective(name + "dcp_q_allgather", "allgather", n, td * h * hd * 2, dcp)
                self.collective(
                    name + "dcp_out_reducescatter", "reducescatter", n, td * h * hd * 2, dcp
                )
        if s.num_prefills:
            windowed = kind == "swa"
            work = ops.attn_prefill_work(
                s.prefill_kv_window if windowed else s.prefill_kv,
                s.prefill_tokens,
                s.prefill_pairs_window if windowed else s.prefill_pairs,
                h, kvh, hd, kvb,
            )  # fmt: skip
            self.add(name + "prefill_attention", "attn_prefill", "attention", n, work, bf16)
        self.gemm(name + "o_proj", "attention", n, t, d, h * hd, w, pk)

    def _linear(self, n: float) -> None:
        m, s, t = self.m, self.s, self.t
        card, serving = m.card, m.serving
        la = card.linear_attention
        assert la is not None
        tp = serving.tp
        d = float(card.hidden_size)
        hv = la.num_v_heads / tp
        dk, dv = float(la.head_k_dim), float(la.head_v_dim)
        w, pk = self.wbytes("linear_attention"), self.peak("linear_attention")
        bf16 = m.device.peak_flops_per_s.bf16
        conv = la.conv_dim / tp
        state_b = STATE_BYTES[serving.state_dtype or la.state_dtype]
        proj = conv + hv  # q, k, v (+ beta)
        if la.kind == "gdn":
            proj += hv * dv + hv  # z (output gate) and a
        elif la.full_rank_gate:
            proj += hv * dk + hv * dv  # decay and output gates at full rank
        else:
            self.gemm("kda.gate_a_proj", "recurrent", n, t, dk + dv, d, w, pk)
            self.gemm("kda.gate_b_proj", "recurrent", n, t, hv * (dk + dv), dk, w, pk)
        self.gemm(f"{la.kind}.in_proj", "recurrent", n, t, proj, d, w, pk)
        self.add(
            f"{la.kind}.short_conv",
            "elementwise",
            "recurrent",
            n,
            ops.elementwise(t * conv, 4.0, 8.0),
            bf16,
        )
        if s.num_prefills:
            # decodes batched with prefills take the chunked kernel as length-1 sequences
            seqs = s.num_prefills + s.num_decodes
            work = ops.kda_prefill(seqs, s.num_tokens / seqs, hv, dk, state_b)
            self.add(f"{la.kind}.chunked_prefill", "kda_prefill", "recurrent", n, work, bf16)
        else:
            q = s.decode_tokens / s.num_decodes
            work = ops.kda_decode(s.num_decodes, hv, dk, state_b, q)
            self.add(f"{la.kind}.recurrent_decode", "kda_decode", "recurrent", n, work, bf16)
        self.add(
            f"{la.kind}.out_norm_gate",
            "elementwise",
            "recurrent",
            n,
            ops.elementwise(t * hv * dv, 6.0),
            bf16,
        )
        self.gemm(f"{la.kind}.o_proj", "recurrent", n, t, d, hv * dv, w, pk)

    def _dense_mlp(self, n: float) -> None:
        m, t = self.m, self.t
        inter = (m.card.dense_intermediate_size or 0) / m.serving.tp
        d = float(m.card.hidden_size)
        w, pk = self.wbytes("dense_mlp"), self.peak("dense_mlp")
        self.gemm("mlp.gate_up", "dense", n, t, 2 * inter, d, w, pk)
        self.add("mlp.act", "elementwise", "dense", n, ops.elementwise(t * inter, 6.0), pk)
        self.gemm("mlp.down", "dense", n, t, d, inter, w, pk)
        self.collective("mlp_allreduce", "allreduce", n, t * d * ops.ACT_BYTES, m.serving.tp)

    def _moe(self, n: float) -> None:
        m, t = self.m, self.t
        card, serving = m.card, m.serving
        moe = card.moe
        assert moe is not None
        tp, ep = serving.tp, serving.ep
        d = float(card.hidden_size)
        dr = float(moe.routed_hidden_size or card.hidden_size)
        bf16 = m.device.peak_flops_per_s.bf16
        self.gemm(
            "moe.router",
            "moe",
            n,
            t,
            moe.num_experts,
            d,
            self.wbytes("router"),
            self.peak("router"),
        )
        if moe.routed_hidden_size:
            w, pk = self.wbytes("moe_latent"), self.peak("moe_latent")
            self.gemm("moe.latent_down", "moe", n, t, dr, d, w, pk)
            self.gemm("moe.latent_up", "moe", n, t, d, dr, w, pk)
        # with EP every rank sees the tokens of all DP ranks (same batch assumed on each)
        tokens = t * serving.dp if ep > 1 else t
        work = ops.moe(
            tokens, dr, moe.expert_intermediate_size, moe.num_experts, moe.top_k,
            ep, 1 if ep > 1 else tp, self.wbytes("routed_experts"),
        )  # fmt: skip
        self.add("moe.routed_experts", "moe", "moe", n, work, self.peak("routed_experts"))
        if moe.num_shared_experts:
            si = (
                moe.num_shared_experts
                * (moe.shared_intermediate_size or moe.expert_intermediate_size)
                / tp
            )
            w, pk = self.wbytes("shared_experts"), self.peak("shared_experts")
            self.gemm("moe.shared_gate_up", "moe", n, t, 2 * si, d, w, pk)
            self.gemm("moe.shared_down", "moe", n, t, d, si, w, pk)
        self.add(
            "moe.act_sum", "elementwise", "moe", n, ops.elementwise(t * moe.top_k * dr, 4.0), bf16
        )
        if ep > 1 and serving.dp > 1:
            disp = t * moe.top_k * dr * ops.ACT_BYTES
            self.collective("moe.dispatch_alltoall", "alltoall", n, disp, ep)
            self.collective("moe.combine_alltoall", "alltoall", n, disp, ep)
        else:
            self.collective("moe_allreduce", "allreduce", n, t * d * ops.ACT_BYTES, tp)

    def _head(self) -> None:
        m, s, t = self.m, self.s, self.t
        card, tp = m.card, m.serving.tp
        d = float(card.hidden_size)
        bf16 = m.device.peak_flops_per_s.bf16
        vocab = card.vocab_size / tp
        self.add("embedding", "elementwise", "dense", 1, ops.elementwise(t * d, 4.0, 0.0), bf16)
        self.collective("embedding_allreduce", "allreduce", 1, t * d * ops.ACT_BYTES, tp)
        # logits for the last token of every request (all 1 + K positions of a verify)
        rows = float(s.decode_tokens + s.num_prefills)
        w, pk = self.wbytes("lm_head"), self.peak("lm_head")
        self.gemm("lm_head", "dense", 1, rows, vocab, d, w, pk)
        self.collective("logits_allgather", "allgather", 1, rows * vocab * 4.0, tp)
        self.add(
            "sampling",
            "elementwise",
            "dense",
            1,
            ops.elementwise(rows * card.vocab_size, 8.0),
            bf16,
        )

    # ---------------------------------------------------------------- pricing

    def finish(self, detail: bool) -> StepCost:
        m = self.m
        lat = m.latency
        per_cat = np.zeros(len(CATEGORIES))
        lines: list[OpLine] = []
        gpu = 0.0
        if self.rows:
            names, classes, cats, counts, flops, bytes_, kernels, peaks = zip(
                *self.rows, strict=True
            )
            kern = np.zeros(len(kernels)) if self.fused else np.array(kernels)
            shapes = None
            if self.want_shapes:
                shapes = np.full((len(classes), 4), np.nan)
                for i, shape in self.shapes.items():
                    shapes[i] = shape
            secs = lat.compute_seconds_mixed(
                list(classes), np.array(flops), np.array(bytes_), np.array(peaks), kern, shapes
            )
            total = secs * np.array(counts)
            per_cat += np.bincount(cats, weights=total, minlength=len(CATEGORIES))
            gpu += float(total.sum())
            if detail:
                cat_names = [CATEGORIES[c] for c in cats]
                lines += [
                    OpLine(*row)
                    for row in zip(
                        names,
                        classes,
                        cat_names,
                        counts,
                        flops,
                        bytes_,
                        total.tolist(),
                        strict=True,
                    )
                ]
        if self.fused:
            launches = (
                FUSED_KERNELS_PER_LAYER * m.card.layers.count * m.device.roofline.kernel_launch_s
            )
            per_cat[_CAT_INDEX["overhead"]] += launches
            gpu += launches
        if self.colls:
            cnames, cclasses, ccounts, cbytes, cworld = zip(*self.colls, strict=True)
            csecs = lat.collective_seconds_mixed(list(cclasses), list(cbytes), list(cworld))
            if self.fused:  # fused kernels hide the latency term of small collectives
                zero = lat.collective_seconds_mixed(
                    list(cclasses), [0.0] * len(cbytes), list(cworld)
                )
                csecs = [max(t - z, 0.0) for t, z in zip(csecs, zero, strict=True)]
            ctotal = np.array(csecs) * np.array(ccounts)
            comm = float(ctotal.sum())
            per_cat[_CAT_INDEX["communication"]] += comm
            gpu += comm
            if detail:
                lines += [
                    OpLine(nm, cl, "communication", c, 0.0, b, sec)
                    for nm, cl, c, b, sec in zip(
                        cnames, cclasses, ccounts, cbytes, ctotal.tolist(), strict=True
                    )
                ]
        cpu = m.device.roofline.cpu_step_overhead_s if self.rows else 0.0
        step = max(gpu, cpu)
        per_cat[_CAT_INDEX["overhead"]] += step - gpu
        return StepCost(
            seconds=step,
            gpu_s=gpu,
            cpu_s=cpu,
            breakdown_s=dict(zip(CATEGORIES, per_cat.tolist(), strict=True)),
            padded_tokens=int(self.t),
            lines=tuple(lines),
        )
