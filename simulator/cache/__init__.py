"""One replica's KV cache as vLLM v1 manages it: block pool, prefix cache, hybrid groups,
recurrent-state checkpoints and the CPU offload tier.

The engine builds a :class:`CacheConfig` (``CacheConfig.from_layout``), then per request
calls :meth:`KVCacheManager.lookup` / ``admit`` / ``grow`` / ``commit`` / ``free``.
"""

from __future__ import annotations

from simulator.cache.block_pool import BlockPool
from simulator.cache.config import CacheConfig, CacheUsage, Retention
from simulator.cache.manager import KVCacheManager
from simulator.cache.offload import CpuTier
from simulator.cache.prefix import NO_HIT, HitLike, PrefixHit, find_prefix_hit
from simulator.cache.transfer import Nics, TransferSizer, reserve, send_back_tokens

__all__ = [
    "NO_HIT",
    "BlockPool",
    "CacheConfig",
    "CacheUsage",
    "CpuTier",
    "HitLike",
    "KVCacheManager",
    "Nics",
    "PrefixHit",
    "Retention",
    "TransferSizer",
    "find_prefix_hit",
    "reserve",
    "send_back_tokens",
]
