"""KV transfers between replicas (prefill/decode disaggregation): sizes, link time, send-back.

Mirrors vLLM's ``NixlConnector`` in pull mode (``vllm_mechanics.md`` 9): the reader READs the
writer's blocks, each TP rank its own shard over its own NIC.

- Size (:class:`TransferSizer`): the blocks past the reader's local hit, whole pages of every
  real layer (padding layers of a group are not registered, so not moved): full-attention
  blocks up to the last token read, sliding-window blocks clipped to the window
  (``get_exchange_clipped_blocks``) and one state page per recurrent layer (Mamba groups are
  reduced to the state block). Bytes are per GPU.
- Time (:class:`Nics`, :class:`TransferCost`): ``latency + descriptors x descriptor_s +
  max(bytes read per reader GPU / reader bw, bytes sent per writer GPU / writer bw)``. A
  replica's NICs are shared by its transfers; each direction (send, receive) serves one
  transfer at a time, first come first served, so a transfer starts when both the writer's
  send side and the reader's receive side are free. (Serialisation, not bandwidth sharing: the
  same finish time for the last of several concurrent transfers, earlier finishes for the
  first ones.) Descriptors are NIXL's: one per (layer, block) region a reader rank reads from
  one writer rank (K and V are two regions with split K/V caches, one for MLA's latent and a
  recurrent state); their posting is taken to be serial with the data (an upper bound: NIXL
  overlaps posting with movement in part).
- Different TP on the two sides (:meth:`TransferCost.between`): each reader rank reads the
  pages it holds (its own layout's bytes per GPU) from the writer ranks holding them: from
  ``fan_in = page_reader / page_writer`` ranks when the reader holds more heads per rank
  (tp_reader < tp_writer, heads sharded), else from one. A writer rank then sends ``tp_reader
  / tp_writer`` times what a reader rank receives when the reader side is wider (it serves
  that many reader ranks), else ``1 / fan_in`` of it (each reader rank's bytes come from
  ``fan_in`` writer ranks; a replicated MLA latent is read whole from one rank).
- Send-back (:func:`send_back_tokens`): the prefill side's rule for a turn whose previous
  turn's blocks are pinned on the decode side (``pull_scheduler.get_num_new_matched_tokens``,
  ``do_remote_decode`` branch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from simulator.kv_layout import KvLayout

# Seconds per NIXL descriptor (assumption, derived): vllm-project/vllm#50913 measured a ~5k-token
# pull at --block-size 16 fragmenting into "tens of thousands" of ~8 KB descriptors with a
# ~105 ms transfer window, cut by ~58 ms at --block-size 64 (4x fewer descriptors): 58 ms /
# (0.75 x 20k-40k descriptors) = 1.9-3.9 us each; 2.5 us is the middle. vllm#55434 (GB200)
# measured descriptor submission dominating NIXL transfers too, with cuda_ipc ~20x dearer per
# descriptor than RDMA rc_x. The default of every disaggregated run (kv_descriptor_s: 0 disables).
NIXL_DESCRIPTOR_S = 2.5e-6


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


@dataclass(frozen=True, slots=True)
class TransferCost:
    """One direction of KV reads between two pools: the reader's sizes, the descriptors it
    posts and what the writer's NICs send (module docstring)."""

    sizer: TransferSizer  # the reader's layout: bytes per reader GPU
    descriptor_s: float = 0.0
    regions_per_page: int = 1  # descriptors per attention page (2: split K and V caches)
    fan_in: int = 1  # writer ranks each reader rank reads from
    send_ratio: float = 1.0  # bytes per writer GPU / bytes per reader GPU
    _unit: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_unit", self.send_ratio == 1.0)

    @classmethod
    def between(
        cls,
        reader: KvLayout,
        writer: KvLayout,
        reader_tp: int,
        writer_tp: int,
        dcp: int,
        descriptor_s: float = 0.0,
        regions_per_page: int = 1,
    ) -> TransferCost:
        fan_in = 1
        if reader_tp < writer_tp and writer.page_bytes > 0:
            fan_in = max(1, min(round(reader.page_bytes / writer.page_bytes), writer_tp))
        return cls(
            sizer=TransferSizer.from_layout(reader, dcp),
            descriptor_s=descriptor_s,
            regions_per_page=regions_per_page,
            fan_in=fan_in,
            send_ratio=reader_tp / writer_tp if reader_tp >= writer_tp else 1 / fan_in,
        )

    def descriptors(self, start_tokens: int, end_tokens: int) -> int:
        """Descriptors one reader rank posts for tokens ``[start, end)``."""
        full, swa = self.sizer.blocks(start_tokens, end_tokens)
        if not full and not swa:
            return 0
        z = self.sizer
        attention = (z.full_layers * full + z.swa_layers * swa) * self.regions_per_page
        return (attention + z.state_layers) * self.fan_in

    def send_bytes(self, bytes_per_reader_gpu: float) -> float | None:
        """Bytes per writer GPU (None: the same as the reader's)."""
        return None if self._unit else bytes_per_reader_gpu * self.send_ratio


@dataclass(slots=True)
class Nics:
    """One replica's NICs (one per GPU): when each direction is next free."""

    bw_bytes_per_s: float
    latency_s: float
    send_free_s: float = 0.0
    recv_free_s: float = 0.0


def reserve(
    sender: Nics,
    receiver: Nics,
    now_s: float,
    bytes_per_gpu: float,
    send_bytes_per_gpu: float | None = None,
    overhead_s: float = 0.0,
) -> tuple[float, float]:
    """Book a transfer of ``bytes_per_gpu`` (per GPU) from ``sender`` to ``receiver`` asked for
    at ``now_s``: (start, landed). It starts when both sides are free, occupies them for
    bytes / bandwidth (the slower side's; with ``send_bytes_per_gpu``, the longer of the
    receiver's bytes / its bandwidth and the sender's bytes / its bandwidth) plus
    ``overhead_s`` (descriptor posting), and lands a link latency later."""
    start = max(now_s, sender.send_free_s, receiver.recv_free_s)
    if send_bytes_per_gpu is None:
        bw = min(sender.bw_bytes_per_s, receiver.bw_bytes_per_s)
        end = start + bytes_per_gpu / bw
    else:
        end = start + max(
            bytes_per_gpu / receiver.bw_bytes_per_s, send_bytes_per_gpu / sender.bw_bytes_per_s
        )
    if overhead_s:
        end += overhead_s
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
