"""Memory planner: weights, KV cache, recurrent state and what fits, per GPU, as vLLM lays it out.

All figures are per GPU of one replica (a TP group; DCP reuses the TP ranks). Sequence counts
are per replica: every rank of the replica holds a slice of every running sequence.

The KV cache follows vLLM's hybrid allocator (``../shared/reference/vllm_mechanics.md`` 2.2-2.4):
layers are bucketed by cache spec, split into groups of equal layer count that share one block
pool, and for hybrids the block size is raised until one attention page holds a recurrent state.
"""

from __future__ import annotations

from pydantic import Field

from simulator import sparse_attention
from simulator.deployment import (
    GIB,
    batch_limits,
    check_deployment,
    check_device,
    effective_max_model_len,
)
from simulator.kv_layout import (
    KvLayout,
    attention_bytes_per_token_per_layer,
    blocks_per_seq,
    kv_layout,
    state_bytes_per_layer,
)
from simulator.specs.frozen import Frozen
from simulator.specs.hardware import HardwareProfile
from simulator.specs.model import FULL_ATTENTION_KINDS, LINEAR_KINDS, ModelCard
from simulator.specs.serving import ServingConfig
from simulator.vision import images_profiled, vision_activation_reserve_bytes
from simulator.weights import weights_per_gpu

# vLLM fused_moe processes at most this many tokens at once (VLLM_FUSED_MOE_CHUNK_SIZE).
FUSED_MOE_CHUNK_TOKENS = 16384

# --------------------------------------------------------------------------- activations


def activation_reserve_bytes(
    card: ModelCard, serving: ServingConfig, device: HardwareProfile
) -> float:
    """Estimate of vLLM's profile-run peak (activations of one max_num_batched_tokens forward).

    Assumption, not a measurement: a few hidden-sized bf16 buffers per token (residual, normed
    input, attention output, MLP output), the widest per-rank MLP intermediate, the fused-MoE
    workspaces (intermediate caches of ``top_k`` rows per token, chunked at 16k tokens), and
    fp32 logits for max_num_seqs sampled sequences; plus, for a card with a vision tower, the
    images vLLM's profiling run encodes (``simulator/vision.py``).
    """
    tokens, seqs = batch_limits(device, serving)
    d = card.hidden_size
    per_token = 4 * d * 2.0
    if card.dense_intermediate_size:
        mlp = card.mlp_matrices * card.dense_intermediate_size  # widths of the MLP GEMMs
        per_token = max(per_token, per_token + mlp / serving.tp * 2)
    moe_ws = 0.0
    if card.moe is not None:
        moe = card.moe
        i_rank = moe.expert_intermediate_size / (1 if serving.ep > 1 else serving.tp)
        d_routed = moe.routed_hidden_size or d
        moe_rows = min(tokens, FUSED_MOE_CHUNK_TOKENS) * moe.top_k
        moe_ws = moe_rows * (card.mlp_matrices * i_rank + d_routed) * 2.0  # relu2: 2 I + D
    logits = seqs * card.vocab_size * 4.0
    vision = vision_activation_reserve_bytes(card, serving, tokens, seqs)
    return tokens * per_token + moe_ws + logits + vision


# --------------------------------------------------------------------------- report


class WeightGroupRow(Frozen):
    group: str
    precision: str
    params_per_gpu: float
    bytes_per_gpu: float
    replicated_bytes_per_gpu: float
    placement: str  # "TP-sharded", "EP-sharded", "replicated" or "mixed"


class MemoryReport(Frozen):
    """Everything `plan memory` prints. Bytes are per GPU; sequence counts are per replica."""

    model: str
    device: str
    tp: int
    dp: int
    ep: int
    dcp: int
    kv_cache_dtype: str
    context_tokens: int
    num_seqs: int
    max_model_len: int  # --max-model-len, else the card's max_context_tokens
    usable_memory_bytes: float
    budget_bytes_per_gpu: float = Field(description="gpu_memory_utilization x usable memory")
    weight_bytes_per_gpu: float
    weight_groups: list[WeightGroupRow]
    activation_reserve_bytes_per_gpu: float  # vision_activation_reserve included
    runtime_reserve_bytes_per_gpu: float
    vision_weight_bytes_per_gpu: float = 0.0  # part of weight_bytes_per_gpu (the vision tower)
    vision_activation_reserve_bytes_per_gpu: float = 0.0  # part of the activation reserve
    vision_images_profiled: int = 0  # images vLLM's profiling run encodes on one GPU
    kv_cache_bytes_per_gpu: float  # left for KV + state
    kv_bytes_per_token_per_gpu: float  # full-attention layers
    kv_bytes_per_seq_per_gpu: float  # full-attention KV of one sequence at context_tokens
    swa_kv_bytes_per_seq_per_gpu: float  # sliding-window layers, capped at the window
    state_bytes_per_seq_per_gpu: float  # recurrent + conv state, one copy
    state_pool_bytes_per_seq_per_gpu: float  # the state pages vLLM holds per running request
    block_size_tokens: int
    bytes_per_block: float
    num_kv_groups: int
    kv_group_kinds: list[str]
    state_pages_per_seq: int
    num_blocks: int
    kv_capacity_tokens: int  # full-attention tokens the pool holds (no state pages)
    blocks_per_seq: int
    max_seqs_at_context: int
    max_seqs_at_context_per_gpu: float
    max_num_seqs: int
    max_context_for_num_seqs: int
    fits: bool
    fits_reason: str
    fits_on: str
    # the fewest GPUs of this device that hold the model alone under TP (None: more than 512)
    fewest_gpus_model_alone: int | None = None


def _placement(row_bytes: float, replicated: float, group: str, serving: ServingConfig) -> str:
    if serving.tp == 1 and serving.ep == 1:
        return "whole"
    if replicated >= row_bytes * 0.999:
        return "replicated"
    if replicated > 0:
        return "mixed"
    return "EP-sharded" if group == "routed_experts" and serving.ep > 1 else "TP-sharded"


def plan_memory(
    card: ModelCard,
    device: HardwareProfile,
    serving: ServingConfig,
    context_tokens: int,
    num_seqs: int = 1,
    devices: list[HardwareProfile] | None = None,
) -> MemoryReport:
    """The memory report of ``card`` on ``device`` deployed as ``serving`` (checks first)."""
    check_deployment(card, serving)
    check_device(serving, device)
    groups = weights_per_gpu(card, serving)
    weight_total = sum(g.bytes_per_gpu for g in groups)
    budget = serving.gpu_memory_utilization * device.usable_memory_bytes
    activations = activation_reserve_bytes(card, serving, device)
    explicit_kv_over = False
    if serving.kv_cache_memory_bytes is not None:
        kv_bytes = serving.kv_cache_memory_bytes
        # a pool that does not fit beside the weights does not exist (vLLM: CUDA OOM at start)
        explicit_kv_over = weight_total + kv_bytes + serving.runtime_reserve_bytes > (
            device.usable_memory_bytes
        )
    else:
        kv_bytes = budget - weight_total - activations - serving.runtime_reserve_bytes
    layout = kv_layout(card, serving)
    num_blocks = max(int(kv_bytes // layout.bytes_per_block), 0) if kv_bytes > 0 else 0
    if explicit_kv_over:
        num_blocks = 0
    per_seq_blocks = blocks_per_seq(layout, serving, context_tokens)
    limit = effective_max_model_len(card, serving)
    # vLLM holds no sequence longer than max_model_len, whatever the memory
    max_seqs = num_blocks // per_seq_blocks if per_seq_blocks and context_tokens <= limit else 0

    kinds = card.layer_kinds
    full_per_token = (
        sum(
            attention_bytes_per_token_per_layer(card, serving, k)
            for k in kinds
            if k in FULL_ATTENTION_KINDS
        )
        / serving.dcp
    )
    swa_layers = sum(1 for k in kinds if k == "swa")
    swa_per_seq = 0.0
    if swa_layers and layout.sliding_window_tokens is not None:
        swa_per_seq = (
            swa_layers
            * attention_bytes_per_token_per_layer(card, serving, "swa")
            * min(context_tokens, layout.sliding_window_tokens)
        )
    # DeepSeek-V4: every layer's 128-token window and the compressors' running states
    swa_per_seq += sparse_attention.window_bytes_per_seq(card, context_tokens)
    linear_layers = sum(1 for k in kinds if k in LINEAR_KINDS)
    state_per_seq = linear_layers * state_bytes_per_layer(card, serving) if linear_layers else 0.0
    state_pages = (2 if serving.enable_prefix_caching else 1) + serving.num_speculative_tokens
    n_mamba = layout.count("mamba")
    n_full = layout.count("full")
    kv_capacity = num_blocks * layout.block_size_tokens * serving.dcp // n_full if n_full else 0
    max_tokens_limit, max_num_seqs = batch_limits(device, serving)
    del max_tokens_limit

    fits, reason = True, "fits"
    if context_tokens > limit:
        fits = False
        where = (
            "serving.max_model_len"
            if serving.max_model_len is not None
            else f"the max_context_tokens of {card.name}"
        )
        reason = (
            f"context {context_tokens:,} tokens exceeds max_model_len {limit:,} ({where}):"
            " vLLM rejects longer requests"
        )
    elif explicit_kv_over:
        fits = False
        reason = (
            "weights + kv_cache_memory_bytes + runtime reserve exceed the usable memory"
            f" ({device.usable_memory_bytes / GIB:,.1f} GiB)"
        )
    elif weight_total > budget:
        fits, reason = False, "weights exceed gpu_memory_utilization x usable memory"
    elif kv_bytes <= 0:
        fits, reason = False, "no memory left for the KV cache after weights and reserves"
    elif num_seqs * per_seq_blocks > num_blocks:
        fits = False
        reason = (
            f"KV cache holds {max_seqs:,} sequence{'s' if max_seqs != 1 else ''} of"
            f" {context_tokens:,} token{'s' if context_tokens != 1 else ''}, not {num_seqs:,}"
            f" ({num_blocks:,} KV blocks; one sequence needs {per_seq_blocks:,})"
        )
    elif num_seqs > max_num_seqs:  # (5,000 read "fits" beside max_num_seqs 1,024)
        fits = False
        reason = (
            f"max_num_seqs {max_num_seqs:,} runs at most {max_num_seqs:,} sequences at once,"
            f" not {num_seqs:,} (the others wait)"
        )

    from simulator.fits import fit_answers

    answer, fewest = fit_answers(card, serving, device, devices or [device])
    return MemoryReport(
        model=card.name,
        device=device.name,
        tp=serving.tp,
        dp=serving.dp,
        ep=serving.ep,
        dcp=serving.dcp,
        kv_cache_dtype=serving.kv_cache_dtype,
        context_tokens=context_tokens,
        num_seqs=num_seqs,
        max_model_len=limit,
        usable_memory_bytes=device.usable_memory_bytes,
        budget_bytes_per_gpu=budget,
        weight_bytes_per_gpu=weight_total,
        weight_groups=[
            WeightGroupRow(
                group=g.group,
                precision=g.precision,
                params_per_gpu=g.params_per_gpu,
                bytes_per_gpu=g.bytes_per_gpu,
                replicated_bytes_per_gpu=g.replicated_bytes_per_gpu,
                placement=_placement(g.bytes_per_gpu, g.replicated_bytes_per_gpu, g.group, serving),
            )
            for g in groups
        ],
        activation_reserve_bytes_per_gpu=activations,
        runtime_reserve_bytes_per_gpu=serving.runtime_reserve_bytes,
        vision_weight_bytes_per_gpu=sum(g.bytes_per_gpu for g in groups if g.group == "vision"),
        vision_activation_reserve_bytes_per_gpu=vision_activation_reserve_bytes(
            card, serving, *batch_limits(device, serving)
        ),
        vision_images_profiled=images_profiled(card, serving, *batch_limits(device, serving)),
        kv_cache_bytes_per_gpu=kv_bytes,
        kv_bytes_per_token_per_gpu=full_per_token,
        kv_bytes_per_seq_per_gpu=full_per_token * context_tokens,
        swa_kv_bytes_per_seq_per_gpu=swa_per_seq,
        state_bytes_per_seq_per_gpu=state_per_seq,
        state_pool_bytes_per_seq_per_gpu=n_mamba * state_pages * layout.bytes_per_block,
        block_size_tokens=layout.block_size_tokens,
        bytes_per_block=layout.bytes_per_block,
        num_kv_groups=len(layout.groups),
        kv_group_kinds=[g.kind for g in layout.groups],
        state_pages_per_seq=n_mamba * state_pages,
        num_blocks=num_blocks,
        kv_capacity_tokens=int(kv_capacity),
        blocks_per_seq=per_seq_blocks,
        max_seqs_at_context=max_seqs,
        max_seqs_at_context_per_gpu=max_seqs / serving.gpus_per_replica,
        max_num_seqs=max_num_seqs,
        max_context_for_num_seqs=max_context_for(layout, serving, num_blocks, num_seqs, card),
        fits=fits,
        fits_reason=reason,
        fits_on=answer,
        fewest_gpus_model_alone=fewest,
    )


def max_context_for(
    layout: KvLayout, serving: ServingConfig, num_blocks: int, num_seqs: int, card: ModelCard
) -> int:
    """Longest context (tokens) at which ``num_seqs`` sequences fit, capped at max_model_len."""
    limit = effective_max_model_len(card, serving)
    if num_seqs * blocks_per_seq(layout, serving, 1) > num_blocks:
        return 0
    if num_seqs * blocks_per_seq(layout, serving, limit) <= num_blocks:
        return limit
    lo, hi = 1, limit  # blocks_per_seq is monotone in context: bisect
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if num_seqs * blocks_per_seq(layout, serving, mid) <= num_blocks:
            lo = mid
        else:
            hi = mid - 1
    return lo


def fits_on(card: ModelCard, serving: ServingConfig, devices: list[HardwareProfile]) -> str:
    """The smallest of ``devices`` that holds the model alone on one GPU (weights + reserves
    leave KV cache memory), else how many GPUs of the largest it takes under TP (and EP if
    enabled). The rules: ``simulator/fits.py``."""
    from simulator.fits import fits_on as answer

    return answer(card, serving, devices)


def fewest_gpus(card: ModelCard, serving: ServingConfig, device: HardwareProfile) -> int | None:
    """The fewest GPUs of ``device`` that hold the model alone under TP (``simulator/fits.py``)."""
    from simulator.fits import fewest_gpus as answer

    return answer(card, serving, device)
