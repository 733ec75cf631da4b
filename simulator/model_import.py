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

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from simulator.importers import deepseek_v4, dsa, modelopt_quant, nemotron_h
from simulator.importers.config_view import ConfigView
from simulator.importers.families import READERS as _OLDER_READERS
from simulator.importers.hf_precision import base_dtype, precisions
from simulator.specs.loading import SpecError, parse, parse_json, read_text
from simulator.specs.model import MODULE_GROUPS, ModelCard, ModuleGroup
from simulator.specs.precision import WeightPrecision

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

# family -> reader: the older families (simulator/importers/families.py) and the newer ones
_READERS = {
    **_OLDER_READERS,
    "nemotron_h": nemotron_h.read_nemotron_h,
    "glm_dsa": dsa.read_dsa,
    "deepseek_v32": dsa.read_dsa,
    "deepseek_v4": deepseek_v4.read_deepseek_v4,
}


def load_hf_config(path: str | Path) -> dict[str, Any]:
    """Read a Hugging Face config.json; any failure is a SpecError on ``(file)``."""
    p = Path(path)
    data = parse_json(read_text(p), p)  # a key given twice is refused, not the last kept
    if not isinstance(data, dict):
        raise SpecError(p, "(file)", f"expected a JSON object, got {type(data).__name__}")
    return modelopt_quant.attach_sidecar(p, data)  # a ModelOpt hf_quant_config.json beside it


def import_hf_config(config: dict[str, Any], name: str, source: str) -> ModelCard:
    """The model card a Hugging Face config.json describes.

    ``source`` names the config (a path) in errors and on the card. ``hf_id`` comes from a
    ``<org>--<model>_config.json`` file name or ``_name_or_path``; ``published`` is left empty.
    """
    top = ConfigView(config, source)
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
    with _named_by_config():
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
            base_dtype(text, top), notes,
        )  # fmt: skip
    else:
        data["weight_precision"] = precisions(
            _MODULE_NAMES[family], groups, quant_owner, quant_cfg, base_dtype(text, top), notes
        )
    data["weight_precision"] |= {g: p for g, p in overrides.items() if g in groups}
    data["notes"] = notes
    with _named_by_config():
        return parse(ModelCard, data, source)


# card fields met in a card's checks, by the config.json keys they are read from (most
# families); a field not listed is named as the card's ("card moe.top_k")
_CONFIG_KEY = {
    "layers.count": "num_hidden_layers",
    "hidden_size": "hidden_size",
    "vocab_size": "vocab_size",
    "max_context_tokens": "max_position_embeddings",
    "gqa.num_heads": "num_attention_heads",
    "gqa.num_kv_heads": "num_key_value_heads",
    "gqa.head_dim": "head_dim",
    "gqa": "num_attention_heads / num_key_value_heads",
}


@contextmanager
def _named_by_config() -> Iterator[None]:
    """A card check that fails on what the config gave names the config's key (the user
    edits the config.json, not a card they have not seen)."""
    try:
        yield
    except SpecError as exc:
        raise exc.remapped(
            lambda e: SpecError(e.file, _CONFIG_KEY.get(e.field, f"card {e.field}"), e.reason)
        ) from None


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
