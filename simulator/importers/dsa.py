"""``glm_moe_dsa`` (GLM-5, GLM-5.1) and ``deepseek_v32``: MLA with DeepSeek sparse attention.

Every layer is MLA (``q_lora_rank`` / ``kv_lora_rank`` / nope / rope / v head dims) whose
attention reads only the ``index_topk`` cached tokens a lightning indexer picks
(``index_n_heads`` x ``index_head_dim``: q from the q latent, one key per token): the card's
``sparse_mla`` kind, with ``mla.indexer``. The MLP is DeepSeek-V3's: dense in the first
``first_k_dense_replace`` layers, then ``n_routed_experts`` routed (top ``num_experts_per_tok``)
+ ``n_shared_experts`` shared experts; ``num_nextn_predict_layers`` MTP modules.

GLM-5.2 / 5.3 (``indexer_types`` with ``shared`` layers that reuse another layer's top-k,
``index_topk_freq``) are refused: which layers keep their own indexer and cache is not
expressible on the card.
"""

from __future__ import annotations

from typing import Any

from simulator.importers.config_view import ConfigView
from simulator.importers.deepseek_parts import deepseek_moe_layers, layer_range, mla_fields
from simulator.specs.model import LayerKind, ModuleGroup

Config = ConfigView


# One Hugging Face module name per module group (quantization ignore lists); layer 0 stands
# for every layer of the group; None: not an nn.Linear (the embedding, the MoE gate weight).
GLM_MODULE_NAMES: dict[ModuleGroup, str | None] = {
    "embedding": None,
    "lm_head": "lm_head",
    "attention": "model.layers.0.self_attn.q_a_proj",
    "dense_mlp": "model.layers.0.mlp.gate_proj",
    "router": None,
    "shared_experts": "model.layers.3.mlp.shared_experts.gate_proj",
    "routed_experts": "model.layers.3.mlp.experts.0.gate_proj",
    # the MTP module is layer num_hidden_layers (78); its experts are most of its weights
    # (GLM-5-FP8 keeps eh_proj bf16 but its experts fp8)
    "mtp": "model.layers.78.mlp.experts.0.gate_proj",
}
DEEPSEEK_V32_MODULE_NAMES: dict[ModuleGroup, str | None] = {
    **GLM_MODULE_NAMES,
    "mtp": "model.layers.61.mlp.experts.0.gate_proj",
}


def _moe_layers(cfg: Config, count: int) -> list[int]:
    """1-based MoE layers: ``mlp_layer_types`` (GLM-5.1: "dense" / "sparse" per layer) when
    given, else DeepSeek-V3's rule (0-based i is MoE if i >= first_k_dense_replace and
    i % moe_layer_freq == 0)."""
    if cfg.has("mlp_layer_types"):
        types = cfg.str_list("mlp_layer_types")
        if len(types) != count or set(types) - {"dense", "sparse"}:
            raise cfg.error(
                "mlp_layer_types", f"expected {count} entries of 'dense' or 'sparse', got {types!r}"
            )
        return [i for i, t in enumerate(types, start=1) if t == "sparse"]
    return deepseek_moe_layers(cfg, count, cfg.integer("n_routed_experts"))


def _check_indexer_per_layer(cfg: Config) -> None:
    if cfg.has("indexer_types"):
        types = cfg.str_list("indexer_types")
        other = sorted(set(types) - {"full"})
        if other:
            raise cfg.error(
                "indexer_types",
                f"has {', '.join(map(repr, other))} layers (they reuse another layer's top-k"
                " and keep no indexer cache); only 'full' in every layer is supported",
            )
    if cfg.integer("index_topk_freq", 1) != 1:
        raise cfg.error(
            "index_topk_freq",
            f"is {cfg.get('index_topk_freq')}: an indexer in only some layers is not supported",
        )


def read_dsa(cfg: Config, notes: list[str]) -> dict[str, Any]:
    count = cfg.integer("num_hidden_layers")
    _check_indexer_per_layer(cfg)
    indexer = {
        "num_heads": cfg.integer("index_n_heads"),
        "head_dim": cfg.integer("index_head_dim"),
        "topk_tokens": cfg.integer("index_topk"),
    }
    mla = {**mla_fields(cfg), "indexer": indexer}
    moe_layers = _moe_layers(cfg, count)
    moe = None
    if moe_layers:
        moe = {
            "num_experts": cfg.integer("n_routed_experts"),
            "top_k": cfg.integer("num_experts_per_tok"),
            "expert_intermediate_size": cfg.integer("moe_intermediate_size"),
            "num_shared_experts": cfg.integer("n_shared_experts", 0),
        }
    mixers: dict[LayerKind, list[int]] = {"sparse_mla": layer_range(count)}
    dense = len(moe_layers) < count
    notes.append(
        f"sparse_mla in all {count} layers: MLA ({mla['num_heads']} heads, q_lora_rank"
        f" {mla['q_lora_rank']}, kv_lora_rank {mla['kv_lora_rank']}, nope"
        f" {mla['qk_nope_head_dim']}, rope {mla['qk_rope_head_dim']}, v {mla['v_head_dim']})"
        f" attending the top {indexer['topk_tokens']} tokens of a DSA indexer with"
        f" {indexer['num_heads']} heads x {indexer['head_dim']} (index_n_heads, index_head_dim,"
        " index_topk); num_key_value_heads, head_dim and qk_head_dim do not apply to MLA"
    )
    notes.append(
        f"MoE in layers {moe_layers[0] if moe_layers else '-'}..{count}"
        f" ({'mlp_layer_types' if cfg.has('mlp_layer_types') else 'first_k_dense_replace'}):"
        f" {cfg.get('n_routed_experts')} routed experts top-{cfg.get('num_experts_per_tok')}"
        f" + {cfg.get('n_shared_experts', 0)} shared, expert intermediate"
        f" {cfg.get('moe_intermediate_size')}; dense layers intermediate"
        f" {cfg.get('intermediate_size') if dense else '-'}. Not on the card: the"
        f" {cfg.get('scoring_func', '?')} router with routed_scaling_factor"
        f" {cfg.get('routed_scaling_factor', '?')} (n_group {cfg.get('n_group', '?')}, topk_group"
        f" {cfg.get('topk_group', '?')}), RoPE settings, indexer_rope_interleave"
    )
    return {
        "layers": {"count": count, "mixers": mixers, "moe_layers": moe_layers},
        "mla": mla,
        "dense_intermediate_size": cfg.integer("intermediate_size") if dense else None,
        "moe": moe,
        "mtp_layers": cfg.integer("num_nextn_predict_layers", 0),
    }
