"""Step cost model: hand-checked bounds, invariants and the knobs that change a step."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator import catalog
from simulator.cost.latency import LatencyModels
from simulator.cost.latency_file import (
    FitError,
    FittedModel,
    LatencyModelFile,
    Measurements,
    RooflineParams,
)
from simulator.cost.step import StepCostModel, cuda_graph_sizes, shape_of
from simulator.specs import ServingConfig
from simulator.weights import weights_per_gpu


def model(name: str, device: str, **serving: object) -> StepCostModel:
    profile = catalog.hardware_profile(device)
    return StepCostModel(
        catalog.model_card(name),
        profile,
        ServingConfig.model_validate(serving),
        LatencyModels(profile),  # priors only: the tests must not depend on fitted files
    )


def decode(batch: int, ctx: int) -> tuple[np.ndarray, np.ndarray]:
    return np.ones(batch, dtype=np.int64), np.full(batch, ctx, dtype=np.int64)


def test_breakdown_sums_to_step_time() -> None:
    m = model("kimi-k3", "mi355x", tp=8)
    for new, ctx in (decode(1, 1000), decode(64, 50_000), (np.array([4096, 1]), np.array([0, 9]))):
        cost = m.step(new, ctx, detail=True)
        assert sum(cost.breakdown_s.values()) == pytest.approx(cost.seconds)
        assert cost.seconds == max(cost.gpu_s, cost.cpu_s)
        assert sum(line.seconds for line in cost.lines) == pytest.approx(cost.gpu_s)


def test_dense_decode_is_bound_by_streaming_the_weights() -> None:
    # Llama-3.3-70B, TP1 on H100, one decode over a short context: every weight is read once.
    m = model("llama-3.3-70b", "h100")
    profile = m.device
    weights = sum(g.bytes_per_gpu for g in weights_per_gpu(m.card, m.serving))
    embedding = m.card.vocab_size * m.card.hidden_size * 2  # a gather reads one row, not all
    floor = (weights - embedding) / (
        profile.memory_bw_bytes_per_s * profile.roofline.memory_efficiency
    )
    cost = m.step(*decode(1, 100))
    assert floor < cost.gpu_s < 1.1 * floor


def test_large_prefill_is_bound_by_gemm_flops() -> None:
    m = model("llama-3.3-70b", "h100", tp=8)
    t = 8192
    cost = m.step(np.array([t]), np.array([0]), detail=True)
    gemm_params = 80 * (8192 * (8192 + 2 * 1024) + 8192 * 8192 + 3 * 8192 * 28672) / 8
    peak = m.device.peak_flops_per_s.bf16 * m.device.roofline.gemm_compute_efficiency
    gemm_s = sum(line.seconds for line in cost.lines if line.op_class == "gemm")
    assert gemm_s == pytest.approx(2 * t * gemm_params / peak, rel=0.05)


def test_decode_batches_pad_to_cuda_graph_sizes() -> None:
    sizes = cuda_graph_sizes(1024, 1)
    assert sizes[:5] == [1, 2, 4, 8, 16]
    assert sizes[-1] == 512
    m = model("kimi-k3", "mi355x", tp=8)
    assert m.step(*decode(5, 100)).padded_tokens == 8
    assert m.step(*decode(250, 100)).padded_tokens == 256
    assert m.step(np.array([5, 1]), np.array([0, 10])).padded_tokens == 6  # has a prefill


def test_dcp_cuts_decode_kv_reads_and_adds_collectives() -> None:
    base = model("kimi-k3", "mi355x", tp=8).step(*decode(32, 100_000), detail=True)
    dcp = model("kimi-k3", "mi355x", tp=8, dcp=8).step(*decode(32, 100_000), detail=True)

    def line(cost, name):  # type: ignore[no-untyped-def]
        return next(x for x in cost.lines if x.name == name)

    assert line(dcp, "mla.decode_attention").bytes < line(base, "mla.decode_attention").bytes / 7
    assert not any(x.name.startswith("dcp.") for x in base.lines)
    assert {x.name for x in dcp.lines if x.name.startswith("dcp.")} == {
        "dcp.q_allgather", "dcp.lse_allgather", "dcp.out_reducescatter",
    }  # fmt: skip
    assert dcp.breakdown_s["attention"] < base.breakdown_s["attention"]


def test_moe_decode_streams_only_touched_experts() -> None:
    m = model("kimi-k3", "mi355x", tp=8)
    one = next(
        x for x in m.step(*decode(1, 100), detail=True).lines if x.name == "moe.routed_experts"
    )
    expert_bytes = 3 * 3584 * 3072 / 8 * 4.25 / 8  # one expert's TP shard in MXFP4
    touched = 896 * (1 - (1 - 1 / 896) ** 16)
    assert one.bytes == pytest.approx(touched * expert_bytes, rel=0.01)


def test_fused_decode_kernels_remove_fixed_costs() -> None:
    plain = model("kimi-k3", "gb300", tp=4)
    fused = model("kimi-k3", "gb300", tp=4, fused_decode_kernels=True)
    assert fused.step(*decode(1, 8000)).gpu_s < 0.8 * plain.step(*decode(1, 8000)).gpu_s
    prefill = (np.array([2048]), np.array([0]))
    assert fused.step(*prefill).seconds == plain.step(*prefill).seconds


@pytest.mark.parametrize("tables", [False, True], ids=["priors", "measured"])
def test_fused_collectives_lose_their_latency_term(tables: bool) -> None:
    """Under fused decode kernels a collective costs its time at its size less its time at
    (almost) none: the measured curve's at 1 byte, or the prior's at 0."""
    profile = catalog.hardware_profile("h100")
    lat = LatencyModels.for_device(profile) if tables else LatencyModels(profile)
    if tables and lat.tables is None:
        pytest.skip("the measured extra (aiconfigurator-core) is not installed")
    serving = ServingConfig(tp=8, fused_decode_kernels=True)
    m = StepCostModel(catalog.model_card("llama-3.3-70b"), profile, serving, lat)
    lines = m.step(*decode(16, 4000), detail=True).lines
    comm = [x for x in lines if x.category == "communication"]
    assert len(comm) >= 3
    prior = LatencyModels(profile)
    curves = 0
    for line in comm:
        curve = m.lookups._by_name.get(line.name)
        if curve is not None:
            curves += 1
            want = max(curve.seconds(line.bytes) - curve.seconds(1.0), 0.0)
        else:
            full, zero = prior.collective_seconds_mixed(
                [line.op_class] * 2, [line.bytes, 0.0], [8.0, 8.0]
            )
            want = max(full - zero, 0.0)
        assert line.seconds == want * line.count, line.name
    assert (curves > 0) == tables


@pytest.mark.parametrize("requests", [1, 7, 64])
def test_cpu_time_bounds_tiny_steps(requests: int) -> None:
    # a host that needs 20 ms + 0.1 ms per request: the step is CPU-bound at that time
    base = catalog.hardware_profile("b200")
    roof = base.roofline.model_copy(
        update={"cpu_step_overhead_s": 0.02, "cpu_step_per_request_s": 1e-4}
    )
    profile = base.model_copy(update={"roofline": roof})
    m = StepCostModel(
        catalog.model_card("kimi-linear-48b-a3b"), profile, ServingConfig(), LatencyModels(profile)
    )
    cost = m.step(*decode(requests, 10))
    assert cost.cpu_s == pytest.approx(0.02 + 1e-4 * requests)
    assert cost.seconds == cost.cpu_s > cost.gpu_s
    assert cost.breakdown_s["overhead"] == pytest.approx(cost.cpu_s - cost.gpu_s)


def test_speculative_verify_computes_logits_for_every_position() -> None:
    spec = {"method": "eagle", "num_speculative_tokens": 3, "acceptance_rate": 0.7}
    m = model("deepseek-v3", "b200", tp=8, speculative=spec)
    cost = m.step(np.full(4, 4), np.full(4, 1000), detail=True)
    head = next(x for x in cost.lines if x.name == "lm_head")
    assert head.flops == 2 * 16 * (129280 / 8) * 7168  # 4 requests x (1 + K) rows
    assert m.step(np.full(4, 4), np.full(4, 1000)).padded_tokens == 16


def test_fitted_model_replaces_the_prior_and_counts_extrapolations() -> None:
    profile = catalog.hardware_profile("h100")
    fitted = LatencyModelFile(
        device="h100",
        description="test",
        models=[
            FittedModel(
                op_class="gemm",
                form="roofline",
                roofline=RooflineParams(
                    compute_efficiency=0.35, memory_efficiency=0.41, launch_s=0
                ),
                flops_range=(1.0, 1e9),
                bytes_range=(1.0, 1e6),
                fit_error=FitError(n=3, median_ape=1.0, max_ape=2.0),
                measurements=Measurements(file="x.csv", sha256="0" * 64, rows=3),
            )
        ],
    )
    card, serving = catalog.model_card("llama-3.3-70b"), ServingConfig(tp=8)
    lat = LatencyModels(profile, fitted)
    cost = StepCostModel(card, profile, serving, lat).step(*decode(8, 100), detail=True)
    up = next(x for x in cost.lines if x.name == "mlp.gate_up")
    expected = max(
        up.flops / (profile.peak_flops_per_s.bf16 * 0.35),
        up.bytes / (profile.memory_bw_bytes_per_s * 0.41),
    )
    assert up.seconds / up.count == pytest.approx(expected)
    assert lat.source("gemm") == "fitted"
    assert lat.source("moe") == "prior"
    assert lat.extrapolations["gemm"] > 0  # 70B weight matrices exceed the 1 MB range


requests = st.lists(
    st.tuples(st.integers(1, 4096), st.integers(1, 200_000)), min_size=1, max_size=40
)


@given(requests, st.integers(1, 300_000))
def test_adding_work_never_makes_a_step_faster(reqs: list[tuple[int, int]], extra_ctx: int) -> None:
    m = model("qwen3.5-397b-a17b", "b300", tp=8)
    new = np.array([r[0] for r in reqs])
    ctx = np.array([r[1] for r in reqs])
    cost = m.step(new, ctx)
    assert np.isfinite(cost.seconds)
    assert cost.seconds > 0
    longer = m.step(new, ctx + extra_ctx)
    assert longer.gpu_s >= cost.gpu_s * (1 - 1e-9)
    more = m.step(np.append(new, 1), np.append(ctx, extra_ctx))
    assert more.gpu_s >= cost.gpu_s * (1 - 1e-9)


def test_shape_of_splits_decodes_and_prefills() -> None:
    s = shape_of(np.array([1, 1, 100, 3]), np.array([10, 0, 50, 7]), decode_query_len=1, window=8)
    # (1, 0) has no context: a 1-token prompt is a prefill, not a decode
    assert (s.num_decodes, s.num_prefills) == (1, 3)
    assert s.decode_kv == 11
    assert s.decode_kv_window == 8
    assert s.prefill_tokens == 104
    assert s.prefill_pairs == 1 + (100 * 50 + 5050) + (3 * 7 + 6)


def test_speculative_decoding_pays_for_k_draft_passes() -> None:
    spec = {"method": "mtp", "num_speculative_tokens": 2, "acceptance_rate": 0.7}
    m = model("deepseek-v3", "b200", tp=8, speculative=spec)
    cost = m.step(np.full(8, 3), np.full(8, 4000), detail=True)
    drafts = [x for x in cost.lines if x.name.startswith("draft.")]
    # compute in its own category; the drafter's all-reduces count as communication
    assert {x.category for x in drafts} == {"drafting", "communication"}
    assert {x.category for x in drafts if x.category != "communication"} == {"drafting"}
    # K = 2 sequential passes of one MLA + MoE layer over the 8 decoding requests
    assert next(x for x in drafts if x.name == "draft.mla.o_proj").count == 2
    assert next(x for x in drafts if x.name == "draft.lm_head").flops == 2 * 8 * (129280 / 8) * 7168
    assert cost.breakdown_s["drafting"] > 0
    plain = model("deepseek-v3", "b200", tp=8).step(np.ones(8, dtype=np.int64), np.full(8, 4000))
    assert plain.breakdown_s["drafting"] == 0
    prefill = m.step(np.array([512]), np.array([0]))
    assert prefill.breakdown_s["drafting"] == 0  # no decodes, nothing to draft for


@pytest.mark.parametrize(
    ("card", "device", "tp"),
    [
        ("kimi-linear-48b-a3b", "h200", 1),
        ("kimi-k3", "mi355x", 8),
        ("qwen3.5-397b-a17b", "b200", 8),
    ],
)
def test_decodes_beside_a_prefill_chunk_never_make_the_linear_attention_cheaper(
    card: str, device: str, tp: int
) -> None:
    """vLLM runs a mixed batch's decodes through the chunked KDA / GDN kernel as length-1
    sequences. Looked up at the batch's mean length, 8 decodes beside an 8,192-token chunk
    priced it as 9 sequences of 911 tokens: the step got cheaper (338 -> 312 ms on Kimi K3)."""
    profile = catalog.hardware_profile(device)
    lat = LatencyModels.for_device(profile)
    if lat.tables is None:
        pytest.skip("the measured extra (aiconfigurator-core) is not installed")
    m = StepCostModel(catalog.model_card(card), profile, ServingConfig(tp=tp), lat)

    def chunked_s(decodes: int) -> float:
        new = np.array([8192] + [1] * decodes)
        ctx = np.array([0] + [8192] * decodes)
        cost = m.step(new, ctx, detail=True)
        (line,) = [x for x in cost.lines if x.name.endswith("chunked_prefill")]
        return line.seconds

    times = [chunked_s(d) for d in (0, 1, 8, 64, 256)]
    assert times == sorted(times)
    assert times[2] >= times[0]  # never the 911-token sequences' time again


@pytest.mark.parametrize("device", ["b200", "gb300"])
def test_one_decode_costs_no_more_than_two_on_blackwell_fp8(device: str) -> None:
    """The tables' FP8 GEMM rows at m = 1 read ~3x m = 2 on Blackwell, where vLLM runs one
    kernel for m <= 16: one DeepSeek-V3 decode cost 12.6 ms on B200, two 8.8 ms (and one
    user was predicted slower than two)."""
    profile = catalog.hardware_profile(device)
    m = StepCostModel(
        catalog.model_card("deepseek-v3"), profile, ServingConfig(tp=8),
        LatencyModels.for_device(profile),
    )  # fmt: skip
    if m.latency.tables is None:
        pytest.skip("the measured tables are not installed (the priors are monotone anyway)")
    one, two = (m.step(np.ones(n, dtype=np.int64), np.full(n, 1024)).seconds for n in (1, 2))
    assert one <= two
