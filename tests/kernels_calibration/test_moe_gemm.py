"""Grouped MoE GEMM (fused_moe style) against its float64 numpy reference.

Covers the dense (fp32/bf16/fp16), fp8 e4m3 (per-channel scale) and MXFP4 weight formats, the
align step, expert parallelism (``expert_map``), empty experts, the quantisers' round trips and
the ValueErrors. On a CPU the kernels run in the Triton interpreter (``TRITON_INTERPRET=1``, set
before triton is imported); the module is skipped where the calibration extra is absent.
"""

from __future__ import annotations

import dataclasses
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="the calibration extra (torch CPU + triton) is not installed"
)
pytest.importorskip("triton", reason="the calibration extra (torch CPU + triton) is not installed")

from kernels_calibration.moe_formats import (  # noqa: E402 (after importorskip)
    E2M1_VALUES,
    FP8_DTYPE,
    dequantize_fp8,
    dequantize_mxfp4,
    quantize_fp8,
    quantize_mxfp4,
)
from kernels_calibration.moe_gemm import fused_moe  # noqa: E402
from kernels_calibration.moe_inputs import MoeInputs, make_inputs  # noqa: E402
from kernels_calibration.moe_routing import moe_align_block_size, route  # noqa: E402

# See test_gemm_norm_lse.py: triton 3.5's interpreter int()s 1-element arrays in `for` bounds.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Conversion of an array with ndim > 0 to a scalar:DeprecationWarning:"
    r"triton\.runtime\.interpreter"
)

# On a GPU box run with TRITON_INTERPRET=0 to compile the kernels for real.
DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
# ||y - ref|| / ||ref|| bounds, the reference seeing the same rounded inputs and dequantised
# weights. fp32 math throughout (observed ~2.5e-7). With 16-bit activations the intermediates
# (h, silu*up, the weighted down-projection, y) are rounded to that dtype, as in vLLM: four
# roundings. The interpreter's fp32 -> bf16 cast truncates, shrinking every value by ~0.35% on
# average, and the shrinks add up (observed 1.4e-2 on the CPU; ~4e-3 expected with a GPU's RNE).
REL_TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 3e-2}
HIDDEN, INTER, EXPERTS, TOPK = 64, 32, 8, 2
SHAPE = (HIDDEN, INTER, EXPERTS, TOPK)  # make_inputs' hidden, inter, num_experts, topk
FORMATS = [
    pytest.param("fp32", torch.float32, id="fp32"),
    pytest.param("bf16", torch.bfloat16, id="bf16"),
    pytest.param("fp16", torch.float16, id="fp16"),
    pytest.param("fp8", torch.float32, id="fp8-a32"),
    pytest.param("fp8", torch.bfloat16, id="fp8-bf16"),
    pytest.param("mxfp4", torch.float32, id="mxfp4-a32"),
    pytest.param("mxfp4", torch.bfloat16, id="mxfp4-bf16"),
]


def _rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def _np(x: torch.Tensor) -> np.ndarray:
    return x.detach().to(device="cpu", dtype=torch.float64).numpy()


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _check(inputs: MoeInputs, **config: int) -> torch.Tensor:
    y = inputs.run(**config)
    assert y.shape == inputs.x.shape
    assert y.dtype == inputs.x.dtype
    assert _rel_err(_np(y), inputs.reference()) < REL_TOL[inputs.x.dtype]
    return y


@pytest.mark.parametrize(("weight_format", "dtype"), FORMATS)
@pytest.mark.parametrize("num_tokens", [1, 7, 33])
def test_fused_moe_matches_reference(
    num_tokens: int, weight_format: str, dtype: torch.dtype
) -> None:
    inputs = make_inputs(
        num_tokens, HIDDEN, INTER, EXPERTS, TOPK, weight_format, dtype, DEVICE, _gen(num_tokens)
    )
    _check(inputs)


@pytest.mark.parametrize(
    ("weight_format", "block_k"), [("fp32", 16), ("fp8", 16), ("mxfp4", 32)], ids=str
)
def test_small_tiles_loop_over_k_and_n(weight_format: str, block_k: int) -> None:
    """Several K steps, N tiles and row blocks per expert, grouped tile order (fp32 activations)."""
    inputs = make_inputs(37, 96, 64, 4, 3, weight_format, torch.float32, DEVICE, _gen(11))
    _check(inputs, block_m=16, block_n=16, block_k=block_k, group_m=2)


def test_fused_moe_explicit_call_and_int64_ids() -> None:
    """``fused_moe`` called directly, with int64 ids and id validation on (the default)."""
    inputs = make_inputs(9, HIDDEN, INTER, EXPERTS, 3, "fp8", torch.float32, DEVICE, _gen(5))
    y = fused_moe(
        inputs.x,
        inputs.w1,
        inputs.w2,
        inputs.topk_weights,
        inputs.topk_ids.to(torch.int64),
        w1_scale=inputs.w1_scale,
        w2_scale=inputs.w2_scale,
    )
    assert _rel_err(_np(y), inputs.reference()) < REL_TOL[torch.float32]


def test_mxfp4_kernel_decodes_raw_bytes() -> None:
    """Arbitrary packed bytes (all 16 e2m1 codes, -0 included) and e8m0 scales, not ours."""
    rng = np.random.default_rng(3)
    inputs = make_inputs(11, HIDDEN, INTER, 4, 2, "mxfp4", torch.float32, DEVICE, _gen(3))

    def raw(t: torch.Tensor | None, lo: int, hi: int) -> torch.Tensor:
        assert t is not None
        return torch.from_numpy(rng.integers(lo, hi, t.shape, dtype=np.uint8)).to(DEVICE)

    inputs = dataclasses.replace(
        inputs,
        w1=raw(inputs.w1, 0, 256),
        w2=raw(inputs.w2, 0, 256),
        w1_scale=raw(inputs.w1_scale, 117, 125),
        w2_scale=raw(inputs.w2_scale, 118, 123),
    )
    _check(inputs)


@pytest.mark.parametrize(
    ("weight_format", "dtype"),
    [("fp32", torch.float32), ("mxfp4", torch.bfloat16)],
    ids=["fp32", "mxfp4-bf16"],
)
def test_expert_parallel_rank_matches_reference(weight_format: str, dtype: torch.dtype) -> None:
    """Rank 1 of an EP group holding experts 3..5 of 8: only pairs routed there count."""
    inputs = make_inputs(
        33, *SHAPE, weight_format, dtype, DEVICE, _gen(21), local_experts=3, ep_rank=1
    )
    assert inputs.w1.shape[0] == 3
    assert inputs.expert_map is not None
    assert inputs.expert_map.tolist() == [-1, -1, -1, 0, 1, 2, -1, -1]
    y = _check(inputs)
    ids = inputs.topk_ids.cpu()
    no_local = ~((ids >= 3) & (ids <= 5)).any(dim=1)
    assert bool(no_local.any())  # the case is exercised
    assert bool(torch.all(y.cpu()[no_local] == 0))


def test_expert_parallel_ranks_sum_to_full_output() -> None:
    """Two EP ranks of 4 experts each: equal seeds give equal x, routing and experts; the
    partial outputs add up (the all-reduce) to the single-rank result."""
    full = make_inputs(19, *SHAPE, "fp32", None, DEVICE, _gen(8))
    ranks = [
        make_inputs(19, *SHAPE, "fp32", None, DEVICE, _gen(8), local_experts=4, ep_rank=r)
        for r in (0, 1)
    ]
    for r, rank in enumerate(ranks):
        assert torch.equal(rank.x, full.x)
        assert torch.equal(rank.topk_ids, full.topk_ids)
        assert torch.equal(rank.w1, full.w1[4 * r : 4 * r + 4])
        assert torch.equal(rank.w2, full.w2[4 * r : 4 * r + 4])
    y = _np(ranks[0].run()) + _np(ranks[1].run())
    assert _rel_err(y, full.reference()) < REL_TOL[torch.float32]
    assert _rel_err(y, _np(full.run())) < REL_TOL[torch.float32]


def test_experts_without_tokens_and_multi_block_expert() -> None:
    """Expert 0 takes every token (two 16-row blocks), 1..4 a few each, 5..7 none."""
    num_tokens = 20
    inputs = make_inputs(num_tokens, HIDDEN, INTER, EXPERTS, TOPK, "fp32", None, DEVICE, _gen(4))
    t = torch.arange(num_tokens)
    ids = torch.stack([torch.zeros_like(t), 1 + t % 4], dim=1).to(torch.int32).to(DEVICE)
    inputs = dataclasses.replace(inputs, topk_ids=ids)
    _check(inputs, block_m=16)
    _, block_expert, num_padded = moe_align_block_size(ids, 16, EXPERTS)
    assert int(num_padded) == 32 + 4 * 16
    assert block_expert.tolist()[:6] == [0, 0, 1, 2, 3, 4]
    assert set(block_expert.tolist()[6:]) <= {-1}


@pytest.mark.parametrize(
    ("num_tokens", "block_m", "use_map"),
    [(1, 16, False), (33, 16, False), (50, 32, True), (64, 16, True)],
)
def test_align_block_size_layout(num_tokens: int, block_m: int, use_map: bool) -> None:
    topk, num_experts = 3, 8
    _, ids = route(_gen(num_tokens), topk, num_tokens=num_tokens, num_experts=num_experts)
    expert_map = None
    local = ids.to(torch.int64).reshape(-1)
    num_local = num_experts
    if use_map:  # experts 2..6 local (ids 0..4), the rest elsewhere
        num_local = 5
        expert_map = torch.tensor([-1, -1, 0, 1, 2, 3, 4, -1], dtype=torch.int32)
        local = expert_map.to(torch.int64)[local]
    sorted_ids, block_expert, num_padded = moe_align_block_size(ids, block_m, num_local, expert_map)
    num_pairs = ids.numel()
    counts = torch.bincount(local[local >= 0], minlength=num_local)
    used = int(((counts + block_m - 1) // block_m * block_m).sum())
    rows = -(-(num_pairs + min(num_local, num_pairs) * (block_m - 1)) // block_m) * block_m
    assert sorted_ids.dtype == block_expert.dtype == num_padded.dtype == torch.int32
    assert sorted_ids.numel() == rows
    assert block_expert.numel() == rows // block_m
    assert int(num_padded) == used
    listed = sorted_ids[sorted_ids < num_pairs]
    expected = torch.nonzero(local >= 0).reshape(-1)
    assert torch.equal(torch.sort(listed.to(torch.int64)).values, expected)  # each once
    assert bool(torch.all(sorted_ids[used:] == num_pairs))
    assert bool(torch.all(block_expert[used // block_m :] == -1))
    blocks = sorted_ids[:used].reshape(-1, block_m)
    experts = block_expert[: used // block_m]
    assert bool(torch.all(experts[1:] >= experts[:-1]))
    for b, e in enumerate(experts.tolist()):
        pairs = blocks[b][blocks[b] < num_pairs].to(torch.int64)
        assert pairs.numel() > 0
        assert bool(torch.all(local[pairs] == e))
        assert bool(torch.all(pairs[1:] > pairs[:-1]))  # stable: ascending pair order


def test_route_from_logits_and_generator() -> None:
    logits = torch.randn((6, 8), generator=_gen(1))
    weights, ids = route(logits, 3)
    assert ids.dtype == torch.int32
    assert weights.dtype == torch.float32
    assert torch.equal(ids.to(torch.int64), torch.topk(logits, 3).indices)
    torch.testing.assert_close(weights.sum(dim=1), torch.ones(6))
    raw_weights, _ = route(logits, 3, renormalize=False)
    torch.testing.assert_close(raw_weights, torch.topk(torch.softmax(logits, -1), 3).values)
    w_a, ids_a = route(_gen(2), 2, num_tokens=5, num_experts=16)
    w_b, ids_b = route(_gen(2), 2, num_tokens=5, num_experts=16)
    assert ids_a.shape == (5, 2)
    assert torch.equal(ids_a, ids_b)
    assert torch.equal(w_a, w_b)
    assert bool(torch.all(ids_a[:, 0] != ids_a[:, 1]))


@pytest.mark.parametrize("weight_format", ["bf16", "fp8", "mxfp4"])
def test_make_inputs_layouts_and_determinism(weight_format: str) -> None:
    a = make_inputs(5, 64, 32, 6, 2, weight_format, generator=_gen(9))
    b = make_inputs(5, 64, 32, 6, 2, weight_format, generator=_gen(9))
    assert a.x.dtype == torch.bfloat16
    assert a.x.shape == (5, 64)
    assert a.topk_ids.shape == a.topk_weights.shape == (5, 2)
    assert a.expert_map is None
    shapes = {
        "bf16": ((6, 64, 64), (6, 64, 32), None, None),
        "fp8": ((6, 64, 64), (6, 64, 32), (6, 64), (6, 64)),
        "mxfp4": ((6, 64, 32), (6, 64, 16), (6, 64, 2), (6, 64, 1)),
    }[weight_format]
    got = [None if t is None else tuple(t.shape) for t in (a.w1, a.w2, a.w1_scale, a.w2_scale)]
    assert got == list(shapes)
    wdtype = {"bf16": torch.bfloat16, "fp8": FP8_DTYPE, "mxfp4": torch.uint8}[weight_format]
    assert a.w1.dtype == a.w2.dtype == wdtype
    for field in dataclasses.fields(MoeInputs):
        va, vb = getattr(a, field.name), getattr(b, field.name)
        if isinstance(va, torch.Tensor):
            assert torch.equal(_bits(va), _bits(vb))
        else:
            assert va == vb


def _bits(t: torch.Tensor) -> torch.Tensor:
    """float8 tensors compared by bit pattern (torch.equal has no float8 kernel on the CPU)."""
    return t.view(torch.uint8) if t.dtype == FP8_DTYPE else t


def _fp8_grid() -> torch.Tensor:
    """Every finite e4m3fn value (254 of them: 0x7F and 0xFF are NaN), as fp32."""
    bits = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    values = bits.view(FP8_DTYPE).to(torch.float32)
    return values[~torch.isnan(values)]


def test_fp8_round_trip_is_exact_on_representable_values() -> None:
    grid = _fp8_grid()
    assert grid.numel() == 254
    assert float(grid.abs().max()) == 448.0
    gen = _gen(12)
    rows = torch.stack([grid[torch.randperm(grid.numel(), generator=gen)] for _ in range(12)])
    exps = torch.randint(-8, 9, (12,), generator=gen)
    scale = torch.ldexp(torch.ones(12), exps)
    w = (rows * scale[:, None]).reshape(3, 4, -1)
    w_q, s = quantize_fp8(w)
    assert w_q.dtype == FP8_DTYPE
    assert s.dtype == torch.float32
    assert s.shape == (3, 4)
    torch.testing.assert_close(s, scale.reshape(3, 4), rtol=0, atol=0)
    torch.testing.assert_close(w_q.to(torch.float32), rows.reshape(3, 4, -1), rtol=0, atol=0)
    np.testing.assert_array_equal(dequantize_fp8(w_q, s), _np(w))


def test_fp8_quantize_rounds_within_half_an_ulp_and_handles_zero_rows() -> None:
    w = torch.randn((5, 40), generator=_gen(13))
    w[2] = 0.0
    w_q, s = quantize_fp8(w)
    assert float(s[2]) == 1.0
    assert bool(torch.all(w_q[2].to(torch.float32) == 0))
    err = np.abs(dequantize_fp8(w_q, s) - _np(w))
    # e4m3 has 3 mantissa bits: a relative error of at most 2**-4 above the subnormal range.
    bound = np.maximum(np.abs(_np(w)) * 2.0**-4, _np(s)[:, None] * 2.0**-10)
    assert bool(np.all(err <= bound))


def _e2m1_code(value: float) -> int:
    magnitude = E2M1_VALUES.index(abs(value))
    return magnitude | (8 if value < 0 else 0)


def test_mxfp4_round_trip_is_exact_on_representable_values() -> None:
    rng = np.random.default_rng(14)
    values = np.array([*E2M1_VALUES, *(-v for v in E2M1_VALUES[1:])])
    n, k = 6, 128
    elems = rng.choice(values, size=(n, k // 32, 32))
    elems[:, :, 0] = rng.choice([4.0, -4.0, 6.0, -6.0], size=(n, k // 32))  # |max| fixes X
    exps = rng.integers(-20, 6, size=(n, k // 32))
    w = torch.from_numpy((elems * np.ldexp(1.0, exps)[..., None]).reshape(n, k)).to(torch.float32)
    packed, scales = quantize_mxfp4(w)
    assert packed.dtype == scales.dtype == torch.uint8
    assert packed.shape == (n, k // 2)
    assert scales.shape == (n, k // 32)
    np.testing.assert_array_equal(scales.numpy(), exps + 127)
    codes = np.vectorize(_e2m1_code)(elems.reshape(n, k))
    np.testing.assert_array_equal(packed.numpy(), codes[:, 0::2] | (codes[:, 1::2] << 4))
    np.testing.assert_array_equal(dequantize_mxfp4(packed, scales), _np(w))


def test_mxfp4_rounding_ties_to_even_and_saturation() -> None:
    block = [6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.5, -2.7, -0.2, 0.1, 2.9, 0.0]
    want = [6.0, 0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, -3.0, 0.0, 0.0, 3.0, 0.0]
    w = torch.zeros((1, 96))
    w[0, : len(block)] = torch.tensor(block)
    w[0, 32] = 7.9  # floor(log2(7.9)) - 2 = 0: scale 1, and 7.9 saturates to 6
    w[0, 33] = -7.0
    w[0, 34] = 0.3  # -> 0.5
    # w[0, 64:96] stays zero
    packed, scales = quantize_mxfp4(w)
    out = dequantize_mxfp4(packed, scales)[0]
    np.testing.assert_array_equal(out[: len(want)], want)
    np.testing.assert_array_equal(out[32:35], [6.0, -6.0, 0.5])
    assert int(scales[0, 0]) == int(scales[0, 1]) == 127
    assert not np.any(out[64:])
    assert not np.any(packed.numpy()[0, 7:16])  # the zero tail of block 0, and no -0 codes


def test_dequantize_mxfp4_nibble_order_and_scale() -> None:
    packed = torch.tensor([[0x9F, 0x21] + [0] * 14], dtype=torch.uint8)
    scales = torch.tensor([[128]], dtype=torch.uint8)  # 2**1
    out = dequantize_mxfp4(packed, scales)
    np.testing.assert_array_equal(out[0, :4], [-12.0, -1.0, 1.0, 2.0])  # low nibble first


def _inputs(weight_format: str = "fp32", **kwargs: object) -> MoeInputs:
    dtype = torch.bfloat16 if weight_format in ("fp8", "mxfp4") else None
    base = make_inputs(4, HIDDEN, INTER, 4, 2, weight_format, dtype, DEVICE, _gen(0))
    return dataclasses.replace(base, **kwargs)


def test_fused_moe_rejects_bad_inputs() -> None:
    dense = _inputs()
    with pytest.raises(ValueError, match="activation dtype"):
        dataclasses.replace(dense, x=dense.x.to(torch.bfloat16)).run()
    with pytest.raises(ValueError, match="need w1"):
        dataclasses.replace(dense, w2=dense.w2[:, :, :16]).run()
    with pytest.raises(ValueError, match="topk_ids must lie in"):
        _inputs(topk_ids=dense.topk_ids + 4).run(validate_ids=True)
    with pytest.raises(ValueError, match="topk_weights must be float"):
        _inputs(topk_weights=dense.topk_weights[:, :1]).run()
    with pytest.raises(ValueError, match="power of two"):
        dense.run(block_m=24)
    with pytest.raises(ValueError, match="take no scales"):
        _inputs(w1_scale=torch.ones((4, 64))).run()
    fp8 = _inputs("fp8")
    with pytest.raises(ValueError, match="w2_scale is required"):
        dataclasses.replace(fp8, w2_scale=None).run()
    with pytest.raises(ValueError, match="w1_scale must be"):
        dataclasses.replace(fp8, w1_scale=torch.ones((4, 64), dtype=torch.bfloat16)).run()
    mx = _inputs("mxfp4")
    with pytest.raises(ValueError, match="block_k=16 must be a power of two >= 32"):
        mx.run(block_k=16)
    with pytest.raises(ValueError, match="multiples of 32"):
        fused_moe(
            mx.x[:, :48],
            mx.w1[:, :, :24],
            mx.w2[:, :48],
            mx.topk_weights,
            mx.topk_ids,
            w1_scale=mx.w1_scale,
            w2_scale=mx.w2_scale,
        )
    with pytest.raises(ValueError, match="share a dtype"):
        dataclasses.replace(mx, w2=fp8.w2).run()


def test_helpers_reject_bad_inputs() -> None:
    with pytest.raises(ValueError, match="weight_format"):
        make_inputs(4, 64, 32, 8, 2, "int4")
    with pytest.raises(ValueError, match="local_experts"):
        make_inputs(4, 64, 32, 8, 2, local_experts=3, ep_rank=2)
    with pytest.raises(ValueError, match="activations of that dtype"):
        make_inputs(4, 64, 32, 8, 2, "fp32", torch.bfloat16)
    with pytest.raises(ValueError, match="topk <= num_experts"):
        make_inputs(4, 64, 32, 2, 3)
    with pytest.raises(ValueError, match="multiples of 32"):
        make_inputs(4, 48, 32, 8, 2, "mxfp4")
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize_mxfp4(torch.ones((2, 48)))
    with pytest.raises(ValueError, match="float tensor"):
        quantize_fp8(torch.ones((2, 4), dtype=torch.int32))
    with pytest.raises(ValueError, match="scales"):
        dequantize_mxfp4(
            torch.zeros((2, 16), dtype=torch.uint8), torch.zeros((2, 2), dtype=torch.uint8)
        )
    with pytest.raises(ValueError, match="topk=9"):
        route(torch.zeros((3, 8)), 9)
    with pytest.raises(ValueError, match="num_tokens and num_experts"):
        route(_gen(0), 2)
