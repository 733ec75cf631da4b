"""What the KV cache manager needs to know about one replica, and what it reports."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from simulator.kv_layout import KvLayout
from simulator.specs.serving import ServingConfig

Retention = Literal["default", "every_n", "every_block"]


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """One replica's KV cache as vLLM v1 lays it out (``vllm_mechanics.md`` 2.2-2.4, 4, 8).

    All groups share one pool of ``num_blocks`` equal blocks. ``block_tokens`` is the block
    per rank; with DCP an attention block covers ``block_tokens * dcp`` tokens of the sequence
    (``kv_cache_utils.py:resolve_dcp_kv_block_size``) and that is also the granularity of the
    prefix hashes and of the recurrent-state checkpoints (an assumption for DCP hybrids: vLLM's
    Mamba groups are not DCP-sharded, but hashes only exist at the attention block).

    Retention of recurrent-state checkpoints (``prefix_cache_retention_interval``,
    ``MambaManager.reachable_block_mask``): ``"default"`` (0) keeps the replay boundary
    ``floor((prompt-1)/blk)*blk`` and detected shared-prefix junctions; ``"every_n"`` also keeps
    multiples of ``retention_interval_tokens`` that are block boundaries; ``"every_block"``
    (None) keeps every block boundary. Extra (non-mandatory) positions are kept only where a
    prefill chunk ends, because align mode writes the state at chunk ends only
    (``scheduler.py:_mamba_block_aligned_split``).

    ``store_attention_remainder``: when True the prefill kernel is taken to export the state
    at every block boundary and each state is cached together with the full-attention block it
    ends (prompt and decode blocks alike, whenever that block gets its hash), so a later request
    resumes wherever the attention history is cached. When False (vLLM 0.33 default) only the
    retained positions above have states, and a request whose attention hit runs past the last
    checkpoint resumes at the checkpoint and recomputes the rest (``PrefixHit.recompute_tokens``).
    """

    block_tokens: int
    num_blocks: int
    dcp: int = 1
    full_groups: int = 1
    swa_groups: int = 0
    window_tokens: int | None = None
    state_groups: int = 0
    num_speculative_tokens: int = 0
    prefix_caching: bool = True
    retention: Retention = "default"
    retention_interval_tokens: int | None = None
    store_attention_remainder: bool = False
    # EAGLE/MTP drafts: the full-attention hit drops its last block (``drop_eagle_block``) and
    # the replay boundary one block lower is retained too (``_mamba_block_aligned_split``).
    eagle: bool = False
    cpu_blocks: int = 0  # CPU tier size in pool blocks; 0 = no offloading
    bytes_per_block: float = 0.0  # one pool block, all layers of a group (for transfer bytes)
    offload_prompt_only: bool = True  # vLLM OffloadingConnector default

    def __post_init__(self) -> None:
        if self.block_tokens < 1 or self.dcp < 1 or self.num_blocks < 0:
            raise ValueError("block_tokens >= 1, dcp >= 1 and num_blocks >= 0 required")
        if min(self.full_groups, self.swa_groups, self.state_groups) < 0:
            raise ValueError("group counts must be >= 0")
        if self.full_groups + self.swa_groups + self.state_groups == 0:
            raise ValueError("a cache needs at least one group")
        if self.swa_groups and (self.window_tokens is None or self.window_tokens < 1):
            raise ValueError("sliding-window groups need window_tokens >= 1")
        if self.retention == "every_n" and not self.retention_interval_tokens:
            raise ValueError('retention "every_n" needs retention_interval_tokens >= 1')
        if self.num_speculative_tokens < 0 or self.cpu_blocks < 0:
            raise ValueError("num_speculative_tokens and cpu_blocks must be >= 0")

    @property
    def attention_block_tokens(self) -> int:
        """Tokens of the sequence one attention block (and one prefix hash) covers."""
        return self.block_tokens * self.dcp

    @property
    def state_pages_per_request(self) -> int:
        """State pages per recurrent group a running request holds (``MambaSpec``):
        align mode (prefix caching) 2 + K, else 1 + K; 0 without recurrent groups."""
        if not self.state_groups:
            return 0
        return (2 if self.prefix_caching else 1) + self.num_speculative_tokens

    @property
    def window_blocks(self) -> int:
        """Blocks one sliding-window group holds at most: ceil((window-1)/B) + 1."""
        if self.window_tokens is None:
            return 0
        return math.ceil((self.window_tokens - 1) / self.block_tokens) + 1

    @classmethod
    def from_layout(
        cls,
        layout: KvLayout,
        serving: ServingConfig,
        num_blocks: int,
        cpu_blocks: int = 0,
        store_attention_remainder: bool = False,
    ) -> CacheConfig:
        """The config ``simulator.kv_layout.kv_layout`` and the serving knobs imply."""
        interval = serving.prefix_cache_retention_interval
        retention: Retention = (
            "every_block" if interval is None else "default" if interval == 0 else "every_n"
        )
        spec = serving.speculative
        return cls(
            block_tokens=layout.block_size_tokens,
            num_blocks=num_blocks,
            dcp=serving.dcp,
            full_groups=layout.count("full"),
            swa_groups=layout.count("swa"),
            window_tokens=layout.sliding_window_tokens,
            state_groups=layout.count("mamba"),
            num_speculative_tokens=serving.num_speculative_tokens,
            prefix_caching=serving.enable_prefix_caching,
            retention=retention,
            retention_interval_tokens=interval or None,
            store_attention_remainder=store_attention_remainder,
            eagle=spec is not None and spec.method in ("eagle", "mtp"),
            cpu_blocks=cpu_blocks if serving.enable_prefix_caching else 0,
            bytes_per_block=layout.bytes_per_block,
        )


@dataclass(frozen=True, slots=True)
class CacheUsage:
    """Pool occupancy: distinct blocks, so a block shared by several requests counts once."""

    used_blocks: int
    free_blocks: int  # ref count 0, cached (evictable) or not
    cached_blocks: int  # hash-carrying, in use or free (0 while a pool counts: SINK uncounted)
    state_blocks: int  # recurrent-state pages in use (running pages and held checkpoints)
    num_requests: int
    cpu_used_blocks: int = 0
