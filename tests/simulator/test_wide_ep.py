"""Wide expert parallelism (EPLB's redundant experts, load imbalance, the dispatch / combine
all-to-alls over the scale-up link and the scale-out NIC) and the latent-MoE projection
placement, against hand arithmetic on a tiny latent MoE (docs/rack-scale.md); bad inputs
are one line naming the field."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from simulator import catalog
from simulator.cli import app
from simulator.cost import ops
from simulator.cost.shapes import OpLine
from simulator.cost.step import StepCostModel
from simulator.deployment import check_deployment, check_device
from simulator.measured import device as measured_device
from simulator.memory import plan_memory
from simulator.model_import import import_hf_config
from simulator.specs import HardwareProfile, ModelCard, ServingConfig, SpecError
from simulator.weights import weights_per_gpu

runner = CliRunner()

# a small nemotron_h-style latent MoE: 8 experts, top-2, relu2 (2 matrices), latent 64
HIDDEN, LATENT, EXPERTS, TOPK, INTER, MOE_LAYERS = 256, 64, 8, 2, 128, 2


def tiny_config(**over: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "model_type": "nemotron_h", "torch_dtype": "bfloat16", "hidden_size": HIDDEN,
        "vocab_size": 1000, "max_position_embeddings": 4096, "tie_word_embeddings": False,
        "hybrid_override_pattern": "ME*EM-", "num_hidden_layers": 6, "mamba_num_heads": 8,
        "mamba_head_dim": 32, "n_groups": 4, "ssm_state_size": 16, "conv_kernel": 4,
        "expand": 1, "mamba_ssm_cache_dtype": "float32", "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 512,
        "mlp_hidden_act": "relu2", "n_routed_experts": EXPERTS, "num_experts_per_tok": TOPK,
        "moe_intermediate_size": INTER, "n_shared_experts": 1,
        "moe_shared_expert_intermediate_size": 192, "moe_latent_size": LATENT,
    }  # fmt: skip
    return config | over


@pytest.fixture(scope="module")
def card() -> ModelCard:
    return import_hf_config(tiny_config(), "tiny", "tiny.json")


@pytest.fixture
def no_tables(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Roofline priors only (no measured tables), so every number is the formula's."""
    monkeypatch.setenv("PLAN_MEASURED", "off")
    measured_device.reset()
    yield
    measured_device.reset()


def serving(**kw: Any) -> ServingConfig:
    return ServingConfig.model_validate(kw)


def group(card: ModelCard, s: ServingConfig, name: str) -> Any:
    return next(g for g in weights_per_gpu(card, s) if g.group == name)


def narrow(profile: HardwareProfile, domain: int, scale_out: bool = True) -> HardwareProfile:
    """``profile`` with a scale-up domain of ``domain`` GPUs (and its NIC, or none)."""
    assert profile.scale_up is not None
    update: dict[str, Any] = {
        "scale_up": profile.scale_up.model_copy(update={"domain_size": domain})
    }
    if not scale_out:
        update["scale_out"] = None
    return profile.model_copy(update=update)


def lines(card: ModelCard, device: HardwareProfile, s: ServingConfig, t: int) -> dict[str, OpLine]:
    """The op lines of one pure-decode step of ``t`` requests (context 100 tokens each)."""
    model = StepCostModel(card, device, s)
    cost = model.step(np.ones(t, dtype=np.int64), np.full(t, 100, dtype=np.int64), detail=True)
    assert cost.padded_tokens == t  # a CUDA-graph size: the hand arithmetic's t
    return {line.name: line for line in cost.lines}


# ------------------------------------------------------------------------------ memory


@pytest.mark.parametrize(("dp", "redundant"), [(4, 0), (4, 4), (3, 1), (12, 4)])
def test_experts_per_rank_count_the_redundant_copies(
    card: ModelCard, dp: int, redundant: int
) -> None:
    s = serving(tp=1, dp=dp, ep=dp, eplb_redundant_experts=redundant)
    check_deployment(card, s)
    expert = 2 * LATENT * INTER  # relu2: up and down, at the latent width
    want = (EXPERTS + redundant) / dp * expert * MOE_LAYERS
    got = group(card, s, "routed_experts")
    assert got.params_per_gpu == pytest.approx(want, rel=1e-12)
    assert got.bytes_per_gpu == pytest.approx(want * 2.0, rel=1e-12)  # bf16


def test_redundant_experts_cost_memory_per_rank(card: ModelCard) -> None:
    device = catalog.hardware_profile("h200")
    base = plan_memory(card, device, serving(tp=1, dp=4, ep=4), 1000)
    more = plan_memory(card, device, serving(tp=1, dp=4, ep=4, eplb_redundant_experts=4), 1000)
    extra = 4 / 4 * 2 * LATENT * INTER * MOE_LAYERS * 2.0  # one more expert per rank, bf16
    assert more.weight_bytes_per_gpu - base.weight_bytes_per_gpu == pytest.approx(extra)
    assert more.kv_cache_bytes_per_gpu == pytest.approx(base.kv_cache_bytes_per_gpu - extra)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_latent_projection_memory_replicated_or_split(card: ModelCard, tp: int) -> None:
    whole = 2 * HIDDEN * LATENT * MOE_LAYERS  # down (hidden -> latent) and up, per layer
    rep = group(card, serving(tp=tp), "moe_latent")
    split = group(card, serving(tp=tp, latent_moe_projection="rank_split"), "moe_latent")
    assert rep.params_per_gpu == whole
    assert rep.replicated_bytes_per_gpu == whole * 2.0
    assert split.params_per_gpu == pytest.approx(whole / tp)
    assert split.replicated_bytes_per_gpu == 0.0


# ------------------------------------------------------------------------------ step cost


@pytest.mark.usefixtures("no_tables")
@pytest.mark.parametrize(("redundant", "imbalance"), [(0, 1.0), (4, 1.0), (0, 1.5), (4, 1.25)])
def test_routed_experts_are_the_busiest_ranks(
    card: ModelCard, redundant: int, imbalance: float
) -> None:
    dp, t = 4, 8
    device = catalog.hardware_profile("gb300")
    s = serving(tp=1, dp=dp, ep=dp, eplb_redundant_experts=redundant, moe_load_imbalance=imbalance)
    line = lines(card, device, s, t)["moe.routed_experts"]
    tokens = t * dp * imbalance  # every DP rank's tokens, the busiest rank's share
    pairs = tokens * TOPK / dp
    physical = EXPERTS + redundant
    local = physical / dp
    touched = local * (1 - (1 - 1 / physical) ** (tokens * TOPK))
    assert line.count == MOE_LAYERS
    assert line.flops == pytest.approx(2 * pairs * 2 * LATENT * INTER, rel=1e-12)
    weights = touched * 2 * LATENT * INTER * 2.0
    acts = pairs * (2 * LATENT + 2 * INTER) * ops.ACT_BYTES
    assert line.bytes == pytest.approx(weights + acts, rel=1e-12)


@pytest.mark.usefixtures("no_tables")
def test_imbalance_without_expert_parallelism_is_refused() -> None:
    # at ep 1 it had no effect on the step, and an answer was given as if it had been used
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="needs expert parallelism"):
        serving(tp=2, moe_load_imbalance=2.0)
    assert serving(tp=2, moe_load_imbalance=1.0).moe_load_imbalance == 1.0


def a2a_prior(device: HardwareProfile, s_bytes: float, ep: int) -> float:
    """One all-to-all by hand: the scale-up part and (past the domain) the NIC part."""
    assert device.scale_up is not None
    eff = device.roofline.link_efficiency
    d = min(ep, device.scale_up.domain_size)
    up = device.scale_up.latency_s + s_bytes * (d - 1) / ep / (device.scale_up.bw_bytes_per_s * eff)
    if ep <= d:
        return up
    assert device.scale_out is not None
    out = device.scale_out.latency_s + s_bytes * (ep - d) / ep / (
        device.scale_out.bw_bytes_per_s * eff
    )
    return max(up, out)


@pytest.mark.usefixtures("no_tables")
@pytest.mark.parametrize(
    ("domain", "dp", "imbalance"), [(8, 8, 1.0), (4, 8, 1.0), (2, 8, 1.3), (4, 16, 1.0)]
)
def test_dispatch_and_combine_over_scale_up_and_scale_out(
    card: ModelCard, domain: int, dp: int, imbalance: float
) -> None:
    device = narrow(catalog.hardware_profile("gb300"), domain)
    t = 16
    s = serving(
        tp=1, dp=dp, ep=dp, moe_load_imbalance=imbalance, eplb_redundant_experts=-EXPERTS % dp
    )
    got = lines(card, device, s, t)
    sent = t * TOPK * LATENT * ops.ACT_BYTES * imbalance  # the busiest rank's routed copies
    for name in ("moe.dispatch_alltoall", "moe.combine_alltoall"):
        line = got[name]
        assert line.bytes == pytest.approx(sent)
        assert line.seconds == pytest.approx(MOE_LAYERS * a2a_prior(device, sent, dp), rel=1e-12)
    assert "moe_allreduce" not in got  # EP with DP attention joins by the all-to-alls


def test_deepep_reads_the_measured_table(card: ModelCard, fixture_tables: Path) -> None:
    """h200's DeepEP low-latency curve (the fixture cut, measured at ep 8): at ep 8 the line
    is the curve; at ep 16 (two HGX domains) the larger of the curve at the bytes each NVLink
    peer gets and the NIC's share."""
    measured_device.reset()
    device = catalog.hardware_profile("h200")
    t = 1024  # the bytes at ep 8 and the NVLink share at ep 16 lie inside the table's grid
    sent = t * TOPK * LATENT * ops.ACT_BYTES
    tables = measured_device.tables_for(device)
    assert tables is not None
    model = tables.models["moe_alltoall"]

    def measured(phase: str, x: float) -> float:
        fam = model.family(world=8, backend="deepep_low_latency", phase=phase)
        return float(np.exp(model.log_seconds(fam, np.array([[x]]))[0][0]))

    s8 = serving(tp=1, dp=8, ep=8, all2all_backend="deepep_low_latency")
    got = lines(card, device, s8, t)
    for phase in ("dispatch", "combine"):
        line = got[f"moe.{phase}_alltoall"]
        assert line.seconds == pytest.approx(MOE_LAYERS * measured(phase, sent), rel=1e-9)
    s16 = serving(
        tp=1, dp=16, ep=16, all2all_backend="deepep_low_latency", eplb_redundant_experts=8
    )
    got = lines(card, device, s16, t)
    out = device.scale_out
    assert out is not None
    nic = out.latency_s + sent * 8 / 16 / (out.bw_bytes_per_s * device.roofline.link_efficiency)
    for phase in ("dispatch", "combine"):
        up = measured(phase, sent * 7 / 16 * 8 / 7)
        line = got[f"moe.{phase}_alltoall"]
        assert line.seconds == pytest.approx(MOE_LAYERS * max(up, nic), rel=1e-9)
    measured_device.reset()


@pytest.mark.usefixtures("no_tables")
@pytest.mark.parametrize("tp", [2, 4])
def test_rank_split_latent_projections_cost(card: ModelCard, tp: int) -> None:
    device = catalog.hardware_profile("gb300")
    t = 32
    rep = lines(card, device, serving(tp=tp), t)
    split = lines(card, device, serving(tp=tp, latent_moe_projection="rank_split"), t)
    # replicated: the full GEMMs on every rank, no collective of their own
    assert rep["moe.latent_down"].flops == 2.0 * t * LATENT * HIDDEN
    assert "moe.latent_allgather" not in rep
    assert "moe.latent_reducescatter" not in rep
    # split: 1/tp of each GEMM (flops and weight bytes) ...
    assert split["moe.latent_down"].flops == pytest.approx(2.0 * t * LATENT / tp * HIDDEN)
    assert split["moe.latent_up"].flops == pytest.approx(2.0 * t * HIDDEN * LATENT / tp)
    w_down = ops.gemm(t, LATENT / tp, HIDDEN, 2.0).bytes
    assert split["moe.latent_down"].bytes == pytest.approx(w_down)
    # ... an all-gather of each rank's latent / tp columns (planner convention: one shard) ...
    gather = split["moe.latent_allgather"]
    assert gather.bytes == pytest.approx(t * LATENT / tp * 2.0)
    eff = device.roofline.link_efficiency
    up = device.scale_up
    assert up is not None
    hand = (tp - 1) * up.latency_s + (tp - 1) * gather.bytes / (up.bw_bytes_per_s * eff)
    assert gather.seconds == pytest.approx(MOE_LAYERS * hand, rel=1e-12)
    # ... and a reduce-scatter of the experts' partial latent before the row-split up GEMM
    assert split["moe.latent_reducescatter"].bytes == pytest.approx(t * LATENT * 2.0)
    # the MoE all-reduce over the hidden state stays as it was
    assert split["moe_allreduce"].bytes == rep["moe_allreduce"].bytes


@pytest.mark.usefixtures("no_tables")
def test_rank_split_with_ep_dispatch_all_reduces_the_partial_hidden_states(card: ModelCard) -> None:
    device = catalog.hardware_profile("gb300")
    t = 8
    s = serving(tp=2, dp=4, ep=8, latent_moe_projection="rank_split")
    got = lines(card, device, s, t)
    assert got["moe.latent_up_allreduce"].bytes == pytest.approx(t * HIDDEN * 2.0)
    assert "moe.latent_reducescatter" not in got  # the combined latent is whole per rank


@pytest.mark.usefixtures("no_tables")
def test_tp1_rank_split_is_the_replicated_layout(card: ModelCard) -> None:
    device = catalog.hardware_profile("gb300")
    a = lines(card, device, serving(tp=1), 8)
    b = lines(card, device, serving(tp=1, latent_moe_projection="rank_split"), 8)
    assert {k: v.seconds for k, v in a.items()} == {k: v.seconds for k, v in b.items()}


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("fields", "field", "reason"),
    [
        ({"eplb_redundant_experts": 4}, "eplb_redundant_experts", "need expert parallelism"),
        (
            {"eplb_redundant_experts": -1, "tp": 1, "dp": 2, "ep": 2},
            "eplb_redundant_experts",
            "greater than or equal to 0",
        ),
        ({"moe_load_imbalance": 0.9}, "moe_load_imbalance", "must be >= 1 (the busiest EP rank"),
        # the busiest of 8 ranks holds at most all the pairs: 1e30 priced without a bound
        (
            {"moe_load_imbalance": 9.0, "tp": 1, "dp": 8, "ep": 8},
            "moe_load_imbalance",
            "exceeds ep 8",
        ),
        ({"all2all_backend": "deepep_low_latency", "tp": 8, "ep": 8}, "all2all_backend", "dp > 1"),
        ({"all2all_backend": "pplx"}, "all2all_backend", "generic"),
        ({"latent_moe_projection": "sharded"}, "latent_moe_projection", "rank_split"),
        ({"tp": 2, "dp": 4, "ep": 4}, "ep", "tp*dp = 8"),
    ],
)
def test_bad_serving_values_are_refused_naming_the_field(
    fields: dict[str, Any], field: str, reason: str
) -> None:
    from simulator.specs.loading import parse

    with pytest.raises(SpecError) as err:
        parse(ServingConfig, fields, "s.yaml")
    assert err.value.field == field
    assert reason in err.value.reason


@pytest.mark.parametrize(
    ("model", "fields", "field", "reason"),
    [
        ("tiny", {"tp": 1, "dp": 3, "ep": 3}, "ep", "eplb_redundant_experts: 1 gives 9 = 3 x 3"),
        ("tiny", {"tp": 1, "dp": 6, "ep": 6, "eplb_redundant_experts": 2},
         "ep", "8 experts + 2 redundant = 10 physical"),
        ("deepseek-v3", {"tp": 8, "latent_moe_projection": "rank_split"},
         "latent_moe_projection", "needs a latent MoE"),
        ("latent6", {"tp": 4, "latent_moe_projection": "rank_split"},
         "latent_moe_projection", "tp 4 does not divide the 6-wide latent"),
        ("tiny", {"tp": 4, "latent_moe_projection": "rank_split"}, None, None),
    ],
)  # fmt: skip
def test_bad_deployments_are_refused_naming_the_field(
    card: ModelCard, model: str, fields: dict[str, Any], field: str | None, reason: str | None
) -> None:
    which = {
        "tiny": card,
        "latent6": import_hf_config(tiny_config(moe_latent_size=6), "latent6", "latent6.json"),
    }.get(model) or catalog.model_card(model)
    s = serving(**fields)
    if field is None:
        check_deployment(which, s)  # 64 / 4: fine
        return
    with pytest.raises(SpecError) as err:
        check_deployment(which, s)
    assert err.value.field == f"serving.{field}"
    assert reason is not None
    assert reason in err.value.reason


def test_ep_beyond_the_domain_needs_a_scale_out_nic(card: ModelCard) -> None:
    s = serving(tp=1, dp=8, ep=8)
    h200 = catalog.hardware_profile("h200")
    check_device(s, narrow(h200, 4))  # the NIC carries the other domain's share
    with pytest.raises(SpecError) as err:
        check_device(s, narrow(h200, 4, scale_out=False))
    assert err.value.field == "serving.ep"
    assert "scale-up domain" in err.value.reason
    assert "scale_out" in err.value.reason


def test_the_cli_refuses_a_bad_eplb_in_one_line(tmp_path: Path) -> None:
    f = tmp_path / "serving.yaml"
    f.write_text("tp: 1\ndp: 72\nep: 72\n")  # 72 does not divide DeepSeek-V3's 256 experts
    result = runner.invoke(
        app, ["memory", "--model", "deepseek-v3", "--device", "gb300", "--serving", str(f)]
    )
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert "\n" not in line
    assert line.startswith("error: ")
    assert "serving.ep" in line
    assert "eplb_redundant_experts: 32 gives 288 = 72 x 4" in line
    f.write_text("tp: 1\ndp: 72\nep: 72\neplb_redundant_experts: 32\n")
    ok = runner.invoke(
        app, ["memory", "--model", "deepseek-v3", "--device", "gb300", "--serving", str(f)]
    )
    assert ok.exit_code == 0, ok.output
