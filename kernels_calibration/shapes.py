"""The shapes the calibration job measures, derived from model cards and serving configs.

Each ``Job`` is one row of a measurement table: an op class of the cost model
(``simulator.cost.predict.OP_COLUMNS``), the implementation timed, its dtype and the shape
columns of that op class. The grids are the shapes the step cost model asks about:

* ``gemm``: every plain GEMM (n, k, weight format) that ``StepCostModel.gemm_shapes`` reads
  off a step of the model at each tensor-parallel size, at several token counts m;
* ``moe``: the routed experts of the card at each TP (EP 1), several token counts;
* ``mla_decode`` / ``mla_prefill``: the card's heads per rank (and all heads, which is what a
  rank computes under DCP = TP), several batch sizes and contexts;
* ``attn_prefill``: GQA heads / KV heads / head dim per rank;
* ``kda_prefill`` / ``kda_decode``: the linear-attention value heads per rank;
* ``elementwise``: RMSNorm over the hidden size, and the LSE merge of two attention partials.

No torch here: the grid is planned (and tested) without the calibration extra.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from simulator.cost.latency import LatencyModels
from simulator.cost.step import StepCostModel
from simulator.deployment import check_deployment
from simulator.specs.hardware import HardwareProfile
from simulator.specs.loading import SpecError
from simulator.specs.model import ModelCard
from simulator.specs.precision import WEIGHT_FORMATS
from simulator.specs.serving import ServingConfig

# The kernels timed, by name (the ``kernel`` column); names starting "torch." are torch ops.
KERNELS = (
    "torch.matmul", "triton.matmul", "torch.rms_norm", "rmsnorm", "lse_merge", "moe_gemm",
    "mla_decode", "mla_prefill", "prefill_attention", "kda_prefill", "kda_decode",
)  # fmt: skip


def impl_of(kernel: str) -> str:
    """torch or triton; which one the fit uses per op class: ``calibration.PREFERRED_IMPL``."""
    return "torch" if kernel.startswith("torch.") else "triton"


# Weight formats the GEMM kernels run, by the card's storage format. Block-scaled FP8 runs as
# per-tensor-scaled FP8 (the scales are 0.02 % of the bytes); FP4/INT4 dense GEMMs have no
# kernel here and are left to the fit's roofline (``not_measured`` says so).
GEMM_FORMAT = {"bf16": "bf16", "fp16": "bf16", "fp32": "bf16", "fp8": "fp8", "fp8_block": "fp8"}
MOE_FORMAT = {
    **GEMM_FORMAT,
    "mxfp4": "mxfp4",
    "nvfp4": "mxfp4",
    "int4_g128": "mxfp4",
    "int4_g32": "mxfp4",
}


@dataclass(frozen=True)
class Grid:
    gemm_m: tuple[int, ...]
    moe_tokens: tuple[int, ...]
    decode_batch: tuple[int, ...]
    decode_ctx: tuple[int, ...]
    prefill_seq: tuple[int, ...]
    prefill_prefix: tuple[int, ...]
    kda_batch: tuple[int, ...]
    kda_seq: tuple[int, ...]
    kda_decode_batch: tuple[int, ...]
    norm_tokens: tuple[int, ...]
    # largest KV cache / activation set one job may allocate (bytes)
    max_bytes: float = 24e9


FULL = Grid(
    gemm_m=(1, 8, 32, 128, 512, 2048, 8192),
    moe_tokens=(1, 8, 64, 256, 1024, 4096),
    decode_batch=(1, 8, 32, 128),
    decode_ctx=(1024, 8192, 32768, 131072),
    prefill_seq=(256, 1024, 4096, 8192),
    prefill_prefix=(0, 8192, 32768),
    kda_batch=(1, 4),
    kda_seq=(256, 1024, 4096, 16384),
    kda_decode_batch=(1, 8, 32, 128, 512),
    norm_tokens=(1, 64, 512, 4096, 16384),
)
SMOKE = Grid(
    gemm_m=(1, 512),
    moe_tokens=(8, 512),
    decode_batch=(8,),
    decode_ctx=(1024, 8192),
    prefill_seq=(1024,),
    prefill_prefix=(0, 4096),
    kda_batch=(1,),
    kda_seq=(1024, 4096),
    kda_decode_batch=(8, 128),
    norm_tokens=(64, 4096),
    max_bytes=4e9,
)


@dataclass(frozen=True)
class Job:
    """One measurement: ``op`` (cost-model op class), ``kernel``, ``dtype`` and the shape."""

    op: str
    kernel: str
    dtype: str
    shape: tuple[tuple[str, int], ...]
    kv_dtype: str = ""
    # which model / projection asked for it (the first one, when several share the shape)
    source: str = field(default="", compare=False)
    # how to lay the shape out where its columns leave it open (e.g. a norm's row width)
    params: tuple[tuple[str, int], ...] = field(default=(), compare=False)

    @property
    def impl(self) -> str:
        return impl_of(self.kernel)

    @property
    def key(self) -> tuple[str, ...]:
        return (
            self.op,
            self.kernel,
            self.dtype,
            self.kv_dtype,
            *(f"{k}={v}" for k, v in self.shape),
        )

    def dims(self) -> dict[str, int]:
        return dict(self.shape)


def row_key(row: dict[str, str], shape_columns: Sequence[str]) -> tuple[str, ...]:
    """The ``Job.key`` of a row read back from a measurement CSV."""
    dims = (f"{c}={int(float(row[c]))}" for c in shape_columns)
    return (row["op"], row["kernel"], row["dtype"], row.get("kv_dtype", ""), *dims)


def _format_name(weight_bytes_per_elem: float) -> str:
    return min(
        (f for f in WEIGHT_FORMATS if f != "fp32"),
        key=lambda f: abs(WEIGHT_FORMATS[f].bits_per_element / 8 - weight_bytes_per_elem),
    )


@dataclass
class Plan:
    """The jobs of a run, and what the grid could not cover (for the run's log)."""

    jobs: list[Job] = field(default_factory=list)
    not_measured: list[str] = field(default_factory=list)
    _seen: set[tuple[str, ...]] = field(default_factory=set)

    def add(self, job: Job) -> None:
        if job.key not in self._seen:
            self._seen.add(job.key)
            self.jobs.append(job)

    def skip(self, what: str) -> None:
        if what not in self.not_measured:
            self.not_measured.append(what)


def _per_rank(total: int, tp: int) -> int | None:
    return total // tp if total % tp == 0 else None


def plan_jobs(
    cards: Sequence[ModelCard],
    tps: Iterable[int],
    profile: HardwareProfile,
    grid: Grid = FULL,
    impls: frozenset[str] = frozenset({"torch", "triton"}),
) -> Plan:
    """Every job for ``cards`` at each TP in ``tps``, deduplicated, in a stable order.

    ``impls`` limits the implementations (``{"torch"}`` on a CPU: Triton kernels only run
    in its interpreter there, whose timings mean nothing).
    """
    plan = Plan()
    tps = sorted(set(tps))
    latency = LatencyModels(profile)
    for card in cards:
        for tp in tps:
            tag = f"{card.name} tp{tp}"
            try:  # a TP vLLM would refuse for this card (its heads): no shapes to measure
                check_deployment(card, ServingConfig(tp=tp))
            except SpecError as exc:
                plan.skip(f"{tag}: {exc.reason}")
                continue
            _gemm(plan, card, tp, profile, latency, grid, impls, tag)
            if "triton" not in impls:
                continue
            _moe(plan, card, tp, grid, tag)
            _attention(plan, card, tp, grid, tag)
            _linear(plan, card, tp, grid, tag)
        _norms(plan, card, tps, grid, impls)
    return plan


def _gemm(
    plan: Plan,
    card: ModelCard,
    tp: int,
    profile: HardwareProfile,
    latency: LatencyModels,
    grid: Grid,
    impls: frozenset[str],
    tag: str,
) -> None:
    model = StepCostModel(card, profile, ServingConfig(tp=tp), latency=latency)
    for g in model.gemm_shapes():
        fmt = GEMM_FORMAT.get(_format_name(g.weight_bytes_per_elem))
        if fmt is None:
            plan.skip(f"gemm {_format_name(g.weight_bytes_per_elem)} ({tag} {g.name}): no kernel")
            continue
        for kernel in ("torch.matmul", "triton.matmul"):
            if impl_of(kernel) not in impls:
                continue
            # the Triton GEMM is a reference point next to cuBLAS: every third m only
            for m in grid.gemm_m if kernel == "torch.matmul" else grid.gemm_m[::3]:
                plan.add(
                    Job(
                        "gemm",
                        kernel,
                        fmt,
                        (("m", m), ("n", g.n), ("k", g.k)),
                        source=f"{tag} {g.name}",
                    )
                )


def _moe(plan: Plan, card: ModelCard, tp: int, grid: Grid, tag: str) -> None:
    moe = card.moe
    if moe is None:
        return
    inter = moe.expert_intermediate_size
    if _per_rank(inter, tp) is None:
        plan.skip(f"moe ({tag}): intermediate {inter} not divisible by TP {tp}")
        return
    precision = card.weight_precision.get("routed_experts", "bf16")
    fmt = MOE_FORMAT.get(precision)
    if fmt is None:  # int2 / int3 group formats: no MoE kernel here (the fit's roofline answers)
        plan.skip(f"moe {precision} ({tag} routed experts): no kernel")
        return
    hidden = moe.routed_hidden_size or card.hidden_size
    for t in grid.moe_tokens:
        shape = (
            ("num_tokens", t), ("hidden", hidden), ("inter", inter),
            ("num_experts", moe.num_experts), ("topk", moe.top_k), ("ep", 1), ("tp", tp),
        )  # fmt: skip
        plan.add(Job("moe", "moe_gemm", fmt, shape, source=f"{tag} routed experts"))


def _attention(plan: Plan, card: ModelCard, tp: int, grid: Grid, tag: str) -> None:
    if card.mla is not None:
        mla = card.mla
        local = _per_rank(mla.num_heads, tp)
        if local is None:
            plan.skip(f"mla ({tag}): {mla.num_heads} heads not divisible by TP {tp}")
            return
        lat = (mla.kv_lora_rank + mla.qk_rope_head_dim) * 2
        # H/tp heads per rank; with DCP = TP a rank runs all H heads over 1/dcp of the context
        for heads in sorted({local, mla.num_heads}):
            for b in grid.decode_batch:
                for ctx in grid.decode_ctx:
                    if b * ctx * lat > grid.max_bytes:
                        continue
                    shape = (("batch", b), ("ctx_len", ctx), ("num_heads", heads))
                    plan.add(Job("mla_decode", "mla_decode", "bf16", shape, "bf16", f"{tag} mla"))
        for seq in grid.prefill_seq:
            for prefix in grid.prefill_prefix:
                if (seq + prefix) * local * 3 * 192 * 2 > grid.max_bytes:
                    continue
                shape = (
                    ("batch", 1),
                    ("seq_len", seq),
                    ("prefix_len", prefix),
                    ("num_heads", local),
                )
                plan.add(Job("mla_prefill", "mla_prefill", "bf16", shape, "bf16", f"{tag} mla"))
    if card.gqa is not None:
        g = card.gqa
        heads = _per_rank(g.num_heads, tp)
        if heads is None:
            plan.skip(f"attn_prefill ({tag}): {g.num_heads} heads not divisible by TP {tp}")
            return
        kv_heads = max(1, g.num_kv_heads // tp)
        for seq in grid.prefill_seq:
            for prefix in grid.prefill_prefix:
                shape = (
                    ("batch", 1), ("seq_len", seq), ("prefix_len", prefix),
                    ("num_heads", heads), ("num_kv_heads", kv_heads), ("head_dim", g.head_dim),
                )  # fmt: skip
                plan.add(
                    Job("attn_prefill", "prefill_attention", "bf16", shape, "bf16", f"{tag} gqa")
                )
        plan.skip("attn_decode: no paged GQA decode kernel here (the prior answers)")


def _linear(plan: Plan, card: ModelCard, tp: int, grid: Grid, tag: str) -> None:
    la = card.linear_attention
    if la is None:
        return
    if la.kind == "mamba2":
        plan.skip(f"mamba2 ({tag}): no Mamba2 scan kernel in this job (the prior answers)")
        return
    heads = _per_rank(la.num_v_heads, tp)
    if heads is None:
        plan.skip(f"{la.kind} ({tag}): {la.num_v_heads} heads not divisible by TP {tp}")
        return
    dim = la.head_k_dim
    for b in grid.kda_batch:
        for seq in grid.kda_seq:
            shape = (("batch", b), ("seq_len", seq), ("num_heads", heads), ("head_dim", dim))
            plan.add(Job("kda_prefill", "kda_prefill", "bf16", shape, source=f"{tag} {la.kind}"))
    for b in grid.kda_decode_batch:
        shape = (("batch", b), ("num_heads", heads), ("head_dim", dim))
        plan.add(Job("kda_decode", "kda_decode", "bf16", shape, source=f"{tag} {la.kind}"))


# bytes per element each elementwise kernel moves (bf16): RMSNorm reads x and writes y;
# the LSE merge reads two partial outputs and writes one
NORM_BYTES = 4
MERGE_BYTES = 6


def _norms(
    plan: Plan, card: ModelCard, tps: Sequence[int], grid: Grid, impls: frozenset[str]
) -> None:
    for kernel in ("torch.rms_norm", "rmsnorm"):
        if impl_of(kernel) not in impls:
            continue
        for t in grid.norm_tokens:
            shape = (("elements", t * card.hidden_size), ("bytes_per_elem", NORM_BYTES))
            width = (("width", card.hidden_size),)
            plan.add(Job("elementwise", kernel, "bf16", shape, "", f"{card.name} rmsnorm", width))
    if card.mla is None or "triton" not in impls:
        return
    for tp in tps:
        heads = _per_rank(card.mla.num_heads, tp)
        if heads is None:
            continue
        for t in grid.decode_batch:
            shape = (
                ("elements", t * heads * card.mla.kv_lora_rank),
                ("bytes_per_elem", MERGE_BYTES),
            )
            plan.add(
                Job(
                    "elementwise",
                    "lse_merge",
                    "bf16",
                    shape,
                    source=f"{card.name} tp{tp} lse merge",
                )
            )
