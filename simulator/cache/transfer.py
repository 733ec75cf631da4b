"""KV transfers between replicas (prefill/decode disaggregation): sizes, link time, send-back.

Mirrors vLLM's ``NixlConnector`` in pull mode (``vllm_mechanics.md`` 9): the reader READs the
writer's blocks, each TP rank its own shard over its own NIC.

- Size (:class:`TransferSizer`): the blocks past the reader's local hit, whole pages of every
  real layer (padding layers of a group are not registered, so not moved): full-attention
  blocks up to the last token read, sliding-window blocks clipped to the window
  (``get_exchange_clipped_blocks``) and one state page per recurrent layer (Mamba groups are
  reduced to the state block). Bytes are per GPU.
- Time (:class:`Nics`): ``bytes_per_gpu / bandwidth + latency``. A replica's NICs are shared by
  its transfers; each direction (send, receive) serves one transfer at a time, first come
  first served, so a transfer starts when both the writer's send side and the reader's receive
  side are free. (Serialisation, not bandwidth sharing: the same finish time for the last of
  several concurrent transfers, earlier finishes for the first ones.)
- Send-back (:func:`send_back_tokens`): the prefill side's rule for a turn whose previous
  turn's blocks are pinned on the decode side (``pull_scheduler.get_num_new_matched_tokens``,
  ``do_remote_decode`` branch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.memory import KvLayout


@dataclass(frozen=True, slots=True)
class TransferSizer:
    """Bytes per GPU of reading a request's KV for tokens ``[start, end)`` from a replica."""

    attention_block_tokens: int  # sequence tokens per full-attention block (block x dcp)
    swa_block_tokens: int  # sequence tokens per sliding-window block
    window_blocks: int  # sliding-window blocks a request holds at most
    page_bytes: float  # one layer's page of one block, per GPU
    full_layers: int
    swa_layers: int
    state_layers: int

    @classmethod
    def from_layout(cls, layout: KvLayout, dcp: int) -> TransferSizer:
        def layers(kind: str) -> int:
            return sum(g.layers for g in layout.groups if g.kind == kind)

        b = layout.block_size_tokens
        window = layout.sliding_window_tokens
        return cls(
            attention_block_tokens=b * dcp,
            swa_block_tokens=b,
            window_blocks=math.ceil((window - 1) / b) + 1 if window else 0,
            page_bytes=layout.page_bytes,
            full_layers=layers("full"),
            swa_layers=layers("swa"),
            state_layers=layers("mamba"),
        )

    def blocks(self, start_tokens: int, end_tokens: int) -> tuple[int, int]:
        """(full-attention, sliding-window) blocks per layer covering ``[start, end)``; the
        start is where the reader's local hit ends (block-aligned)."""
        if end_tokens <= start_tokens:
            return 0, 0
        blk = self.attention_block_tokens
        full = math.ceil(end_tokens / blk) - start_tokens // blk
        swa = 0
        if self.swa_layers:
            b = self.swa_block_tokens
            swa = min(math.ceil(end_tokens / b) - start_tokens // b, self.window_blocks)
        return full, swa

    def bytes_per_gpu(self, start_tokens: int, end_tokens: int) -> float:
        """Bytes one GPU moves; 0 when there is nothing past the local hit."""
        full, swa = self.blocks(start_tokens, end_tokens)
        if not full and not swa:
            return 0.0
        pages = self.full_layers * full + self.swa_layers * swa + self.state_layers
        return pages * self.page_bytes


@dataclass(slots=True)
class Nics:
    """One replica's NICs (one per GPU): when each direction is next free."""

    bw_bytes_per_s: float
    latency_s: float
    send_free_s: float = 0.0
    recv_free_s: float = 0.0


def reserve(
    sender: Nics, receiver: Nics, now_s: float, bytes_per_gpu: float
) -> tuple[float, float]:
    """Book a transfer of ``bytes_per_gpu`` (per GPU) from ``sender`` to ``receiver`` asked for
    at ``now_s``: (start, landed). It starts when both sides are free, occupies them for
    bytes / bandwidth (the slower side's), and lands a link latency later."""
    bw = min(sender.bw_bytes_per_s, receiver.bw_bytes_per_s)
    start = max(now_s, sender.send_free_s, receiver.recv_free_s)
    end = start + bytes_per_gpu / bw
    sender.send_free_s = receiver.recv_free_s = end
    return start, end + max(sender.latency_s, receiver.latency_s)


def send_back_tokens(
    remote_tokens: int, prompt_tokens: int, local_tokens: int, threshold_tokens: int
) -> int:
    """Tokens the prefill side resumes at after pulling a pinned sequence back from the decode
    side, or 0 to compute locally instead.

    ``remote_tokens``: the pinned request's computed tokens (prompt + output - 1);
    ``prompt_tokens``: what the prefill side computes (the prompt, less the hybrid backoff);
    ``local_tokens``: its own prefix hit. vLLM: ``count = min(remote, prompt) - local``; pull
    unless ``0 < count < threshold`` (recompute) or ``count <= 0`` (nothing to pull). Here the
    pull also stops one token short of the prompt (the last token is always computed, for its
    logits). As in vLLM, nothing checks that a recurrent state pinned at ``remote`` serves a
    shorter prompt.
    """
    usable = min(remote_tokens, prompt_tokens - 1)
    count = usable - local_tokens
    if count <= 0 or count < threshold_tokens:
        return 0
    return usable
