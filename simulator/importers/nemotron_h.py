"""``nemotron_h``: NVIDIA Nemotron-H, Nemotron 3 Nano / Super / Ultra.

A stack of single-purpose blocks given by ``hybrid_override_pattern``, one character per
block (Ultra's config gives the same as the list ``layers_block_type``):

  M  Mamba2 mixer, no MLP        -> mixer ``mamba2``, on ``mlp_free``
  *  GQA attention, no MLP       -> mixer ``gqa``, on ``mlp_free``
  E  MoE, no mixer               -> mixer ``none``, on ``moe_layers``
  -  dense MLP, no mixer         -> mixer ``none``, dense MLP

as vLLM builds them (``model_executor/models/nemotron_h.py``: ``ALL_DECODER_LAYER_TYPES``;
each block is one RMSNorm and one mixer). Every MLP is non-gated: up_proj, relu2,
down_proj (``NemotronHMLP``; the experts' ``activation_without_mul``), so the card has
``gated_mlp: false``. Super and Ultra route a latent: ``fc1_latent_proj`` (hidden ->
``moe_latent_size``) before the routed experts and ``fc2_latent_proj`` after, both
``ReplicatedLinear``; the shared expert works on the full hidden size.

The Mamba2 mixer maps onto ``LinearAttentionConfig`` through the SSD duality (see its
docstring): n_groups key heads of d_state, mamba_num_heads value heads of mamba_head_dim.
d_inner is ``mamba_num_heads x mamba_head_dim`` (vLLM's ``NemotronHMambaDecoderLayer``), not
``expand x hidden_size``.
"""

from __future__ import annotations

from typing import Any

from simulator.importers.config_view import ConfigView
from simulator.specs.model import LayerKind, ModuleGroup
from simulator.specs.precision import StateDtype

BLOCKS: dict[str, str] = {"M": "Mamba2", "E": "MoE", "*": "attention", "-": "MLP"}
# Ultra's ``layers_block_type`` names -> pattern characters
BLOCK_TYPES: dict[str, str] = {"mamba": "M", "moe": "E", "attention": "*", "mlp": "-"}
# mamba_ssm_cache_dtype -> the card's state dtype (float16 is stored as 2 bytes, like bf16)
SSM_DTYPES: dict[str, StateDtype] = {"float32": "fp32", "bfloat16": "bf16", "float16": "bf16"}

# One Hugging Face module name per module group (checkpoint names, ``backbone.`` prefix), for
# quantization ignore / exclude lists. Layer 0 stands for every layer of the group: the ModelOpt
# reader (modelopt_quant.py) puts in each layer's index, so the Nano NVFP4 exclude list (its 6
# attention blocks and 6 of its 23 Mamba2 blocks kept BF16) reads as attention bf16, Mamba2
# nvfp4 by majority. None: not an nn.Linear (the embedding; the router ``mixer.gate`` is a
# plain weight, and vLLM builds it without a quantization method).
MODULE_NAMES: dict[ModuleGroup, str | None] = {
    "embedding": None,
    "lm_head": "lm_head",
    "attention": "backbone.layers.0.mixer.q_proj",
    "linear_attention": "backbone.layers.0.mixer.in_proj",
    "dense_mlp": "backbone.layers.0.mixer.up_proj",
    "router": None,
    "shared_experts": "backbone.layers.0.mixer.shared_experts.up_proj",
    "routed_experts": "backbone.layers.0.mixer.experts.0.up_proj",
    "moe_latent": "backbone.layers.0.mixer.fc1_latent_proj",
    "mtp": "mtp.layers.0.mixer.q_proj",
}


def block_pattern(cfg: ConfigView) -> str:
    """The block pattern, checked: known characters, one per layer."""
    if cfg.has("hybrid_override_pattern"):
        key = "hybrid_override_pattern"
        pattern = cfg.require(key)
        if not isinstance(pattern, str):
            raise cfg.error(key, f"expected a string of M, E, * and -, got {pattern!r}")
    elif cfg.has("layers_block_type"):
        key = "layers_block_type"
        types = cfg.require(key)
        if not isinstance(types, list):
            raise cfg.error(key, f"expected a list of block types, got {types!r}")
        for i, name in enumerate(types, start=1):
            if name not in BLOCK_TYPES:
                raise cfg.error(
                    key,
                    f"unknown block type {name!r} at block {i}; known: {', '.join(BLOCK_TYPES)}",
                )
        pattern = "".join(BLOCK_TYPES[t] for t in types)
    else:
        raise cfg.error(
            "hybrid_override_pattern",
            "missing required key 'hybrid_override_pattern' (or layers_block_type)",
        )
    if not pattern:
        raise cfg.error(key, "is empty: no blocks")
    for i, ch in enumerate(pattern, start=1):
        if ch not in BLOCKS:
            known = ", ".join(f"{c} ({what})" for c, what in BLOCKS.items())
            raise cfg.error(key, f"unknown block {ch!r} at block {i}; known: {known}")
    if cfg.has("num_hidden_layers"):
        count = cfg.integer("num_hidden_layers")
        if count != len(pattern):
            raise cfg.error(
                key, f"has {len(pattern)} blocks but num_hidden_layers is {count} (one per block)"
            )
    return pattern


def _positions(pattern: str, chars: str) -> list[int]:
    return [i for i, ch in enumerate(pattern, start=1) if ch in chars]


def _mamba2(cfg: ConfigView, notes: list[str]) -> dict[str, Any]:
    heads = cfg.integer("mamba_num_heads")
    head_dim = cfg.integer("mamba_head_dim")
    groups = cfg.integer("n_groups", minimum=1)
    if heads % groups:
        raise cfg.error("n_groups", f"{groups} groups do not divide the {heads} mamba heads")
    dtype = cfg.get("mamba_ssm_cache_dtype")
    if dtype is None:
        state: StateDtype = "fp32"
        notes.append(
            "mamba_ssm_cache_dtype absent: fp32, vLLM's default for NemotronH"
            " (NemotronHForCausalLMConfig; vLLM releases before it used float16)"
        )
    elif isinstance(dtype, str) and dtype in SSM_DTYPES:
        state = SSM_DTYPES[dtype]
        notes.append(
            f"Mamba2 SSM state {state} (mamba_ssm_cache_dtype {dtype}, which vLLM's"
            " NemotronHForCausalLMConfig applies when --mamba-ssm-cache-dtype is auto);"
            " conv state in the model dtype"
        )
    else:
        raise cfg.error("mamba_ssm_cache_dtype", f"unsupported state dtype {dtype!r}")
    hidden = cfg.integer("hidden_size")
    expand = cfg.get("expand")
    if isinstance(expand, int) and expand * hidden != heads * head_dim:
        notes.append(
            f"d_inner = mamba_num_heads x mamba_head_dim = {heads * head_dim} (as vLLM);"
            f" expand x hidden_size = {expand * hidden} is not used"
        )
    notes.append(
        f"Mamba2 as linear_attention kind mamba2: num_k_heads = n_groups ({groups}),"
        f" head_k_dim = ssm_state_size ({cfg.get('ssm_state_size')}), num_v_heads ="
        f" mamba_num_heads ({heads}), head_v_dim = mamba_head_dim ({head_dim});"
        f" SSD chunk_size {cfg.get('chunk_size', '?')}; conv bias, dt_bias, A, D and the gated"
        " norm are not counted (below 0.01 % of the weights)"
    )
    return {
        "kind": "mamba2",
        "num_k_heads": groups,
        "num_v_heads": heads,
        "head_k_dim": cfg.integer("ssm_state_size"),
        "head_v_dim": head_dim,
        "conv_kernel_size": cfg.integer("conv_kernel"),
        "state_dtype": state,
    }


def _gqa(cfg: ConfigView, notes: list[str]) -> dict[str, Any]:
    if cfg.get("sliding_window") is not None:
        raise cfg.error("sliding_window", "sliding-window Nemotron-H attention is not supported")
    heads = cfg.integer("num_attention_heads", minimum=1)
    head_dim = cfg.optional_int("head_dim") or cfg.optional_int("attention_head_dim")
    notes.append(
        "attention blocks apply no rotary embedding (NemotronHAttention: qkv_proj, attention,"
        " o_proj); the step model's GQA rope line (an elementwise op) still counts"
    )
    return {
        "num_heads": heads,
        "num_kv_heads": cfg.integer("num_key_value_heads", heads, minimum=1),
        "head_dim": head_dim or cfg.integer("hidden_size", minimum=1) // heads,
        "output_gate": False,
    }


def _moe(cfg: ConfigView, notes: list[str]) -> dict[str, Any]:
    shared = cfg.integer("n_shared_experts", 0)
    latent = cfg.optional_int("moe_latent_size")
    notes.append(
        f"MoE: sigmoid router with score-correction bias, n_group {cfg.get('n_group', 1)},"
        f" routed_scaling_factor {cfg.get('routed_scaling_factor', '?')}"
        + (
            f"; latent MoE: fc1_latent_proj hidden -> {latent} before the routed experts,"
            " fc2_latent_proj after (ReplicatedLinear: whole on every rank); the shared"
            " expert works on the full hidden size"
            if latent
            else ""
        )
    )
    return {
        "num_experts": cfg.integer("n_routed_experts"),
        "top_k": cfg.integer("num_experts_per_tok"),
        "expert_intermediate_size": cfg.integer("moe_intermediate_size"),
        "num_shared_experts": shared,
        "shared_intermediate_size": (
            cfg.integer("moe_shared_expert_intermediate_size") if shared else None
        ),
        "routed_hidden_size": latent,
    }


def _dense_size(cfg: ConfigView) -> int:
    size = cfg.require("intermediate_size")
    if isinstance(size, list):
        if len(set(size)) != 1 or not isinstance(size[0], int):
            raise cfg.error(
                "intermediate_size", "per-block MLP widths (a list of several) are not supported"
            )
        return int(size[0])
    return cfg.integer("intermediate_size")


def _mtp(cfg: ConfigView, notes: list[str]) -> int:
    layers = cfg.integer("num_nextn_predict_layers", 0)
    if not layers:
        return 0
    pattern = cfg.get("mtp_hybrid_override_pattern")
    if pattern is None and isinstance(cfg.get("mtp_layers_block_type"), list):
        pattern = "".join(BLOCK_TYPES.get(str(t), "?") for t in cfg.get("mtp_layers_block_type"))
    shape = "an attention block + an MoE block + eh_proj (2 hidden -> hidden)"
    if pattern == "*E":
        notes.append(f"MTP module ({pattern!r}): {shape}, as the planner counts it")
    else:
        notes.append(
            f"MTP module pattern {pattern!r}: counted as {shape} (the planner's MTP layout)"
        )
    return layers


def read_nemotron_h(cfg: ConfigView, notes: list[str]) -> dict[str, Any]:
    """The card fields of a ``nemotron_h`` config.json (the importer adds the common ones)."""
    pattern = block_pattern(cfg)
    if not cfg.has("num_hidden_layers"):
        notes.append(f"num_hidden_layers absent: {len(pattern)} blocks from the block list")
    mixers: dict[LayerKind, list[int]] = {
        "mamba2": _positions(pattern, "M"),
        "gqa": _positions(pattern, "*"),
        "none": _positions(pattern, "E-"),
    }
    moe_layers = _positions(pattern, "E")
    act = cfg.get("mlp_hidden_act", "relu2")
    notes.append(
        f"blocks {', '.join(f'{pattern.count(c)} {w}' for c, w in BLOCKS.items())}"
        " (hybrid_override_pattern): Mamba2 and attention blocks have no MLP (mlp_free),"
        " MoE and MLP blocks no mixer (none); one RMSNorm per block"
    )
    notes.append(
        f"non-gated MLPs and experts (gated_mlp false): up_proj, {act}, down_proj, two"
        " matrices each"
    )
    return {
        "layers": {
            "count": len(pattern),
            "mixers": mixers,
            "moe_layers": moe_layers,
            "mlp_free": _positions(pattern, "M*"),
        },
        "gqa": _gqa(cfg, notes) if "*" in pattern else None,
        "linear_attention": _mamba2(cfg, notes) if "M" in pattern else None,
        "dense_intermediate_size": _dense_size(cfg) if "-" in pattern else None,
        "moe": _moe(cfg, notes) if moe_layers else None,
        "gated_mlp": False,
        "mtp_layers": _mtp(cfg, notes),
    }
