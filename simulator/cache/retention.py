"""Which recurrent-state checkpoints a hybrid request keeps (vLLM 0.33 align mode).

Mirrors ``single_type_kv_cache_manager.py:MambaManager.reachable_block_mask``,
``kv_cache_coordinator.py:replay_boundaries`` and the mandatory chunk stops of
``sched/scheduler.py:_mamba_block_aligned_split`` (``vllm_mechanics.md`` 2.4-2.5):

- mandatory positions, always kept (the scheduler ends a prefill chunk there): the replay
  boundary ``floor((prompt-1)/blk)*blk`` (with EAGLE/MTP also the one a block lower, where a
  resend resumes after ``drop_eagle_block``) and the shared-prefix junction: when a request's
  attention hit runs past its checkpoint hit, the attention-cached extent
  (``shared_prefix_boundary``), so the next sibling resumes there;
- ``every_n`` / ``every_block`` add block boundaries, but only where a prefill chunk ends,
  because align mode writes the state at chunk ends only;
- decode-phase states are not kept;
- ``store_attention_remainder`` keeps every boundary, prompt and decode (see ``CacheConfig``).
"""

from __future__ import annotations

from simulator.cache.config import CacheConfig


def mandatory_checkpoints(
    c: CacheConfig, prompt_tokens: int, hit_tokens: int, recompute_tokens: int
) -> tuple[int, ...]:
    """The mandatory checkpoint positions past the hit, ascending (none without state groups
    or prefix caching)."""
    if not (c.state_groups and c.prefix_caching):
        return ()
    blk = c.attention_block_tokens
    replay = (prompt_tokens - 1) // blk * blk
    points = {replay}
    if c.eagle and replay > blk:
        points.add(replay - blk)
    if recompute_tokens:
        points.add(hit_tokens + recompute_tokens)  # shared_prefix_boundary
    return tuple(sorted(p for p in points if p > hit_tokens))


def retains(
    c: CacheConfig, prompt_tokens: int, mandatory: tuple[int, ...], p: int, chunk_end: int
) -> bool:
    """Is the state at block boundary ``p``, passed by a chunk ending at ``chunk_end``, kept?"""
    if c.store_attention_remainder:
        return True
    if p > prompt_tokens:
        return False  # decode-phase states are not retained
    if p in mandatory:
        return True
    if p != chunk_end:
        return False  # align mode writes the state at chunk ends only
    if c.retention == "every_block":
        return True
    return c.retention == "every_n" and p % (c.retention_interval_tokens or 1) == 0
