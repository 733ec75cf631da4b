"""Per-pool parallelism of a disaggregated deployment and the remote (Mooncake-style) KV store.

``PoolServing`` overrides a few fields of the scenario's ``serving`` for one pool (prefill or
decode); everything it leaves out comes from ``serving``. ``KvStore`` is a shared KV store
below the host tier (vLLM ``MooncakeStoreConnector``; ``simulator.cache.remote_tier``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt

from simulator.specs.frozen import Spec
from simulator.specs.serving import All2AllBackend, LatentPlacement, ServingConfig

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

    capacity_bytes: PositiveFloat
    bw_bytes_per_s: PositiveFloat | None = None
    latency_s: float = Field(default=DEFAULT_STORE_LATENCY_S, ge=0)
