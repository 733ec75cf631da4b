"""Build a ModelCard from a Hugging Face ``config.json`` and write cards back as YAML.

Families read (``model_type``):
  kimi_k3, kimi_linear       Kimi Linear: KDA + MLA hybrid, (latent) MoE; K3 under ``text_config``
  deepseek_v3, kimi_k2       DeepSeek-V3 architecture: MLA everywhere, MoE after the dense layers
  kimi_k25                   Kimi-K2.5: the DeepSeek-V3 / Kimi-K2 text model under ``text_config``
  qwen3_5_moe, qwen3_next    gated-DeltaNet + gated GQA hybrid, MoE with one shared expert
  qwen3, qwen3_moe           GQA with q/k RMSNorm; dense MLP (qwen3) or MoE without a shared
                             expert (qwen3_moe)
  llama                      dense GQA
  gpt_oss                    alternating sliding-window / full GQA, MoE, MXFP4 experts
  minimax_m2                 GQA with q/k RMSNorm and partial RoPE, MoE in every layer, no
                             shared expert
  minimax_m3                 GQA + block-sparse GQA (indexer), MoE with a shared expert
  nemotron_h                 Mamba2 / attention / (latent) MoE / MLP blocks, non-gated relu2
                             MLPs (simulator/importers/nemotron_h.py)
  glm_moe_dsa, deepseek_v32  MLA + DSA indexer (sparse_mla) in every layer, DeepSeek-V3 MoE
                             (simulator/importers/dsa.py)
  deepseek_v4                compressed sparse / heavily compressed / sliding-window MQA per
                             compress_ratios, MoE everywhere (simulator/importers/deepseek_v4.py)

ModelOpt checkpoints (``quant_method: modelopt``, or a ``hf_quant_config.json`` beside the
config) are read by ``simulator/importers/modelopt_quant.py``.

Layer numbers on the card are 1-based; configs that give per-layer lists (``layer_types``,
``moe_layer_freq`` lists, ``sparse_attention_freq``) or 0-based indices (``mlp_only_layers``)
are converted here. Weight precisions follow ``quantization_config`` (none: the config dtype).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from simulator.importers import deepseek_v4, dsa, modelopt_quant, nemotron_h
from simulator.specs.loading import SpecError, parse, read_text
from simulator.specs.model import MODULE_GROUPS, LayerKind, ModelCard, ModuleGroup
from simulator.specs.precision import StateDtype, WeightPrecision

# model_type -> family reader (kimi_k3, kimi_k25 and qwen3_5_moe keep the text model under
# text_config)
_FAMILY_OF: dict[str, str] = {
    "kimi_k3": "kimi_linear",
    "kimi_linear": "kimi_linear",
    "deepseek_v3": "deepseek",
    "kimi_k2": "deepseek",
    "kimi_k25": "deepseek",
    "qwen3_5_moe": "qwen",
    "qwen3_5_moe_text": "qwen",
    "qwen3_next": "qwen",
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3",
    "llama": "llama",
    "gpt_oss": "gpt_oss",
    "minimax_m2": "minimax_m2",
    "minimax_m3": "minimax_m3",
    "nemotron_h": "nemotron_h",
    "glm_moe_dsa": "glm_dsa",
    "deepseek_v32": "deepseek_v32",
    "deepseek_v4": "deepseek_v4",
}
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(_FAMILY_OF)

# One representative Hugging Face module name per module group, to test against a
# quantization config's ignore lists; None = the weights are not an nn.Linear (embeddings,
# DeepSeek/Kimi MoEGate parameter), which "Linear"-targeted quantization never touches.
_MODULE_NAMES: dict[str, dict[ModuleGroup, str | None]] = {
    "deepseek": {
        "embedding": None,
        "lm_head": "lm_head",
        "attention": "model.layers.0.self_attn.q_a_proj",
        "dense_mlp": "model.layers.0.mlp.gate_proj",
        "router": None,
        "shared_experts": "model.layers.3.mlp.shared_experts.gate_proj",
        "routed_experts": "model.layers.3.mlp.experts.0.gate_proj",
        "mtp": "model.layers.61.eh_proj",
    },
    "kimi_linear": {
        "embedding": None,
        "lm_head": "lm_head",
        "attention": "model.layers.3.self_attn.kv_a_proj_with_mqa",
        # KDA layers are also called self_attn in the Kimi Linear modeling code
        "linear_attention": "model.layers.0.self_attn.f_a_proj",
        "dense_mlp": "model.layers.0.mlp.gate_proj",
        "router": None,
        "shared_experts": "model.layers.1.block_sparse_moe.shared_experts.gate_proj",
        "routed_experts": "model.layers.1.block_sparse_moe.experts.0.w1",
        "moe_latent": "model.layers.1.block_sparse_moe.routed_expert_down_proj",
        "mtp": "model.mtp.0.eh_proj",
    },
    "qwen": {
        "embedding": None,
        "lm_head": "lm_head",
        "attention": "model.layers.3.self_attn.q_proj",
        "linear_attention": "model.layers.0.linear_attn.in_proj_qkvz",
        "dense_mlp": "model.layers.0.mlp.gate_proj",
        "router": "model.layers.0.mlp.gate",
        "shared_experts": "model.layers.0.mlp.shared_expert.gate_proj",
        "routed_experts": "model.layers.0.mlp.experts.0.gate_proj",
        "mtp": "mtp.layers.0.self_attn.q_proj",
    },
    "qwen3": {
        "embedding": None,
        "lm_head": "lm_head",
        "attention": "model.layers.0.self_attn.q_proj",
        "dense_mlp": "model.layers.0.mlp.gate_proj",
        "router": "model.layers.0.mlp.gate",
        "routed_experts": "model.layers.0.mlp.experts.0.gate_proj",
    },
    "llama": {
        "embedding": None,
        "lm_head": "lm_head",
        "attention": "model.layers.0.self_attn.q_proj",
        "dense_mlp": "model.layers.0.mlp.gate_proj",
    },
    "gpt_oss": {
        "embedding": None,
        "lm_head": "lm_head",
        "attention": "model.layers.0.self_attn.q_proj",
        "router": "model.layers.0.mlp.router",
        "routed_experts": "model.layers.0.mlp.experts",
    },
    "minimax_m2": {
        "embedding": None,
        "lm_head": "lm_head",
        "attention": "model.layers.0.self_attn.q_proj",
        "router": "model.layers.0.block_sparse_moe.gate",
        "routed_experts": "model.layers.0.block_sparse_moe.experts.0.w1",
    },
    "minimax_m3": {
        "embedding": None,
        "lm_head": "lm_head",
        "attention": "model.layers.0.self_attn.q_proj",
        "dense_mlp": "model.layers.0.mlp.gate_proj",
        "router": "model.layers.3.block_sparse_moe.gate",
        "shared_experts": "model.layers.3.block_sparse_moe.shared_experts.gate_proj",
        "routed_experts": "model.layers.3.block_sparse_moe.experts.0.w1",
        "mtp": "model.mtp_layers.0.self_attn.q_proj",
    },
    "nemotron_h": nemotron_h.MODULE_NAMES,
    "glm_dsa": dsa.GLM_MODULE_NAMES,
    "deepseek_v32": dsa.DEEPSEEK_V32_MODULE_NAMES,
    "deepseek_v4": deepseek_v4.MODULE_NAMES,
}

_DTYPES: dict[str, WeightPrecision] = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
_STATE_DTYPES: dict[str, StateDtype] = {"float32": "fp32", "bfloat16": "bf16"}


class _Config:
    """A config.json mapping whose accessors name the missing or bad key in the SpecError."""

    def __init__(self, data: Mapping[str, Any], source: str, prefix: str = "") -> None:
        self.data = data
        self.source = source
        self.prefix = prefix

    def field(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def error(self, key: str, reason: str) -> SpecError:
        return SpecError(self.source, self.field(key), reason)

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def get(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key)
        return default if value is None else value

    def require(self, key: str) -> Any:
        if key not in self.data:
            raise self.error(key, f"missing required key {key!r}")
        if self.data[key] is None:
            raise self.error(key, "is null")
        return self.data[key]

    def integer(self, key: str, default: int | None = None) -> int:
        if default is not None and self.data.get(key) is None:
            return default
        value = self.require(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"expected an integer, got {value!r}")
        return value

    def first_int(self, *keys: str) -> int:
        """The first of several alias keys that is present (e.g. n_routed_experts / num_experts)."""
        for key in keys:
            if self.has(key):
                return self.integer(key)
        raise self.error(keys[0], f"missing required key {keys[0]!r} (or {', '.join(keys[1:])})")

    def optional_int(self, key: str) -> int | None:
        return self.integer(key) if self.has(key) else None

    def boolean(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {value!r}")
        return value

    def int_list(self, key: str) -> list[int]:
        value = self.require(key)
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise self.error(key, f"expected a list of integers, got {value!r}")
        return list(value)

    def str_list(self, key: str) -> list[str]:
        value = self.require(key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, f"expected a list of strings, got {value!r}")
        return list(value)

    def sub(self, key: str) -> _Config:
        value = self.require(key)
        if not isinstance(value, dict):
            raise self.error(key, f"expected a mapping, got {type(value).__name__}")
        return _Config(value, self.source, f"{self.field(key)}.")


def load_hf_config(path: str | Path) -> dict[str, Any]:
    """Read a Hugging Face config.json; any failure is a SpecError on ``(file)``."""
    p = Path(path)
    text = read_text(p)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(p, "(file)", f"invalid JSON: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise SpecError(p, "(file)", f"expected a JSON object, got {type(data).__name__}")
    return modelopt_quant.attach_sidecar(p, data)  # a ModelOpt hf_quant_config.json beside it


def import_hf_config(config: dict[str, Any], name: str, source: str) -> ModelCard:
    """The model card a Hugging Face config.json describes.

    ``source`` names the config (a path) in errors and on the card. ``hf_id`` comes from a
    ``<org>--<model>_config.json`` file name or ``_name_or_path``; ``published`` is left empty.
    """
    top = _Config(config, source)
    model_type = top.require("model_type")
    if not isinstance(model_type, str) or model_type not in _FAMILY_OF:
        raise top.error(
            "model_type",
            f"unsupported model_type {model_type!r}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}",
        )
    family = _FAMILY_OF[model_type]
    text = top.sub("text_config") if "text_config" in config else top
    notes: list[str] = []
    if text is not top:
        notes.append(
            f"text model read from text_config (model_type {text.get('model_type', '?')!r});"
            " vision tower and projector not counted"
        )

    data: dict[str, Any] = {
        "name": name,
        "hf_id": _hf_id(config, source),
        "source": source,
        "model_type": model_type,
        "hidden_size": text.integer("hidden_size"),
        "vocab_size": text.integer("vocab_size"),
        "tie_word_embeddings": text.get(
            "tie_word_embeddings", top.get("tie_word_embeddings", False)
        ),
        "max_context_tokens": text.integer("max_position_embeddings"),
    }
    data |= _READERS[family](text, notes)
    # a family's own precision reading (deepseek_v4 experts), applied after the generic one
    overrides: dict[ModuleGroup, WeightPrecision] = data.pop("weight_precision", {})
    data["layers"]["mixers"] = {k: v for k, v in data["layers"]["mixers"].items() if v}
    # Which module groups exist follows from the architecture: validate once with a
    # placeholder precision table, then fill in the real one for exactly those groups.
    draft = parse(
        ModelCard, {**data, "weight_precision": dict.fromkeys(MODULE_GROUPS, "bf16")}, source
    )
    groups = draft.required_groups()
    if draft.mtp_layers > 0:
        groups.append("mtp")
    quant_cfg = text.get("quantization_config", top.get("quantization_config"))
    quant_owner = text if text.has("quantization_config") else top
    if isinstance(quant_cfg, dict) and quant_cfg.get("quant_method") == "modelopt":
        data["weight_precision"] = modelopt_quant.read_modelopt(
            draft, groups, quant_owner.sub("quantization_config"), _MODULE_NAMES[family],
            _base_dtype(text, top), notes,
        )  # fmt: skip
    else:
        data["weight_precision"] = _precisions(
            family, groups, quant_owner, quant_cfg, _base_dtype(text, top), notes
        )
    data["weight_precision"] |= {g: p for g, p in overrides.items() if g in groups}
    data["notes"] = notes
    return parse(ModelCard, data, source)


# --- families ------------------------------------------------------------------------------


def _layer_range(count: int) -> list[int]:
    return list(range(1, count + 1))


def _deepseek_moe_layers(cfg: _Config, count: int, num_experts: int | None) -> list[int]:
    """HF DeepseekV3/KimiLinear rule: 0-based layer i is MoE if i >= first_k_dense_replace and
    i % moe_layer_freq == 0."""
    if not num_experts:
        return []
    first_dense = cfg.integer("first_k_dense_replace", 0)
    freq = cfg.integer("moe_layer_freq", 1)
    return [i for i in _layer_range(count) if i - 1 >= first_dense and (i - 1) % freq == 0]


def _mla(cfg: _Config) -> dict[str, Any]:
    return {
        "num_heads": cfg.integer("num_attention_heads"),
        "q_lora_rank": cfg.optional_int("q_lora_rank"),
        "kv_lora_rank": cfg.integer("kv_lora_rank"),
        "qk_nope_head_dim": cfg.integer("qk_nope_head_dim"),
        "qk_rope_head_dim": cfg.integer("qk_rope_head_dim"),
        "v_head_dim": cfg.integer("v_head_dim"),
        "output_gate": cfg.boolean("mla_use_output_gate", False),
    }


def _dense_size(cfg: _Config, moe_layers: list[int], count: int, key: str) -> int | None:
    return cfg.integer(key) if len(moe_layers) < count else None


def _read_kimi_linear(cfg: _Config, notes: list[str]) -> dict[str, Any]:
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
            kda = [i for i in _layer_range(count) if i not in set(full or [])]
        if full is None:
            full = [i for i in _layer_range(count) if i not in set(kda)]
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
        mixers = {"mla": _layer_range(count)}
        notes.append("linear_attn_config is null: every layer is MLA")
    if cfg.boolean("mla_use_nope", False):
        notes.append(
            "mla_use_nope: MLA layers apply no rotary embedding"
            " (the qk_rope_head_dim slot is still cached)"
        )
    num_experts = cfg.optional_int("num_experts")
    moe_layers = _deepseek_moe_layers(cfg, count, num_experts)
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
        "mla": _mla(cfg) if mixers.get("mla") else None,
        "linear_attention": linear,
        "dense_intermediate_size": _dense_size(cfg, moe_layers, count, "intermediate_size"),
        "moe": moe,
        "mtp_layers": cfg.integer("num_nextn_predict_layers", 0),
    }


def _read_deepseek(cfg: _Config, notes: list[str]) -> dict[str, Any]:
    count = cfg.integer("num_hidden_layers")
    num_experts = cfg.optional_int("n_routed_experts")
    moe_layers = _deepseek_moe_layers(cfg, count, num_experts)
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
            "mixers": {"mla": _layer_range(count)},
            "moe_layers": moe_layers,
        },
        "mla": _mla(cfg),
        "dense_intermediate_size": _dense_size(cfg, moe_layers, count, "intermediate_size"),
        "moe": moe,
        "mtp_layers": cfg.integer("num_nextn_predict_layers", 0),
    }


def _layer_kinds(cfg: _Config, kinds: Mapping[str, LayerKind]) -> dict[LayerKind, list[int]]:
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


def _gqa(cfg: _Config, output_gate: bool) -> dict[str, Any]:
    heads = cfg.integer("num_attention_heads")
    hidden = cfg.integer("hidden_size")
    return {
        "num_heads": heads,
        "num_kv_heads": cfg.integer("num_key_value_heads", heads),
        "head_dim": cfg.integer("head_dim", hidden // heads),
        "output_gate": output_gate,
    }


def _qwen_moe_layers(cfg: _Config, count: int) -> tuple[int, list[int]]:
    """``num_experts`` and the MoE layers (``_layer_range`` numbering) by the Qwen3-MoE rule:
    0-based layer i is sparse if i is not in ``mlp_only_layers`` and (i+1) % step == 0."""
    num_experts = cfg.integer("num_experts", 0)
    step = cfg.integer("decoder_sparse_step", 1)
    mlp_only = set(cfg.int_list("mlp_only_layers")) if cfg.has("mlp_only_layers") else set()
    moe_layers = [
        i for i in _layer_range(count) if num_experts and i - 1 not in mlp_only and i % step == 0
    ]
    return num_experts, moe_layers


def _read_qwen(cfg: _Config, notes: list[str]) -> dict[str, Any]:
    count = cfg.integer("num_hidden_layers")
    if cfg.has("layer_types"):
        mixers = _layer_kinds(cfg, {"full_attention": "gqa", "linear_attention": "gdn"})
    else:
        interval = cfg.integer("full_attention_interval", 4)
        full = [i for i in _layer_range(count) if i % interval == 0]
        mixers = {"gdn": [i for i in _layer_range(count) if i % interval], "gqa": full}
        notes.append(f"no layer_types: every {interval}th layer is full attention")
    ssm_dtype = cfg.get("mamba_ssm_dtype", "float32")
    if ssm_dtype not in _STATE_DTYPES:
        raise cfg.error("mamba_ssm_dtype", f"unsupported state dtype {ssm_dtype!r}")
    linear = {
        "kind": "gdn",
        "num_k_heads": cfg.integer("linear_num_key_heads"),
        "num_v_heads": cfg.integer("linear_num_value_heads"),
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
        "gqa": _gqa(cfg, cfg.boolean("attn_output_gate", True)),
        "linear_attention": linear,
        "dense_intermediate_size": _dense_size(cfg, moe_layers, count, "intermediate_size"),
        "moe": moe,
        "mtp_layers": mtp if mtp is not None else cfg.integer("num_nextn_predict_layers", 0),
    }


def _read_qwen3(cfg: _Config, notes: list[str]) -> dict[str, Any]:
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
        "q_norm / k_norm (RMSNorm of each query and key head, head_dim weights) are not on the"
        " card: no GEMM and a negligible share of the weights"
    )
    return {
        "layers": {
            "count": count,
            "mixers": {"gqa": _layer_range(count)},
            "moe_layers": moe_layers,
        },
        "gqa": _gqa(cfg, False),
        "dense_intermediate_size": _dense_size(cfg, moe_layers, count, "intermediate_size"),
        "moe": moe,
    }


def _read_llama(cfg: _Config, notes: list[str]) -> dict[str, Any]:
    count = cfg.integer("num_hidden_layers")
    return {
        "layers": {"count": count, "mixers": {"gqa": _layer_range(count)}},
        "gqa": _gqa(cfg, False),
        "dense_intermediate_size": cfg.integer("intermediate_size"),
    }


def _read_gpt_oss(cfg: _Config, notes: list[str]) -> dict[str, Any]:
    count = cfg.integer("num_hidden_layers")
    if cfg.has("layer_types"):
        mixers = _layer_kinds(cfg, {"sliding_attention": "swa", "full_attention": "gqa"})
    else:
        mixers = {"swa": _layer_range(count)[0::2], "gqa": _layer_range(count)[1::2]}
        notes.append("no layer_types: sliding and full attention alternate, sliding first")
    gqa = _gqa(cfg, False)
    if mixers.get("swa"):
        gqa["sliding_window_tokens"] = cfg.integer("sliding_window")
    notes.append(
        "attention sinks (one learned logit per head) and attention biases are not on the card"
    )
    top_k = cfg.first_int("num_experts_per_tok", "experts_per_token")
    return {
        "layers": {"count": count, "mixers": mixers, "moe_layers": _layer_range(count)},
        "gqa": gqa,
        "moe": {
            "num_experts": cfg.integer("num_local_experts"),
            "top_k": top_k,
            "expert_intermediate_size": cfg.integer("intermediate_size"),
            "num_shared_experts": 0,
        },
    }


def _per_layer_flags(cfg: _Config, key: str, count: int) -> list[int]:
    """A 0/1 list with one entry per layer (0-based) as the 1-based layers flagged 1."""
    flags = cfg.int_list(key)
    if len(flags) != count:
        raise cfg.error(key, f"has {len(flags)} entries for {count} layers")
    return [i for i, f in enumerate(flags, start=1) if f]


def _read_minimax_m2(cfg: _Config, notes: list[str]) -> dict[str, Any]:
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
        f"q/k RMSNorm ({cfg.get('qk_norm_type', 'per_layer')}: over all heads, so TP ranks"
        f" reduce its statistics) and partial RoPE (rotary_dim {cfg.get('rotary_dim', '?')}"
        " of head_dim) are not on the card"
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
            "mixers": {"gqa": _layer_range(count)},
            "moe_layers": _layer_range(count),
        },
        "gqa": _gqa(cfg, False),
        "moe": {
            "num_experts": cfg.integer("num_local_experts"),
            "top_k": cfg.integer("num_experts_per_tok"),
            "expert_intermediate_size": cfg.integer("intermediate_size"),
            "num_shared_experts": 0,
        },
        "mtp_layers": cfg.integer("num_nextn_predict_layers", 0),
    }


def _read_minimax_m3(cfg: _Config, notes: list[str]) -> dict[str, Any]:
    count = cfg.integer("num_hidden_layers")
    gqa = _gqa(cfg, cfg.boolean("attention_output_gate", False))
    mixers: dict[LayerKind, list[int]] = {"gqa": _layer_range(count)}
    if cfg.has("sparse_attention_config"):
        sparse_cfg = cfg.sub("sparse_attention_config")
        if sparse_cfg.boolean("use_sparse_attention", True):
            sparse = _per_layer_flags(sparse_cfg, "sparse_attention_freq", count)
            mixers = {
                "gqa": [i for i in _layer_range(count) if i not in sparse],
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
        moe_layers = _deepseek_moe_layers(cfg, count, cfg.integer("num_local_experts"))
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


_READERS: dict[str, Callable[[_Config, list[str]], dict[str, Any]]] = {
    "kimi_linear": _read_kimi_linear,
    "deepseek": _read_deepseek,
    "qwen": _read_qwen,
    "llama": _read_llama,
    "qwen3": _read_qwen3,
    "gpt_oss": _read_gpt_oss,
    "minimax_m2": _read_minimax_m2,
    "minimax_m3": _read_minimax_m3,
    "nemotron_h": nemotron_h.read_nemotron_h,
    "glm_dsa": dsa.read_dsa,
    "deepseek_v32": dsa.read_dsa,
    "deepseek_v4": deepseek_v4.read_deepseek_v4,
}


# --- precisions ----------------------------------------------------------------------------


def _base_dtype(text: _Config, top: _Config) -> WeightPrecision:
    for cfg in (text, top):
        for key in ("torch_dtype", "dtype"):
            if cfg.has(key):
                dtype = cfg.get(key)
                if dtype not in _DTYPES:
                    raise cfg.error(key, f"unsupported dtype {dtype!r}")
                return _DTYPES[dtype]
    return "bf16"


def _hf_pattern_matches(pattern: str, module: str) -> bool:
    """transformers ``modules_to_not_convert``: a substring or a regex matched at the start."""
    if pattern in module:
        return True
    try:
        return re.match(pattern, module) is not None
    except re.error:
        return False


def _ct_ignored(pattern: str, module: str) -> bool:
    """compressed-tensors ``ignore``: ``re:<regex>`` (re.match) or an exact module name."""
    if pattern.startswith("re:"):
        return re.match(pattern[3:], module) is not None
    return module == pattern or module.endswith("." + pattern)


def _ct_precision(q: _Config, group: Mapping[str, Any], name: str) -> WeightPrecision:
    """Weight precision of one compressed-tensors config group."""
    fmt = str(group.get("format") or q.get("format", ""))
    weights = group.get("weights") or {}
    bits = weights.get("num_bits")
    if "mxfp4" in fmt:
        return "mxfp4"
    if "nvfp4" in fmt:
        return "nvfp4"
    if fmt == "float-quantized" and bits == 8:
        return "fp8_block" if weights.get("strategy") == "block" else "fp8"
    if bits == 4 and weights.get("type") == "int" and weights.get("group_size") == 128:
        return "int4_g128"
    if bits == 4 and weights.get("type") == "int" and weights.get("group_size") == 32:
        return "int4_g32"
    raise q.error(
        f"config_groups.{name}",
        f"unsupported compressed-tensors weights (format {fmt!r}, {weights.get('type')}"
        f" {bits}-bit, group {weights.get('group_size')})",
    )


def _precisions(
    family: str,
    groups: list[ModuleGroup],
    owner: _Config,
    quant: Any,
    base: WeightPrecision,
    notes: list[str],
) -> dict[ModuleGroup, WeightPrecision]:
    out: dict[ModuleGroup, WeightPrecision] = dict.fromkeys(groups, base)
    if quant is None:
        notes.append(f"no quantization_config: all weights {base} (config dtype)")
        return out
    q = owner.sub("quantization_config")
    modules = _MODULE_NAMES[family]
    method = q.get("quant_method")
    linear = {g: modules[g] for g in groups if modules.get(g) is not None}

    if method == "fp8":
        fmt: WeightPrecision = "fp8_block" if q.has("weight_block_size") else "fp8"
        skip = [str(p) for p in q.get("modules_to_not_convert", [])]
        for g, module in linear.items():
            if g != "lm_head" and not any(_hf_pattern_matches(p, module or "") for p in skip):
                out[g] = fmt
        notes.append(
            f"quantization_config fp8 {q.get('weight_block_size', '')}: every nn.Linear is {fmt};"
            f" embedding, lm_head and the router (a plain parameter, not nn.Linear) stay {base}"
        )
    elif method == "mxfp4":
        skip = [str(p) for p in q.get("modules_to_not_convert", [])]
        module = modules.get("routed_experts")
        if "routed_experts" in out and not any(_hf_pattern_matches(p, module or "") for p in skip):
            out["routed_experts"] = "mxfp4"
        notes.append(
            f"quantization_config mxfp4: the routed experts are mxfp4; attention, router,"
            f" embedding and lm_head stay {base} (modules_to_not_convert)"
        )
    elif method == "compressed-tensors":
        ignore = [str(p) for p in q.get("ignore", [])]
        config_groups = q.sub("config_groups")
        for cg_name, cg in config_groups.data.items():
            if not isinstance(cg, dict):
                raise config_groups.error(cg_name, "expected a mapping")
            targets = [str(t) for t in cg.get("targets") or []]
            precision = _ct_precision(q, cg, cg_name)
            for g, module in linear.items():
                if module is None or any(_ct_ignored(p, module) for p in ignore):
                    continue
                if "Linear" in targets or any(_ct_ignored(t, module) for t in targets):
                    out[g] = precision
        quantized = sorted(g for g in out if out[g] != base)
        kept = sorted(g for g in out if out[g] == base)
        notes.append(
            f"quantization_config compressed-tensors ({q.get('format', '?')}): quantized"
            f" {', '.join(quantized) or 'nothing'}; kept {base} by `ignore` or as non-Linear:"
            f" {', '.join(kept)}"
        )
    else:
        raise q.error("quant_method", f"unsupported quant_method {method!r}")
    return out


def _hf_id(config: Mapping[str, Any], source: str) -> str:
    match = re.fullmatch(r"(?P<org>[^/\\]+)--(?P<model>.+)_config\.json", Path(source).name)
    if match:
        return f"{match['org']}/{match['model']}"
    name = config.get("_name_or_path")
    return name if isinstance(name, str) else ""


# --- YAML ----------------------------------------------------------------------------------


class _CardDumper(yaml.SafeDumper):
    """Block-style mappings, flow-style lists of scalars (a 93-layer list stays on few lines)."""


def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    flow = all(isinstance(v, int | float | bool) for v in data) and bool(data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


def _represent_float(dumper: yaml.SafeDumper, data: float) -> yaml.Node:
    if data.is_integer() and abs(data) < 2**53:
        return dumper.represent_int(int(data))
    return dumper.represent_float(data)


_CardDumper.add_representer(list, _represent_list)
_CardDumper.add_representer(float, _represent_float)


def _plain(model: BaseModel) -> dict[str, Any]:
    """Field values in schema order; optional fields left at None are dropped."""
    out: dict[str, Any] = {}
    for key, info in type(model).model_fields.items():
        value = getattr(model, key)
        if value is None and not info.is_required():
            continue
        out[key] = _plain_value(value)
    return out


def _plain_value(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return _plain(value)
    if isinstance(value, dict):
        return {k: _plain_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain_value(v) for v in value]
    return value


def card_to_yaml(card: ModelCard) -> str:
    """The card as YAML that ``simulator.specs.load(ModelCard, path)`` reads back unchanged."""
    header = (
        f"# Model card {card.name}, generated by simulator.model_import (import_hf_config) from\n"
        f"#   {card.source}\n"
        "# hf_id, published and notes may be edited by hand; every other field is what the\n"
        "# importer derives from that config. Layer numbers are 1-based.\n"
    )
    body = yaml.dump(
        _plain(card), Dumper=_CardDumper, sort_keys=False, width=100, allow_unicode=True
    )
    return header + body
