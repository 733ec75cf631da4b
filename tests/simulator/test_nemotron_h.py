"""Nemotron-H (``nemotron_h``): block patterns, Mamba2 state and non-gated relu2 experts,
against hand arithmetic from the configs; bad configs are one error line and exit 2.

The cards themselves are re-derived from their configs in test_model_cards.py
(``PACKAGE_SOURCES``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from simulator import catalog
from simulator.cli import app
from simulator.cost import ops
from simulator.cost.latency import LatencyModels
from simulator.cost.mamba2 import mamba2_decode, ssd_prefill_flops_per_token_head
from simulator.cost.step import StepCostModel
from simulator.kv_layout import kv_layout, state_bytes_per_layer
from simulator.memory import plan_memory
from simulator.model_import import import_hf_config
from simulator.specs import ModelCard, ServingConfig, SpecError
from simulator.specs.loading import parse
from simulator.weights import params_per_gpu, total_params

runner = CliRunner()
SUPER = "nemotron-3-super-120b"


def serving(**kw: object) -> ServingConfig:
    return ServingConfig.model_validate(kw)


def tiny_config(**over: Any) -> dict[str, Any]:
    """A small nemotron_h config.json with every block kind (no package needed)."""
    config: dict[str, Any] = {
        "model_type": "nemotron_h",
        "torch_dtype": "bfloat16",
        "hidden_size": 256,
        "vocab_size": 1000,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "hybrid_override_pattern": "ME*EM-",
        "num_hidden_layers": 6,
        "mamba_num_heads": 8,
        "mamba_head_dim": 32,
        "n_groups": 2,
        "ssm_state_size": 16,
        "conv_kernel": 4,
        "expand": 1,
        "mamba_ssm_cache_dtype": "float32",
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "intermediate_size": 512,
        "mlp_hidden_act": "relu2",
        "n_routed_experts": 8,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 128,
        "n_shared_experts": 1,
        "moe_shared_expert_intermediate_size": 192,
        "moe_latent_size": 64,
    }
    return config | over


# ------------------------------------------------------------------------------ the card


def test_block_pattern_becomes_mixers_and_mlps() -> None:
    card = import_hf_config(tiny_config(), "tiny", "tiny.json")
    assert card.layers.mixers == {"mamba2": [1, 5], "gqa": [3], "none": [2, 4, 6]}
    assert card.layers.moe_layers == [2, 4]
    assert card.layers.mlp_free == [1, 3, 5]
    assert card.dense_intermediate_size == 512  # the "-" block
    assert not card.gated_mlp
    la = card.linear_attention
    assert la is not None
    assert (la.kind, la.num_k_heads, la.num_v_heads, la.head_k_dim, la.head_v_dim) == (
        "mamba2", 2, 8, 16, 32,
    )  # fmt: skip
    assert la.conv_dim == 8 * 32 + 2 * 2 * 16  # d_inner + 2 n_groups d_state
    assert card.is_hybrid
    assert set(card.required_groups()) == {
        "embedding", "lm_head", "attention", "linear_attention", "dense_mlp", "router",
        "routed_experts", "shared_experts", "moe_latent",
    }  # fmt: skip


def test_ultra_block_list_reads_like_the_pattern() -> None:
    types = {"M": "mamba", "E": "moe", "*": "attention", "-": "mlp"}
    config = tiny_config()
    listed = {k: v for k, v in config.items() if k not in ("hybrid_override_pattern",)}
    listed["layers_block_type"] = [types[c] for c in config["hybrid_override_pattern"]]
    del listed["num_hidden_layers"]
    a = import_hf_config(config, "t", "t.json")
    b = import_hf_config(listed, "t", "t.json")
    skip = {"notes"}
    assert a.model_dump(exclude=skip) == b.model_dump(exclude=skip)


def test_super_card_facts() -> None:
    card = catalog.model_card(SUPER)
    assert card.layers.count == 88
    assert (card.count_layers("mamba2"), card.count_layers("gqa"), card.count_layers("none")) == (
        40, 8, 40,
    )  # fmt: skip
    assert len(card.layers.moe_layers) == 40
    assert len(card.layers.mlp_free) == 48
    assert card.num_dense_mlp_layers == 0
    assert card.moe is not None
    assert (card.moe.num_experts, card.moe.top_k, card.moe.routed_hidden_size) == (512, 22, 1024)
    assert card.mtp_layers == 1
    assert card.weight_precision["routed_experts"] == "nvfp4"
    assert card.weight_precision["embedding"] == "bf16"
    assert catalog.model_card("nemotron-3-super-120b-fp8").weight_precision["routed_experts"] == (
        "fp8"
    )


def test_a_layer_cannot_be_both_mlp_free_and_moe_or_empty() -> None:
    card = catalog.model_card("nemotron-3-nano-30b-a3b").model_dump()
    both = copy.deepcopy(card)
    both["layers"]["mlp_free"].append(both["layers"]["moe_layers"][0])
    with pytest.raises(SpecError, match="in both moe_layers and mlp_free"):
        parse(ModelCard, both, "c.yaml")
    empty = copy.deepcopy(card)
    empty["layers"]["moe_layers"].remove(2)
    empty["layers"]["mlp_free"].append(2)  # layer 2 is a `none` (MoE) block
    with pytest.raises(SpecError, match="no mixer"):
        parse(ModelCard, empty, "c.yaml")


# ------------------------------------------------------------------------- state bytes


def test_mamba2_state_bytes_by_hand() -> None:
    card = catalog.model_card(SUPER)
    # conv (conv_kernel - 1) x (d_inner + 2 n_groups d_state) in bf16, SSM state heads x
    # head_dim x d_state in fp32 (mamba_ssm_cache_dtype float32)
    conv = (4 - 1) * (128 * 64 + 2 * 8 * 128) * 2
    ssm = 128 * 64 * 128 * 4
    assert (conv, ssm) == (61_440, 4_194_304)
    assert state_bytes_per_layer(card, serving(tp=1)) == conv + ssm
    assert state_bytes_per_layer(card, serving(tp=2)) == (conv + ssm) / 2
    assert state_bytes_per_layer(card, serving(state_dtype="bf16")) == conv + ssm / 2
    mtp = serving(
        speculative={"method": "mtp", "num_speculative_tokens": 1, "acceptance_rate": 0.7}
    )
    assert state_bytes_per_layer(card, mtp) == (4 - 1 + 1) * 10_240 * 2 + ssm
    r = plan_memory(card, catalog.hardware_profile("gb300"), serving(), context_tokens=2048)
    assert r.state_bytes_per_seq_per_gpu == 40 * (conv + ssm)


def test_hybrid_page_alignment_follows_vllm() -> None:
    card = catalog.model_card(SUPER)
    page = 4_255_744  # one Mamba2 layer's state, TP1
    attn_token = 2 * 2 * 128 * 2  # K and V of 2 KV heads x 128, bf16
    layout = kv_layout(card, serving())
    # block = 16 x cdiv(state page, 16 x attention page per token); groups of 8 layers
    assert layout.block_size_tokens == 16 * -(-page // (16 * attn_token)) == 4160
    assert layout.group_size == 8
    assert [g.kind for g in layout.groups] == ["full"] + ["mamba"] * 5
    assert layout.bytes_per_block == 8 * 4160 * attn_token
    fp8 = kv_layout(card, serving(kv_cache_dtype="fp8"))
    assert fp8.block_size_tokens == 16 * -(-page // (16 * attn_token // 2)) == 8320


# ---------------------------------------------------------------------------- weights


def test_relu2_expert_weights_are_two_matrices() -> None:
    card = catalog.model_card(SUPER)
    p = params_per_gpu(card)
    moe_layers = 40
    assert p["routed_experts"].total == moe_layers * 512 * 2 * 1024 * 2688
    assert p["shared_experts"].total == moe_layers * 1 * 2 * 4096 * 5376
    assert p["moe_latent"].total == moe_layers * 2 * 4096 * 1024
    # in_proj (z, x B C, dt) + conv + out_proj per Mamba2 layer
    mamba = 4096 * (8192 + 10_240 + 128) + 10_240 * 4 + 8192 * 4096
    assert p["linear_attention"].total == 40 * mamba
    assert p["attention"].total == 8 * (4096 * (32 + 2 * 2) * 128 + 32 * 128 * 4096)
    assert total_params(card) / 1e9 == pytest.approx(120.668, abs=1e-3)
    assert total_params(card, mtp=True) / 1e9 == pytest.approx(123.610, abs=1e-3)
    dense = import_hf_config(tiny_config(), "tiny", "tiny.json")
    assert params_per_gpu(dense)["dense_mlp"].total == 2 * 256 * 512  # up, down
    gated = parse(ModelCard, dense.model_dump() | {"gated_mlp": True}, "g.yaml")
    assert params_per_gpu(gated)["dense_mlp"].total == 3 * 256 * 512


def test_relu2_moe_flops_and_bytes_are_two_thirds_of_gated() -> None:
    args = (64.0, 1024.0, 2688.0, 512.0, 22.0, 1.0, 1.0, 0.5625)
    gated, relu2 = ops.moe(*args), ops.moe(*args, matrices=2.0)
    assert relu2.flops == pytest.approx(gated.flops * 2 / 3)
    weights = ops.experts_touched(64.0, 512.0, 22.0, 512.0) * 1024 * 2688 * 0.5625
    acts = 64 * 22 * 2 * 1024 * ops.ACT_BYTES
    assert gated.bytes == pytest.approx(3 * weights + acts + 64 * 22 * 3 * 2688 * ops.ACT_BYTES)
    assert relu2.bytes == pytest.approx(2 * weights + acts + 64 * 22 * 2 * 2688 * ops.ACT_BYTES)


# ------------------------------------------------------------------------- cost model


def test_mamba2_decode_moves_the_state_once_each_way() -> None:
    w = mamba2_decode(batch=4, heads=128, head_dim=64, state=128, groups=8)
    state = 128 * 64 * 128 * 4.0
    acts = 4 * (128 * (2 * 64 + 1) + 2 * 8 * 128) * ops.ACT_BYTES
    assert w.bytes == 4 * 2 * state + acts
    assert w.flops == 5 * 4 * 128 * 64 * 128
    # 2 x (2 N P + chunk P + chunk N g/h + N P / chunk) at N 128, P 64, chunk 128, 16 heads/group
    assert ssd_prefill_flops_per_token_head(128, 64, 1 / 16) == 2 * (16_384 + 8192 + 1024 + 64)


def test_step_prices_mamba2_on_the_prior_and_counts_one_norm_per_block() -> None:
    card = catalog.model_card(SUPER)
    device = catalog.hardware_profile("gb300")
    latency = LatencyModels.for_device(device)
    model = StepCostModel(card, device, serving(), latency)
    assert model.n_norms == 88  # one RMSNorm per block, not two per layer
    cost = model.step(np.array([1] * 8 + [512]), np.array([1000] * 8 + [0]), detail=True)
    lines = {x.name: x for x in cost.lines}
    assert lines["mamba2.state_update"].count == 40
    assert lines["mamba2.chunked_scan"].op_class == "mamba2_prefill"
    assert lines["moe.shared_up"].count == 40  # non-gated: no gate_up GEMM
    assert "mlp.gate_up" not in lines
    assert lines["rmsnorm"].count == 88
    state = 128 * 64 * 128 * 4.0
    assert lines["mamba2.state_update"].bytes >= 8 * 2 * state
    assert latency.source("mamba2_decode") == "prior"
    assert latency.source("mamba2_prefill") == "prior"


# ------------------------------------------------------------------------ bad configs


def _import(tmp_path: Path, config: dict[str, Any]) -> tuple[int, str]:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = runner.invoke(app, ["models", "import", str(path)])
    return result.exit_code, result.stderr


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"num_hidden_layers": 7},
            "hybrid_override_pattern: has 6 blocks but num_hidden_layers is 7 (one per block)",
        ),
        (
            {"hybrid_override_pattern": "ME*XM-"},
            "hybrid_override_pattern: unknown block 'X' at block 4; known: M (Mamba2), E (MoE),"
            " * (attention), - (MLP)",
        ),
        ({"hybrid_override_pattern": ""}, "hybrid_override_pattern: is empty: no blocks"),
        ({"n_groups": 3}, "n_groups: 3 groups do not divide the 8 mamba heads"),
        ({"n_groups": 0}, "n_groups: must be at least 1, got 0"),  # divided by zero before
        ({"mamba_ssm_cache_dtype": [4]}, "mamba_ssm_cache_dtype: unsupported state dtype [4]"),
        ({"mamba_ssm_cache_dtype": "int8"}, "mamba_ssm_cache_dtype: unsupported state dtype"),
    ],
)
def test_bad_config_is_one_line_and_exit_2(
    tmp_path: Path, change: dict[str, Any], expected: str
) -> None:
    code, stderr = _import(tmp_path, tiny_config(**change))
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"error: {tmp_path / 'config.json'}: ")
    assert expected in lines[0]


def test_unknown_block_type_in_a_block_list(tmp_path: Path) -> None:
    config = tiny_config()
    del config["hybrid_override_pattern"]
    config["layers_block_type"] = ["mamba", "moe", "attention", "moe", "mamba", "conv"]
    code, stderr = _import(tmp_path, config)
    assert code == 2
    assert "layers_block_type: unknown block type 'conv' at block 6" in stderr


def test_missing_pattern_names_the_key(tmp_path: Path) -> None:
    config = tiny_config()
    del config["hybrid_override_pattern"]
    code, stderr = _import(tmp_path, config)
    assert code == 2
    assert "hybrid_override_pattern: missing required key" in stderr
