"""A remote KV store below the host tier (Mooncake Store through vLLM's
``MooncakeStoreConnector``, combined with the host tier by ``MultiConnector``).

What is modelled (``vllm_mechanics.md`` 5.3; vLLM ``kv_connector/v1/multi_connector.py``):

- One store for the whole deployment, shared by every replica that offloads (a distributed
  pool with hash dedup: a block stored by one replica is found by all). Entries are keyed as
  in the host tier, (kind, block hash); capacity in pool blocks, every TP rank's shard
  counted (``capacity_bytes // (bytes_per_block x gpus_per_replica)``); LRU eviction.
- Saves: ``MultiConnector`` saves through every connector, so each block offered to the host
  tier (full, computed, inside the prompt with ``offload_prompt_only``) is offered here too;
  a key already present is neither stored again nor refreshed (as the host tier).
- Loads: ``MultiConnector`` loads a request from the first connector reporting a non-zero
  match past the GPU hit. The host tier is asked first; only when it has nothing past the
  GPU hit is the store asked: consecutive attention blocks from the GPU hit on, and for
  hybrids the recurrent state at the new boundary (``simulator.cache.prefix``). The hit is
  loaded asynchronously like a host hit (the scheduler's LOADING state): the request waits
  ``load_bytes / bw_bytes_per_s + latency_s`` plus about one step. ``bw_bytes_per_s`` is per
  GPU: every rank reads its own shard over its own NIC (no contention between replicas or
  with the P/D KV reads is modelled).

Left out: the store's own placement (replication, striping over the store's nodes), its
SSD tier, a load that prefers the host tier block by block and the store for the rest (one
connector serves each request), and promotion of store hits into the host tier beyond what
the host tier's own offload of the loaded blocks does.
"""

from __future__ import annotations

from simulator.cache.offload import CpuTier


class RemoteTier(CpuTier):
    """The shared LRU of a remote KV store: a :class:`CpuTier` with its own link."""

    __slots__ = ("bw_bytes_per_s", "latency_s")

    def __init__(
        self,
        capacity_blocks: int,
        bytes_per_block: float,
        bw_bytes_per_s: float,
        latency_s: float,
    ) -> None:
        super().__init__(capacity_blocks, bytes_per_block)
        if bw_bytes_per_s <= 0 or latency_s < 0:
            raise ValueError("bw_bytes_per_s must be > 0 and latency_s >= 0")
        self.bw_bytes_per_s = bw_bytes_per_s
        self.latency_s = latency_s

    def load_seconds(self, blocks: int) -> float:
        """Seconds to load ``blocks`` pool blocks (per GPU) from the store, latency included."""
        return self.load_bytes(blocks) / self.bw_bytes_per_s + self.latency_s

    @classmethod
    def sized(
        cls,
        capacity_bytes: float,
        bytes_per_block: float,
        gpus_per_replica: int,
        bw_bytes_per_s: float,
        latency_s: float,
    ) -> RemoteTier:
        """A store of ``capacity_bytes`` in all (every rank's shard of a block counted)."""
        blocks = int(capacity_bytes // (bytes_per_block * gpus_per_replica))
        return cls(blocks, bytes_per_block, bw_bytes_per_s, latency_s)
