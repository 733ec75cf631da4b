"""The kinds of measured rows: per kind, the family columns a query must match exactly and
the axes interpolated within a family (``simulator.measured.tables`` reads the tables into
them, ``simulator.measured.lookup`` answers from them), and the op class each prices."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KindSpec:
    """How rows of one kind are keyed: exact-match family columns and interpolated axes."""

    family: tuple[str, ...]
    axes: tuple[str, ...]
    monotone: tuple[str, ...]  # axes along which the kernel's latency cannot fall
    # (family column, its value, axis, limit): where vLLM runs one kernel configuration for
    # every coordinate up to ``limit``, a cell costs at most the next one along the axis
    same_kernel: tuple[tuple[str, str, str, float], ...] = ()


KINDS: dict[str, KindSpec] = {
    # GEMM, BMM and MoE kernels change tiles / kernels with the token count, and the tables
    # show it: no monotone enforcement. Except per-tensor FP8 at m <= 16, one CUTLASS
    # configuration in vLLM's SM90 and SM100 dispatch (``sm100_fp8_config_M16_swap_ab``,
    # ``scaled_mm_sm100_fp8_dispatch.cuh``): the tables' m = 1 rows read ~3x m = 2 on
    # Blackwell for the same work (docs/measured.md)
    "gemm": KindSpec(("dtype",), ("m", "n", "k"), (), (("dtype", "fp8", "m", 16.0),)),
    "bmm": KindSpec(("which",), ("num_tokens", "num_heads"), ()),
    "moe": KindSpec(
        ("dtype", "hidden", "inter", "topk", "num_experts", "tp", "ep", "distribution"),
        ("num_tokens",),
        (),
    ),
    # the same rows by kernel, from every collection (ServingConfig.moe_kernel)
    "moe_kernel": KindSpec(
        ("kernel", "dtype", "hidden", "inter", "topk", "num_experts", "tp", "ep", "distribution"),
        ("num_tokens",),
        (),
    ),
    "attn_decode": KindSpec(
        ("kv_dtype", "head_dim", "window", "num_heads", "num_kv_heads"),
        ("batch", "ctx_len"),
        ("batch", "ctx_len"),
    ),
    "attn_prefill": KindSpec(
        ("kv_dtype", "head_dim", "window", "num_heads", "num_kv_heads"),
        ("batch", "seq_len"),
        ("batch", "seq_len"),
    ),
    "mla_decode_module": KindSpec(
        ("kv_dtype",), ("num_heads", "batch", "ctx_len"), ("batch", "ctx_len")
    ),
    "mla_prefill_module": KindSpec(
        ("kv_dtype",), ("num_heads", "batch", "seq_len"), ("batch", "seq_len")
    ),
    # the attention cores derived from the modules (``device.mla_core_frame``)
    "mla_decode": KindSpec(("kv_dtype",), ("num_heads", "batch", "ctx_len"), ("batch", "ctx_len")),
    "mla_prefill": KindSpec(("kv_dtype",), ("num_heads", "batch", "seq_len"), ("batch", "seq_len")),
    "kda_prefill": KindSpec(
        ("kind", "num_k_heads", "num_v_heads"), ("batch", "seq_len"), ("batch", "seq_len")
    ),
    "kda_decode": KindSpec(("kind", "num_k_heads", "num_v_heads"), ("batch",), ("batch",)),
    "kda_verify": KindSpec(
        ("kind", "num_k_heads", "num_v_heads"), ("batch", "queries"), ("batch", "queries")
    ),
    "allreduce": KindSpec(("world",), ("bytes",), ("bytes",)),
    "allgather": KindSpec(("world",), ("bytes",), ("bytes",)),
    "reducescatter": KindSpec(("world",), ("bytes",), ("bytes",)),
    "alltoall": KindSpec(("world",), ("bytes",), ("bytes",)),
    # vLLM's DeepEP dispatch / combine (world first: the collectives' baseline reads it)
    "moe_alltoall": KindSpec(("world", "backend", "phase"), ("bytes",), ("bytes",)),
}


# kind of table -> op class of the step model it prices
KIND_CLASS = {
    "gemm": "gemm",
    "bmm": "gemm",
    "moe": "moe",
    "moe_kernel": "moe",
    "attn_decode": "attn_decode",
    "attn_prefill": "attn_prefill",
    "mla_decode_module": "mla_decode",
    "mla_prefill_module": "mla_prefill",
    "mla_decode": "mla_decode",
    "mla_prefill": "mla_prefill",
    "kda_prefill": "kda_prefill",
    "kda_decode": "kda_decode",
    "kda_verify": "kda_decode",
    "allreduce": "allreduce",
    "allgather": "allgather",
    "reducescatter": "reducescatter",
    "alltoall": "alltoall",
    "moe_alltoall": "alltoall",
}
