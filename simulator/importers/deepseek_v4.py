"""``deepseek_v4``: DeepSeek-V4-Flash / -Pro, compressed sparse + heavily compressed attention.

Per layer ``compress_ratios[i]`` (one entry per layer, then one per MTP module) picks the
attention: 4 -> ``csa`` (a 4x-compressed KV stream, an indexer keeps the ``index_topk`` best
entries), 128 -> ``hca`` (a 128x-compressed stream, all entries attended), 0 -> ``swa_mqa``;
every layer also attends its last ``sliding_window`` tokens. Attention is MQA over one
``head_dim`` vector per entry (``num_key_value_heads`` 1; K = V), q through ``q_lora_rank``,
output through ``o_groups`` grouped projections to ``o_lora_rank``. Every layer is MoE
(``n_routed_experts`` top ``num_experts_per_tok`` + ``n_shared_experts``); the first
``num_hash_layers`` route by a token-id table instead of a learned gate. Checkpoint: FP8
(128x128 blocks) linears, routed experts in ``expert_dtype`` (fp4 = MXFP4, what vLLM's
``DeepseekV4FP8Config`` loads them as), or NVFP4 experts in NVIDIA's ModelOpt variant
(``quantized_layers``). vLLM 0.24 accepts only the ratios 0, 4 and 128
(``CompressorStateCache``: ``assert compress_ratio in [4, 128]``; C4A has the indexer).
"""

from __future__ import annotations

from typing import Any

from simulator.importers.config_view import ConfigView
from simulator.specs.model import LayerKind, ModuleGroup
from simulator.specs.precision import WeightPrecision

KIND_OF_RATIO: dict[int, LayerKind] = {0: "swa_mqa", 4: "csa", 128: "hca"}
EXPERT_DTYPES: dict[str, WeightPrecision] = {"fp4": "mxfp4", "fp8": "fp8_block"}

# One checkpoint module name per module group (DeepSeek's own naming, which the ModelOpt
# variant's ignore list uses: "*.attn.*", "*.ffn.shared_experts.*", "head", "mtp.*").
MODULE_NAMES: dict[ModuleGroup, str | None] = {
    "embedding": None,
    "lm_head": "head",
    "attention": "layers.0.attn.wq_a",
    "router": None,  # ffn.gate: a plain weight (and a token-id table in the hash layers)
    "shared_experts": "layers.0.ffn.shared_experts.w1",
    "routed_experts": "layers.0.ffn.experts.0.w1",
    "mtp": "mtp.0.e_proj",
}


Config = ConfigView


def _kinds(cfg: Config, count: int, notes: list[str]) -> dict[LayerKind, list[int]]:
    ratios = cfg.int_list("compress_ratios")
    if len(ratios) < count:
        raise cfg.error("compress_ratios", f"has {len(ratios)} entries for {count} layers")
    mixers: dict[LayerKind, list[int]] = {}
    for i, r in enumerate(ratios, start=1):
        if r not in KIND_OF_RATIO:
            raise cfg.error(
                "compress_ratios",
                f"ratio {r} at layer {i}: vLLM's DeepSeek-V4 attention takes 0, 4 and 128 only",
            )
        if i <= count:
            mixers.setdefault(KIND_OF_RATIO[r], []).append(i)
    if not mixers.get("csa") and not mixers.get("hca"):
        raise cfg.error("compress_ratios", "no compressed layer (4 or 128): nothing to model")
    extra = ratios[count:]
    notes.append(
        "compress_ratios per layer: 4 -> csa (layers"
        f" {_span(mixers.get('csa', []))}), 128 -> hca ({_span(mixers.get('hca', []))}),"
        f" 0 -> swa_mqa ({_span(mixers.get('swa_mqa', []))}); the entries past"
        f" num_hidden_layers ({extra}) are the MTP modules' (their weights are counted as the"
        " last layer's kind)"
    )
    return mixers


def _span(layers: list[int]) -> str:
    if not layers:
        return "none"
    if len(layers) <= 4:
        return ", ".join(map(str, layers))
    return f"{layers[0]}, {layers[1]}, ..., {layers[-1]}: {len(layers)} layers"


def _expert_precisions(cfg: Config, notes: list[str]) -> tuple[WeightPrecision, WeightPrecision]:
    """(routed experts, MTP module) formats: ``expert_dtype`` (fp4: MXFP4 with e8m0 scales per
    32), or NVFP4 routed experts where a ModelOpt ``quantized_layers`` table says so for every
    layer's experts (its ignore list leaves ``mtp.*`` as the base checkpoint stores it)."""
    expert_dtype = cfg.get("expert_dtype", "fp4")
    if expert_dtype not in EXPERT_DTYPES:
        raise cfg.error(
            "expert_dtype", f"unsupported {expert_dtype!r}; known: {', '.join(EXPERT_DTYPES)}"
        )
    precision = EXPERT_DTYPES[expert_dtype]
    quant = cfg.get("quantization_config")
    table = quant.get("quantized_layers") if isinstance(quant, dict) else None
    if isinstance(table, dict):
        algos = {
            str(v.get("quant_algo"))
            for k, v in table.items()
            if k.endswith(".ffn.experts") and isinstance(v, dict)
        }
        if algos - {"NVFP4"} or len(table) < cfg.integer("num_hidden_layers"):
            raise cfg.error(
                "quantization_config.quantized_layers",
                f"expected NVFP4 experts in every layer, got {sorted(algos)} over {len(table)}"
                " entries",
            )
        notes.append(
            "ModelOpt variant (quant_algo MIXED_PRECISION): quantized_layers make every layer's"
            " routed experts nvfp4; its ignore list (*.attn.*, *.ffn.shared_experts.*, head,"
            " mtp.*) keeps the rest as the base checkpoint stores it (fp8_block; the MTP module"
            " with its fp4 experts, taken as mxfp4)"
        )
        return "nvfp4", precision
    notes.append(
        f"routed experts {precision} (expert_dtype {expert_dtype}: vLLM's DeepseekV4FP8Config"
        " loads fp4 experts with Mxfp4MoEMethod); the MTP module is taken at the routed"
        " experts' format (most of its weights are experts)"
    )
    return precision, precision


def read_deepseek_v4(cfg: Config, notes: list[str]) -> dict[str, Any]:
    count = cfg.integer("num_hidden_layers")
    if cfg.integer("num_key_value_heads", 1) != 1:
        raise cfg.error("num_key_value_heads", "DeepSeek-V4 attention has one shared KV head")
    mixers = _kinds(cfg, count, notes)
    attention = {
        "num_heads": cfg.integer("num_attention_heads"),
        "head_dim": cfg.integer("head_dim"),
        "rope_head_dim": cfg.integer("qk_rope_head_dim"),
        "q_lora_rank": cfg.integer("q_lora_rank"),
        "o_lora_rank": cfg.integer("o_lora_rank"),
        "o_groups": cfg.integer("o_groups"),
        "sliding_window_tokens": cfg.integer("sliding_window"),
        "csa_compress_ratio": 4,
        "hca_compress_ratio": 128,
        "index_num_heads": cfg.integer("index_n_heads"),
        "index_head_dim": cfg.integer("index_head_dim"),
        "index_topk": cfg.integer("index_topk"),
        "residual_streams": cfg.integer("hc_mult", 1),
    }
    experts, mtp = _expert_precisions(cfg, notes)
    notes.append(
        f"attention: {attention['num_heads']} heads of {attention['head_dim']} over one shared"
        f" K=V vector per entry (rope {attention['rope_head_dim']}), sliding window"
        f" {attention['sliding_window_tokens']} in every layer, CSA indexer"
        f" {attention['index_num_heads']} x {attention['index_head_dim']} keeping the top"
        f" {attention['index_topk']} compressed entries; attention sinks, the q/kv RMSNorms,"
        " the grouped output's inverse RoPE and YaRN (factor"
        f" {(cfg.get('rope_scaling') or {}).get('factor', '?')}, compress_rope_theta"
        f" {cfg.get('compress_rope_theta', '?')}) are not on the card"
    )
    notes.append(
        f"mHC hyper-connections: hc_mult {attention['residual_streams']} residual streams"
        f" (hc_sinkhorn_iters {cfg.get('hc_sinkhorn_iters', '?')}); their mixing weights"
        " (fp32, ~0.01 % of the parameters) are not counted"
    )
    notes.append(
        f"MoE in all {count} layers: {cfg.get('n_routed_experts')} routed experts"
        f" top-{cfg.get('num_experts_per_tok')} + {cfg.get('n_shared_experts', 0)} shared,"
        f" expert intermediate {cfg.get('moe_intermediate_size')}, {cfg.get('scoring_func', '?')}"
        f" scores, swiglu_limit {cfg.get('swiglu_limit', '?')}; the first"
        f" {cfg.get('num_hash_layers', 0)} layers route by a token-id table (num_hash_layers),"
        " priced here like the learned router"
    )
    return {
        "layers": {"count": count, "mixers": mixers, "moe_layers": list(range(1, count + 1))},
        "compressed_attention": attention,
        "moe": {
            "num_experts": cfg.integer("n_routed_experts"),
            "top_k": cfg.integer("num_experts_per_tok"),
            "expert_intermediate_size": cfg.integer("moe_intermediate_size"),
            "num_shared_experts": cfg.integer("n_shared_experts", 0),
        },
        "mtp_layers": cfg.integer("num_nextn_predict_layers", 0),
        # read by simulator.model_import after the generic quantization_config pass
        "weight_precision": {"routed_experts": experts, "mtp": mtp},
    }
