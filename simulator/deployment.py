"""What a deployment must satisfy before anything is sized: vLLM's batch limits per device,
the parallelism the card allows (``check_deployment``), that the device can hold it at all
(``check_device``), and the longest context it serves (``effective_max_model_len``)."""

from __future__ import annotations

from collections.abc import Callable

from simulator import expert_parallel, sparse_attention
from simulator.specs.hardware import HardwareProfile
from simulator.specs.loading import SpecError
from simulator.specs.model import FULL_ATTENTION_KINDS, ModelCard
from simulator.specs.serving import ServingConfig

GIB = float(1 << 30)


def default_batch_limits(device: HardwareProfile) -> tuple[int, int]:
    """vLLM's OpenAI-server defaults (max_num_batched_tokens, max_num_seqs) by device memory.

    ``engine/arg_utils.py:get_batch_defaults``: >= 160 GB: 16384 / 1024; >= 70 GB: 8192 / 1024;
    otherwise 2048 / 256.
    """
    gb = device.usable_memory_bytes / 1e9
    if gb >= 160:
        return 16384, 1024
    if gb >= 70:
        return 8192, 1024
    return 2048, 256


def batch_limits(device: HardwareProfile, serving: ServingConfig) -> tuple[int, int]:
    tokens, seqs = default_batch_limits(device)
    return serving.max_num_batched_tokens or tokens, serving.max_num_seqs or seqs


def check_deployment(card: ModelCard, serving: ServingConfig, source: str = "(arguments)") -> None:
    """Cross-checks between a model and a serving config; raises SpecError naming the field."""

    def fail(field: str, reason: str) -> None:
        raise SpecError(source, f"serving.{field}", reason)

    heads = card.num_attention_heads
    if heads and heads % serving.tp:
        fail("tp", f"tp {serving.tp} does not divide the {heads} attention heads of {card.name}")
    if card.gqa is not None:
        kv = card.gqa.num_kv_heads
        if kv % serving.tp and serving.tp % kv:
            fail("tp", f"tp {serving.tp} and the {kv} KV heads of {card.name} do not divide")
    la = card.linear_attention
    if la is not None:
        for n, what in ((la.num_v_heads, "value"), (la.num_k_heads, "key")):
            if n % serving.tp:
                fail("tp", f"tp {serving.tp} does not divide the {n} {la.kind} {what} heads")
    expert_parallel.check_card(card, serving, fail)  # ep, EPLB, latent-MoE placement
    if serving.dcp > 1 and not any(k in FULL_ATTENTION_KINDS for k in card.layer_kinds):
        fail("dcp", f"{card.name} has no full-attention layers to shard with DCP")
    if serving.dcp > 1 and card.mla is None and card.gqa is not None:
        _check_gqa_dcp(card, serving, fail)
    if serving.max_model_len is not None and serving.max_model_len > card.max_context_tokens:
        fail(
            "max_model_len",
            f"{serving.max_model_len:,} exceeds the {card.max_context_tokens:,}-token context"
            f" of {card.name} (its max_context_tokens)",
        )
    sparse_attention.check_deployment(card, serving, fail)
    if serving.kv_cache_dtype in ("fp8_ds_mla", "nvfp4_ds_mla") and card.mla is None:
        fail("kv_cache_dtype", f"{serving.kv_cache_dtype} needs MLA layers; {card.name} has none")
    groups = card.required_groups()
    for group in serving.weight_precision:
        if group not in groups:
            fail(f"weight_precision.{group}", f"{card.name} has no {group} weights")
    spec = serving.speculative
    if spec is not None and spec.method == "mtp" and card.mtp_layers == 0:
        fail("speculative.method", f"{card.name} has no MTP layers (num_nextn_predict_layers 0)")


def _check_gqa_dcp(
    card: ModelCard, serving: ServingConfig, fail: Callable[[str, str], None]
) -> None:
    """vLLM's DCP checks for GQA/MHA models (``ModelConfig.verify_with_parallel_config``,
    vllm/config/model.py; MLA models only need ``tp % dcp == 0``).

    A DCP group shards by token only the KV heads TP has replicated: TP gives each of the
    ``num_kv_heads`` heads to ``tp / num_kv_heads`` ranks, so ``dcp <= tp // num_kv_heads``
    (which needs ``tp > num_kv_heads``); and the query heads of one KV head are split across
    the DCP group, so ``(num_heads / num_kv_heads) % dcp == 0``.
    """
    g = card.gqa
    assert g is not None
    kv, tp, dcp = g.num_kv_heads, serving.tp, serving.dcp
    max_dcp = max(tp // kv, 1)
    if dcp > max_dcp:
        fail(
            "dcp",
            f"dcp {dcp} exceeds tp {tp} // {kv} KV heads = {max_dcp} for {card.name}: GQA"
            " decode context parallel only shards KV heads that TP replicates"
            " (vLLM: dcp <= tp // num_kv_heads)",
        )
    q_per_kv = g.num_heads // kv
    if q_per_kv % dcp:
        fail(
            "dcp",
            f"dcp {dcp} does not divide the {q_per_kv} query heads per KV head of {card.name}"
            " (vLLM: (num_heads / num_kv_heads) % dcp == 0 for GQA)",
        )


def effective_max_model_len(card: ModelCard, serving: ServingConfig) -> int:
    """The longest prompt + max_tokens vLLM accepts: --max-model-len, else the card's."""
    return serving.max_model_len or card.max_context_tokens


def check_device(
    serving: ServingConfig, device: HardwareProfile, source: str = "(arguments)"
) -> None:
    """Cross-checks between a serving config and the device: what the knobs ask of one GPU
    (and of the host behind a replica) must exist on it."""

    def fail(field: str, reason: str) -> None:
        raise SpecError(source, f"serving.{field}", reason)

    domain = device.scale_up.domain_size if device.scale_up is not None else 1
    if serving.tp > domain:
        fail("tp", f"tp {serving.tp} exceeds the scale-up domain of {device.name} ({domain} GPUs)")
    expert_parallel.check_device(serving, device, fail)
    usable = device.usable_memory_bytes
    for field in ("kv_cache_memory_bytes", "runtime_reserve_bytes"):
        value = getattr(serving, field)
        if value is not None and value > usable:
            user_set = field in serving.model_fields_set
            fail(
                field,
                f"{value:.4g} B{'' if user_set else ' (the default)'} exceeds the usable memory"
                f" of one {device.name} ({usable:.4g} B = {usable / GIB:,.1f} GiB; {field} is"
                " per GPU)"
                + ("" if user_set else ": the device profile's usable_memory_bytes is too small"),
            )
    host = device.host_dram_bytes_per_gpu * serving.tp
    if serving.cpu_offload_bytes > host:
        fail(
            "cpu_offload_bytes",
            f"{serving.cpu_offload_bytes:.4g} B exceeds the host DRAM of tp {serving.tp} x"
            f" {device.name} ({host:.4g} B = {host / GIB:,.0f} GiB: host_dram_bytes_per_gpu"
            " x tp; the host tier is per replica)",
        )
    tokens, seqs = batch_limits(device, serving)
    if tokens < seqs:
        given = "" if serving.max_num_seqs is not None else f", vLLM's default on {device.name}"
        fail(
            "max_num_batched_tokens",
            f"max_num_batched_tokens ({tokens}) must be >= max_num_seqs ({seqs}{given}):"
            " every running sequence needs a token of the step (vLLM SchedulerConfig refuses"
            " it)",
        )
