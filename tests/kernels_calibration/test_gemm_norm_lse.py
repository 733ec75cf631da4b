"""GEMM, RMSNorm and LSE-merge Triton kernels against their float64 numpy references.

On a CPU they run in the Triton interpreter (``TRITON_INTERPRET=1``, set before triton is
imported); the module is skipped where the calibration extra (torch + triton) is absent.
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

from kernels_calibration.gemm import matmul, matmul_reference  # noqa: E402 (after importorskip)
from kernels_calibration.lse_merge import lse_merge, lse_merge_reference  # noqa: E402
from kernels_calibration.rmsnorm import rmsnorm, rmsnorm_reference  # noqa: E402

# triton 3.5's interpreter calls int() on a 1-element array when a runtime scalar bounds a
# `for` loop (tensor.__index__); numpy >= 1.25 deprecates that (it errors from numpy 2.3, hence
# numpy < 2.3 in the calibration venv). Not our code, and harmless on 2.2: ignore it there only.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Conversion of an array with ndim > 0 to a scalar:DeprecationWarning:"
    r"triton\.runtime\.interpreter"
)

# On a GPU box run with TRITON_INTERPRET=0 to compile the kernels for real.
DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
# ||out - ref|| / ||ref|| bounds. fp32 math throughout. bf16 adds the output rounding: the
# reference sees the same bf16-rounded inputs. The interpreter's fp32 -> bf16 cast truncates
# instead of rounding to nearest, so CPU bf16 errors (~4e-3) are about twice a GPU's.
REL_TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
DTYPES = [pytest.param(torch.float32, id="fp32"), pytest.param(torch.bfloat16, id="bf16")]


def _rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def _randn(gen: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Standard normal drawn in fp32 on the CPU, then cast and moved."""
    return torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype=dtype, device=DEVICE)


def _np(x: torch.Tensor) -> np.ndarray:
    """float64 copy of what the kernel actually read (so the reference sees the rounded inputs)."""
    return x.detach().to(device="cpu", dtype=torch.float64).numpy()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("m", "n", "k"),
    [(16, 16, 16), (37, 19, 45), (1, 70, 33), (65, 130, 7)],
    ids=["square16", "ragged37x19x45", "decode-m1", "two-tiles-k7"],
)
def test_matmul_matches_reference(m: int, n: int, k: int, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(1000 * m + 10 * n + k)
    a = _randn(gen, (m, k), dtype)
    b = _randn(gen, (k, n), dtype)
    c = matmul(a, b)
    assert c.shape == (m, n)
    assert c.dtype == dtype
    assert _rel_err(_np(c), matmul_reference(_np(a), _np(b))) < REL_TOL[dtype]


def test_matmul_transposed_weight_and_small_blocks() -> None:
    """``x @ w.T`` for an ``[N, K]`` weight (strided b) with non-default tiles and K loop."""
    gen = torch.Generator().manual_seed(7)
    x = _randn(gen, (37, 45), torch.float32)
    w = _randn(gen, (19, 45), torch.float32)
    c = matmul(x, w.T, block_m=16, block_n=16, block_k=16, group_m=2)
    assert _rel_err(_np(c), matmul_reference(_np(x), _np(w).T)) < REL_TOL[torch.float32]


FNUZ_ON_CPU = pytest.mark.skipif(
    DEVICE == "cpu", reason="triton 3.5's interpreter cannot convert fp8e4b8 (MI300's fnuz)"
)


@pytest.mark.parametrize(
    "fp8",
    [
        pytest.param(torch.float8_e4m3fn, id="fn"),
        pytest.param(torch.float8_e4m3fnuz, id="fnuz", marks=FNUZ_ON_CPU),
    ],
)
def test_fp8_matmul_is_scaled_and_bf16(fp8: torch.dtype) -> None:
    """W8A8 per-tensor: the reference multiplies the FP8 values exactly as stored."""
    gen = torch.Generator().manual_seed(3)
    a = _randn(gen, (33, 40), torch.float32).to(fp8)
    b = _randn(gen, (40, 21), torch.float32).to(fp8)
    c = matmul(a, b, block_m=16, block_n=16, block_k=16, scale_a=0.5, scale_b=3.0)
    assert c.dtype == torch.bfloat16
    ref = 1.5 * matmul_reference(_np(a), _np(b))
    assert _rel_err(_np(c), ref) < REL_TOL[torch.bfloat16]
    with pytest.raises(ValueError, match="FP8 inputs only"):
        matmul(a.float(), b.float(), scale_a=2.0)


def test_matmul_rejects_mismatched_inner_dims() -> None:
    a = torch.zeros((4, 5), device=DEVICE)
    with pytest.raises(ValueError, match="inner dimensions"):
        matmul(a, torch.zeros((6, 4), device=DEVICE))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("rows", "n", "max_block_n"),
    [(1, 16, 4096), (5, 19, 4096), (7, 300, 4096), (3, 300, 64)],
    ids=["1x16", "ragged5x19", "7x300", "7x300-looped"],
)
def test_rmsnorm_matches_reference(rows: int, n: int, max_block_n: int, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(100 * rows + n)
    x = _randn(gen, (rows, n), dtype) * 3.0
    w = 1.0 + 0.1 * _randn(gen, (n,), dtype)
    y = rmsnorm(x, w, 1e-6, max_block_n=max_block_n)
    assert y.shape == x.shape
    assert y.dtype == dtype
    assert _rel_err(_np(y), rmsnorm_reference(_np(x), _np(w), 1e-6)) < REL_TOL[dtype]


def test_rmsnorm_keeps_leading_dims_and_uses_eps() -> None:
    gen = torch.Generator().manual_seed(3)
    x = 1e-3 * _randn(gen, (2, 3, 24), torch.float32)  # mean(x**2) ~ 1e-6, comparable to eps
    w = _randn(gen, (24,), torch.float32)
    y = rmsnorm(x, w, 1e-5)
    assert y.shape == (2, 3, 24)
    assert _rel_err(_np(y), rmsnorm_reference(_np(x), _np(w), 1e-5)) < REL_TOL[torch.float32]


def _lse_case(
    rng: np.random.Generator, t: int, h: int, d: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    o1 = torch.from_numpy(rng.standard_normal((t, h, d), dtype=np.float32)).to(DEVICE, dtype)
    o2 = torch.from_numpy(rng.standard_normal((t, h, d), dtype=np.float32)).to(DEVICE, dtype)
    # lse spread wide enough that one side often dominates.
    lse1 = torch.from_numpy(rng.normal(0.0, 4.0, (t, h)).astype(np.float32)).to(DEVICE)
    lse2 = torch.from_numpy(rng.normal(0.0, 4.0, (t, h)).astype(np.float32)).to(DEVICE)
    return o1, lse1, o2, lse2


def _check_lse_merge(
    o1: torch.Tensor, lse1: torch.Tensor, o2: torch.Tensor, lse2: torch.Tensor, dtype: torch.dtype
) -> None:
    o, lse = lse_merge(o1, lse1, o2, lse2)
    o_ref, lse_ref = lse_merge_reference(_np(o1), _np(lse1), _np(o2), _np(lse2))
    assert o.shape == o1.shape
    assert o.dtype == dtype
    assert lse.shape == lse1.shape
    assert _rel_err(_np(o), o_ref) < REL_TOL[dtype]
    lse_np = _np(lse)
    finite = np.isfinite(lse_ref)
    np.testing.assert_array_equal(np.isneginf(lse_np), np.isneginf(lse_ref))
    assert _rel_err(lse_np[finite], lse_ref[finite]) < REL_TOL[torch.float32]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("t", "h", "d"), [(1, 1, 16), (5, 3, 19), (9, 4, 64)], ids=["1x1x16", "ragged5x3x19", "9x4x64"]
)
def test_lse_merge_matches_reference(t: int, h: int, d: int, dtype: torch.dtype) -> None:
    rng = np.random.default_rng(10_000 * t + 100 * h + d)
    _check_lse_merge(*_lse_case(rng, t, h, d, dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_lse_merge_empty_side(dtype: torch.dtype) -> None:
    """-inf (or FA's +inf) lse on one side passes the other through; both empty gives (0, -inf)."""
    rng = np.random.default_rng(42)
    o1, lse1, o2, lse2 = _lse_case(rng, 6, 2, 24, dtype)
    lse1[0, :] = float("-inf")  # token 0: no prefix keys
    lse2[1, 1] = float("-inf")  # token 1, head 1: no suffix keys
    lse1[2, 0] = float("inf")  # token 2, head 0: empty part reported as +inf
    lse1[3, :] = float("-inf")  # token 3: both parts empty
    lse2[3, :] = float("-inf")
    _check_lse_merge(o1, lse1, o2, lse2, dtype)
    o, lse = lse_merge(o1, lse1, o2, lse2)
    torch.testing.assert_close(o[0], o2[0], rtol=0, atol=0)
    torch.testing.assert_close(lse[0], lse2[0], rtol=0, atol=0)
    torch.testing.assert_close(o[1, 1], o1[1, 1], rtol=0, atol=0)
    torch.testing.assert_close(o[2, 0], o2[2, 0], rtol=0, atol=0)
    assert bool(torch.all(o[3] == 0))
    assert bool(torch.all(torch.isneginf(lse[3])))


def test_lse_merge_accepts_head_major_lse() -> None:
    """vLLM keeps lse as ``[H, T]``: its transpose is a strided ``[T, H]`` view, no copy needed."""
    rng = np.random.default_rng(5)
    o1, lse1, o2, lse2 = _lse_case(rng, 7, 3, 32, torch.float32)
    lse1_ht, lse2_ht = lse1.T.contiguous(), lse2.T.contiguous()
    _check_lse_merge(o1, lse1_ht.T, o2, lse2_ht.T, torch.float32)
