"""Top-k routing and vLLM's align step for the grouped MoE GEMM (``moe_gemm.py``).

``route`` draws or computes softmax top-k routing; ``moe_align_block_size`` sorts the (token,
slot) pairs by expert and pads each expert's run to ``BLOCK_M`` (step 1 of ``moe_gemm``'s
docstring); ``default_config`` picks the tile sizes as vLLM's ``get_default_config`` does.
"""

from __future__ import annotations

import torch
import triton

from kernels_calibration.moe_formats import WEIGHT_FORMATS


def route(
    router: torch.Tensor | torch.Generator,
    topk: int,
    *,
    num_tokens: int | None = None,
    num_experts: int | None = None,
    renormalize: bool = True,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax top-k routing: ``(topk_weights [T, topk] fp32, topk_ids [T, topk] int32)``.

    ``router`` is either router logits ``[T, E]`` or a ``torch.Generator``, in which case
    ``num_tokens x num_experts`` standard-normal logits are drawn from it (on the generator's
    device): i.i.d. logits make every token's expert set uniformly random (balanced routing in
    expectation). ``renormalize`` rescales each token's top-k weights to sum to 1 (Mixtral,
    DeepSeek, Kimi); otherwise they are the raw softmax probabilities. The result goes to
    ``device`` (default: the logits' device).
    """
    if isinstance(router, torch.Generator):
        if num_tokens is None or num_experts is None:
            raise ValueError("routing from a generator needs num_tokens and num_experts")
        if num_tokens < 0 or num_experts < 1:
            raise ValueError(
                f"bad routing shape: num_tokens={num_tokens}, num_experts={num_experts}"
            )
        logits = torch.randn(
            (num_tokens, num_experts), generator=router, device=router.device, dtype=torch.float32
        )
    else:
        logits = router
        if logits.dim() != 2 or not logits.is_floating_point():
            raise ValueError(f"router logits must be a float [T, E] tensor, got {logits.shape}")
    if not 1 <= topk <= logits.shape[1]:
        raise ValueError(f"topk={topk} must be in [1, num_experts={logits.shape[1]}]")
    probs = torch.softmax(logits.float(), dim=-1)
    weights, ids = torch.topk(probs, topk, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    target = logits.device if device is None else device
    return weights.to(device=target, dtype=torch.float32), ids.to(device=target, dtype=torch.int32)


def moe_align_block_size(
    topk_ids: torch.Tensor,
    block_m: int,
    num_local_experts: int,
    expert_map: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sort the (token, slot) pairs by expert and pad each expert's run to ``block_m``.

    ``topk_ids [T, topk]`` holds global expert ids; ``expert_map [E]`` (if given) maps them to
    local ids, ``-1`` for experts of other ranks, whose pairs are dropped. Returns, all int32
    on ``topk_ids.device`` and without a host sync:

    - ``sorted_ids [R]``: pair indices ``t * topk + j``, grouped by local expert in ascending
      order, stable within an expert, each group followed by ``T * topk`` sentinels up to the
      next multiple of ``block_m``, then sentinels to the end. ``R`` is the worst case
      ``T*topk + min(L, T*topk) * (block_m - 1)`` rounded up to ``block_m``.
    - ``block_expert [R / block_m]``: the local expert of each block, ``-1`` past the end.
    - ``num_padded [1]``: ``sum_e ceil(n_e / block_m) * block_m``, the rows actually used.

    Experts without pairs get no block. Equivalent to vLLM's ``moe_align_block_size`` (a CUDA op
    there, a few torch ops here) with its sentinel convention.
    """
    if topk_ids.dim() != 2:
        raise ValueError(f"topk_ids must be [T, topk], got {tuple(topk_ids.shape)}")
    if block_m < 1 or num_local_experts < 1:
        raise ValueError(
            f"block_m={block_m} and num_local_experts={num_local_experts} must be >= 1"
        )
    device = topk_ids.device
    num_pairs = topk_ids.numel()
    rows = num_pairs + min(num_local_experts, num_pairs) * (block_m - 1)
    rows = triton.cdiv(rows, block_m) * block_m
    flat = topk_ids.reshape(-1).to(torch.int64)
    local = flat if expert_map is None else expert_map.to(torch.int64)[flat]
    # Bucket num_local_experts collects the dropped pairs (non-local experts).
    bucket = torch.where(local >= 0, local, num_local_experts)
    counts = torch.zeros(num_local_experts + 1, dtype=torch.int64, device=device)
    counts.scatter_add_(0, bucket, torch.ones_like(bucket))
    count_start = torch.cumsum(counts, 0) - counts
    padded = (counts[:num_local_experts] + block_m - 1) // block_m * block_m
    padded_end = torch.cumsum(padded, 0)
    # Destination of the dropped bucket: one slot past the end, cut off below.
    padded_start = torch.cat([padded_end - padded, torch.full_like(padded_end[:1], rows)])
    order = torch.argsort(bucket, stable=True)
    sorted_bucket = bucket[order]
    rank_in_expert = torch.arange(num_pairs, device=device) - count_start[sorted_bucket]
    dest = torch.where(
        sorted_bucket < num_local_experts, padded_start[sorted_bucket] + rank_in_expert, rows
    )
    sorted_ids = torch.full((rows + 1,), num_pairs, dtype=torch.int32, device=device)
    sorted_ids.scatter_(0, dest, order.to(torch.int32))
    block_start = torch.arange(0, rows, block_m, device=device)
    block_expert = torch.searchsorted(padded_end, block_start, right=True)
    block_expert = torch.where(block_expert < num_local_experts, block_expert, -1)
    return sorted_ids[:rows], block_expert.to(torch.int32), padded_end[-1:].to(torch.int32)


def default_config(
    num_tokens: int, topk: int, num_experts: int, weight_format: str
) -> dict[str, int]:
    """Tile sizes after vLLM's ``get_default_config`` as summarised in ``vllm_mechanics.md`` s7.

    ``BLOCK_M`` 16/32/64/128 for ``T`` <= 32/96/512/larger, ``BLOCK_N`` 64 (``T`` <= 64) else
    128, ``BLOCK_K`` 128 for quantised weights or ``T`` <= 64 else 64, ``GROUP_M`` 16 when an
    expert averages more than 128 pairs else 1. vLLM's tuned JSON tables override these.
    """
    if weight_format not in WEIGHT_FORMATS:
        raise ValueError(f"weight_format={weight_format!r} must be one of {WEIGHT_FORMATS}")
    t = num_tokens
    block_m = 16 if t <= 32 else 32 if t <= 96 else 64 if t <= 512 else 128
    block_n = 64 if t <= 64 else 128
    block_k = 128 if weight_format in ("fp8", "mxfp4") or t <= 64 else 64
    group_m = 16 if t * topk > 128 * max(num_experts, 1) else 1
    return {"block_m": block_m, "block_n": block_n, "block_k": block_k, "group_m": group_m}
