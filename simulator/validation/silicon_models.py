"""How the silicon rows' models and precisions map to model cards and served weights.

Every card is the importer's output of the model's ``config.json`` as aiconfigurator-core
ships it (``MODEL_ROWS`` gives the evidence); every (card, precision, gemm_quant_mode,
moe_quant_mode) combination of the CSV's vLLM aggregated rows has a ``PrecisionMapping``
saying which ``ServingConfig.weight_precision`` overrides reproduce the checkpoint vLLM
loaded. Used by ``silicon.py``; the document prints both tables.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.validation.points import Overrides

# model_path of the CSV -> model card (every card is the importer's output of the model's
# config.json, see MODEL_ROWS for the evidence)
MODELS: dict[str, str] = {
    "meta-llama/Llama-3.1-70B": "llama-3.3-70b",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b-fp8",
    "MiniMaxAI/MiniMax-M2.5": "minimax-m2.5",
    "moonshotai/Kimi-K2.5": "kimi-k2.5",
    "openai/gpt-oss-120b": "gpt-oss-120b",
}

# (model_path, card, why) for the document
MODEL_ROWS: list[tuple[str, str, str]] = [
    (
        "meta-llama/Llama-3.1-70B",
        "llama-3.3-70b",
        "same architecture: the card is imported from meta-llama--Meta-Llama-3.1-70B_config.json"
        " (`tests/simulator/test_model_cards.py` re-derives it from the package's copy)",
    ),
    (
        "nvidia/Llama-3.1-8B-Instruct-FP8",
        "llama-3.1-8b",
        "imported from meta-llama--Meta-Llama-3.1-8B_config.json (the FP8 checkpoint quantizes"
        " the same architecture)",
    ),
    ("Qwen/Qwen3-32B", "qwen3-32b", "imported from Qwen--Qwen3-32B_config.json (`qwen3`)"),
    (
        "Qwen/Qwen3-235B-A22B-FP8",
        "qwen3-235b-a22b-fp8",
        "imported from Qwen--Qwen3-235B-A22B-FP8_config.json (`qwen3_moe`; its"
        " quantization_config: fp8 e4m3, weight_block_size 128x128, router and lm_head bf16)",
    ),
    (
        "MiniMaxAI/MiniMax-M2.5",
        "minimax-m2.5",
        "imported from MiniMaxAI--MiniMax-M2.5_config.json (`minimax_m2`; the native checkpoint"
        " is fp8 with 128x128 blocks, router and lm_head bf16; its 3 MTP modules are not loaded)",
    ),
    (
        "moonshotai/Kimi-K2.5",
        "kimi-k2.5",
        "imported from moonshotai--Kimi-K2.5_config.json (`kimi_k25`: the Kimi-K2 / DeepSeek-V3"
        " text model under text_config; routed experts int4 in groups of 32 (`int4_g32`), the"
        " rest bf16; vision tower not counted: the prompts are text)",
    ),
    ("openai/gpt-oss-120b", "gpt-oss-120b", "the existing card (native MXFP4 routed experts)"),
]


@dataclass(frozen=True)
class PrecisionMapping:
    """How one (card, precision, gemm_quant_mode, moe_quant_mode) combination is served."""

    overrides: Overrides  # ServingConfig.weight_precision on top of the card's
    checkpoint: str  # what vLLM loaded, in words (for the document)
    needs_fp4: bool = False  # NVFP4 weights: only on a GPU with FP4 tensor cores


_LINEAR_FP8: Overrides = {"attention": "fp8", "dense_mlp": "fp8"}
_LINEAR_NVFP4: Overrides = {"attention": "nvfp4", "dense_mlp": "nvfp4"}

# (card, precision, gemm_quant_mode, moe_quant_mode) -> mapping; "" = empty cell. Every
# combination of the CSV's vLLM aggregated rows is here; any other is skipped with a reason.
PRECISIONS: dict[tuple[str, str, str, str], PrecisionMapping] = {
    ("llama-3.3-70b", "fp8", "fp8", "fp8"): PrecisionMapping(
        _LINEAR_FP8,
        "FP8 with per-tensor scales on every linear layer, embedding and lm_head bf16"
        " (ModelOpt, as nvidia/Llama-3.1-70B-Instruct-FP8, whose hf_quant_config the package"
        " ships: quant_algo FP8, exclude_modules [lm_head])",
    ),
    ("llama-3.3-70b", "fp4", "nvfp4", "nvfp4"): PrecisionMapping(
        _LINEAR_NVFP4,
        "**assumption**: NVFP4 on every linear layer, embedding and lm_head bf16 (as the"
        " NVIDIA ModelOpt FP4 Llama checkpoints; the package ships no config for this one)",
        needs_fp4=True,
    ),
    ("llama-3.1-8b", "fp8", "fp8", "fp8"): PrecisionMapping(
        _LINEAR_FP8,
        "nvidia/Llama-3.1-8B-Instruct-FP8 (ModelOpt FP8, per-tensor scales): every linear"
        " layer fp8, embedding and lm_head bf16",
    ),
    ("qwen3-32b", "", "", ""): PrecisionMapping(
        {}, "empty precision columns: the published Qwen/Qwen3-32B checkpoint, bf16 = the card"
    ),
    ("qwen3-32b", "fp8", "fp8", "fp8"): PrecisionMapping(
        _LINEAR_FP8,
        "**assumption**: model_path is the bf16 checkpoint, so FP8 is vLLM's online"
        " `--quantization fp8` (per-tensor) on every linear layer (Qwen/Qwen3-32B-FP8 with"
        " 128x128 blocks would run the same FP8 GEMMs)",
    ),
    ("qwen3-235b-a22b-fp8", "fp8", "fp8", "fp8"): PrecisionMapping(
        {}, "the checkpoint itself: fp8 with 128x128 block scales (`fp8_block`) = the card"
    ),
    ("minimax-m2.5", "fp8", "fp8", "fp8"): PrecisionMapping(
        {}, "the native checkpoint: fp8 with 128x128 block scales (`fp8_block`) = the card"
    ),
    ("minimax-m2.5", "fp4", "nvfp4", "nvfp4"): PrecisionMapping(
        {"routed_experts": "nvfp4", "attention": "bf16"},
        "nvidia/MiniMax-M2.5-NVFP4 (its config ships in the package): NVFP4 routed experts;"
        " its ignore list keeps every self_attn, the router and lm_head out, so attention is"
        " bf16 (not the native fp8_block) although gemm_quant_mode says nvfp4",
        needs_fp4=True,
    ),
    ("kimi-k2.5", "int4", "int4_wo", "int4_wo"): PrecisionMapping(
        {},
        "the native checkpoint: int4 weight-only routed experts in groups of 32 (`int4_g32`,"
        " compressed-tensors pack-quantized), attention, shared experts, dense MLP, lm_head"
        " bf16 = the card",
    ),
    ("kimi-k2.5", "fp4", "nvfp4", "nvfp4"): PrecisionMapping(
        {"routed_experts": "nvfp4", "shared_experts": "nvfp4", "dense_mlp": "nvfp4"},
        "nvidia/Kimi-K2.5-NVFP4 (its config ships in the package): NVFP4 on every linear"
        " layer except self_attn and lm_head (ignore list), so routed and shared experts and"
        " the dense MLP of layer 1 are NVFP4, attention bf16",
        needs_fp4=True,
    ),
    ("gpt-oss-120b", "fp4", "nvfp4", "nvfp4"): PrecisionMapping(
        {},
        "the native openai/gpt-oss-120b checkpoint = the card: MXFP4 routed experts, the rest"
        " bf16 (the CSV labels its quant modes nvfp4; model_path is the MXFP4 checkpoint)."
        " On H100/H200 vLLM runs MXFP4 weight-only",
    ),
}
