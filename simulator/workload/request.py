"""Requests and sessions, and the prompt's prefix identity as a chain of block ids.

A request's prefix identity is ``block_hashes``: one 64-bit id per *full* block of
``block_tokens`` prompt tokens. The ids form a chain, as vLLM's block hashes do
(``hash(parent_hash, block_tokens)``, vllm_mechanics.md 2.1): block i's id identifies the whole
prefix up to the end of block i, so two prompts share block i's id only if they share all of
its tokens and every token before. A prefix-cache hit is therefore the longest run of leading
ids already cached, and :func:`reblock` can derive the ids at any engine block size.

Ids are built from per-block *content keys* (a trace's local hash ids, scoped to the trace)
with a polynomial rolling hash mod 2**64, vectorised with numpy (a request of 10^4 blocks costs
microseconds), then passed through the splitmix64 finaliser with the block position. Nothing
here uses Python's ``hash`` or ``random``: the ids are the same on every run and machine.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

BlockIds = NDArray[np.uint64]

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15  # odd: invertible mod 2**64
_GOLDEN_INV = pow(_GOLDEN, -1, 1 << 64)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
EMPTY_IDS: BlockIds = np.zeros(0, dtype=np.uint64)
EMPTY_IDS.flags.writeable = False


def fmix(x: BlockIds) -> BlockIds:
    """splitmix64 finaliser, elementwise (uint64 arithmetic wraps mod 2**64)."""
    x = (x ^ (x >> _S30)) * _M1
    x = (x ^ (x >> _S27)) * _M2
    return x ^ (x >> _S31)


def scope_key(*parts: str | int) -> int:
    """A 64-bit key for a hash-id scope (a trace, a generated session): blake2b of the parts."""
    text = "\x1f".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


def content_keys(scope: int, local_ids: NDArray[np.int64] | NDArray[np.uint64]) -> BlockIds:
    """Per-block content keys: a trace's local ids made globally unique by their scope."""
    ids = np.asarray(local_ids).astype(np.uint64)
    return fmix(ids * np.uint64(_GOLDEN) + np.uint64(scope & _MASK))


class _Powers:
    """Cached powers of the chain multiplier and of its inverse, grown on demand."""

    def __init__(self) -> None:
        self.pow: BlockIds = np.ones(1, dtype=np.uint64)
        self.inv: BlockIds = np.ones(1, dtype=np.uint64)
        self.pos: BlockIds = fmix(np.arange(1, 2, dtype=np.uint64) * np.uint64(_GOLDEN))

    def ensure(self, n: int) -> None:
        if n <= len(self.pow):
            return
        size = max(n, 2 * len(self.pow))
        self.pow = np.multiply.accumulate(np.full(size, _GOLDEN, dtype=np.uint64))
        self.pow = np.concatenate([np.ones(1, dtype=np.uint64), self.pow[:-1]])
        self.inv = np.multiply.accumulate(np.full(size, _GOLDEN_INV, dtype=np.uint64))
        self.inv = np.concatenate([np.ones(1, dtype=np.uint64), self.inv[:-1]])
        self.pos = fmix(np.arange(1, size + 1, dtype=np.uint64) * np.uint64(_GOLDEN))


_POWERS = _Powers()


def chain(keys: BlockIds) -> BlockIds:
    """Chain ids of a prompt's blocks from their content keys (block i's id covers blocks 0..i).

    ``h_i = sum_{j<=i} key_j * P**(i-j) mod 2**64`` is computed as
    ``P**i * cumsum(key_j * P**-j)``; the id is ``fmix(h_i ^ fmix(i + 1))``. The result is
    read-only.
    """
    ids, _ = chain_extend(keys, 0, 0)
    return ids


def chain_extend(keys: BlockIds, start: int, prev_sum: int) -> tuple[BlockIds, BlockIds]:
    """Chain ids of blocks ``start, start+1, ...`` given the running sum after block
    ``start - 1`` (0 at the start); returns the ids and the running sums (to extend again)."""
    n = len(keys)
    if n == 0:
        return EMPTY_IDS, EMPTY_IDS
    end = start + n
    _POWERS.ensure(end)
    sums = np.cumsum(keys * _POWERS.inv[start:end], dtype=np.uint64)
    if prev_sum:
        sums += np.uint64(prev_sum)
    out = fmix((sums * _POWERS.pow[start:end]) ^ _POWERS.pos[start:end])
    out.flags.writeable = False
    return out, sums


class ChainedIds:
    """A prompt's chain ids kept with their running sums, so a later prompt that shares a
    prefix with it mixes only its own blocks: ``cut`` back to the common prefix, ``extend``
    by the rest's content keys (exact: the ids of a prefix do not depend on what follows)."""

    __slots__ = ("ids", "sums")

    def __init__(self) -> None:
        self.ids: BlockIds = EMPTY_IDS  # read-only
        self.sums: BlockIds = EMPTY_IDS

    def cut(self, n_blocks: int) -> None:
        self.ids, self.sums = self.ids[:n_blocks], self.sums[:n_blocks]

    def extend(self, keys: BlockIds) -> None:
        if len(keys) == 0:
            return
        have = len(self.ids)
        new_ids, new_sums = chain_extend(keys, have, int(self.sums[-1]) if have else 0)
        self.ids = np.concatenate([self.ids, new_ids])
        self.ids.flags.writeable = False
        self.sums = np.concatenate([self.sums, new_sums])


def reblock(
    block_hashes: BlockIds | Sequence[int],
    src_block_tokens: int,
    dst_block_tokens: int,
    prompt_tokens: int,
) -> tuple[int, ...]:
    """Chain ids at the engine's block size (``dst_block_tokens``) from those of a trace.

    A destination block exists only if all of its tokens lie in full source blocks (and in the
    prompt): 64 -> 1920 takes every 30th id, and a partial tail is not a block. When the sizes
    do not divide, destination block k (ending at token e) takes the id of the source block
    holding token e-1 mixed with e's offset in it: equal ids still imply equal prefixes.
    """
    src = np.asarray(block_hashes, dtype=np.uint64)
    covered = min(len(src) * src_block_tokens, prompt_tokens)
    n_dst = covered // dst_block_tokens
    if n_dst == 0:
        return ()
    if dst_block_tokens % src_block_tokens == 0:
        step = dst_block_tokens // src_block_tokens
        return tuple(src[step - 1 : step * n_dst : step].tolist())
    ends = np.arange(1, n_dst + 1, dtype=np.int64) * dst_block_tokens
    j = (ends - 1) // src_block_tokens
    offset = (ends - j * src_block_tokens).astype(np.uint64)
    mixed = fmix(src[j] + offset * np.uint64(_GOLDEN))
    return tuple(np.where(offset == np.uint64(src_block_tokens), src[j], mixed).tolist())


@dataclass(frozen=True, slots=True, eq=False)
class Request:
    """One request as the engine sees it. Identity equality: a request is a dict key.

    ``arrival_s`` is the absolute time it is due. ``think_time_s``: closed loop and Poisson
    sessions, the delay applied after the previous turn completed (scaled and capped); open
    loop, the trace's think time (informational). ``block_hashes`` are chain ids of the full
    ``block_tokens``-token blocks of the prompt (empty when the source has no prefix identity);
    :meth:`engine_blocks` re-blocks them. ``output_tokens`` may be 0 (a few trace records).
    ``parent_session_id``/``parent_request_id`` name the session and the request that spawned
    a sub-agent (None for top-level sessions).
    """

    request_id: int
    session_id: int
    turn: int
    prompt_tokens: int
    output_tokens: int
    block_hashes: BlockIds
    block_tokens: int
    arrival_s: float
    think_time_s: float = 0.0
    parent_session_id: int | None = None
    parent_request_id: int | None = None

    def engine_blocks(self, dst_block_tokens: int) -> tuple[int, ...]:
        """The prompt's chain ids at the engine's block size (see :func:`reblock`)."""
        return reblock(self.block_hashes, self.block_tokens, dst_block_tokens, self.prompt_tokens)


@dataclass(frozen=True, slots=True, eq=False)
class Turn:
    """A request of a session before replay gives it an id and a time.

    ``think_time_s``: client delay after the previous turn completed (or, after a sub-agent
    group, after the last sub-agent finished). ``offset_s``: when the trace sent it, relative
    to the session's start (used by open-loop replay).
    """

    prompt_tokens: int
    output_tokens: int
    block_hashes: BlockIds
    block_tokens: int
    think_time_s: float
    offset_s: float


@dataclass(frozen=True, slots=True, eq=False)
class SubagentGroup:
    """Sub-agents the session spawns at this point; they run concurrently, each as its own
    sequential chain, and the session's next turn waits until all of them have finished."""

    sessions: tuple[Session, ...]


@dataclass(slots=True, eq=False)
class Session:
    """A session: turns (and sub-agent groups) produced lazily, in order.

    ``start_s`` is the session's start in trace time (0 when the source has none; for a
    sub-agent, relative to its parent's start). ``key`` is a human label (trace id, ...).
    """

    key: str
    start_s: float
    items: Iterator[Turn | SubagentGroup]
    meta: dict[str, str] = field(default_factory=dict)
