"""Prefill/decode disaggregation (``Disaggregation``), the per-pool parallelism of a
disaggregated deployment and the remote (Mooncake-style) KV store.

``PoolServing`` overrides a few fields of the scenario's ``serving`` for one pool (prefill or
decode); everything it leaves out comes from ``serving``. ``KvStore`` is a shared KV store
below the host tier (vLLM ``MooncakeStoreConnector``; ``simulator.cache.remote_tier``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import Field, PositiveFloat, PositiveInt, ValidationError, model_validator

from simulator.specs import limits
from simulator.specs.frozen import Spec
from simulator.specs.hardware import LinkBandwidth, Seconds
from simulator.specs.limits import at_most
from simulator.specs.serving import All2AllBackend, LatentPlacement, ServingConfig

if TYPE_CHECKING:
    from simulator.specs.hardware import HardwareProfile

Pool = Literal["prefill", "decode"]


class PoolServing(Spec):
    """One pool's parallelism, expert placement and batch limits, over the scenario's
    ``serving`` (a field not given is ``serving``'s).

    An instance of the pool is ``tp x dp`` GPUs. With ``dp > 1`` each DP rank has its own
    scheduler and KV cache (vLLM DP attention): the engine simulates each DP rank as one
    replica of ``tp`` GPUs, and with ``ep = tp x dp`` (wide EP) the MoE layers of every rank
    see the tokens of all the instance's DP ranks (``simulator.cost.moe_ep.record_moe``). ``ep`` not
    given: expert parallelism stays on (ep = this pool's tp x dp) if ``serving`` has it on
    (``serving.ep = serving.tp x serving.dp > 1``), else off (1).
    """

    tp: PositiveInt | None = None
    dp: PositiveInt | None = None
    dcp: PositiveInt | None = None
    ep: PositiveInt | None = None
    moe_token_distribution: (
        Literal["auto", "balanced", "power_law_1.01", "power_law_1.2"] | None
    ) = None
    # wide-EP knobs of ServingConfig (validated there, against this pool's ep)
    eplb_redundant_experts: int | None = Field(default=None, ge=0)
    moe_load_imbalance: float | None = None
    all2all_backend: All2AllBackend | None = None
    latent_moe_projection: LatentPlacement | None = None
    max_num_seqs: PositiveInt | None = None
    max_num_batched_tokens: PositiveInt | None = None

    @property
    def short(self) -> str:
        """The fields given, for labels: ``TP1-DP16-EP16-DeepEP-LL`` ..."""
        parts = [
            f"{name.upper()}{value}"
            for name in ("tp", "dp", "dcp", "ep")
            if (value := getattr(self, name)) is not None
        ]
        if self.all2all_backend not in (None, "generic"):
            parts.append(
                {"deepep_high_throughput": "DeepEP-HT"}.get(self.all2all_backend, "DeepEP-LL")
            )
        if self.eplb_redundant_experts:
            parts.append(f"EPLB{self.eplb_redundant_experts}")
        if self.moe_load_imbalance not in (None, 1.0):
            parts.append(f"imb{self.moe_load_imbalance:g}")
        if self.latent_moe_projection == "rank_split":
            parts.append("latent-split")
        for name, tag in (("max_num_seqs", "seqs"), ("max_num_batched_tokens", "mbt")):
            if (value := getattr(self, name)) is not None:
                parts.append(f"{tag}{value}")
        return "-".join(parts)

    def apply(self, serving: ServingConfig) -> ServingConfig:
        """``serving`` with this pool's fields; raises ValueError (pydantic's message) when the
        combination is not a valid ServingConfig."""
        update: dict[str, Any] = self.model_dump(exclude_none=True)
        if "ep" not in update:
            ep_on = serving.ep > 1 and serving.ep == serving.tp * serving.dp
            tp, dp = update.get("tp", serving.tp), update.get("dp", serving.dp)
            update["ep"] = tp * dp if ep_on else 1
        return ServingConfig.model_validate({**serving.model_dump(), **update})


# Assumption, per GPU: the store is reached over the GPU's scale-out NIC (one 400 Gb/s NIC
# per GPU = 50e9 B/s per direction, as DEFAULT_LINK_BW_BYTES_PER_S); Mooncake's transfer
# engine reports near line rate on large objects (FAST'25 paper, Mooncake README: up to 87
# GB/s over 4x200 Gb/s RoCE, 190 GB/s over 8x400 Gb/s). Used when the device profile has no
# ``scale_out`` link and the block gives no ``bw_bytes_per_s``.
DEFAULT_STORE_BW_BYTES_PER_S = 50e9
# Assumption: one metadata round trip to the store's master plus an RDMA read round trip and
# the connector's completion: ~100 us (no public per-get figure found for Mooncake Store).
DEFAULT_STORE_LATENCY_S = 1e-4
MAX_STORE_BYTES = 1e18


class KvStore(Spec):
    """A remote KV store shared by the deployment's replicas (Mooncake Store via vLLM's
    ``MooncakeStoreConnector``), combined with the host tier as vLLM's ``MultiConnector``
    does: every block stored in the host tier is also stored here (saves go to every
    connector), and a request loads from the first connector that reports a hit past its GPU
    hit (host tier first, then the store). LRU over ``capacity_bytes`` (all replicas'
    blocks, every TP rank's shard counted). ``bw_bytes_per_s`` is per GPU (each rank reads
    its own shard; None: the device profile's ``scale_out`` link, else 50 GB/s, an
    assumption); ``latency_s`` is added once per load. A load is asynchronous like a host
    load: the request waits for bytes / bw + latency + about one step.
    """

    # bounded as a profile's links are (a 300 s latency left a load in flight at the end and
    # a bandwidth of 1e-300 B/s stalled a closed loop, both reported as "drains")
    capacity_bytes: Annotated[PositiveFloat, at_most(MAX_STORE_BYTES, "bytes (an exabyte)")]
    bw_bytes_per_s: LinkBandwidth | None = None
    latency_s: Seconds = DEFAULT_STORE_LATENCY_S


# Assumption, used when neither the scenario nor the device profile (``scale_out``) gives the
# link: one 400 Gb/s NIC per GPU (ConnectX-7 / Pollara 400 class, as 8-NIC HGX / MI355X nodes
# ship), 400e9 / 8 = 50e9 B/s per direction.
DEFAULT_LINK_BW_BYTES_PER_S = 50e9
# Assumption: one RDMA read round trip plus NIXL's completion notification; the proxy's HTTP
# hops between P and D are not modelled.
DEFAULT_LINK_LATENCY_S = 1e-5


class Disaggregation(Spec):
    """Prefill/decode disaggregation (xPyD, vLLM ``NixlConnector`` pull mode; vllm_mechanics 9).

    ``prefill_replicas`` + ``decode_replicas`` instances (they replace ``serving.dp``). A
    request prefills on a prefill instance (``max_tokens`` 1; hybrids stop one token short so
    that D derives the last state itself), the decode instance reads its KV (and recurrent
    state) over the inter-node link, computes the last prompt token and decodes.
    ``prefill_prefix_caching`` is off by default, as in vLLM's send-back experiment.
    ``send_back`` (``bidirectional_kv_xfer``): a request finished on D keeps its blocks pinned
    for ``serving.decoder_kv_blocks_ttl_s`` and the session's next turn pulls them back to P
    unless fewer than ``serving.kv_recompute_threshold_tokens`` tokens would be reused.

    ``prefill_serving`` / ``decode_serving``: the pool's own parallelism (tp, dp, dcp, ep) and
    batch limits over ``serving`` (``PoolServing``); an instance is tp x dp GPUs and each of
    its DP ranks is one simulated replica (DP attention). Without them both pools run
    ``serving`` with dp 1.

    The link, one GPU's NIC per direction (every TP rank moves its own shard over its own
    NIC): ``link_bw_bytes_per_s`` / ``link_latency_s`` when given, else the device profile's
    ``scale_out`` link, else 50 GB/s and 10 us (assumptions). A read takes latency +
    descriptors x ``kv_descriptor_s`` + bytes / bandwidth (``simulator.cache.transfer``);
    ``kv_descriptor_s`` None: ``NIXL_DESCRIPTOR_S`` (an assumption, sourced there), whichever
    link is used; 0 turns descriptor posting off. The transfers of one replica's NICs in one
    direction run one at a time.
    """

    prefill_replicas: PositiveInt = 1
    decode_replicas: PositiveInt = 1
    prefill_prefix_caching: bool = False
    send_back: bool = False
    # None: the profile's scale_out; bounded as the profile's links are (limits.py)
    link_bw_bytes_per_s: LinkBandwidth | None = None
    link_latency_s: Seconds | None = None
    kv_descriptor_s: Seconds | None = None
    prefill_serving: PoolServing | None = None
    decode_serving: PoolServing | None = None

    @model_validator(mode="after")
    def _replicas_bounded(self) -> Self:
        if self.replicas > limits.MAX_REPLICAS:
            raise ValueError(
                f"prefill_replicas + decode_replicas = {self.replicas:,} exceeds"
                f" {limits.MAX_REPLICAS:,} replicas per simulated deployment (each is"
                " simulated; size a bigger fleet with demand_users)"
            )
        return self

    @property
    def label(self) -> str:
        """``1P1D``, ``2P1D send-back``, ``1P1D send-back P-cache``, and a pool's own
        parallelism: ``1P1D P-cache P-TP8 D-TP1-DP16-EP16`` ..."""
        parts = [f"{self.prefill_replicas}P{self.decode_replicas}D"]
        if self.send_back:
            parts.append("send-back")
        if self.prefill_prefix_caching:
            parts.append("P-cache")
        for tag, pool in (("P", self.prefill_serving), ("D", self.decode_serving)):
            if pool is not None and pool.short:
                parts.append(f"{tag}-{pool.short}")
        return " ".join(parts)

    @property
    def replicas(self) -> int:
        return self.prefill_replicas + self.decode_replicas

    @property
    def per_pool(self) -> bool:
        """Whether a pool has its own parallelism (``prefill_serving`` / ``decode_serving``)."""
        return self.prefill_serving is not None or self.decode_serving is not None

    def pool_serving(self, serving: ServingConfig, pool: Pool) -> ServingConfig:
        """The serving config of one pool's instances (``serving`` without an override)."""
        override = self.prefill_serving if pool == "prefill" else self.decode_serving
        return serving if override is None else override.apply(serving)

    def engine_replicas(self, serving: ServingConfig, pool: Pool) -> int:
        """Simulated replicas of a pool: instances x DP ranks."""
        count = self.prefill_replicas if pool == "prefill" else self.decode_replicas
        return count * self.pool_serving(serving, pool).dp

    def pool_gpus(self, serving: ServingConfig, pool: Pool) -> int:
        return self.engine_replicas(serving, pool) * self.pool_serving(serving, pool).tp

    def link(self, device: HardwareProfile) -> tuple[float, float, float]:
        """(bandwidth per GPU per direction, latency, seconds per descriptor) of the KV link:
        the scenario's, else the profile's ``scale_out``, else the default assumptions."""
        from simulator.cache.transfer import NIXL_DESCRIPTOR_S

        out = device.scale_out
        bw = self.link_bw_bytes_per_s
        if bw is None:
            bw = out.bw_bytes_per_s if out is not None else DEFAULT_LINK_BW_BYTES_PER_S
        latency = self.link_latency_s
        if latency is None:
            latency = out.latency_s if out is not None else DEFAULT_LINK_LATENCY_S
        descriptor_s = NIXL_DESCRIPTOR_S if self.kv_descriptor_s is None else self.kv_descriptor_s
        return bw, latency, descriptor_s


def pool_checks(d: Disaggregation, serving: ServingConfig) -> None:
    """The pools' servings are valid and compatible; ValueError naming the pool otherwise."""
    pools: dict[str, ServingConfig] = {}
    names: tuple[Pool, Pool] = ("prefill", "decode")
    for pool in names:
        try:
            pools[pool] = d.pool_serving(serving, pool)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            msg = str(err["msg"]).removeprefix("Value error, ")
            raise ValueError(f"{pool}_serving: {where}: {msg}") from None
    p, dec = pools["prefill"], pools["decode"]
    if p.dcp != dec.dcp:
        raise ValueError(
            f"prefill_serving / decode_serving: dcp {p.dcp} vs {dec.dcp}: both pools must use"
            " one dcp (a KV block maps one to one between them; DCP on one side only is not"
            " modelled)"
        )
    total = d.engine_replicas(serving, "prefill") + d.engine_replicas(serving, "decode")
    if total > limits.MAX_REPLICAS:
        raise ValueError(
            f"(prefill_replicas x dp) + (decode_replicas x dp) = {total:,} simulated replicas"
            f" exceeds {limits.MAX_REPLICAS:,} per deployment (each DP rank is simulated)"
        )
