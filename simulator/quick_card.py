"""A quick card: a memory ESTIMATE from a release's headline numbers when no config.json exists.

``plan memory --params 74e9 --active-params 9e9 --precision int2_g64 --vision-params 1.7e9
--device D`` answers whether the weights and reserves fit, and with ``--layers`` and
``--kv-heads`` / ``--head-dim`` (or ``--hidden`` for a rule of thumb) how many sequences of
``--context`` tokens the KV cache holds. Every figure it cannot know is either an assumption
it names (``assumed``, with the reason) or left out with one line saying what is missing.

The assumptions (docs/memory.md, "Quick card"):

- every parameter is stored at ``--precision`` and TP shards all of them evenly (real
  checkpoints keep embeddings / lm_head / norms in BF16 and replicate small pieces: a few %);
- the vision tower is sharded over TP (vLLM's default ``--mm-encoder-tp-mode weights``);
- the text activation reserve is the largest that the planner's estimate
  (``memory.activation_reserve_bytes``) gives any shipped card on this device at this TP;
- KV cache: every layer is full grouped-query attention (an upper bound for hybrid, sliding
  window or MLA models); without ``--kv-heads`` / ``--head-dim`` the KV width per layer is
  ``--hidden`` times the widest ratio ``num_kv_heads x head_dim / hidden_size`` among the
  shipped GQA cards (head_dim 128 when TP splits it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.quick_flags import ARGS, QuickCard, count_text
from simulator.specs.frozen import Frozen
from simulator.specs.hardware import HardwareProfile
from simulator.specs.loading import SpecError
from simulator.specs.precision import WEIGHT_FORMATS, kv_element_bytes
from simulator.specs.serving import ServingConfig

POWERS_OF_TWO: tuple[int, ...] = tuple(1 << i for i in range(10))
ROT_HEAD_DIM = 128  # head_dim assumed when the KV width of the rule of thumb is split by TP


class QuickEstimate(Frozen):
    """What `plan memory --params ...` prints: an ESTIMATE, per GPU of one TP group."""

    estimate: bool = True  # always: a quick card, not a config-derived card
    model: str
    device: str
    tp: int
    kv_cache_dtype: str
    context_tokens: int
    num_seqs: int
    given: dict[str, float | int | str]
    assumed: list[str]
    bits_per_element: float  # of --precision, scales and zero points included
    usable_memory_bytes: float
    budget_bytes_per_gpu: float
    text_weight_bytes_per_gpu: float
    vision_weight_bytes_per_gpu: float
    weight_bytes_per_gpu: float
    active_weight_bytes_per_token: float | None  # weights one decode token reads (batch 1)
    activation_reserve_bytes_per_gpu: float  # text + vision
    vision_activation_reserve_bytes_per_gpu: float
    runtime_reserve_bytes_per_gpu: float
    kv_cache_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: float | None  # None: not known from what was given
    kv_unknown_reason: str | None
    max_seqs_at_context: int | None
    fits: bool
    fits_reason: str
    fewest_gpus_model_alone: int | None
    fits_on: str


def text_activation_reserve(serving: ServingConfig, device: HardwareProfile) -> tuple[float, str]:
    """(bytes, card): the largest text activation estimate over the shipped cards at this
    device's batch limits and TP, and the card that sets it."""
    from simulator import catalog
    from simulator.deployment import batch_limits
    from simulator.memory import activation_reserve_bytes
    from simulator.vision import vision_activation_reserve_bytes

    best, name = 0.0, ""
    tokens, seqs = batch_limits(device, serving)
    for card_name in catalog.model_names():
        card = catalog.model_card(card_name)
        text = activation_reserve_bytes(card, serving, device) - vision_activation_reserve_bytes(
            card, serving, tokens, seqs
        )
        if text > best:
            best, name = text, card_name
    return best, name


def _widest_gqa_ratio() -> tuple[float, str]:
    """The largest num_kv_heads x head_dim / hidden_size of the shipped GQA cards."""
    from simulator import catalog

    best, name = 0.0, ""
    for card_name in catalog.model_names():
        card = catalog.model_card(card_name)
        if card.gqa is None or card.mla is not None:
            continue
        ratio = card.gqa.num_kv_heads * card.gqa.head_dim / card.hidden_size
        if ratio > best:
            best, name = ratio, card_name
    return best, name


def kv_bytes_per_token(qc: QuickCard, serving: ServingConfig) -> tuple[float | None, str]:
    """(KV bytes per token on one GPU, the assumption it rests on) or (None, what is missing)."""
    try:
        elem = kv_element_bytes(serving.kv_cache_dtype)
    except ValueError:
        raise SpecError(
            ARGS,
            "serving.kv_cache_dtype",
            f"{serving.kv_cache_dtype} is an MLA cache layout; a quick card has GQA layers"
            " (use auto, bf16 or fp8)",
        ) from None
    if qc.layers is None:
        return None, "KV cache per token unknown without --layers (and --kv-heads, --head-dim)"
    tp = serving.tp
    if qc.kv_heads is not None and qc.head_dim is not None:
        heads = max(qc.kv_heads / tp, 1.0)  # split by TP, replicated below one per rank
        per_token = 2 * qc.layers * heads * qc.head_dim * elem
        return per_token, (
            f"KV: all {qc.layers} layers full GQA attention, {qc.kv_heads} KV heads x"
            f" {qc.head_dim} (hybrid, sliding-window or MLA layers hold less)"
        )
    if qc.hidden_size is None:
        return None, (
            "KV cache per token unknown without --kv-heads and --head-dim (or --hidden for a"
            " rule of thumb)"
        )
    ratio, source = _widest_gqa_ratio()
    width = qc.hidden_size * ratio
    per_rank = max(width / tp, float(ROT_HEAD_DIM))
    return 2 * qc.layers * per_rank * elem, (
        f"KV: rule of thumb, all {qc.layers} layers full GQA attention with KV width"
        f" {ratio:.3f} x hidden = {width:,.0f} per layer (the widest ratio num_kv_heads x"
        f" head_dim / hidden_size of the shipped GQA cards: {source}; head_dim 128 when TP"
        " splits it)"
    )


@dataclass(frozen=True)
class _Memory:
    text_weights: float
    vision_weights: float
    text_activations: float
    vision_activations: float
    activation_card: str
    budget: float

    @property
    def weights(self) -> float:
        return self.text_weights + self.vision_weights

    def kv_bytes(self, serving: ServingConfig) -> float:
        reserves = self.text_activations + self.vision_activations + serving.runtime_reserve_bytes
        return self.budget - self.weights - reserves


def _memory(qc: QuickCard, serving: ServingConfig, device: HardwareProfile) -> _Memory:
    text_act, card = text_activation_reserve(serving, device)
    per_image = qc.vision_activation_bytes_per_image or 0.0
    # vLLM's profiling run encodes max(tokens, T) // T images of T tokens: one when an image
    # holds at least max_num_batched_tokens (T unknown here: assumed so)
    return _Memory(
        text_weights=qc.params * WEIGHT_FORMATS[qc.precision].bits_per_element / 8 / serving.tp,
        vision_weights=(
            qc.vision_params * WEIGHT_FORMATS[qc.vision_precision].bits_per_element / 8 / serving.tp
        ),
        text_activations=text_act,
        vision_activations=per_image,
        activation_card=card,
        budget=serving.gpu_memory_utilization * device.usable_memory_bytes,
    )


def quick_fewest_gpus(qc: QuickCard, serving: ServingConfig, device: HardwareProfile) -> int | None:
    """The fewest GPUs (a power of two up to 512, or ``serving.tp``) of ``device`` whose share
    of the weights and the reserves leave KV cache memory (no head counts known: every TP size
    is tried)."""
    candidates: list[int] = sorted({*POWERS_OF_TWO, serving.tp})
    for tp in candidates:
        trial = serving.model_copy(update={"tp": tp, "dp": 1, "ep": 1, "dcp": 1})
        if _memory(qc, trial, device).kv_bytes(trial) > 0:
            return tp
    return None


def quick_fits_on(qc: QuickCard, serving: ServingConfig, devices: list[HardwareProfile]) -> str:
    """As ``memory.fits_on``: the smallest device holding the model alone on one GPU, else
    the fewest GPUs of the largest."""
    ordered = sorted(devices, key=lambda d: (d.usable_memory_bytes, d.name))
    one = serving.model_copy(update={"tp": 1, "dp": 1, "ep": 1, "dcp": 1})
    for device in ordered:
        if _memory(qc, one, device).kv_bytes(one) > 0:
            return f"1x {device.name}"
    n = quick_fewest_gpus(qc, serving, ordered[-1])
    return f"{n}x {ordered[-1].name}" if n is not None else f"more than 512x {ordered[-1].name}"


def _given(qc: QuickCard) -> dict[str, float | int | str]:
    """The flags that were given, with their values."""
    flags = {
        "--params": qc.params, "--active-params": qc.active_params, "--precision": qc.precision,
        "--vision-params": qc.vision_params or None,
        "--vision-precision": qc.vision_precision if qc.vision_params else None,
        "--vision-activation-bytes-per-image": qc.vision_activation_bytes_per_image,
        "--layers": qc.layers, "--hidden": qc.hidden_size, "--kv-heads": qc.kv_heads,
        "--head-dim": qc.head_dim,
    }  # fmt: skip
    return {k: v for k, v in flags.items() if v is not None}


def estimate(
    qc: QuickCard,
    device: HardwareProfile,
    serving: ServingConfig,
    context_tokens: int,
    num_seqs: int,
    devices: list[HardwareProfile],
) -> QuickEstimate:
    """The memory estimate of a quick card on one device (checks the serving knobs first)."""
    from simulator.deployment import check_device

    for field in ("dcp", "ep"):
        if getattr(serving, field) > 1:
            raise SpecError(
                ARGS, f"serving.{field}", f"a quick card has no layer layout to shard with {field}"
            )
    if serving.dp > 1:  # (--dp 4 gave the answer of --dp 1, unsaid)
        raise SpecError(
            ARGS, "serving.dp", "a quick card has no attention layout for data-parallel ranks"
        )
    if serving.weight_precision:
        raise SpecError(
            ARGS, "serving.weight_precision", "a quick card has one format: give --precision"
        )
    if serving.kv_cache_memory_bytes is not None:
        raise SpecError(
            ARGS, "serving.kv_cache_memory_bytes", "not supported with a quick card (an estimate)"
        )
    check_device(serving, device)
    m = _memory(qc, serving, device)
    fmt = WEIGHT_FORMATS[qc.precision]
    assumed = [
        f"weights: all {count_text(qc.params)} params at {qc.precision}"
        f" ({fmt.bits_per_element:.4g} bits per element, scales and zero points included),"
        " split evenly over TP (real"
        " checkpoints keep embeddings / lm_head / norms in BF16: a few % more)",
        f"text activation reserve: the largest the planner estimates for a shipped card on"
        f" this device at TP {serving.tp} ({m.activation_card})",
        f"runtime reserve: {serving.runtime_reserve_bytes / 2**30:.1f} GiB (CUDA graphs, NCCL,"
        " allocator slack)",
    ]
    if qc.vision_params:
        assumed.append(
            f"vision: {count_text(qc.vision_params)} params at {qc.vision_precision}, split over TP"
            " (vLLM's default --mm-encoder-tp-mode weights)"
        )
        assumed.append(
            "vision activations: not counted (give --vision-activation-bytes-per-image)"
            if qc.vision_activation_bytes_per_image is None
            else "vision activations: one image in vLLM's profiling run (an image assumed to"
            " hold at least max_num_batched_tokens tokens)"
        )
    per_token, kv_note = kv_bytes_per_token(qc, serving)
    kv_bytes = m.kv_bytes(serving)
    max_seqs: int | None = None
    if per_token is not None:
        assumed.append(kv_note)
        block = serving.block_size_tokens
        blocks = int(kv_bytes // (block * per_token)) if kv_bytes > 0 else 0
        max_seqs = blocks // math.ceil(context_tokens / block)
    gib = 2**30
    weights = f"weights {m.weights / gib:,.1f} GiB" + (
        f" (text {m.text_weights / gib:,.1f} + vision {m.vision_weights / gib:,.1f})"
        if m.vision_weights
        else ""
    )
    budget = (
        f"the budget of {m.budget / gib:,.1f} GiB ({serving.gpu_memory_utilization:g} x"
        f" {device.usable_memory_bytes / gib:,.1f} GiB usable)"
    )
    if serving.max_model_len is not None and context_tokens > serving.max_model_len:
        fits = False  # as plan_memory: vLLM rejects the requests (it was read as fitting)
        reason = (
            f"context {context_tokens:,} tokens exceeds max_model_len {serving.max_model_len:,}"
            " (serving.max_model_len): vLLM rejects longer requests"
        )
    elif m.weights > m.budget:
        fits, reason = False, f"{weights} exceed {budget}"
    elif kv_bytes <= 0:
        reserves = m.budget - m.weights - kv_bytes
        fits = False
        reason = f"{weights} + reserves {reserves / gib:,.1f} GiB leave no KV cache in {budget}"
    elif max_seqs is None:
        fits, reason = True, f"model alone fits; sequences not checked: {kv_note}"
    elif max_seqs < num_seqs:
        fits = False
        reason = f"KV cache holds {max_seqs} sequences of {context_tokens} tokens, not {num_seqs}"
    else:
        fits, reason = True, "fits"
    active = qc.active_params
    return QuickEstimate(
        model=f"quick card ({count_text(qc.params)} params, {qc.precision})",
        device=device.name, tp=serving.tp, kv_cache_dtype=serving.kv_cache_dtype,
        context_tokens=context_tokens, num_seqs=num_seqs, given=_given(qc), assumed=assumed,
        bits_per_element=fmt.bits_per_element,
        usable_memory_bytes=device.usable_memory_bytes, budget_bytes_per_gpu=m.budget,
        text_weight_bytes_per_gpu=m.text_weights, vision_weight_bytes_per_gpu=m.vision_weights,
        weight_bytes_per_gpu=m.weights,
        active_weight_bytes_per_token=(
            None if active is None else active * fmt.bits_per_element / 8 / serving.tp
        ),
        activation_reserve_bytes_per_gpu=m.text_activations + m.vision_activations,
        vision_activation_reserve_bytes_per_gpu=m.vision_activations,
        runtime_reserve_bytes_per_gpu=serving.runtime_reserve_bytes,
        kv_cache_bytes_per_gpu=kv_bytes, kv_bytes_per_token_per_gpu=per_token,
        kv_unknown_reason=None if per_token is not None else kv_note,
        max_seqs_at_context=max_seqs, fits=fits, fits_reason=reason,
        fewest_gpus_model_alone=quick_fewest_gpus(qc, serving, device),
        fits_on=quick_fits_on(qc, serving, devices),
    )  # fmt: skip
