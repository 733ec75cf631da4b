"""The family readers of ``simulator/model_import.py``: one function per architecture family
that turns a config.json (``ConfigView``) into the card fields of its layers, attention,
linear attention and MoE. The newer families live in their own modules beside this one
(registered with these in ``simulator/model_import.py``); the DeepSeek-style helpers they
share are in ``deepseek_parts.py``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from simulator.importers.config_view import ConfigView
from simulator.importers.deepseek_parts import deepseek_moe_layers, layer_range, mla_fields
from simulator.specs.model import LayerKind, QKNorm
from simulator.specs.precision import StateDtype

_STATE_DTYPES: dict[str, StateDtype] = {"float32": "fp32", "bfloat16": "bf16"}


def _dense_size(cfg: ConfigView, moe_layers: list[int], count: int, key: str) -> int | None:
    return cfg.integer(key) if len(moe_layers) < count else None


def _read_kimi_linear(cfg: ConfigView, notes: list[str]) -> dict[str, Any]:
    count = cfg.integer("num_hidden_layers")
    mixers: dict[LayerKind, list[int]]
    linear: dict[str, Any] | None = None
    if cfg.has("linear_attn_config"):
        lin = cfg.sub("linear_attn_config")
        kda = lin.int_list("kda_layers") if lin.has("kda_layers") else None
        full = lin.int_list("full_attn_layers") if lin.has("full_attn_layers") else None
        if kda is None and full is None:
            raise lin.error("kda_layers", "missing required key 'kda_layers' (or full_attn_layers)")
        if kda is None:
            kda = [i for i in layer_range(count) if i not in set(full or [])]
        if full is None:
            full = [i for i in layer_range(count) if i not in set(kda)]
        mixers = {"kda": kda, "mla": full}
        heads = lin.integer("num_heads")
        head_dim = lin.integer("head_dim")
        linear = {
            "kind": "kda",
            "num_k_heads": heads,
            "num_v_heads": heads,
            "head_k_dim": head_dim,
            "head_v_dim": head_dim,
            "conv_kernel_size": lin.integer("short_conv_kernel_size"),
            "state_dtype": "fp32",
            "full_rank_gate": lin.boolean("use_full_rank_gate", False),
        }
        notes.append(
            "KDA state_dtype fp32: vLLM default (mamba_ssm_cache_dtype auto -> fp32);"
            " the config does not set it"
        )
    else:
        mixers = {"mla": layer_range(count)}
        notes.append("linear_attn_config is null: every layer is MLA")
    if cfg.boolean("mla_use_nope", False):
        notes.append(
            "mla_use_nope: MLA layers apply no rotary embedding"
            " (the qk_rope_head_dim slot is still cached)"
        )
    num_experts = cfg.optional_int("num_experts")
    moe_layers = deepseek_moe_layers(cfg, count, num_experts)
    moe: dict[str, Any] | None = None
    if moe_layers:
        moe = {
            "num_experts": num_experts,
            "top_k": cfg.integer("num_experts_per_token"),
            "expert_intermediate_size": cfg.integer("moe_intermediate_size"),
            "num_shared_experts": cfg.integer("num_shared_experts", 0),
            "routed_hidden_size": cfg.optional_int("routed_expert_hidden_size"),
        }
    return {
        "layers": {"count": count, "mixers": mixers, "moe_layers": moe_layers},
        "mla": mla_fields(cfg) if mixers.get("mla") else None,
        "linear_attention": linear,
        "dense_intermediate_size": _dense_size(cfg, moe_layers, count, "intermediate_size"),
        "moe": moe,
        "mtp_layers": cfg.integer("num_nextn_predict_layers", 0),
    }


def _read_deepseek(cfg: ConfigView, notes: list[str]) -> dict[str, Any]:
    count = cfg.integer("num_hidden_layers")
    num_experts = cfg.optional_int("n_routed_experts")
    moe_layers = deepseek_moe_layers(cfg, count, num_experts)
    moe: dict[str, Any] | None = None
    if moe_layers:
        moe = {
            "num_experts": num_experts,
            "top_k": cfg.integer("num_experts_per_tok"),
            "expert_intermediate_size": cfg.integer("moe_intermediate_size"),
            "num_shared_experts": cfg.integer("n_shared_experts", 0),
        }
    return {
        "layers": {
            "count": count,
            "mixers": {"mla": layer_range(count)},
            "moe_layers": moe_layers,
        },
        "mla": mla_fields(cfg),
        "dense_intermediate_size": _dense_size(cfg, moe_layers, count, "intermediate_size"),
        "moe": moe,
        "mtp_layers": cfg.integer("num_nextn_predict_layers", 0),
    }


def _layer_kinds(cfg: ConfigView, kinds: Mapping[str, LayerKind]) -> dict[LayerKind, list[int]]:
    """``layer_types`` (one entry per layer, 0-based) as 1-based lists per kind."""
    types = cfg.str_list("layer_types")
    count = cfg.integer("num_hidden_layers")
    if len(types) != count:
        raise cfg.error("layer_types", f"has {len(types)} entries for {count} layers")
    mixers: dict[LayerKind, list[int]] = {}
    for i, t in enumerate(types, start=1):
        if t not in kinds:
            raise cfg.error("layer_types", f"unknown layer type {t!r}; known: {', '.join(kinds)}")
        mixers.setdefault(kinds[t], []).append(i)
    return mixers


def _gqa(cfg: ConfigView, output_gate: bool, qk_norm: QKNorm = "none") -> dict[str, Any]:
    heads = cfg.integer("num_attention_heads", minimum=1)
    hidden = cfg.integer("hidden_size", minimum=1)
    out: dict[str, Any] = {
        "num_heads": heads,
        "num_kv_heads": cfg.integer("num_key_value_heads", heads, minimum=1),
        "head_dim": cfg.integer("head_dim", hidden // heads, minimum=1),
        "output_gate": output_gate,
    }
    if qk_norm != "none":
        out["qk_norm"] = qk_norm
    return out


def _qwen_moe_layers(cfg: ConfigView, count: int) -> tuple[int, list[int]]:
    """``num_experts`` and the MoE layers (``layer_range`` numbering) by the Qwen3-MoE rule:
    0-based layer i is sparse if i is not in ``mlp_only_layers`` and (i+1) % step == 0."""
    num_experts = cfg.integer("num_experts", 0)
    step = cfg.integer("decoder_sparse_step", 1, minimum=1)
    mlp_only = set(cfg.int_list("mlp_only_layers")) if cfg.has("mlp_only_layers") else set()
    moe_layers = [
        i for i in layer_range(count) if num_experts and i - 1 not in mlp_only and i % step == 0
    ]
    return num_experts, moe_layers


def _read_qwen(cfg: ConfigView, notes: list[str]) -> dict[str, Any]:
    count = cfg.integer("num_hidden_layers")
    if cfg.has("layer_types"):
        mixers = _layer_kinds(cfg, {"full_attention": "gqa", "linear_attention": "gdn"})
    else:
        interval = cfg.integer("full_attention_interval", 4, minimum=1)
        full = [i for i in layer_range(count) if i % interval == 0]
        mixers = {"gdn": [i for i in layer_range(count) if i % interval], "gqa": full}
        notes.append(f"no layer_types: every {interval}th layer is full attention")
    ssm_dtype = cfg.get("mamba_ssm_dtype", "float32")
    if ssm_dtype not in _STATE_DTYPES:
        raise cfg.error("mamba_ssm_dtype", f"unsupported state dtype {ssm_dtype!r}")
    k_heads, v_heads = cfg.integer("linear_num_key_heads"), cfg.integer("linear_num_value_heads")
    if v_heads % k_heads:  # each key head serves a group of value heads (vLLM's GDN layer)
        raise cfg.error(
            "linear_num_value_heads", f"{v_heads} is not a multiple of linear_num_key_heads"
            f" {k_heads}",
        )  # fmt: skip
    linear = {
        "kind": "gdn",
        "num_k_heads": k_heads,
        "num_v_heads": v_heads,
        "head_k_dim": cfg.integer("linear_key_head_dim"),
        "head_v_dim": cfg.integer("linear_value_head_dim"),
        "conv_kernel_size": cfg.integer("linear_conv_kernel_dim"),
        "state_dtype": _STATE_DTYPES[ssm_dtype],
    }
    if not cfg.has("attn_output_gate"):
        notes.append("attn_output_gate absent: Qwen3-Next full attention is always gated")
    num_experts, moe_layers = _qwen_moe_layers(cfg, count)
    moe: dict[str, Any] | None = None
    if moe_layers:
        shared = cfg.integer("shared_expert_intermediate_size", 0)
        moe = {
            "num_experts": num_experts,
            "top_k": cfg.integer("num_experts_per_tok"),
            "expert_intermediate_size": cfg.integer("moe_intermediate_size"),
            "num_shared_experts": 1 if shared else 0,
            "shared_intermediate_size": shared or None,
        }
    mtp = cfg.optional_int("mtp_num_hidden_layers")
    return {
        "layers": {"count": count, "mixers": mixers, "moe_layers": moe_layers},
        "gqa": _gqa(cfg, cfg.boolean("attn_output_gate", True), "per_head"),  # q_norm, k_norm
        "linear_attention": linear,
        "dense_intermediate_size": _dense_size(cfg, moe_layers, count, "intermediate_size"),
        "moe": moe,
        "mtp_layers": mtp if mtp is not None else cfg.integer("num_nextn_predict_layers", 0),
    }


def _read_qwen3(cfg: ConfigView, notes: list[str]) -> dict[str, Any]:
    """Qwen3 (dense) and Qwen3-MoE: GQA in every layer, q/k RMSNorm per head; MoE layers by
    the Qwen3-MoE rule, no shared expert."""
    count = cfg.integer("num_hidden_layers")
    if cfg.boolean("use_sliding_window", False):
        raise cfg.error("use_sliding_window", "sliding-window Qwen3 layers are not supported")
    num_experts, moe_layers = _qwen_moe_layers(cfg, count)
    moe: dict[str, Any] | None = None
    if moe_layers:
        if cfg.integer("shared_expert_intermediate_size", 0):
            raise cfg.error(
                "shared_expert_intermediate_size", "qwen3_moe has no shared expert; got one"
            )
        moe = {
            "num_experts": num_experts,
            "top_k": cfg.integer("num_experts_per_tok"),
            "expert_intermediate_size": cfg.integer("moe_intermediate_size"),
            "num_shared_experts": 0,
        }
    notes.append(
        "q_norm / k_norm (RMSNorm of each query and key head): qk_norm per_head, priced as"
        " elementwise lines; their head_dim weights are not counted (a negligible share)"
    )
    return {
        "layers": {
            "count": count,
            "mixers": {"gqa": layer_range(count)},
            "moe_layers": moe_layers,
        },
        "gqa": _gqa(cfg, False, "per_head"),
        "dense_intermediate_size": _dense_size(cfg, moe_layers, count, "intermediate_size"),
        "moe": moe,
    }


def _read_llama(cfg: ConfigView, notes: list[str]) -> dict[str, Any]:
    count = cfg.integer("num_hidden_layers")
    return {
        "layers": {"count": count, "mixers": {"gqa": layer_range(count)}},
        "gqa": _gqa(cfg, False),
        "dense_intermediate_size": cfg.integer("intermediate_size"),
    }


def _read_gpt_oss(cfg: ConfigView, notes: list[str]) -> dict[str, Any]:
    count = cfg.integer("num_hidden_layers")
    if cfg.has("layer_types"):
        mixers = _layer_kinds(cfg, {"sliding_attention": "swa", "full_attention": "gqa"})
    else:
        mixers = {"swa": layer_range(count)[0::2], "gqa": layer_range(count)[1::2]}
        notes.append("no layer_types: sliding and full attention alternate, sliding first")
    gqa = _gqa(cfg, False)
    if mixers.get("swa"):
        gqa["sliding_window_tokens"] = cfg.integer("sliding_window")
    notes.append(
        "attention sinks (one learned logit per head) and attention biases are not on the card"
    )
    top_k = cfg.first_int("num_experts_per_tok", "experts_per_token")
    return {
        "layers": {"count": count, "mixers": mixers, "moe_layers": layer_range(count)},
        "gqa": gqa,
        "moe": {
            "num_experts": cfg.integer("num_local_experts"),
            "top_k": top_k,
            "expert_intermediate_size": cfg.integer("intermediate_size"),
            "num_shared_experts": 0,
        },
    }


def _per_layer_flags(cfg: ConfigView, key: str, count: int) -> list[int]:
    """A 0/1 list with one entry per layer (0-based) as the 1-based layers flagged 1."""
    flags = cfg.int_list(key)
    if len(flags) != count:
        raise cfg.error(key, f"has {len(flags)} entries for {count} layers")
    return [i for i, f in enumerate(flags, start=1) if f]


def _read_minimax_m2(cfg: ConfigView, notes: list[str]) -> dict[str, Any]:
    """MiniMax-M2 / M2.5: full GQA in every layer (q/k RMSNorm over all heads, partial RoPE),
    MoE in every layer (``intermediate_size`` is the expert width), no shared expert."""
    count = cfg.integer("num_hidden_layers")
    if cfg.has("attn_type_list"):
        types = cfg.int_list("attn_type_list")
        if len(types) != count:
            raise cfg.error("attn_type_list", f"has {len(types)} entries for {count} layers")
        if any(t != 1 for t in types):
            raise cfg.error(
                "attn_type_list", "only full softmax attention (1) in every layer is supported"
            )
    if cfg.integer("shared_intermediate_size", 0):
        raise cfg.error("shared_intermediate_size", "minimax_m2 shared experts are not supported")
    notes.append(
        f"q/k RMSNorm (qk_norm_type {cfg.get('qk_norm_type', 'per_layer')}; vLLM's minimax_m2"
        " normalizes over all heads whatever it says): qk_norm across_heads, TP ranks"
        " all-reduce its variances once a layer; partial RoPE (rotary_dim"
        f" {cfg.get('rotary_dim', '?')} of head_dim) is priced as full RoPE"
    )
    if cfg.boolean("use_mtp", False):
        notes.append(
            f"use_mtp with num_mtp_modules {cfg.get('num_mtp_modules', '?')}: mtp_layers follows"
            f" num_nextn_predict_layers ({cfg.get('num_nextn_predict_layers', 0)}); the MTP"
            " modules are not counted (served here without speculative decoding)"
        )
    return {
        "layers": {
            "count": count,
            "mixers": {"gqa": layer_range(count)},
            "moe_layers": layer_range(count),
        },
        "gqa": _gqa(cfg, False, "across_heads"),
        "moe": {
            "num_experts": cfg.integer("num_local_experts"),
            "top_k": cfg.integer("num_experts_per_tok"),
            "expert_intermediate_size": cfg.integer("intermediate_size"),
            "num_shared_experts": 0,
        },
        "mtp_layers": cfg.integer("num_nextn_predict_layers", 0),
    }


def _read_minimax_m3(cfg: ConfigView, notes: list[str]) -> dict[str, Any]:
    count = cfg.integer("num_hidden_layers")
    qk_norm: QKNorm = "none"
    if cfg.boolean("use_qk_norm", False):  # qk_norm_type per_head, or per_layer as in M2
        per_head = cfg.get("qk_norm_type", "per_layer") == "per_head"
        qk_norm = "per_head" if per_head else "across_heads"
    gqa = _gqa(cfg, cfg.boolean("attention_output_gate", False), qk_norm)
    mixers: dict[LayerKind, list[int]] = {"gqa": layer_range(count)}
    if cfg.has("sparse_attention_config"):
        sparse_cfg = cfg.sub("sparse_attention_config")
        if sparse_cfg.boolean("use_sparse_attention", True):
            sparse = _per_layer_flags(sparse_cfg, "sparse_attention_freq", count)
            mixers = {
                "gqa": [i for i in layer_range(count) if i not in sparse],
                "sparse_gqa": sparse,
            }
            gqa |= {
                "sparse_block_tokens": sparse_cfg.integer("sparse_block_size"),
                "sparse_topk_blocks": sparse_cfg.integer("sparse_topk_blocks"),
                "index_num_heads": sparse_cfg.integer("sparse_num_index_heads"),
                "index_head_dim": sparse_cfg.integer("sparse_index_dim"),
            }
            extra = {
                k: sparse_cfg.get(k)
                for k in ("sparse_init_block", "sparse_local_block", "sparse_score_type")
                if sparse_cfg.has(k)
            }
            notes.append(
                "sparse attention settings not on the card: "
                + ", ".join(f"{k}={v}" for k, v in extra.items())
                + "; sparse_disable_index_value per-layer list ignored"
            )
    freq = cfg.get("moe_layer_freq", 1)
    if isinstance(freq, list):
        moe_layers = _per_layer_flags(cfg, "moe_layer_freq", count)
    else:
        moe_layers = deepseek_moe_layers(cfg, count, cfg.integer("num_local_experts"))
    shared = cfg.integer("n_shared_experts", 0)
    moe = {
        "num_experts": cfg.integer("num_local_experts"),
        "top_k": cfg.integer("num_experts_per_tok"),
        "expert_intermediate_size": cfg.integer("moe_intermediate_size"),
        "num_shared_experts": shared,
        "shared_intermediate_size": cfg.optional_int("shared_intermediate_size")
        if shared
        else None,
    }
    if cfg.has("num_mtp_modules"):
        notes.append(
            f"num_mtp_modules is {cfg.get('num_mtp_modules')} while num_nextn_predict_layers is"
            f" {cfg.get('num_nextn_predict_layers', 0)}; mtp_layers follows"
            " num_nextn_predict_layers (if the checkpoint stores all MTP modules,"
            " their weights are undercounted)"
        )
    return {
        "layers": {"count": count, "mixers": mixers, "moe_layers": moe_layers},
        "gqa": gqa,
        "dense_intermediate_size": _dense_size(cfg, moe_layers, count, "dense_intermediate_size"),
        "moe": moe if moe_layers else None,
        "mtp_layers": cfg.integer("num_nextn_predict_layers", 0),
    }


READERS: dict[str, Callable[[ConfigView, list[str]], dict[str, Any]]] = {
    "kimi_linear": _read_kimi_linear,
    "deepseek": _read_deepseek,
    "qwen": _read_qwen,
    "llama": _read_llama,
    "qwen3": _read_qwen3,
    "gpt_oss": _read_gpt_oss,
    "minimax_m2": _read_minimax_m2,
    "minimax_m3": _read_minimax_m3,
}
