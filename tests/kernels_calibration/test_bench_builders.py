"""Every kernel the calibration job times builds its inputs and runs (tiny shapes, interpreter).

``bench.build(job, device)`` is what the harness calls on the GPU; here the same code runs
on the CPU under ``TRITON_INTERPRET=1``, and the outputs are checked against torch.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

torch = pytest.importorskip(
    "torch", reason="the calibration extra (torch CPU + triton) is not installed"
)
pytest.importorskip("triton", reason="the calibration extra (torch CPU + triton) is not installed")

from kernels_calibration import bench  # noqa: E402 (after importorskip)
from kernels_calibration.shapes import KERNELS, Job  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:Conversion of an array with ndim > 0 to a scalar:DeprecationWarning:"
    r"triton\.runtime\.interpreter"
)
DEVICE = torch.device("cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda")


def _job(kernel: str, op: str, dtype: str = "bf16", **shape: int) -> Job:
    params = tuple((k[2:], shape.pop(k)) for k in list(shape) if k.startswith("p_"))
    return Job(op, kernel, dtype, tuple(shape.items()), params=params)


JOBS = [
    _job("torch.matmul", "gemm", m=5, n=48, k=32),
    _job("triton.matmul", "gemm", m=5, n=48, k=32),
    _job("triton.matmul", "gemm", "fp8", m=5, n=48, k=32),
    _job("torch.rms_norm", "elementwise", elements=3 * 40, bytes_per_elem=4, p_width=40),
    _job("rmsnorm", "elementwise", elements=3 * 40, bytes_per_elem=4, p_width=40),
    _job("lse_merge", "elementwise", elements=2 * 3 * 32, bytes_per_elem=6, p_heads=3,
         p_width=32),
    _job("mla_decode", "mla_decode", batch=2, ctx_len=70, num_heads=2),
    _job("kda_decode", "kda_decode", batch=2, num_heads=2, head_dim=16),
    _job("kda_prefill", "kda_prefill", batch=1, seq_len=70, num_heads=2, head_dim=16),
    _job("prefill_attention", "attn_prefill", batch=1, seq_len=20, prefix_len=13, num_heads=4,
         num_kv_heads=2, head_dim=16),
    _job("mla_prefill", "mla_prefill", batch=1, seq_len=9, prefix_len=7, num_heads=2),
    _job("moe_gemm", "moe", "bf16", num_tokens=5, hidden=64, inter=64, num_experts=8, topk=2,
         ep=2, tp=2),
    _job("moe_gemm", "moe", "mxfp4", num_tokens=5, hidden=64, inter=64, num_experts=8, topk=2,
         ep=1, tp=2),
]  # fmt: skip


@pytest.mark.parametrize("job", JOBS, ids=lambda j: f"{j.kernel}-{j.dtype}")
def test_builder_runs_the_kernel(job: Job) -> None:
    out = bench.build(job, DEVICE)()
    tensors = out if isinstance(out, tuple) else (out,)
    for t in tensors:
        assert torch.isfinite(t.float()).all()


def test_every_kernel_has_a_builder() -> None:
    assert set(bench.BUILDERS) == set(KERNELS)


def test_triton_and_torch_gemm_agree() -> None:
    torch_out = bench.build(JOBS[0], DEVICE)()
    triton_out = bench.build(JOBS[1], DEVICE)()
    assert torch.allclose(torch_out.float(), triton_out.float(), rtol=2e-2, atol=2e-2)


def test_unknown_kernel_is_refused() -> None:
    with pytest.raises(ValueError, match="no builder for kernel 'nope'"):
        bench.build(Job("gemm", "nope", "bf16", (("m", 1),)), DEVICE)


def test_moe_family_reuses_its_weights_and_stays_correct() -> None:
    shape = {"hidden": 64, "inter": 64, "num_experts": 8, "topk": 2, "ep": 1, "tp": 2}
    first = bench.build(_job("moe_gemm", "moe", "fp8", num_tokens=5, **shape), DEVICE)
    second = bench.build(_job("moe_gemm", "moe", "fp8", num_tokens=3, **shape), DEVICE)
    a, b = first.__self__, second.__self__  # type: ignore[attr-defined]
    assert a.w1 is b.w1  # the same expert weights, new tokens and routing
    assert a.x.shape[0] == 5
    assert b.x.shape[0] == 3
    out = second()
    assert out.shape == (3, 64)
    ref = torch.from_numpy(b.reference())
    assert torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref) < 3e-2
