"""What ``simulation.simulate`` builds for a disaggregated deployment and a remote KV store:
each pool's serving config and memory (``PoolServing``), the engine's ``DisaggSpec`` with the
link and the per-direction transfer costs, and the shared store (``RemoteTier``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from simulator.cache.prefix import HitLike
from simulator.cache.remote_tier import RemoteTier
from simulator.cache.transfer import TransferCost, TransferSizer
from simulator.disaggregation import DisaggSpec
from simulator.kv_layout import kv_layout
from simulator.memory import MemoryReport, plan_memory
from simulator.specs.hardware import HardwareProfile, Link
from simulator.specs.loading import SpecError
from simulator.specs.model import ModelCard
from simulator.specs.pools import DEFAULT_STORE_BW_BYTES_PER_S, Pool
from simulator.specs.scenario import Scenario
from simulator.specs.serving import ServingConfig


@dataclass(frozen=True)
class PoolPlan:
    """One pool as the engine builds it: the serving its replicas run and their memory."""

    serving: ServingConfig  # with the pool's prefix-caching / offload rule applied
    memory: MemoryReport
    replicas: int  # simulated replicas: instances x DP ranks


def pool_plans(
    card: ModelCard,
    device: HardwareProfile,
    scenario: Scenario,
    devices: list[HardwareProfile],
    source: str,
    base_memory: MemoryReport | None,
) -> tuple[PoolPlan, PoolPlan]:
    """(prefill, decode) of a disaggregated scenario. Without per-pool parallelism both run
    ``serving`` and the decode pool reuses ``base_memory`` (as before); with it each pool's
    memory is planned and checked on its own (SpecError naming the pool)."""
    d = scenario.disaggregation
    assert d is not None
    serving = scenario.serving

    def planned(pool: Pool, s: ServingConfig, check: bool) -> MemoryReport:
        field = f"disaggregation.{pool}_serving"
        try:
            memory = plan_memory(card, device, s, context_tokens=1, devices=devices)
        except SpecError as exc:
            # a knob the pool's own override sets is named as that override's field
            over = d.prefill_serving if pool == "prefill" else d.decode_serving
            knob = exc.field.removeprefix("serving.")
            named = over is not None and knob in over.model_fields_set
            where = f"{field}.{knob}" if named else exc.field
            raise SpecError(source, where, f"{pool} pool: {exc.reason}") from None
        if check and memory.num_blocks <= memory.blocks_per_seq:
            reason = f"{card.name} on {device.name}: {pool} pool: {memory.fits_reason}"
            raise SpecError(source, field, reason)
        return memory

    # the prefill pool runs with its own prefix-caching setting (hybrids hold one state page
    # per recurrent group without it); the decode pool reads its prompts from the prefill
    # pool, not from a host tier
    p_base = d.pool_serving(serving, "prefill")
    p_serving = p_base.model_copy(update={"enable_prefix_caching": d.prefill_prefix_caching})
    d_base = d.pool_serving(serving, "decode")
    d_serving = d_base.model_copy(update={"cpu_offload_bytes": 0.0})
    d_memory = planned("decode", d_base, True) if d.per_pool or base_memory is None else base_memory
    p_memory = planned("prefill", p_serving, d.per_pool)
    if d.per_pool:
        p_blk = kv_layout(card, p_serving).block_size_tokens * p_serving.dcp
        d_blk = kv_layout(card, d_serving).block_size_tokens * d_serving.dcp
        if p_blk != d_blk:
            raise SpecError(
                source,
                "disaggregation.decode_serving",
                f"the pools' KV blocks differ ({p_blk} tokens on prefill, {d_blk} on decode:"
                " hybrid page alignment depends on tp); blocks map one to one between pools,"
                " so give both pools a tp that aligns to one block size",
            )
    return (
        PoolPlan(p_serving, p_memory, d.engine_replicas(serving, "prefill")),
        PoolPlan(d_serving, d_memory, d.engine_replicas(serving, "decode")),
    )


def disaggregation_spec(
    card: ModelCard, scenario: Scenario, device: HardwareProfile | None = None
) -> DisaggSpec:
    """What the engine needs of a scenario's ``disaggregation`` block and serving knobs: the
    link (``Disaggregation.link``) and, when the pools differ or descriptors cost time, the
    cost of each direction (``TransferCost.between``)."""
    if device is None:
        from simulator import catalog

        device = catalog.hardware_profile(scenario.device)
    d = scenario.disaggregation
    assert d is not None
    serving = scenario.serving
    bw, latency, descriptor_s = d.link(device)
    p = d.pool_serving(serving, "prefill")
    dec = d.pool_serving(serving, "decode")
    kv_cost = back_cost = None
    if d.per_pool or descriptor_s:
        # assumption: split K and V caches (FlashAttention layout) for GQA/MHA, one region
        # per layer for MLA's latent (and for recurrent states)
        regions = 2 if card.mla is None and card.gqa is not None else 1
        p_layout, d_layout = kv_layout(card, p), kv_layout(card, dec)
        kv_cost = TransferCost.between(
            d_layout, p_layout, dec.tp, p.tp, serving.dcp, descriptor_s, regions
        )
        back_cost = TransferCost.between(
            p_layout, d_layout, p.tp, dec.tp, serving.dcp, descriptor_s, regions
        )
    return DisaggSpec(
        prefill_replicas=d.engine_replicas(serving, "prefill"),
        sizer=TransferSizer.from_layout(kv_layout(card, serving), serving.dcp)
        if kv_cost is None
        else kv_cost.sizer,
        link_bw_bytes_per_s=bw,
        link_latency_s=latency,
        # vLLM's _prefill_backoff: P stops one token short on Mamba/KDA hybrids so that D
        # derives the last state itself (multi-module MTP backoff is not modelled)
        backoff_tokens=1 if card.is_hybrid else 0,
        send_back=d.send_back,
        ttl_s=serving.decoder_kv_blocks_ttl_s,
        recompute_threshold_tokens=serving.kv_recompute_threshold_tokens,
        kv_cost=kv_cost,
        back_cost=back_cost,
    )


def remote_store(
    card: ModelCard, device: HardwareProfile, scenario: Scenario, serving: ServingConfig
) -> RemoteTier | None:
    """The scenario's shared remote KV store, sized for replicas running ``serving`` (the
    prefill pool's when disaggregated); None without a ``kv_store`` block."""
    spec = scenario.kv_store
    if spec is None:
        return None
    bw = spec.bw_bytes_per_s
    if bw is None:
        out = device.scale_out
        bw = out.bw_bytes_per_s if out is not None else DEFAULT_STORE_BW_BYTES_PER_S
    layout = kv_layout(card, serving)
    return RemoteTier.sized(
        spec.capacity_bytes, layout.bytes_per_block, serving.gpus_per_replica, bw, spec.latency_s
    )


def load_bytes_with_store(
    cpu_bytes: Callable[[HitLike], float], store: RemoteTier, host: Link
) -> Callable[[HitLike], float]:
    """``ReplicaParts.load_bytes`` for a replica with a remote store. The engine times a load
    as ``load_bytes / host bw + host latency + one step``; a store hit returns the host-link
    bytes that take the store's time (``store.load_seconds``) instead, so the engine's formula
    gives ``store bytes / store bw + store latency + one step``."""
    bw, latency = host.bw_bytes_per_s, host.latency_s

    def load_bytes(hit: HitLike) -> float:
        if getattr(hit, "store_tokens", 0):
            blocks = getattr(hit, "cpu_load_blocks", 0)
            return (store.load_seconds(blocks) - latency) * bw
        return cpu_bytes(hit)

    return load_bytes
