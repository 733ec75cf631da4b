"""Causal prefill attention over a cached prefix against its float64 numpy reference.

Covers prefix_len 0 and > 0, sizes that are not multiples of the blocks, GQA/MQA, QK head dims
that are not powers of two (the main + tail split MLA's 192 = 128 + 64 takes), Dqk != Dv, the
LSE (chunked-context merge) and bad inputs. On a CPU the kernel runs in Triton's interpreter
(``TRITON_INTERPRET=1``, set before triton is imported); on a GPU box run with
``TRITON_INTERPRET=0`` to test the compiled kernel on CUDA.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="the calibration extra (torch CPU + triton) is not installed"
)
pytest.importorskip("triton", reason="the calibration extra (torch CPU + triton) is not installed")

from kernels_calibration.lse_merge import lse_merge  # noqa: E402 (after importorskip)
from kernels_calibration.prefill_attention import (  # noqa: E402
    attention_flops,
    make_inputs,
    prefill_attention,
    prefill_attention_reference,
)

# triton 3.5's interpreter calls int() on a 1-element array when a runtime value bounds a `for`
# loop (the key range of a query block); numpy 2.2 deprecates that. Interpreter only.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Conversion of an array with ndim > 0 to a scalar:DeprecationWarning:"
    r"triton\.runtime\.interpreter"
)

DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
# ||out - ref|| / ||ref||. fp32: exact fp32 products, fp32 softmax. bf16/fp16: P is rounded to
# the input dtype before P @ V (as FlashAttention does) and the output is rounded; the
# interpreter's fp32 -> bf16 cast truncates, so CPU bf16 errors (~5e-3) are about twice a GPU's.
REL_TOL = {torch.float32: 1e-5, torch.bfloat16: 1.5e-2, torch.float16: 2e-3}
LSE_TOL = 1e-5  # the scores are fp32 in every dtype

# (batch, seq_len, prefix_len, num_heads, num_kv_heads, head_dim_qk, head_dim_v, block_m, block_n)
SHAPES = [
    pytest.param(1, 1, 0, 2, 2, 16, 16, 16, 16, id="one-token"),
    pytest.param(2, 37, 0, 4, 2, 32, 32, 16, 16, id="no-prefix-gqa2-ragged"),
    pytest.param(2, 21, 45, 4, 1, 24, 16, 16, 32, id="prefix45-mqa-qk24-tail-v16"),
    pytest.param(1, 70, 19, 2, 2, 48, 32, 32, 16, id="prefix19-mla-like-qk48-v32"),
    pytest.param(1, 33, 64, 4, 1, 12, 20, 16, 16, id="prefix64-gqa4-qk12-v20"),
    pytest.param(2, 90, 40, 2, 1, 32, 32, 64, 64, id="default-blocks"),
]
DTYPES = [pytest.param(torch.float32, id="fp32"), pytest.param(torch.bfloat16, id="bf16")]


def _rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def _np(x: torch.Tensor) -> np.ndarray:
    """float64 copy of what the kernel read (so the reference sees the rounded inputs)."""
    return x.detach().to(device="cpu", dtype=torch.float64).numpy()


def _inputs(
    shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    batch, seq_len, prefix_len, heads, kv_heads, dqk, dv = shape
    gen = torch.Generator().manual_seed(seed)
    return make_inputs(batch, seq_len, prefix_len, heads, kv_heads, dqk, dv, dtype, DEVICE, gen)


def _check(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    *,
    sm_scale: float | None = None,
    causal: bool = True,
) -> None:
    ref_out, ref_lse = prefill_attention_reference(
        _np(q), _np(k), _np(v), sm_scale=sm_scale, causal=causal
    )
    assert out.shape == ref_out.shape
    assert out.dtype == q.dtype
    assert lse.shape == ref_lse.shape
    assert lse.dtype == torch.float32
    assert _rel_err(_np(out), ref_out) < REL_TOL[q.dtype]
    assert _rel_err(_np(lse), ref_lse) < LSE_TOL


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("batch", "seq_len", "prefix_len", "heads", "kv_heads", "dqk", "dv", "block_m", "block_n"),
    SHAPES,
)
def test_prefill_attention_matches_reference(
    batch: int,
    seq_len: int,
    prefix_len: int,
    heads: int,
    kv_heads: int,
    dqk: int,
    dv: int,
    block_m: int,
    block_n: int,
    dtype: torch.dtype,
) -> None:
    q, k, v = _inputs((batch, seq_len, prefix_len, heads, kv_heads, dqk, dv), dtype, seed=seq_len)
    out, lse = prefill_attention(q, k, v, block_m=block_m, block_n=block_n)
    _check(q, k, v, out, lse)


def test_prefill_attention_fp16_and_custom_scale() -> None:
    q, k, v = _inputs((2, 29, 11, 4, 2, 32, 16), torch.float16, seed=5)
    out, lse = prefill_attention(q, k, v, sm_scale=0.3, block_m=16, block_n=16)
    _check(q, k, v, out, lse, sm_scale=0.3)


def test_causal_mask_is_offset_by_the_prefix() -> None:
    """A new token must not see later new tokens: changing them leaves earlier rows unchanged."""
    q, k, v = _inputs((1, 20, 13, 2, 1, 16, 16), torch.float32, seed=9)
    out, _ = prefill_attention(q, k, v, block_m=16, block_n=16)
    k2, v2 = k.clone(), v.clone()
    k2[:, 13 + 10 :] = 100.0  # keys of new tokens 10.. (prefix 13)
    v2[:, 13 + 10 :] = -100.0
    out2, _ = prefill_attention(q, k2, v2, block_m=16, block_n=16)
    torch.testing.assert_close(out2[:, :10], out[:, :10], rtol=0, atol=0)
    assert not torch.allclose(out2[:, 10:], out[:, 10:])


@pytest.mark.parametrize("dtype", DTYPES)
def test_chunked_context_lse_merge_equals_full_prefill(dtype: torch.dtype) -> None:
    """vLLM's chunked-context prefill: the new tokens attend to the prefix (no mask) and to
    themselves (causal) separately, and ``lse_merge`` combines the two parts exactly."""
    prefix_len, seq_len = 27, 22
    q, k, v = _inputs((2, seq_len, prefix_len, 4, 2, 24, 16), dtype, seed=3)
    full_out, full_lse = prefill_attention(q, k, v, block_m=16, block_n=16)
    ctx_out, ctx_lse = prefill_attention(
        q, k[:, :prefix_len], v[:, :prefix_len], causal=False, block_m=16, block_n=16
    )
    _check(q, k[:, :prefix_len], v[:, :prefix_len], ctx_out, ctx_lse, causal=False)
    new_out, new_lse = prefill_attention(
        q, k[:, prefix_len:], v[:, prefix_len:], block_m=16, block_n=16
    )
    tokens, heads = 2 * seq_len, 4
    merged_out, merged_lse = lse_merge(
        ctx_out.reshape(tokens, heads, -1),
        ctx_lse.reshape(tokens, heads),
        new_out.reshape(tokens, heads, -1),
        new_lse.reshape(tokens, heads),
    )
    ref_out, ref_lse = prefill_attention_reference(_np(q), _np(k), _np(v))
    merged_np = _np(merged_out).reshape(ref_out.shape)
    assert _rel_err(merged_np, ref_out) < 2 * REL_TOL[dtype]  # two roundings of the parts
    assert _rel_err(_np(merged_lse).reshape(ref_lse.shape), ref_lse) < LSE_TOL
    assert _rel_err(_np(full_lse), ref_lse) < LSE_TOL
    assert _rel_err(merged_np, _np(full_out)) < 3 * REL_TOL[dtype]


def test_non_causal_with_fewer_keys_than_queries_and_empty_keys() -> None:
    q, k, v = _inputs((1, 40, 0, 2, 2, 16, 32), torch.float32, seed=4)
    out, lse = prefill_attention(q, k[:, :7], v[:, :7], causal=False, block_m=16, block_n=16)
    _check(q, k[:, :7], v[:, :7], out, lse, causal=False)
    out, lse = prefill_attention(q, k[:, :0], v[:, :0], causal=False)
    assert bool(torch.all(out == 0))
    assert bool(torch.all(torch.isneginf(lse)))


def test_strided_views_of_a_fused_qkv_buffer() -> None:
    """q, k, v sliced out of one fused projection output (non-contiguous token/head strides)."""
    gen = torch.Generator().manual_seed(8)
    batch, seq_len, heads, kv_heads, dqk, dv = 2, 19, 4, 2, 16, 16
    width = heads * dqk + kv_heads * dqk + kv_heads * dv
    fused = torch.randn((batch, seq_len, width), generator=gen).to(DEVICE)
    q = fused[..., : heads * dqk].unflatten(-1, (heads, dqk))
    k = fused[..., heads * dqk : (heads + kv_heads) * dqk].unflatten(-1, (kv_heads, dqk))
    v = fused[..., (heads + kv_heads) * dqk :].unflatten(-1, (kv_heads, dv))
    assert not q.is_contiguous()
    out, lse = prefill_attention(q, k, v, block_m=16, block_n=16)
    _check(q, k, v, out, lse)
    out_c, _ = prefill_attention(
        q.contiguous(), k.contiguous(), v.contiguous(), block_m=16, block_n=16
    )
    torch.testing.assert_close(out, out_c, rtol=0, atol=0)


def test_make_inputs_and_flops() -> None:
    gen = torch.Generator().manual_seed(0)
    q, k, v = make_inputs(2, 5, 3, 8, 2, 24, 16, torch.bfloat16, DEVICE, gen)
    assert q.shape == (2, 5, 8, 24)
    assert k.shape == (2, 8, 2, 24)
    assert v.shape == (2, 8, 2, 16)
    assert {t.dtype for t in (q, k, v)} == {torch.bfloat16}
    assert all(t.is_contiguous() for t in (q, k, v))
    q2, _, _ = make_inputs(2, 5, 3, 8, 2, 24, 16, torch.bfloat16, DEVICE, gen.manual_seed(0))
    torch.testing.assert_close(q, q2, rtol=0, atol=0)
    # 1 query x (prefix 3 + itself) keys, 1 head: 4 pairs * 2 FLOPs * (Dqk + Dv)
    assert attention_flops(1, 1, 3, 1, 24, 16) == 4 * 2 * 40
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        make_inputs(1, 4, 0, 3, 2, 16, 16, torch.float32, DEVICE, gen)


def _bad_cases() -> list:
    z = torch.zeros
    f32 = torch.float32
    return [
        pytest.param(
            (z(1, 4, 3, 16), z(1, 4, 2, 16), z(1, 4, 2, 16)),
            {},
            "multiple of num_kv_heads",
            id="heads-not-multiple",
        ),
        pytest.param(
            (z(1, 4, 2, 16), z(1, 5, 2, 16), z(1, 4, 2, 16)),
            {},
            "must share",
            id="k-v-lengths-differ",
        ),
        pytest.param(
            (z(1, 4, 2, 16), z(1, 3, 2, 16), z(1, 3, 2, 16)),
            {},
            "kv_len >= seq_len",
            id="causal-kv-shorter",
        ),
        pytest.param(
            (z(1, 4, 2, 16), z(1, 4, 2, 8), z(1, 4, 2, 16)),
            {},
            "head dims differ",
            id="qk-dims-differ",
        ),
        pytest.param(
            (z(1, 4, 2, 16), z(1, 4, 2, 16, dtype=torch.float16), z(1, 4, 2, 16)),
            {},
            "must share one of",
            id="dtype-mismatch",
        ),
        pytest.param(
            (z(1, 4, 2, 16, dtype=torch.float64),) * 3,
            {},
            "must share one of",
            id="fp64",
        ),
        pytest.param((z(4, 2, 16), z(4, 2, 16), z(4, 2, 16)), {}, "4-D", id="3-d"),
        pytest.param(
            (z(1, 4, 2, 16, dtype=f32),) * 3,
            {"block_n": 48},
            "power of two",
            id="block-n-48",
        ),
        pytest.param(
            (z(1, 4, 2, 16, dtype=f32),) * 3,
            {"block_m": 8},
            "power of two",
            id="block-m-8",
        ),
    ]


@pytest.mark.parametrize(("tensors", "kwargs", "match"), _bad_cases())
def test_prefill_attention_rejects_bad_inputs(
    tensors: tuple[torch.Tensor, ...], kwargs: dict, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        prefill_attention(*(t.to(DEVICE) for t in tensors), **kwargs)
