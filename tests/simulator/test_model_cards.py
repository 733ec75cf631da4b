"""The built-in model cards: they load, they are what the importer derives from the real
Hugging Face configs, and they survive a YAML round trip."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from simulator.catalog import MODEL_CARDS_DIR, model_card, model_names
from simulator.model_import import card_to_yaml, import_hf_config, load_hf_config
from simulator.specs import ModelCard, SpecError, load

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO.parent / "shared" / "data"
needs_shared = pytest.mark.skipif(
    not SHARED_DATA.is_dir(), reason=f"{SHARED_DATA} is absent: the real configs are not available"
)

# card name -> the config.json it is built from, relative to ../shared/data
HF_SOURCES: dict[str, str] = {
    "kimi-k3": "model_configs/hf/moonshotai--Kimi-K3_config.json",
    "kimi-k2": "model_configs/hf/moonshotai--Kimi-K2-Instruct_config.json",
    "deepseek-v3": "model_configs/hf/deepseek-ai--DeepSeek-V3_config.json",
    "qwen3.5-397b-a17b": "model_configs/hf/Qwen--Qwen3.5-397B-A17B_config.json",
    "llama-3.3-70b": "model_configs/hf/meta-llama--Meta-Llama-3.1-70B_config.json",
    "gpt-oss-120b": "model_configs/hf/openai--gpt-oss-120b_config.json",
    "minimax-m3": "model_configs/hf/MiniMaxAI--MiniMax-M3_config.json",
}
# card name -> the config.json it is built from, shipped in the aiconfigurator-core package
# (the ``measured`` extra) under aiconfigurator_core/model_configs/
PACKAGE_SOURCES: dict[str, str] = {
    "qwen3-32b": "Qwen--Qwen3-32B_config.json",
    "qwen3-235b-a22b-fp8": "Qwen--Qwen3-235B-A22B-FP8_config.json",
    "llama-3.1-8b": "meta-llama--Meta-Llama-3.1-8B_config.json",
    "minimax-m2.5": "MiniMaxAI--MiniMax-M2.5_config.json",
    "kimi-k2.5": "moonshotai--Kimi-K2.5_config.json",
    # nemotron_h (simulator/importers/nemotron_h.py); the quantized ones with the ModelOpt
    # <stem>_hf_quant_config.json beside them, which load_hf_config reads
    "nemotron-3-nano-30b-a3b": "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16_config.json",
    "nemotron-3-nano-30b-a3b-nvfp4": "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4_config.json",
    "nemotron-3-super-120b": "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-NVFP4_config.json",
    "nemotron-3-super-120b-fp8": "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8_config.json",
    "nemotron-3-ultra-550b-a55b": "nvidia--NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16_config.json",
    "nemotron-h-56b": "nvidia--Nemotron-H-56B-Base-8K_config.json",
    # sparse attention (simulator/importers/dsa.py, deepseek_v4.py; tests in
    # test_sparse_attention_cards.py); nvidia--GLM-5-NVFP4 has its hf_quant_config beside it
    "glm-5": "zai-org--GLM-5_config.json",
    "glm-5-fp8": "zai-org--GLM-5-FP8_config.json",
    "glm-5-nvfp4": "nvidia--GLM-5-NVFP4_config.json",
    "deepseek-v4-flash": "deepseek-ai--DeepSeek-V4-Flash_config.json",
    "deepseek-v4-flash-nvfp4": "nvidia--DeepSeek-V4-Flash-NVFP4_config.json",
    "deepseek-v4-pro": "deepseek-ai--DeepSeek-V4-Pro_config.json",
    "deepseek-v4-pro-nvfp4": "nvidia--DeepSeek-V4-Pro-NVFP4_config.json",
}


def _package_root() -> Path | None:
    """The folder holding ``aiconfigurator_core/`` (site-packages), or None when absent."""
    try:
        spec = importlib.util.find_spec("aiconfigurator_core")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))).parent
    return root if (root / "aiconfigurator_core" / "model_configs").is_dir() else None


PACKAGE_ROOT = _package_root()
needs_package = pytest.mark.skipif(
    PACKAGE_ROOT is None,
    reason="aiconfigurator-core is not installed (pip install '.[measured]'): the configs the"
    " package-sourced cards are built from are not available",
)
KIMI_LINEAR_SOURCE = "model_architectures.json (config.json values)"
NOT_ARCHITECTURE = {"name", "source", "hf_id", "published", "notes"}


def architecture(card: ModelCard) -> dict[str, Any]:
    return card.model_dump(exclude=NOT_ARCHITECTURE)


def kimi_linear_config(arch: dict[str, Any]) -> dict[str, Any]:
    """A kimi_linear config.json rebuilt from the model_architectures.json entry."""
    lin = arch["linear_attn"]
    return {
        "model_type": arch["model_type"],
        "torch_dtype": "bfloat16",
        "num_hidden_layers": arch["num_hidden_layers"],
        "hidden_size": arch["hidden_size"],
        "vocab_size": arch["vocab_size"],
        "max_position_embeddings": arch["max_context"],
        "tie_word_embeddings": False,
        "num_attention_heads": arch["num_attention_heads"],
        "num_key_value_heads": arch["num_key_value_heads"],
        "q_lora_rank": arch["q_lora_rank"],
        "kv_lora_rank": arch["kv_lora_rank"],
        "qk_nope_head_dim": arch["qk_nope_head_dim"],
        "qk_rope_head_dim": arch["qk_rope_head_dim"],
        "v_head_dim": arch["v_head_dim"],
        "mla_use_nope": arch["mla_use_nope"],
        "linear_attn_config": {
            "kda_layers": arch["linear_layers_1based"],
            "full_attn_layers": arch["full_attn_layers_1based"],
            "num_heads": lin["num_heads"],
            "head_dim": lin["head_dim"],
            "short_conv_kernel_size": lin["short_conv_kernel_size"],
        },
        "num_experts": arch["n_routed_experts"],
        "num_experts_per_token": arch["num_experts_per_tok"],
        "num_shared_experts": arch["n_shared_experts"],
        "moe_intermediate_size": arch["moe_intermediate_size"],
        "intermediate_size": arch["dense_intermediate_size"],
        "first_k_dense_replace": arch["first_k_dense_replace"],
        "moe_layer_freq": 1,
        "num_nextn_predict_layers": arch["mtp_layers"],
    }


def llama_config() -> dict[str, Any]:
    """A small llama config.json, enough for error tests that must not need ../shared."""
    return {
        "model_type": "llama",
        "hidden_size": 64,
        "vocab_size": 1000,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "max_position_embeddings": 4096,
        "torch_dtype": "bfloat16",
    }


# --- (a) every card loads --------------------------------------------------------------------


def test_expected_cards_are_present() -> None:
    assert set(model_names()) == {*HF_SOURCES, *PACKAGE_SOURCES, "kimi-linear-48b-a3b"}


@pytest.mark.parametrize("name", model_names())
def test_card_loads_under_its_file_name(name: str) -> None:
    card = model_card(name)
    assert card.name == name
    assert card.hf_id
    assert set(card.required_groups()) <= set(card.weight_precision)
    assert ("mtp" in card.weight_precision) == (card.mtp_layers > 0)


# --- (b) the cards are what the importer derives from the real configs ----------------------


@needs_shared
@pytest.mark.parametrize("name", sorted(HF_SOURCES))
def test_card_equals_import_of_its_config(name: str) -> None:
    card = model_card(name)
    assert card.source == f"../shared/data/{HF_SOURCES[name]}"
    imported = import_hf_config(load_hf_config(SHARED_DATA / HF_SOURCES[name]), name, card.source)
    assert architecture(imported) == architecture(card)


@needs_package
@pytest.mark.parametrize("name", sorted(PACKAGE_SOURCES))
def test_package_card_equals_import_of_its_config(name: str) -> None:
    assert PACKAGE_ROOT is not None
    card = model_card(name)
    assert card.source == f"aiconfigurator_core/model_configs/{PACKAGE_SOURCES[name]}"
    imported = import_hf_config(load_hf_config(PACKAGE_ROOT / card.source), name, card.source)
    assert architecture(imported) == architecture(card)


@needs_package
def test_llama_3_1_70b_config_is_the_llama_3_3_70b_architecture() -> None:
    assert PACKAGE_ROOT is not None
    configs = PACKAGE_ROOT / "aiconfigurator_core" / "model_configs"
    path = configs / "meta-llama--Meta-Llama-3.1-70B_config.json"
    imported = import_hf_config(load_hf_config(path), "llama-3.1-70b", str(path))
    assert architecture(imported) == architecture(model_card("llama-3.3-70b"))


@needs_shared
def test_deepseek_r1_config_has_the_v3_architecture() -> None:
    path = SHARED_DATA / "model_configs/hf/deepseek-ai--DeepSeek-R1_config.json"
    imported = import_hf_config(load_hf_config(path), "deepseek-r1", str(path))
    assert architecture(imported) == architecture(model_card("deepseek-v3"))


@needs_shared
def test_kimi_linear_card_equals_import_of_its_config_values() -> None:
    card = model_card("kimi-linear-48b-a3b")
    assert card.source == KIMI_LINEAR_SOURCE
    table = json.loads((SHARED_DATA / "model_configs/model_architectures.json").read_text())
    config = kimi_linear_config(table["Kimi-Linear-48B-A3B-Instruct"])
    imported = import_hf_config(config, card.name, KIMI_LINEAR_SOURCE)
    assert architecture(imported) == architecture(card)


# --- (c) Kimi K3 facts ----------------------------------------------------------------------


def test_kimi_k3_facts() -> None:
    card = model_card("kimi-k3")
    assert card.layers.count == 93
    assert card.count_layers("kda") == 69
    assert card.count_layers("mla") == 24
    assert card.layers.mixers["mla"][-2:] == [92, 93]
    assert len(card.layers.moe_layers) == 92
    assert card.layers.moe_layers == list(range(2, 94))
    assert card.dense_intermediate_size == 33792
    assert card.moe is not None
    assert (card.moe.num_experts, card.moe.top_k) == (896, 16)
    assert card.moe.routed_hidden_size == 3584
    assert card.moe.num_shared_experts == 2
    assert card.mla is not None
    assert card.mla.output_gate
    assert card.linear_attention is not None
    assert card.linear_attention.full_rank_gate
    assert card.weight_precision["routed_experts"] == "mxfp4"
    assert card.weight_precision["attention"] == "bf16"
    assert card.weight_precision["linear_attention"] == "bf16"
    assert card.mtp_layers == 0


def test_kimi_linear_facts() -> None:
    card = model_card("kimi-linear-48b-a3b")
    assert card.layers.mixers["mla"] == [4, 8, 12, 16, 20, 24, 27]
    assert card.count_layers("kda") == 20
    assert card.mla is not None
    assert card.mla.q_lora_rank is None
    assert set(card.weight_precision.values()) == {"bf16"}


def test_new_family_facts() -> None:
    qwen = model_card("qwen3-235b-a22b-fp8")
    assert qwen.moe is not None
    assert qwen.gqa is not None
    assert (qwen.moe.num_experts, qwen.moe.top_k, qwen.moe.num_shared_experts) == (128, 8, 0)
    assert qwen.layers.moe_layers == list(range(1, 95))
    assert qwen.dense_intermediate_size is None
    assert (qwen.gqa.num_heads, qwen.gqa.num_kv_heads) == (64, 4)
    # the native FP8 checkpoint: 128x128 block scales, router (mlp.gate) and lm_head kept bf16
    assert qwen.weight_precision["routed_experts"] == "fp8_block"
    assert qwen.weight_precision["attention"] == "fp8_block"
    assert qwen.weight_precision["router"] == "bf16"
    dense = model_card("qwen3-32b")
    assert dense.layers.moe_layers == []
    assert dense.dense_intermediate_size == 25600
    minimax = model_card("minimax-m2.5")
    assert minimax.moe is not None
    assert (minimax.moe.num_experts, minimax.moe.expert_intermediate_size) == (256, 1536)
    assert minimax.weight_precision["router"] == "bf16"
    assert minimax.weight_precision["routed_experts"] == "fp8_block"
    kimi = model_card("kimi-k2.5")
    assert kimi.model_type == "kimi_k25"
    assert kimi.weight_precision["routed_experts"] == "int4_g32"
    assert {kimi.weight_precision[g] for g in ("attention", "shared_experts", "dense_mlp")} == {
        "bf16"
    }
    # the same text model as Kimi K2 apart from the checkpoint's precisions
    same = NOT_ARCHITECTURE | {"model_type", "weight_precision", "max_context_tokens"}
    assert kimi.model_dump(exclude=same) == model_card("kimi-k2").model_dump(exclude=same)


def test_qwen3_moe_rule_and_int4_group_32() -> None:
    config = llama_config() | {
        "model_type": "qwen3_moe",
        "num_hidden_layers": 4,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "decoder_sparse_step": 2,
        "mlp_only_layers": [3],
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "pack-quantized",
            "ignore": ["lm_head", "re:.*self_attn.*"],
            "config_groups": {
                "g": {
                    "targets": ["Linear"],
                    "weights": {"num_bits": 4, "type": "int", "group_size": 32},
                }
            },
        },
    }
    card = import_hf_config(config, "q", "q.json")
    assert card.layers.moe_layers == [2]  # layer 4 (0-based 3) is in mlp_only_layers
    assert card.weight_precision["routed_experts"] == "int4_g32"
    assert card.weight_precision["dense_mlp"] == "int4_g32"
    assert card.weight_precision["attention"] == "bf16"


def test_minimax_m2_refuses_what_it_cannot_express() -> None:
    config = llama_config() | {
        "model_type": "minimax_m2",
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "attn_type_list": [1, 0],
    }
    with pytest.raises(SpecError, match="only full softmax attention") as info:
        import_hf_config(config, "m", "m.json")
    assert info.value.field == "attn_type_list"
    config["attn_type_list"] = [1, 1]
    card = import_hf_config(config | {"shared_intermediate_size": 0}, "m", "m.json")
    assert card.layers.moe_layers == [1, 2]
    assert card.moe is not None
    assert card.moe.expert_intermediate_size == 128
    with pytest.raises(SpecError, match="shared experts"):
        import_hf_config(config | {"shared_intermediate_size": 64}, "m", "m.json")


# --- (d) importer errors --------------------------------------------------------------------


def test_unknown_model_type_is_a_spec_error() -> None:
    config = llama_config() | {"model_type": "mamba9"}
    with pytest.raises(SpecError, match="unsupported model_type 'mamba9'") as info:
        import_hf_config(config, "x", "x.json")
    assert info.value.field == "model_type"
    assert "llama" in info.value.reason


def test_missing_hidden_size_is_a_spec_error() -> None:
    config = llama_config()
    del config["hidden_size"]
    with pytest.raises(SpecError, match="hidden_size") as info:
        import_hf_config(config, "x", "x.json")
    assert (info.value.file, info.value.field) == ("x.json", "hidden_size")


@needs_shared
def test_missing_key_in_text_config_names_its_path() -> None:
    config = load_hf_config(SHARED_DATA / HF_SOURCES["kimi-k3"])
    broken = copy.deepcopy(config)
    del broken["text_config"]["linear_attn_config"]["num_heads"]
    with pytest.raises(SpecError) as info:
        import_hf_config(broken, "k3", "k3.json")
    assert info.value.field == "text_config.linear_attn_config.num_heads"


def test_invalid_json_file_is_a_spec_error(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": ')
    with pytest.raises(SpecError, match="invalid JSON") as info:
        load_hf_config(path)
    assert info.value.field == "line 1"


def test_missing_and_non_object_files_are_spec_errors(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file"):
        load_hf_config(tmp_path / "absent.json")
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    with pytest.raises(SpecError, match="expected a JSON object"):
        load_hf_config(path)


def test_schema_violation_from_config_is_a_spec_error() -> None:
    config = llama_config() | {"num_key_value_heads": 3}
    with pytest.raises(SpecError, match="not a multiple of num_kv_heads") as info:
        import_hf_config(config, "x", "x.json")
    # named by the config keys the user edits, not the card's ``gqa``
    assert info.value.field == "num_attention_heads / num_key_value_heads"


def test_qwen3_next_without_layer_types_uses_the_interval() -> None:
    config = {
        "model_type": "qwen3_next",
        "hidden_size": 2048,
        "vocab_size": 151936,
        "num_hidden_layers": 8,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "full_attention_interval": 4,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "num_experts": 512,
        "num_experts_per_tok": 10,
        "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [0],
        "intermediate_size": 5120,
        "max_position_embeddings": 262144,
        "torch_dtype": "bfloat16",
    }
    card = import_hf_config(config, "qwen3-next-tiny", "q.json")
    assert card.layers.mixers == {"gdn": [1, 2, 3, 5, 6, 7], "gqa": [4, 8]}
    assert card.layers.moe_layers == [2, 3, 4, 5, 6, 7, 8]  # mlp_only_layers is 0-based
    assert card.dense_intermediate_size == 5120
    assert card.gqa is not None
    assert card.gqa.output_gate


# --- (e) YAML round trip --------------------------------------------------------------------


@pytest.mark.parametrize("name", model_names())
def test_card_to_yaml_round_trip(name: str, tmp_path: Path) -> None:
    card = model_card(name)
    path = tmp_path / f"{name}.yaml"
    path.write_text(card_to_yaml(card))
    assert load(ModelCard, path) == card


def test_card_yaml_keeps_layer_lists_on_few_lines() -> None:
    text = card_to_yaml(model_card("kimi-k3"))
    assert "kda: [1, 2, 3, 5," in text
    assert text.startswith("# Model card kimi-k3")
    assert len(text.splitlines()) < 120
    assert (MODEL_CARDS_DIR / "kimi-k3.yaml").read_text().startswith("# Model card kimi-k3")
