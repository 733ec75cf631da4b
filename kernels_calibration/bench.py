"""Inputs and a run-once closure for every measurement job (``build(job, device)``).

Inputs are random (a seeded ``torch.Generator``), allocated once per job on the device; the
closure runs only the kernel, so the timing covers the kernel and its launch, not the setup.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from kernels_calibration.shapes import Job

Closure = Callable[[], object]
SEED = 0
MLA_LATENT = 512
MLA_ROPE = 64
MLA_NOPE = 128
MLA_V = 128
MLA_PAGE = 64  # tokens per page of the latent cache (vLLM's MLA block size)


def _randn(shape: tuple[int, ...], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    gen = torch.Generator(device=device).manual_seed(SEED)
    return torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(dtype)


def fp8_dtype(device: torch.device) -> torch.dtype:
    """e4m3fn, except MI300-class (gfx94x) ROCm parts, which use the fnuz variant."""
    if device.type == "cuda" and torch.version.hip:
        arch = getattr(torch.cuda.get_device_properties(device), "gcnArchName", "")
        if arch.startswith("gfx94"):
            return torch.float8_e4m3fnuz
    return torch.float8_e4m3fn


def _gemm(job: Job, device: torch.device) -> Closure:
    d = job.dims()
    m, n, k = d["m"], d["n"], d["k"]
    a = _randn((m, k), device, torch.bfloat16)
    w = _randn((n, k), device, torch.bfloat16)  # [out, in] as in nn.Linear
    if job.dtype == "fp8":
        f8 = fp8_dtype(device)
        a, w = a.to(f8), w.to(f8)
    if job.kernel == "triton.matmul":
        from kernels_calibration.gemm import matmul

        wt = w.t()
        return lambda: matmul(a, wt, block_m=64, block_n=128, block_k=64, num_warps=8)
    if job.dtype == "fp8":
        a8, w8 = a, w
        one = torch.ones((), device=device, dtype=torch.float32)
        # per-tensor scaled FP8 GEMM (cuBLASLt / hipBLASLt), bf16 out: vLLM's w8a8 path
        return lambda: torch._scaled_mm(
            a8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16
        )
    return lambda: torch.nn.functional.linear(a, w)


def _norm(job: Job, device: torch.device) -> Closure:
    d, p = job.dims(), dict(job.params)
    if job.kernel == "lse_merge":
        from kernels_calibration.lse_merge import lse_merge

        heads, width = p["heads"], p["width"]
        tokens = d["elements"] // (heads * width)
        o1 = _randn((tokens, heads, width), device, torch.bfloat16)
        o2 = _randn((tokens, heads, width), device, torch.bfloat16)
        l1 = _randn((tokens, heads), device, torch.float32)
        l2 = _randn((tokens, heads), device, torch.float32)
        return lambda: lse_merge(o1, l1, o2, l2)
    width = p["width"]
    x = _randn((d["elements"] // width, width), device, torch.bfloat16)
    weight = _randn((width,), device, torch.bfloat16)
    if job.kernel == "torch.rms_norm":
        return lambda: torch.nn.functional.rms_norm(x, (width,), weight, 1e-6)
    from kernels_calibration.rmsnorm import rmsnorm

    return lambda: rmsnorm(x, weight)


def num_kv_splits(batch: int, heads: int, ctx: int, device: torch.device) -> int:
    """Split-KV parts: enough programs to fill the device's SMs / CUs, at least 256 tokens
    a split, at most 64 splits."""
    units = torch.cuda.get_device_properties(device).multi_processor_count if (
        device.type == "cuda"
    ) else 8  # fmt: skip
    programs = batch * math.ceil(heads / 16)
    want = max(1, math.ceil(units / programs))
    return int(max(1, min(want, 64, math.ceil(ctx / 256))))


def _mla_decode(job: Job, device: torch.device) -> Closure:
    from kernels_calibration.mla_decode import mla_decode

    d = job.dims()
    b, ctx, heads = d["batch"], d["ctx_len"], d["num_heads"]
    pages = math.ceil(ctx / MLA_PAGE)
    cache = _randn((b * pages, MLA_PAGE, MLA_LATENT + MLA_ROPE), device, torch.bfloat16)
    gen = torch.Generator().manual_seed(SEED)
    table = torch.randperm(b * pages, generator=gen).view(b, pages).to(device, torch.int32)
    seq_lens = torch.full((b,), ctx, device=device, dtype=torch.int32)
    q = _randn((b, heads, MLA_LATENT + MLA_ROPE), device, torch.bfloat16)
    splits = num_kv_splits(b, heads, ctx, device)
    scale = 1.0 / math.sqrt(MLA_NOPE + MLA_ROPE)
    return lambda: mla_decode(
        q, cache, table, seq_lens, kv_lora_rank=MLA_LATENT, sm_scale=scale, num_splits=splits
    )


def _kda_decode(job: Job, device: torch.device) -> Closure:
    from kernels_calibration.kda_decode import kda_decode

    d = job.dims()
    b, h, dk = d["batch"], d["num_heads"], d["head_dim"]
    q = _randn((b, h, dk), device, torch.bfloat16)
    k = _randn((b, h, dk), device, torch.bfloat16)
    v = _randn((b, h, dk), device, torch.bfloat16)
    g = -torch.rand((b, h, dk), device=device).to(torch.bfloat16)
    beta = torch.rand((b, h), device=device).to(torch.bfloat16)
    state = torch.zeros((b, h, dk, dk), device=device, dtype=torch.float32)
    return lambda: kda_decode(q, k, v, g, beta, state)


_MOE_CACHE: dict[tuple[object, ...], object] = {}


def _moe(job: Job, device: torch.device) -> Closure:
    """The routed experts of one rank: ``inter / tp`` per expert, ``num_experts / ep`` local
    experts (routing over all of them, pairs of other ranks dropped at the align step).

    Expert weights (GBs at TP1) are made once per family and reused for its token counts;
    only the activations and the routing are drawn anew."""
    import dataclasses

    from kernels_calibration.moe_inputs import MoeInputs, make_inputs
    from kernels_calibration.moe_routing import route

    d = job.dims()
    family = (job.dtype, d["hidden"], d["inter"], d["num_experts"], d["topk"], d["ep"], d["tp"])
    gen = torch.Generator(device=device).manual_seed(SEED)
    cached = _MOE_CACHE.get(family)
    if not isinstance(cached, MoeInputs):
        _MOE_CACHE.clear()  # one family's weights at a time
        cached = make_inputs(
            d["num_tokens"], d["hidden"], d["inter"] // d["tp"], d["num_experts"], d["topk"],
            weight_format=job.dtype, dtype=torch.bfloat16, device=device, generator=gen,
            local_experts=d["num_experts"] // d["ep"],
        )  # fmt: skip
        _MOE_CACHE[family] = cached
    t = d["num_tokens"]
    weights, ids = route(gen, d["topk"], num_tokens=t, num_experts=d["num_experts"], device=device)
    x = _randn((t, d["hidden"]), device, torch.bfloat16)
    inputs = dataclasses.replace(cached, x=x, topk_weights=weights, topk_ids=ids)
    return inputs.run


def _attn_prefill(job: Job, device: torch.device) -> Closure:
    from kernels_calibration.prefill_attention import make_inputs, prefill_attention

    d = job.dims()
    gen = torch.Generator(device=device).manual_seed(SEED)
    q, k, v = make_inputs(
        d["batch"], d["seq_len"], d["prefix_len"], d["num_heads"], d["num_kv_heads"],
        d["head_dim"], d["head_dim"], torch.bfloat16, device, gen,
    )  # fmt: skip
    return lambda: prefill_attention(q, k, v)


def _mla_prefill(job: Job, device: torch.device) -> Closure:
    """vLLM's MLA prefill (``forward_mha``): up-project the latents of prefix + new tokens
    with kv_b to per-head K_nope and V, append the shared RoPE key, then causal attention
    with QK dim 192 and V dim 128 (``ops.mla_prefill_work``: 2 kernels)."""
    from kernels_calibration.prefill_attention import prefill_attention

    d = job.dims()
    b, s, p, h = d["batch"], d["seq_len"], d["prefix_len"], d["num_heads"]
    latent = _randn((b, p + s, MLA_LATENT), device, torch.bfloat16)
    k_rope = _randn((b, p + s, 1, MLA_ROPE), device, torch.bfloat16)
    w_kvb = _randn((h * (MLA_NOPE + MLA_V), MLA_LATENT), device, torch.bfloat16) * 0.05
    q = _randn((b, s, h, MLA_NOPE + MLA_ROPE), device, torch.bfloat16)

    def run() -> object:
        kv = torch.nn.functional.linear(latent, w_kvb).view(b, p + s, h, MLA_NOPE + MLA_V)
        k_nope, v = kv.split([MLA_NOPE, MLA_V], dim=-1)
        k = torch.cat([k_nope, k_rope.expand(b, p + s, h, MLA_ROPE)], dim=-1)
        return prefill_attention(q, k, v.contiguous())

    return run


def _kda_prefill(job: Job, device: torch.device) -> Closure:
    from kernels_calibration.kda_prefill import kda_prefill, make_inputs

    d = job.dims()
    gen = torch.Generator(device=device).manual_seed(SEED)
    q, k, v, g, beta, state = make_inputs(
        d["batch"], d["seq_len"], d["num_heads"], d["head_dim"], torch.bfloat16, device, gen
    )
    return lambda: kda_prefill(q, k, v, g, beta, state)


BUILDERS: dict[str, Callable[[Job, torch.device], Closure]] = {
    "prefill_attention": _attn_prefill,
    "mla_prefill": _mla_prefill,
    "kda_prefill": _kda_prefill,
    "moe_gemm": _moe,
    "torch.matmul": _gemm,
    "triton.matmul": _gemm,
    "torch.rms_norm": _norm,
    "rmsnorm": _norm,
    "lse_merge": _norm,
    "mla_decode": _mla_decode,
    "kda_decode": _kda_decode,
}


def build(job: Job, device: torch.device) -> Closure:
    try:
        builder = BUILDERS[job.kernel]
    except KeyError:
        raise ValueError(f"no builder for kernel {job.kernel!r}") from None
    return builder(job, device)
