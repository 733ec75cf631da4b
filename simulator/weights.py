"""Parameter counts per module group and their bytes per GPU under TP / EP.

Each layer's weights are split into what TP shards (divided by tp), what every rank keeps
whole (replicated), and routed experts (divided by ep with expert parallelism, else by tp on
the intermediate dimension). Norm weights, biases and per-head scalars (A_log, dt_bias,
attention sinks) are left out: they are below 0.01 % of any card here.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Literal

from simulator.sparse_attention import attention_params
from simulator.specs.model import (
    ATTENTION_KINDS,
    LINEAR_KINDS,
    SPARSE_KINDS,
    ModelCard,
    ModuleGroup,
)
from simulator.specs.precision import WeightPrecision, weight_bytes
from simulator.specs.serving import ServingConfig
from simulator.vision import vision_params_per_gpu


@dataclass(frozen=True)
class ParamSplit:
    """Parameters of one module group for one GPU, by how they are placed."""

    sharded: float = 0.0  # this GPU's shard of TP- or EP-split weights
    replicated: float = 0.0  # kept whole on every GPU

    @property
    def total(self) -> float:
        return self.sharded + self.replicated

    def __add__(self, other: ParamSplit) -> ParamSplit:
        return ParamSplit(self.sharded + other.sharded, self.replicated + other.replicated)

    def scaled(self, k: float) -> ParamSplit:
        return ParamSplit(self.sharded * k, self.replicated * k)


@dataclass(frozen=True)
class GroupWeights:
    group: ModuleGroup | Literal["vision"]  # vision: the card's tower (simulator/vision.py)
    precision: WeightPrecision
    params_per_gpu: float
    bytes_per_gpu: float
    replicated_bytes_per_gpu: float  # part of bytes_per_gpu that every rank holds whole


def _attention_layer(card: ModelCard, kind: str, tp: int) -> ParamSplit:
    d = card.hidden_size
    if kind in SPARSE_KINDS:  # the DSA indexer on top of MLA; DeepSeek-V4 attention
        base = _attention_layer(card, "mla", tp) if kind == "sparse_mla" else ParamSplit()
        return base + ParamSplit(*attention_params(card, kind, tp))
    if kind == "mla":
        m = card.mla
        assert m is not None
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        replicated = float(d * (m.kv_lora_rank + m.qk_rope_head_dim))  # kv_a_proj_with_mqa
        if m.q_lora_rank is not None:
            replicated += d * m.q_lora_rank  # q_a_proj
            sharded = float(m.q_lora_rank * m.num_heads * qk)  # q_b_proj
        else:
            sharded = float(d * m.num_heads * qk)  # q_proj
        sharded += m.kv_lora_rank * m.num_heads * (m.qk_nope_head_dim + m.v_head_dim)  # kv_b
        sharded += m.num_heads * m.v_head_dim * d  # o_proj
        if m.output_gate:
            sharded += d * m.num_heads * m.v_head_dim
        return ParamSplit(sharded / tp, replicated)
    g = card.gqa
    assert g is not None
    q_out = g.num_heads * g.head_dim * (2 if g.output_gate else 1)
    sharded = (d * q_out + g.num_heads * g.head_dim * d) / tp
    # KV heads are split by TP until there is one per rank, then replicated
    kv_heads_per_rank = max(g.num_kv_heads / tp, 1.0)
    return ParamSplit(sharded + 2 * d * kv_heads_per_rank * g.head_dim, 0.0)


def _linear_layer(card: ModelCard, tp: int) -> ParamSplit:
    la = card.linear_attention
    assert la is not None
    d = card.hidden_size
    hv_dk = la.num_v_heads * la.head_k_dim
    hv_dv = la.num_v_heads * la.head_v_dim
    sharded = d * la.conv_dim  # q, k, v projections
    sharded += la.conv_dim * la.conv_kernel_size  # short conv weights
    sharded += hv_dv * d  # o_proj
    replicated = 0.0
    if la.kind == "kda":
        sharded += d * la.num_v_heads  # beta
        if la.full_rank_gate:
            sharded += d * hv_dk + d * hv_dv  # decay gate f, output gate g
        else:
            replicated += d * la.head_k_dim + d * la.head_v_dim  # f_a, g_a (low rank)
            sharded += la.head_k_dim * hv_dk + la.head_v_dim * hv_dv  # f_b, g_b
    elif la.kind == "mamba2":  # in_proj also makes z (the gate, d_inner wide) and dt (heads)
        sharded += d * hv_dv + d * la.num_v_heads
    else:  # gdn: z (output gate) and the b, a projections
        sharded += d * hv_dv + d * 2 * la.num_v_heads
    return ParamSplit(sharded / tp, replicated)


def _moe_layer(
    card: ModelCard, tp: int, ep: int, redundant: int = 0, latent_split: bool = False
) -> dict[ModuleGroup, ParamSplit]:
    moe = card.moe
    assert moe is not None
    d = card.hidden_size
    d_routed = moe.routed_hidden_size or d
    mats = card.mlp_matrices  # gate, up, down (SwiGLU) or up, down (relu2)
    if ep > 1:  # (num_experts + EPLB's redundant copies) / ep whole experts per rank
        physical = moe.num_experts + redundant
        routed = physical * mats * d_routed * moe.expert_intermediate_size / ep
    else:  # every expert TP-sharded on its intermediate dimension
        routed = moe.num_experts * mats * d_routed * moe.expert_intermediate_size / tp
    out: dict[ModuleGroup, ParamSplit] = {
        "router": ParamSplit(0.0, d * moe.num_experts),
        "routed_experts": ParamSplit(routed, 0.0),
    }
    if moe.num_shared_experts:
        shared_i = moe.shared_intermediate_size or moe.expert_intermediate_size
        out["shared_experts"] = ParamSplit(moe.num_shared_experts * mats * d * shared_i / tp, 0.0)
    if moe.routed_hidden_size is not None:
        # hidden -> latent before the routed experts and latent -> hidden after: replicated
        # on every rank (the default), or split over the TP ranks on the latent dimension
        # (serving.latent_moe_projection "rank_split": 1/tp of both on each rank)
        latent = 2 * d * moe.routed_hidden_size
        out["moe_latent"] = (
            ParamSplit(latent / tp, 0.0) if latent_split else ParamSplit(0.0, latent)
        )
    return out


def _dense_mlp_layer(card: ModelCard, tp: int) -> ParamSplit:
    assert card.dense_intermediate_size is not None
    mats = card.mlp_matrices
    return ParamSplit(mats * card.hidden_size * card.dense_intermediate_size / tp, 0.0)


def params_per_gpu(
    card: ModelCard,
    tp: int = 1,
    ep: int = 1,
    mtp: bool = False,
    redundant_experts: int = 0,
    latent_split: bool = False,
) -> dict[ModuleGroup, ParamSplit]:
    """Parameters each GPU holds, by module group (tp=ep=1: the whole model).
    ``redundant_experts``: EPLB's extra physical experts per MoE layer (with ep > 1);
    ``latent_split``: latent-MoE projections split over the TP ranks."""
    moe_args = (tp, ep, redundant_experts, latent_split)
    groups: dict[ModuleGroup, ParamSplit] = defaultdict(ParamSplit)
    vocab = card.vocab_size * card.hidden_size / tp  # vocab-parallel embedding and lm_head
    groups["embedding"] = ParamSplit(vocab, 0.0)
    if not card.tie_word_embeddings:
        groups["lm_head"] = ParamSplit(vocab, 0.0)
    attention_cache: dict[str, ParamSplit] = {}
    layers = zip(card.layer_kinds, card.moe_layer_mask, card.mlp_free_mask, strict=True)
    for kind, is_moe, no_mlp in layers:
        if kind in LINEAR_KINDS:
            groups["linear_attention"] += _linear_layer(card, tp)
        elif kind != "none":  # none: an MLP-only block
            if kind not in attention_cache:
                attention_cache[kind] = _attention_layer(card, kind, tp)
            groups["attention"] += attention_cache[kind]
        if is_moe:
            for name, split in _moe_layer(card, *moe_args).items():
                groups[name] += split
        elif not no_mlp:
            groups["dense_mlp"] += _dense_mlp_layer(card, tp)
    if mtp and card.mtp_layers:
        groups["mtp"] = _mtp_params(card, moe_args).scaled(card.mtp_layers)
    return dict(groups)


def _mtp_params(card: ModelCard, moe_args: tuple[int, int, int, bool]) -> ParamSplit:
    """One MTP module: a full-attention decoder layer with the last layer's MLP + eh_proj."""
    tp = moe_args[0]
    full_kind = next(k for k in reversed(card.layer_kinds) if k in ATTENTION_KINDS)
    layer = _attention_layer(card, full_kind, tp)
    if card.moe_layer_mask[-1]:
        for split in _moe_layer(card, *moe_args).values():
            layer += split
    else:
        layer += _dense_mlp_layer(card, tp)
    eh_proj = ParamSplit(2 * card.hidden_size * card.hidden_size / tp, 0.0)
    return layer + eh_proj


def total_params(card: ModelCard, mtp: bool = False) -> float:
    return sum(s.total for s in params_per_gpu(card, mtp=mtp).values())


def precision_of(card: ModelCard, serving: ServingConfig, group: ModuleGroup) -> WeightPrecision:
    return serving.weight_precision.get(group) or card.weight_precision.get(group, "bf16")


def weights_per_gpu(card: ModelCard, serving: ServingConfig) -> list[GroupWeights]:
    """Bytes each GPU holds per module group, at the serving (or the card's) precision."""
    use_mtp = serving.speculative is not None and serving.speculative.method == "mtp"
    out = []
    split_latent = serving.latent_moe_projection == "rank_split"
    per_gpu = params_per_gpu(
        card, serving.tp, serving.ep, use_mtp, serving.eplb_redundant_experts, split_latent
    )
    for group, split in per_gpu.items():
        precision = precision_of(card, serving, group)
        out.append(
            GroupWeights(
                group=group,
                precision=precision,
                params_per_gpu=split.total,
                bytes_per_gpu=weight_bytes(split.total, precision),
                replicated_bytes_per_gpu=weight_bytes(split.replicated, precision),
            )
        )
    if card.vision is not None:  # loaded for every deployment, text-only traffic included
        params, replicated = vision_params_per_gpu(card, serving)
        precision = card.vision.precision
        out.append(
            GroupWeights(
                group="vision",
                precision=precision,
                params_per_gpu=params,
                bytes_per_gpu=weight_bytes(params, precision),
                replicated_bytes_per_gpu=weight_bytes(replicated, precision),
            )
        )
    return out
