"""Host-DRAM tier behind the GPU prefix cache: vLLM's native CPU offloading, LRU.

Mirrors ``--kv-offloading-backend native`` (``vllm_mechanics.md`` 5.1):
``distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py`` (store / lookup jobs) and
``v1/kv_offload/cpu/policies/lru.py`` (eviction), with one GPU block per chunk (the default
``blocks_per_chunk``):

- a block is stored once it is full and computed (the store is asynchronous: only its bytes
  are recorded); a key already present is not stored again and not refreshed
  (``prepare_store`` filters present keys);
- with ``offload_prompt_only`` (the default) only blocks inside the prompt are stored;
- a GPU miss looks the tier up from the GPU hit on: consecutive attention blocks present here
  extend the hit; hybrids also need the recurrent state at the new hit boundary, which is a
  single state entry (``sliding_window_size_in_chunks=1``);
- a load touches the entries it reads (LRU); the engine delays the request by
  ``load_bytes / host-link bandwidth`` plus about one step.

Entries are keyed by (kind, block hash): an attention entry holds the block of every
full-attention group (``full_groups`` pool blocks), a state entry the checkpoint of every
recurrent group (``state_groups`` pool blocks). Capacity is in pool blocks
(``cpu_offload_bytes // bytes_per_block``, computed by the caller).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

ATTENTION = 0
STATE = 1


class CpuTier:
    """An LRU of cached blocks in host memory, ``capacity_blocks`` pool blocks large."""

    __slots__ = (
        "_lru",
        "bytes_per_block",
        "capacity_blocks",
        "evicted_blocks",
        "loaded_bytes",
        "stored_bytes",
        "used_blocks",
    )

    def __init__(self, capacity_blocks: int, bytes_per_block: float) -> None:
        if capacity_blocks < 0 or bytes_per_block < 0:
            raise ValueError("capacity_blocks and bytes_per_block must be >= 0")
        self.capacity_blocks = capacity_blocks
        self.bytes_per_block = bytes_per_block
        self._lru: OrderedDict[tuple[int, int], int] = OrderedDict()  # key -> pool blocks
        self.used_blocks = 0
        self.stored_bytes = 0.0  # device -> host traffic so far
        self.loaded_bytes = 0.0  # host -> device traffic so far
        self.evicted_blocks = 0

    def __len__(self) -> int:
        return len(self._lru)

    def contains(self, kind: int, h: int) -> bool:
        return (kind, h) in self._lru

    def count_prefix(self, hashes: Sequence[int], start: int, limit: int) -> int:
        """End ``i <= limit`` of the run ``hashes[start:i]`` of attention blocks present here."""
        lru = self._lru
        i = start
        while i < limit and (ATTENTION, hashes[i]) in lru:
            i += 1
        return i

    def store(self, kind: int, h: int, cost_blocks: int) -> bool:
        """Store an entry of ``cost_blocks`` pool blocks at the MRU end, evicting LRU entries.

        False if it is already present (nothing changes) or larger than the whole tier.
        """
        key = (kind, h)
        if key in self._lru or cost_blocks > self.capacity_blocks:
            return False
        while self.used_blocks + cost_blocks > self.capacity_blocks:
            _, cost = self._lru.popitem(last=False)
            self.used_blocks -= cost
            self.evicted_blocks += cost
        self._lru[key] = cost_blocks
        self.used_blocks += cost_blocks
        self.stored_bytes += cost_blocks * self.bytes_per_block
        return True

    def touch(self, kind: int, h: int) -> None:
        """Mark an entry as just used (a load reads it); absent entries are ignored."""
        key = (kind, h)
        if key in self._lru:
            self._lru.move_to_end(key)

    def load_bytes(self, blocks: int) -> float:
        """Bytes moved host -> device to load ``blocks`` pool blocks."""
        return blocks * self.bytes_per_block

    def record_load(self, blocks: int) -> None:
        self.loaded_bytes += self.load_bytes(blocks)

    def rename(self, old: int, new: int) -> None:
        """Re-key entries of hash ``old`` (both kinds) to ``new``; the renamed entry becomes MRU
        (the next turn that needs it is about to look it up). A clash keeps the existing one."""
        for kind in (ATTENTION, STATE):
            cost = self._lru.pop((kind, old), None)
            if cost is None:
                continue
            if (kind, new) in self._lru:
                self.used_blocks -= cost
            else:
                self._lru[(kind, new)] = cost

    def check(self) -> None:
        assert self.used_blocks == sum(self._lru.values()), "CPU tier use drifted"
        assert 0 <= self.used_blocks <= self.capacity_blocks, "CPU tier over capacity"
