"""GLM-5 (DSA sparse MLA) and DeepSeek-V4 (compressed sparse attention): the importer families,
the cards' KV bytes against hand arithmetic, weights against published counts and checkpoint
sizes, the step cost's top-k bound, a plan run, and a bad config as one error line."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from simulator import catalog
from simulator.cli import app
from simulator.cost.step import StepCostModel
from simulator.deployment import check_deployment
from simulator.kv_layout import blocks_per_seq, kv_layout
from simulator.memory import plan_memory
from simulator.model_import import import_hf_config, load_hf_config
from simulator.sparse_attention import window_bytes_per_seq
from simulator.specs import ServingConfig, SpecError
from simulator.specs.precision import weight_bytes
from simulator.weights import params_per_gpu, precision_of, total_params
from tests.simulator.test_model_cards import PACKAGE_ROOT, needs_package

CONFIGS = "aiconfigurator_core/model_configs"


def config(name: str) -> dict[str, Any]:
    assert PACKAGE_ROOT is not None
    return load_hf_config(PACKAGE_ROOT / CONFIGS / name)


def serving(**kw: object) -> ServingConfig:
    return ServingConfig.model_validate(kw)


def checkpoint_bytes(name: str) -> float:
    """Every weight at the card's precisions, the MTP module included (what a download holds)."""
    card = catalog.model_card(name)
    s = serving()
    return sum(
        weight_bytes(split.total, precision_of(card, s, group))
        for group, split in params_per_gpu(card, mtp=True).items()
    )


# ------------------------------------------------------------------------------ the cards


def test_glm5_card_facts() -> None:
    card = catalog.model_card("glm-5")
    assert card.model_type == "glm_moe_dsa"
    assert card.layers.mixers == {"sparse_mla": list(range(1, 79))}
    assert card.layers.moe_layers == list(range(4, 79))  # first_k_dense_replace 3
    assert card.mla is not None
    assert card.mla.indexer is not None
    assert (card.mla.indexer.num_heads, card.mla.indexer.head_dim) == (32, 128)
    assert card.mla.indexer.topk_tokens == 2048
    assert (card.mla.qk_nope_head_dim, card.mla.v_head_dim) == (192, 256)
    assert card.mtp_layers == 1
    assert set(card.weight_precision.values()) == {"bf16"}


def test_glm5_checkpoint_precisions() -> None:
    fp8 = catalog.model_card("glm-5-fp8").weight_precision
    assert fp8["routed_experts"] == fp8["attention"] == fp8["mtp"] == "fp8_block"
    assert fp8["router"] == fp8["lm_head"] == "bf16"
    # ModelOpt hf_quant_config.json beside the config: every Linear NVFP4 but self_attn
    # (indexer included), lm_head and the MTP layer (model.layers.78*)
    nvfp4 = catalog.model_card("glm-5-nvfp4").weight_precision
    assert nvfp4["routed_experts"] == nvfp4["shared_experts"] == nvfp4["dense_mlp"] == "nvfp4"
    assert nvfp4["attention"] == nvfp4["lm_head"] == nvfp4["mtp"] == "bf16"


def test_deepseek_v4_card_facts() -> None:
    flash = catalog.model_card("deepseek-v4-flash")
    assert flash.layers.mixers["swa_mqa"] == [1, 2]
    assert flash.layers.mixers["csa"] == list(range(3, 44, 2))
    assert flash.layers.mixers["hca"] == list(range(4, 43, 2))
    assert flash.layers.moe_layers == list(range(1, 44))
    cfg = flash.compressed_attention
    assert cfg is not None
    assert (cfg.num_heads, cfg.head_dim, cfg.o_groups, cfg.index_topk) == (64, 512, 8, 512)
    assert (cfg.sliding_window_tokens, cfg.residual_streams) == (128, 4)
    assert flash.weight_precision["routed_experts"] == "mxfp4"  # expert_dtype fp4
    assert flash.weight_precision["attention"] == "fp8_block"
    pro = catalog.model_card("deepseek-v4-pro")
    assert pro.count_layers("csa") == 30
    assert pro.count_layers("hca") == 31
    assert pro.count_layers("swa_mqa") == 0
    nv = catalog.model_card("deepseek-v4-flash-nvfp4").weight_precision
    assert nv["routed_experts"] == "nvfp4"
    assert nv["mtp"] == "mxfp4"  # mtp.* is on the ModelOpt ignore list
    assert nv["attention"] == nv["shared_experts"] == "fp8_block"


# ------------------------------------------------------------------------- KV by hand


def test_glm5_kv_bytes_per_token_include_the_indexer_keys() -> None:
    card = catalog.model_card("glm-5-fp8")
    b200 = catalog.hardware_profile("b200")
    # 78 layers x (MLA latent + indexer key of 128 fp8 + one fp32 scale = 132 B)
    for kv, latent in (("fp8_ds_mla", 656), ("auto", (512 + 64) * 2), ("fp8", 576)):
        r = plan_memory(card, b200, serving(tp=8, kv_cache_dtype=kv), context_tokens=10_000)
        assert r.kv_bytes_per_token_per_gpu == 78 * (latent + 132)
    assert 78 * (656 + 132) == 61_464


def test_deepseek_v4_flash_kv_bytes_by_hand() -> None:
    card = catalog.model_card("deepseek-v4-flash")
    b200 = catalog.hardware_profile("b200")
    entry = 448 + 64 * 2 + 7 + 1  # fp8 NoPE, bf16 RoPE, ue8m0 scales, pad = 584
    key = 128 + 4
    per_token = 21 * (entry + key) / 4 + 20 * entry / 128
    assert per_token == 3_850.25
    window = 43 * 128 * entry  # every layer's 128-token window
    states = 21 * 8 * (2 * 2 * 512 + 2 * 2 * 128) * 4 + 20 * 128 * (2 * 512) * 4  # fp32
    assert window + states == 15_420_416
    r = plan_memory(card, b200, serving(tp=8), context_tokens=32_768)
    assert r.kv_bytes_per_token_per_gpu == per_token  # replicated on every TP rank
    assert r.swa_kv_bytes_per_seq_per_gpu == window + states
    assert window_bytes_per_seq(card, 64) == 43 * 64 * entry + 21 * 8 * 10_240 + 20 * 64 * 4_096
    # the pool: 256-token blocks holding every compressed layer; the windows as extra blocks
    layout = kv_layout(card, serving(tp=8))
    assert layout.block_size_tokens == 256
    assert layout.bytes_per_block == 256 * per_token
    held = blocks_per_seq(layout, serving(tp=8), 32_768) * layout.bytes_per_block
    assert held == pytest.approx(32_768 * per_token + window + states, rel=0.03)
    assert r.max_seqs_at_context == r.num_blocks // blocks_per_seq(layout, serving(tp=8), 32_768)


def test_unmodelled_deployments_are_refused() -> None:
    flash = catalog.model_card("deepseek-v4-flash")
    with pytest.raises(SpecError, match="decode context parallel") as info:
        check_deployment(flash, serving(tp=8, dcp=8))
    assert info.value.field == "serving.dcp"
    with pytest.raises(SpecError, match="output-projection groups"):
        check_deployment(catalog.model_card("deepseek-v4-pro"), serving(tp=32, dp=1))


# --------------------------------------------------------------------- weights vs published


@pytest.mark.parametrize(
    ("name", "published"),
    [
        ("glm-5", 744e9),  # technical report, without MTP
        ("deepseek-v4-flash", 284e9),
        ("deepseek-v4-pro", 1.6e12),  # "1.6T", rounded
    ],
)
def test_parameter_counts_match_published(name: str, published: float) -> None:
    assert total_params(catalog.model_card(name)) == pytest.approx(published, rel=0.03)


def test_glm5_with_mtp_matches_the_safetensors_count() -> None:
    # Hugging Face's count of the zai-org/GLM-5-FP8 safetensors: 753.9B (MTP layer included)
    assert total_params(catalog.model_card("glm-5"), mtp=True) == pytest.approx(753.9e9, rel=0.01)


@pytest.mark.parametrize(
    ("name", "download_gb"),
    [("deepseek-v4-flash", 160.0), ("deepseek-v4-pro", 865.0)],  # approximate download sizes
)
def test_checkpoint_bytes_match_the_download_size(name: str, download_gb: float) -> None:
    assert checkpoint_bytes(name) / 1e9 == pytest.approx(download_gb, rel=0.03)


# ----------------------------------------------------------------------------- step cost


def test_sparse_attention_reads_at_most_top_k_entries() -> None:
    b200 = catalog.hardware_profile("b200")
    for name, core in (
        ("glm-5-fp8", "sparse_mla.decode_attention"),
        ("deepseek-v4-flash", "v4.csa.decode_attention"),
    ):
        m = StepCostModel(catalog.model_card(name), b200, serving(tp=8))

        def line(ctx: int, op: str, m: StepCostModel = m) -> float:
            cost = m.step(np.array([1] * 8), np.array([ctx] * 8), detail=True)
            return next(x.bytes for x in cost.lines if x.name == op)

        # the attention core stops growing once the context passes the top-k span ...
        assert line(100_000, core) == pytest.approx(line(50_000, core), rel=0.01)
        assert line(1_000, core) < line(50_000, core)
        # ... while the indexer still reads every key
        idx = core.rsplit(".", 1)[0] + ".indexer.decode_logits_topk"
        assert line(100_000, idx) == pytest.approx(2 * line(50_000, idx), rel=0.01)


def test_prefill_and_mtp_drafts_are_priced() -> None:
    b200 = catalog.hardware_profile("b200")
    spec = {"method": "mtp", "num_speculative_tokens": 1, "acceptance_rate": 0.7}
    for name in ("glm-5-fp8", "deepseek-v4-flash", "deepseek-v4-pro"):
        m = StepCostModel(catalog.model_card(name), b200, serving(tp=8, speculative=spec))
        cost = m.step(np.array([2, 2, 4096]), np.array([30_000, 30_000, 20_000]), detail=True)
        names = {x.name for x in cost.lines}
        assert any(n.endswith("prefill_attention") for n in names)
        assert any(n.startswith("draft.") for n in names)
        assert all(math.isfinite(x.seconds) and x.seconds >= 0 for x in cost.lines)
        # the templates path prices a step like the full path
        fast = m.step_seconds(np.array([2, 2, 4096]), np.array([30_000, 30_000, 20_000]))
        assert fast == pytest.approx(cost.seconds, rel=1e-9)


# ------------------------------------------------------------------ importer, end to end


@needs_package
def test_bad_config_is_one_error_line(tmp_path: Path) -> None:
    data = config("deepseek-ai--DeepSeek-V4-Flash_config.json")
    del data["compress_ratios"]
    path = tmp_path / "v4_config.json"
    path.write_text(json.dumps(data))
    result = CliRunner().invoke(app, ["models", "import", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {path}: compress_ratios: missing required key 'compress_ratios'"
    ]


@needs_package
@pytest.mark.parametrize(
    ("file", "edit", "field", "reason"),
    [
        (
            "deepseek-ai--DeepSeek-V4-Flash_config.json",
            {"compress_ratios": [8] * 44},
            "compress_ratios",
            "ratio 8 at layer 1",
        ),
        (
            "deepseek-ai--DeepSeek-V4-Flash_config.json",
            {"num_key_value_heads": 8},
            "num_key_value_heads",
            "one shared KV head",
        ),
        ("zai-org--GLM-5.2_config.json", {}, "indexer_types", "'shared' layers"),
        ("zai-org--GLM-5_config.json", {"index_topk": None}, "index_topk", "is null"),
    ],
)
def test_importer_refuses_what_it_cannot_express(
    file: str, edit: dict[str, Any], field: str, reason: str
) -> None:
    data = copy.deepcopy(config(file)) | edit
    with pytest.raises(SpecError, match=reason) as info:
        import_hf_config(data, "x", file)
    assert info.value.field == field


@needs_package
def test_deepseek_v32_reads_as_sparse_mla() -> None:
    card = import_hf_config(
        config("deepseek-ai--DeepSeek-V3.2_config.json"), "v32", "deepseek-v3.2.json"
    )
    assert card.layers.mixers == {"sparse_mla": list(range(1, 62))}
    assert card.mla is not None
    assert card.mla.indexer is not None
    assert card.mla.indexer.num_heads == 64
    # the V3 architecture (671B) plus the indexers
    assert total_params(card) == pytest.approx(671e9, rel=0.01)
    # GLM-5.1 is GLM-5's architecture (mlp_layer_types and indexer_types "full" everywhere)
    glm51 = import_hf_config(config("nvidia--GLM-5.1-NVFP4_config.json"), "g", "g.json")
    assert glm51.layers == catalog.model_card("glm-5").layers
    assert glm51.weight_precision["shared_experts"] == "bf16"  # on its ignore list


def test_plan_run_deepseek_v4_flash_completes(tmp_path: Path) -> None:
    scenario = tmp_path / "v4.yaml"
    scenario.write_text(
        "name: v4-small\nmodel: deepseek-v4-flash\ndevice: b200\nserving:\n  tp: 8\n"
        "workload:\n  kind: random\n  input_tokens: 2048\n  output_tokens: 256\n"
        "  num_requests: 64\n  concurrency: 16\nseed: 0\n"
    )
    result = CliRunner().invoke(app, ["run", str(scenario), "--json"])
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["requests_finished"] == 64
    assert out["output_tok_per_s_per_gpu"] > 0
