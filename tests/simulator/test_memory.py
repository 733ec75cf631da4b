"""Memory planner rules against hand computation and published figures."""

from __future__ import annotations

import math

import pytest

from simulator import catalog
from simulator.deployment import check_deployment, check_device
from simulator.fits import fewest_gpus
from simulator.kv_layout import (
    attention_bytes_per_token_per_layer,
    blocks_per_seq,
    kv_layout,
    state_bytes_per_layer,
)
from simulator.memory import plan_memory
from simulator.specs import HardwareProfile, ServingConfig, SpecError
from simulator.specs.precision import WEIGHT_FORMATS, weight_bytes
from simulator.weights import params_per_gpu, total_params, weights_per_gpu

MIB = 1 << 20


def serving(**kw: object) -> ServingConfig:
    return ServingConfig.model_validate(kw)


# ----------------------------------------------------------------------------- KV per token


def test_deepseek_r1_fp8_kv_is_35136_bytes_per_token() -> None:
    # 61 MLA layers x (512 + 64) latent elements x 1 byte (LMSYS GB300 blog: 35,136 B)
    card = catalog.model_card("deepseek-v3")
    device = catalog.hardware_profile("b200")
    for tp in (1, 8):
        r = plan_memory(card, device, serving(tp=tp, kv_cache_dtype="fp8"), context_tokens=1000)
        assert r.kv_bytes_per_token_per_gpu == 61 * 576 == 35_136  # replicated across TP
    r = plan_memory(card, device, serving(tp=8, dcp=8, kv_cache_dtype="fp8"), context_tokens=1000)
    assert r.kv_bytes_per_token_per_gpu == 35_136 / 8
    bf16 = plan_memory(card, device, serving(tp=8), context_tokens=1000)
    assert bf16.kv_bytes_per_token_per_gpu == 61 * 1152


def test_mla_packed_fp8_format_is_656_bytes() -> None:
    card = catalog.model_card("deepseek-v3")
    r = plan_memory(
        card, catalog.hardware_profile("b200"), serving(tp=8, kv_cache_dtype="fp8_ds_mla"), 1000
    )
    assert r.kv_bytes_per_token_per_gpu == 61 * 656


def test_gqa_kv_heads_split_by_tp_then_replicated() -> None:
    card = catalog.model_card("llama-3.3-70b")  # 80 layers, 8 KV heads x 128, bf16
    device = catalog.hardware_profile("h200")
    per_layer_tp1 = 2 * 8 * 128 * 2
    assert plan_memory(card, device, serving(tp=1), 10).kv_bytes_per_token_per_gpu == (
        80 * per_layer_tp1
    )
    assert plan_memory(card, device, serving(tp=8), 10).kv_bytes_per_token_per_gpu == (
        80 * per_layer_tp1 / 8
    )
    # 16 ranks > 8 KV heads: one head per rank, replicated (no further saving)
    tp16 = attention_bytes_per_token_per_layer(card, serving(tp=16), "gqa")
    assert tp16 == attention_bytes_per_token_per_layer(card, serving(tp=8), "gqa")
    assert tp16 == per_layer_tp1 / 8


def test_sliding_window_layers_are_capped_at_the_window() -> None:
    card = catalog.model_card("gpt-oss-120b")  # 18 full + 18 sliding (128) layers, 8 KV x 64
    r = plan_memory(card, catalog.hardware_profile("h100"), serving(tp=1), context_tokens=100_000)
    per_layer = 2 * 8 * 64 * 2
    assert r.kv_bytes_per_token_per_gpu == 18 * per_layer
    assert r.kv_bytes_per_seq_per_gpu == 18 * per_layer * 100_000
    assert r.swa_kv_bytes_per_seq_per_gpu == 18 * per_layer * 128
    layout = kv_layout(card, serving(tp=1))
    # sliding groups hold ceil((128-1)/16)+1 = 9 blocks however long the sequence
    assert blocks_per_seq(layout, serving(tp=1), 100_000) == math.ceil(100_000 / 16) + 9


# ----------------------------------------------------------------------------- recurrent state


def test_kimi_linear_keeps_about_40_mib_of_fp32_kda_state_per_sequence() -> None:
    card = catalog.model_card("kimi-linear-48b-a3b")
    r = plan_memory(card, catalog.hardware_profile("h200"), serving(tp=1), context_tokens=4096)
    recurrent = 20 * 32 * 128 * 128 * 4  # 20 KDA layers x 32 heads x 128 x 128 fp32
    conv = 20 * 3 * 32 * 128 * 3 * 2  # q, k, v channels x (kernel 4 - 1) x bf16
    assert recurrent == 40 * MIB
    assert r.state_bytes_per_seq_per_gpu == recurrent + conv
    # split by TP, not by DCP
    tp4 = plan_memory(card, catalog.hardware_profile("h200"), serving(tp=4), 4096)
    tp4_dcp = plan_memory(card, catalog.hardware_profile("h200"), serving(tp=4, dcp=4), 4096)
    assert tp4.state_bytes_per_seq_per_gpu == r.state_bytes_per_seq_per_gpu / 4
    assert tp4_dcp.state_bytes_per_seq_per_gpu == tp4.state_bytes_per_seq_per_gpu
    assert tp4_dcp.kv_bytes_per_token_per_gpu == tp4.kv_bytes_per_token_per_gpu / 4


def test_bf16_state_halves_the_recurrent_part() -> None:
    card = catalog.model_card("kimi-linear-48b-a3b")
    fp32 = state_bytes_per_layer(card, serving(tp=1))
    bf16 = state_bytes_per_layer(card, serving(tp=1, state_dtype="bf16"))
    assert fp32 - bf16 == 32 * 128 * 128 * 2


@pytest.mark.parametrize(
    ("tp", "kv_dtype", "block"),
    [(1, "auto", 1920), (2, "auto", 1024), (4, "auto", 512), (8, "auto", 256),
     (1, "fp8", 3840), (4, "fp8", 1024)],
)  # fmt: skip
def test_kimi_linear_hybrid_block_size_matches_vllm(tp: int, kv_dtype: str, block: int) -> None:
    # vllm_mechanics.md 2.3: block = 128 * ceil(state page / (128 * 1152 B))
    card = catalog.model_card("kimi-linear-48b-a3b")
    layout = kv_layout(card, serving(tp=tp, kv_cache_dtype=kv_dtype))
    assert layout.block_size_tokens == block
    # 4 groups of 7 layers: MLA(7), KDA 7/7/6+1 padding; each block = 7 layer pages
    assert [g.kind for g in layout.groups] == ["full", "mamba", "mamba", "mamba"]
    assert layout.group_size == 7
    per_token = 1152 if kv_dtype == "auto" else 576
    assert layout.bytes_per_block == 7 * block * per_token


def test_qwen35_block_size_is_528_at_tp8() -> None:
    # vllm-project/vllm#40696 reports block_size 528 for Qwen3.5; by hand at TP8:
    # GDN state/rank = 8 heads x 128 x 128 x 4 + (2*16*128 + 64*128)/8 x 3 x 2 = 533,504 B;
    # attention page/token = 2 x 1 KV head x 256 x 2 = 1024 B; 16 * ceil(533504 / 16384) = 528
    card = catalog.model_card("qwen3.5-397b-a17b")
    assert kv_layout(card, serving(tp=8)).block_size_tokens == 528


def test_state_pages_per_running_request() -> None:
    card = catalog.model_card("kimi-linear-48b-a3b")
    s = serving(tp=1)
    layout = kv_layout(card, s)
    # 53 attention blocks of 1920 for 100k tokens + 3 KDA groups x 2 pages (align mode)
    assert blocks_per_seq(layout, s, 100_000) == 53 + 6
    no_cache = serving(tp=1, enable_prefix_caching=False)
    assert blocks_per_seq(layout, no_cache, 100_000) == 53 + 3
    # DCP: an attention block covers block_size x dcp tokens; states are not sharded
    dcp = serving(tp=4, dcp=4)
    layout4 = kv_layout(card, dcp)
    assert blocks_per_seq(layout4, dcp, 100_000) == math.ceil(100_000 / (512 * 4)) + 6


# ----------------------------------------------------------------------------- weights


def test_mxfp4_costs_4_25_bits_per_weight() -> None:
    assert WEIGHT_FORMATS["mxfp4"].bits_per_element == 4.25
    assert WEIGHT_FORMATS["nvfp4"].bits_per_element == 4.5
    assert weight_bytes(32, "mxfp4") == 17  # 16 B of nibbles + one 8-bit scale


def test_kimi_k3_routed_experts_are_mxfp4_and_sharded() -> None:
    card = catalog.model_card("kimi-k3")
    routed_params = 92 * 896 * 3 * 3584 * 3072  # 92 MoE layers, latent 3584 -> 3072 -> 3584
    whole = params_per_gpu(card)["routed_experts"].total
    assert whole == routed_params
    for cfg in (serving(tp=8), serving(tp=8, ep=8)):
        rows = {g.group: g for g in weights_per_gpu(card, cfg)}
        assert rows["routed_experts"].precision == "mxfp4"
        assert rows["routed_experts"].bytes_per_gpu == pytest.approx(routed_params / 8 * 4.25 / 8)
        assert rows["attention"].precision == "bf16"


def test_tp_shards_all_but_the_replicated_parts() -> None:
    card = catalog.model_card("deepseek-v3")
    tp1 = params_per_gpu(card, tp=1)
    tp8 = params_per_gpu(card, tp=8)
    for group, split in tp8.items():
        assert split.sharded == pytest.approx(tp1[group].sharded / 8), group
        assert split.replicated == tp1[group].replicated, group
    # MLA down-projections (q_a, kv_a) are replicated: 7168 x (1536 + 576) per layer
    assert tp8["attention"].replicated == 61 * 7168 * (1536 + 576)
    assert tp8["router"].replicated == 58 * 7168 * 256


@pytest.mark.parametrize("name", catalog.model_names())
def test_parameter_count_matches_published_total(name: str) -> None:
    card = catalog.model_card(name)
    if card.published is None:
        pytest.skip(f"{name}: no published parameter count in its card")
    # published totals are rounded ("48B", "397B"); 4 % covers rounding and the omitted norms
    assert total_params(card) == pytest.approx(card.published.total_params, rel=0.04)


# ----------------------------------------------------------------------------- capacity


def test_capacity_accounting_is_consistent() -> None:
    card = catalog.model_card("kimi-linear-48b-a3b")
    device = catalog.hardware_profile("h200")
    r = plan_memory(card, device, serving(tp=1), context_tokens=100_000, num_seqs=16)
    assert r.num_blocks == int(r.kv_cache_bytes_per_gpu // r.bytes_per_block)
    assert r.max_seqs_at_context == r.num_blocks // r.blocks_per_seq
    assert r.kv_cache_bytes_per_gpu == pytest.approx(
        0.92 * device.usable_memory_bytes
        - r.weight_bytes_per_gpu
        - r.activation_reserve_bytes_per_gpu
        - r.runtime_reserve_bytes_per_gpu
    )
    layout = kv_layout(card, serving(tp=1))
    n = r.max_context_for_num_seqs
    assert n < card.max_context_tokens  # limited by memory, not by the model
    assert 16 * blocks_per_seq(layout, serving(tp=1), n) <= r.num_blocks
    assert 16 * blocks_per_seq(layout, serving(tp=1), n + layout.block_size_tokens) > r.num_blocks


def test_dcp_multiplies_long_context_capacity() -> None:
    card = catalog.model_card("kimi-k3")
    device = catalog.hardware_profile("mi355x")
    base = plan_memory(card, device, serving(tp=8), context_tokens=142_000)
    dcp8 = plan_memory(card, device, serving(tp=8, dcp=8), context_tokens=142_000)
    assert base.fits
    assert dcp8.fits
    assert dcp8.kv_bytes_per_seq_per_gpu == pytest.approx(base.kv_bytes_per_seq_per_gpu / 8)
    assert dcp8.state_bytes_per_seq_per_gpu == base.state_bytes_per_seq_per_gpu
    # state pages do not shrink, so the gain is below 8x but well above 1x
    assert base.max_seqs_at_context < dcp8.max_seqs_at_context < 8 * base.max_seqs_at_context


def test_kimi_k3_does_not_fit_on_8_h200() -> None:
    card = catalog.model_card("kimi-k3")
    r = plan_memory(card, catalog.hardware_profile("h200"), serving(tp=8), 142_000)
    assert not r.fits
    assert r.weight_bytes_per_gpu > r.budget_bytes_per_gpu


def test_fits_on_is_the_smallest_device_that_holds_the_model() -> None:
    devices = [catalog.hardware_profile(n) for n in catalog.device_names()]
    card = catalog.model_card("kimi-linear-48b-a3b")  # ~98 GB in bf16
    answer = plan_memory(card, devices[0], serving(), 1000, devices=devices).fits_on
    count, name = answer.split("x ")
    assert count == "1"
    chosen = catalog.hardware_profile(name)
    for d in devices:
        r = plan_memory(card, d, serving(), 1000, devices=devices)
        holds = r.kv_cache_bytes_per_gpu > 0
        if d.usable_memory_bytes < chosen.usable_memory_bytes:
            assert not holds, d.name
        if d.name == chosen.name:
            assert holds
    # no single GPU holds Kimi K3: the answer is the largest device whose scale-up domain holds
    # it (a 480 GB PCIe card or a Mac, one per replica, does not)
    k3_card = catalog.model_card("kimi-k3")
    k3 = plan_memory(k3_card, devices[0], serving(), 1000, devices=devices)

    def within_domain(d: HardwareProfile) -> bool:
        n = fewest_gpus(k3_card, serving(), d)
        return n is not None and n <= (d.scale_up.domain_size if d.scale_up else 1)

    largest = max(filter(within_domain, devices), key=lambda d: d.usable_memory_bytes)
    assert k3.fits_on.endswith(f"x {largest.name}")
    assert int(k3.fits_on.split("x ")[0]) >= 4


def test_more_memory_never_holds_fewer_sequences() -> None:
    card = catalog.model_card("deepseek-v3")
    device = catalog.hardware_profile("b300")
    seqs = [
        plan_memory(
            card, device, serving(tp=8, gpu_memory_utilization=u), 32_000
        ).max_seqs_at_context
        for u in (0.85, 0.9, 0.95)
    ]
    assert seqs == sorted(seqs)
    assert seqs[0] < seqs[-1]


# ----------------------------------------------------------------------------- bad deployments


@pytest.mark.parametrize(
    ("model", "kw", "field"),
    [
        ("kimi-k3", {"tp": 5}, "serving.tp"),  # 96 heads
        ("llama-3.3-70b", {"tp": 3}, "serving.tp"),
        ("qwen3.5-397b-a17b", {"tp": 32}, "serving.tp"),  # 16 GDN key heads
        ("llama-3.3-70b", {"tp": 8, "ep": 8}, "serving.ep"),  # dense model
        ("llama-3.3-70b", {"kv_cache_dtype": "fp8_ds_mla"}, "serving.kv_cache_dtype"),
        ("kimi-k3", {"speculative": {"method": "mtp", "num_speculative_tokens": 2,
                                     "acceptance_rate": 0.7}}, "serving.speculative.method"),
        ("llama-3.3-70b", {"weight_precision": {"routed_experts": "mxfp4"}},
         "serving.weight_precision.routed_experts"),
    ],
)  # fmt: skip
def test_bad_deployment_names_the_field(model: str, kw: dict[str, object], field: str) -> None:
    with pytest.raises(SpecError) as err:
        check_deployment(catalog.model_card(model), serving(**kw), source="s.yaml")
    assert err.value.field == field
    assert str(err.value).startswith(f"s.yaml: {field}: ")


def test_tp_beyond_the_scale_up_domain_is_refused() -> None:
    with pytest.raises(SpecError, match="scale-up domain"):
        check_device(serving(tp=16), catalog.hardware_profile("h200"))
    check_device(serving(tp=16), catalog.hardware_profile("gb300"))  # NVL72


def test_more_sequences_than_max_num_seqs_do_not_fit() -> None:
    # one-token sequences fit the KV pool many times over; vLLM still runs max_num_seqs at once
    card, device = catalog.model_card("llama-3.1-8b"), catalog.hardware_profile("h100")
    serving = ServingConfig(tp=1)
    at_limit = plan_memory(card, device, serving, context_tokens=1, num_seqs=1)
    limit = at_limit.max_num_seqs
    assert plan_memory(card, device, serving, context_tokens=1, num_seqs=limit).fits
    over = plan_memory(card, device, serving, context_tokens=1, num_seqs=limit + 1)
    assert not over.fits
    assert over.fits_reason.startswith(f"max_num_seqs {limit:,} runs at most {limit:,} sequences")
