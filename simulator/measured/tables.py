"""Read the public vLLM op tables and turn each into rows in the planner's own terms.

Every table becomes one or more *kinds*: a frame with the kind's family columns (what must
match a query exactly: formats, head counts, parallelism), its axis columns (what varies
within a family and is interpolated: tokens, batch, context, bytes) and ``seconds``.
The readings of the columns (units, what each row includes) are documented per reader and
in docs/measured.md; the sources are the package's collectors (``collector/vllm/*.py`` and
``collector/network/*.py`` of ai-dynamo/aiconfigurator).

Rows are dropped, with the reason recorded in ``dropped``, when they do not measure what
vLLM serves: the fp8 block-scaled GEMMs (timed without a CUDA graph: a 55-190 us host floor
below m ~ 4096, where the per-tensor FP8 rows, timed in a graph, move the same bytes) and
Kimi K3's prefill conv rows (the collector's host sync, ~0.26 ms a call, dominates).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from simulator.measured.kinds import KINDS
from simulator.measured.package import TableFile
from simulator.specs.loading import SpecError

if TYPE_CHECKING:
    import pandas as pd

MS = 1e-3
US = 1e-6
# table dtype name -> the planner's weight precision
GEMM_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "nvfp4": "nvfp4"}
MOE_DTYPES = {
    "bfloat16": "bf16",
    "fp8": "fp8",
    "fp8_block": "fp8_block",
    "nvfp4": "nvfp4",
    "w4a16_mxfp4": "mxfp4",  # MXFP4 weights, BF16 activations (Triton / Marlin / trtllm)
    "int4_wo": "int4_g32",  # INT4 weight-only, groups of 32 (Marlin; Kimi-K2.5)
}
KV_DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}
# the routed-expert kernel a MoE row times, by a part of its kernel_source (first match);
# ServingConfig.moe_kernel names these. vLLM 0.19-0.22's ``vllm_fused_moe`` is its Triton
# fused_moe; 0.24 names the oracle's choice (``..._triton_tritonexperts``, OAI Triton MXFP4)
MOE_KERNELS = (
    ("flashinfer_trtllm", "flashinfer_trtllm"),
    ("flashinfer_cutlass", "flashinfer_cutlass"),
    ("marlin", "marlin"),
    ("triton", "triton"),
    ("vllm_fused_moe", "triton"),
)
NCCL_OPS = {
    "all_reduce": "allreduce",
    "all_gather": "allgather",
    "reduce_scatter": "reducescatter",
    "alltoall": "alltoall",
    "moe_alltoall": "alltoall",
}
# DeepEP modes of the MoE all-to-all table -> vLLM's --all2all-backend names
A2A_BACKENDS = {"deepep_ht": "deepep_high_throughput", "deepep_ll": "deepep_low_latency"}


@dataclass
class Frames:
    """The normalized rows of one device, by kind, and where they came from."""

    frames: dict[str, pd.DataFrame] = field(default_factory=dict)
    files: dict[str, list[TableFile]] = field(default_factory=dict)  # kind -> tables read
    dropped: list[str] = field(default_factory=list)

    def add(self, kind: str, df: pd.DataFrame, source: TableFile) -> None:
        import pandas as pd

        spec = KINDS[kind]
        cols = [*spec.family, *spec.axes, "seconds"]
        df = df[cols]
        ok = np.isfinite(df["seconds"].to_numpy(dtype=np.float64)) & (df["seconds"] > 0)
        df = df[ok]
        if df.empty:
            return
        old = self.frames.get(kind)
        self.frames[kind] = df if old is None else pd.concat([old, df], ignore_index=True)
        self.files.setdefault(kind, []).append(source)


def read_table(tf: TableFile, text: tuple[str, ...], numbers: tuple[str, ...]) -> pd.DataFrame:
    """A parquet table with the columns the planner reads checked: present, and numbers
    numeric and finite. A bad table is one SpecError (file, column or row, reason)."""
    import pandas as pd

    try:
        df = pd.read_parquet(tf.path)
    except (OSError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SpecError(tf.path, "(file)", f"not a readable parquet table: {reason}") from None
    missing = [c for c in (*text, *numbers) if c not in df.columns]
    if missing:
        raise SpecError(tf.path, f"column {missing[0]}", "missing (the planner reads it)")
    if df.empty:
        raise SpecError(tf.path, "(file)", "empty table (no rows)")
    for c in numbers:
        values = pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=np.float64)
        bad = ~np.isfinite(values)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise SpecError(tf.path, f"row {row + 1}, column {c}", "not a finite number")
        df[c] = values
    return df


def _gemm(tf: TableFile, out: Frames) -> None:
    df = read_table(tf, ("gemm_dtype",), ("m", "n", "k", "latency"))
    known = df["gemm_dtype"].isin(list(GEMM_DTYPES))
    if (df["gemm_dtype"] == "fp8_block").any():
        out.dropped.append(
            f"{tf.relative}: fp8_block rows (timed without a CUDA graph; fp8_block GEMMs are"
            " answered from the per-tensor fp8 rows)"
        )
    df = df[known]
    frame = df.assign(
        dtype=df["gemm_dtype"].map(GEMM_DTYPES), seconds=df["latency"].astype(float) * MS
    )
    out.add("gemm", frame, tf)


def _bmm(tf: TableFile, out: Frames) -> None:
    df = read_table(tf, ("op_name",), ("num_tokens", "num_heads", "latency"))
    which = df["op_name"].map({"mla_gen_pre": "w_uk", "mla_gen_post": "w_uv"})
    df = df.assign(which=which, seconds=df["latency"].astype(float) * MS)
    out.add("bmm", df[which.notna()], tf)


MOE_NUMBERS = (
    "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
    "moe_ep_size", "latency",
)  # fmt: skip


def _moe_frame(tf: TableFile, text: tuple[str, ...] = ()) -> pd.DataFrame:
    df = read_table(tf, ("moe_dtype", "distribution", *text), MOE_NUMBERS)
    df = df[df["moe_dtype"].isin(list(MOE_DTYPES))]
    return df.assign(
        dtype=df["moe_dtype"].map(MOE_DTYPES),
        hidden=df["hidden_size"],
        inter=df["inter_size"],
        tp=df["moe_tp_size"],
        ep=df["moe_ep_size"],
        seconds=df["latency"].astype(float) * MS,
    )


def _moe(tf: TableFile, out: Frames) -> None:
    out.add("moe", _moe_frame(tf), tf)


def moe_kernel(kernel_source: str) -> str | None:
    """The kernel family of a MoE row's ``kernel_source`` (None: not one vLLM lets a user
    pick, e.g. vLLM 0.19's ``vllm_mxfp4_moe``, whichever MXFP4 backend its oracle chose)."""
    for part, kernel in MOE_KERNELS:
        if part in kernel_source:
            return kernel
    return None


def moe_kernels(history: list[TableFile], out: Frames) -> None:
    """Kind ``moe_kernel``: every collection's MoE rows keyed by kernel; a family (kernel,
    format, shape, layout, skew) timed by several collections keeps the newest one's rows."""
    import pandas as pd

    parts = []
    for order, tf in enumerate(history):  # oldest first
        df = _moe_frame(tf, ("kernel_source",))
        kernel = df["kernel_source"].map(moe_kernel)
        parts.append(df[kernel.notna()].assign(kernel=kernel[kernel.notna()], order=order))
    if not parts:
        return
    frame = pd.concat(parts, ignore_index=True)
    family = list(KINDS["moe_kernel"].family)
    newest = frame.groupby(family, sort=False)["order"].transform("max")
    frame = frame[frame["order"] == newest]
    for order in sorted(set(frame["order"])):
        out.add("moe_kernel", frame[frame["order"] == order], history[order])


def _attention(tf: TableFile, out: Frames, decode: bool) -> None:
    nums = (
        "batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "step",
        "window_size", "latency",
    )  # fmt: skip
    df = read_table(tf, ("kv_cache_dtype",), nums)
    df = df[df["kv_cache_dtype"].isin(list(KV_DTYPES))]
    # num_key_value_heads equal to num_heads is plain MHA; 0 heads never occurs in the tables
    frame = df.assign(
        kv_dtype=df["kv_cache_dtype"].map(KV_DTYPES),
        window=df["window_size"],
        num_kv_heads=df["num_key_value_heads"],
        batch=df["batch_size"],
        seconds=df["latency"].astype(float) * MS,
    )
    if decode:  # `step` cached tokens: the kernel attends step + 1 keys
        out.add("attn_decode", frame.assign(ctx_len=frame["step"] + 1), tf)
    else:  # `isl` new tokens per sequence, no cached prefix
        out.add("attn_prefill", frame.assign(seq_len=frame["isl"]), tf)


def _mla_module(tf: TableFile, out: Frames, decode: bool) -> None:
    from simulator.measured.harness import REFERENCE_MODEL, serving_ratio

    nums = ("num_heads", "batch_size", "isl", "step", "latency")
    df = read_table(tf, ("kv_cache_dtype", "gemm_type"), nums)
    # the bf16-projection rows of DeepSeek-V3's module: the attention core is what is left
    # after subtracting its projections priced from the (CUDA-graph) bf16 GEMM table
    keep = (df["gemm_type"] == "bfloat16") & df["kv_cache_dtype"].isin(list(KV_DTYPES))
    if "model" in df.columns:
        others = df["model"] != REFERENCE_MODEL
        if others.any():
            out.dropped.append(
                f"{tf.relative}: rows of other models than {REFERENCE_MODEL} (the core is"
                " derived with its projections)"
            )
        keep &= ~others
    df = df[keep]
    ratio, note = serving_ratio(tf, df, decode)
    if note:
        out.dropped.append(note)
    frame = df.assign(
        kv_dtype=df["kv_cache_dtype"].map(KV_DTYPES),
        batch=df["batch_size"],
        seconds=df["latency"].astype(float) * MS * ratio,
    )
    if decode:  # `step` = keys attended, the current token included
        out.add("mla_decode_module", frame.assign(ctx_len=frame["step"]), tf)
    else:
        out.add("mla_prefill_module", frame.assign(seq_len=frame["isl"]), tf)


LINEAR_KERNELS: dict[tuple[str, str], tuple[str, tuple[str, ...]]] = {
    # (table, phase) -> (kind, kernels summed into one row)
    ("kda", "context"): ("kda_prefill", ("flashkda_fwd",)),
    ("kda", "generation"): ("kda_decode", ("fused_kda_decode",)),
    ("kda", "verify"): ("kda_verify", ("causal_conv1d_update", "fused_recurrent_kda")),
    ("gdn", "context"): ("kda_prefill", ("chunk_gated_delta_rule_flashinfer",)),
    ("gdn", "generation"): ("kda_decode", ("fused_recurrent_gated_delta_rule_packed_decode",)),
}


def _linear(tf: TableFile, out: Frames, table: str) -> None:
    nums = (
        "batch_size", "seq_len", "num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim",
        "latency",
    )  # fmt: skip
    df = read_table(tf, ("phase", "kernel_source"), nums)
    df = df[(df["head_k_dim"] == 128) & (df["head_v_dim"] == 128)]
    if table == "kda":
        out.dropped.append(
            f"{tf.relative}: causal_conv1d_fn_qkv3 rows (eager, host sync per call); the"
            " prefill short conv stays on the prior"
        )
    for (tbl, phase), (kind, kernels) in LINEAR_KERNELS.items():
        if tbl != table:
            continue
        sel = df[(df["phase"] == phase) & df["kernel_source"].isin(kernels)]
        if sel.empty:
            continue
        keys = ["batch_size", "seq_len", "num_k_heads", "num_v_heads"]
        grouped = sel.groupby(keys, as_index=False).agg(
            latency=("latency", "sum"), n=("kernel_source", "nunique")
        )
        grouped = grouped[grouped["n"] == len(kernels)]  # every kernel of the sum measured
        frame = grouped.assign(
            kind="kda" if table == "kda" else "gdn",
            batch=grouped["batch_size"],
            queries=grouped["seq_len"],
            seconds=grouped["latency"].astype(float) * MS,
        )
        out.add(kind, frame, tf)


def _custom_allreduce(tf: TableFile, out: Frames) -> None:
    df = read_table(tf, ("kernel_source",), ("num_gpus", "message_size", "latency"))
    df = df[df["kernel_source"] == "vLLM_custom_graph"]  # the eager rows add a tensor copy
    frame = df.assign(
        world=df["num_gpus"],
        bytes=df["message_size"].astype(float) * 2.0,  # bf16 elements
        seconds=df["latency"].astype(float) * MS,
    )
    out.add("allreduce", frame, tf)


def _nccl(tf: TableFile, out: Frames) -> None:
    df = read_table(tf, ("op_name", "nccl_dtype"), ("num_gpus", "message_size", "latency"))
    df = df[df["nccl_dtype"] == "half"]
    for op, kind in NCCL_OPS.items():
        if kind == "allreduce" and "allreduce" in out.frames:
            continue  # vLLM's own all-reduce (custom below its limit, NCCL above) answers
        sel = df[df["op_name"] == op]
        total = sel["message_size"].astype(float) * 2.0
        # planner convention: all-gather bytes = one rank's shard; nccl-tests counts the
        # gathered output. Reduce-scatter and all-to-all: the per-rank input buffer.
        per_rank = total / sel["num_gpus"] if kind == "allgather" else total
        frame = sel.assign(
            world=sel["num_gpus"], bytes=per_rank, seconds=sel["latency"].astype(float) * MS
        )
        out.add(kind, frame, tf)


def _moe_a2a(tf: TableFile, out: Frames) -> None:
    """vLLM's DeepEP dispatch and combine within one node (``collector/vllm`` wideep):
    ``num_tokens`` is one rank's tokens (its attention batch), ``latency`` microseconds.
    The axis is the planner's all-to-all bytes per rank, the routed copies the rank sends:
    num_tokens x topk x hidden x 2 (bf16), whatever the kernel's wire format (LL sends FP8:
    the measured time has it), so hidden sizes and top-k of the table share one curve."""
    nums = ("ep_size", "node_num", "num_tokens", "hidden_size", "topk", "latency")
    df = read_table(tf, ("comm_backend", "phase"), nums)
    df = df[df["comm_backend"].isin(list(A2A_BACKENDS)) & (df["node_num"] == 1)]
    frame = df.assign(
        world=df["ep_size"],
        backend=df["comm_backend"].map(A2A_BACKENDS),
        bytes=df["num_tokens"] * df["topk"] * df["hidden_size"] * 2.0,
        seconds=df["latency"].astype(float) * US,
    )
    out.add("moe_alltoall", frame, tf)


READERS: dict[str, Callable[[TableFile, Frames], None]] = {
    "gemm": _gemm,
    "mla_bmm": _bmm,
    "moe": _moe,
    "context_attention": lambda tf, out: _attention(tf, out, decode=False),
    "generation_attention": lambda tf, out: _attention(tf, out, decode=True),
    "mla_context_module": lambda tf, out: _mla_module(tf, out, decode=False),
    "mla_generation_module": lambda tf, out: _mla_module(tf, out, decode=True),
    "kda": lambda tf, out: _linear(tf, out, "kda"),
    "gdn": lambda tf, out: _linear(tf, out, "gdn"),
    "custom_allreduce": _custom_allreduce,
    "nccl": _nccl,  # after custom_allreduce (dict order): all-reduce from vLLM's table first
    "moe_a2a": _moe_a2a,
}


def read_frames(tables: dict[str, TableFile], moe_history: list[TableFile] | None = None) -> Frames:
    """Every table the planner reads, normalized by kind (``moe_history``: every version of
    the MoE table, for the by-kernel kind)."""
    out = Frames()
    for name, reader in READERS.items():
        if name in tables:
            reader(tables[name], out)
    if moe_history:
        moe_kernels(moe_history, out)
    return out
